"""An app chooses the device ledger's accountant from the public API (issue 17):
``BudgetPolicy(composition="basic" | "advanced" | "numerical", composition_delta=...)`` on a Reporter.

Under one cap the tight accountant (privacy loss distributions) admits reports that basic composition
refuses; a delta cap below the accountant's own delta is refused when the policy is made (its totals
carry that delta, so every report would be refused); two reporters on one device ledger must agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ldp_client import wire
from ldp_client.errors import BudgetExceededError, InvalidParameterError
from ldp_client.params import GRRParams
from ldp_client.reporter import Reporter
from ldp_client.reporter.policy import BudgetPolicy, compose_basic, compose_numerical, composer_named
from tests.ldp_client.test_reporter import FAST, FakeServer, campaign

SMALL = GRRParams.from_epsilon(["a", "b", "c"], 0.05)  # epsilon 0.05 (quantised just below)


@pytest.fixture
def served() -> Iterator[FakeServer]:
    s = FakeServer(campaign(SMALL, cid="c1"))
    yield s
    s.stop()


def _reporter(s: FakeServer, state: Path, budget: BudgetPolicy, cid: str = "c1") -> Reporter:
    info = wire.campaign_from_proto(campaign(SMALL, cid=cid))
    kwargs = {"max_batch_age_s": 3600.0, **FAST}
    return Reporter(s.target, cid, max_epsilon=10.0, state_dir=state, campaign=info, budget=budget, **kwargs)


def _fitted(r: Reporter, most: int) -> int:
    """Reports of "a" accepted before the first BudgetExceededError (at most ``most``)."""
    for n in range(most):
        try:
            r.report("a")
        except BudgetExceededError as exc:
            assert exc.cap == "lifetime_epsilon"
            return n
    return most


def test_the_tight_accountant_admits_reports_basic_composition_refuses(
    served: FakeServer, tmp_path: Path
) -> None:
    """Cap: lifetime epsilon 2 (delta 1e-6). Basic composition stops at 40 reports of epsilon 0.05; the
    numerical accountant (epsilon at delta 1e-9 of 40 such reports: 1.67) admits about 55."""
    basic = BudgetPolicy(lifetime_epsilon=2.0, lifetime_delta=1e-6)
    with _reporter(served, tmp_path / "basic", basic) as r:
        assert _fitted(r, 100) == 40
        assert r.privacy_spend().lifetime.epsilon == pytest.approx(40 * SMALL.epsilon)
    tight = BudgetPolicy(lifetime_epsilon=2.0, lifetime_delta=1e-6, composition="numerical")
    with _reporter(served, tmp_path / "tight", tight) as r:
        fitted = _fitted(r, 100)
        spend = r.privacy_spend().lifetime
    # The accountant's own figure decides: fitted reports are within the cap, one more is not.
    composer = compose_numerical(1e-9)
    assert (
        composer([(SMALL.epsilon, 0.0, fitted)])[0] <= 2.0 < composer([(SMALL.epsilon, 0.0, fitted + 1)])[0]
    )
    assert 50 <= fitted <= 60
    assert spend.epsilon <= 2.0 and spend.delta == pytest.approx(1e-9, rel=1e-5)
    # The advanced rule (Dwork-Rothblum-Vadhan) is looser than the numerical one at this size, never
    # looser than basic composition.
    advanced = BudgetPolicy(lifetime_epsilon=2.0, lifetime_delta=1e-6, composition="advanced")
    with _reporter(served, tmp_path / "advanced", advanced) as r:
        assert 40 <= _fitted(r, 100) <= fitted


def test_a_delta_cap_below_the_accountants_delta_is_refused_when_the_policy_is_made() -> None:
    """The other way round: with a pure-epsilon cap (delta 0) every numerical total (delta 1e-9) would be
    refused, even where basic composition admits the report, so the policy itself is refused."""
    BudgetPolicy(lifetime_epsilon=2.0, lifetime_delta=0.0)  # basic: a pure cap is fine
    with pytest.raises(InvalidParameterError) as info:
        BudgetPolicy(lifetime_epsilon=2.0, lifetime_delta=0.0, composition="numerical")
    assert info.value.field == "budget.lifetime_delta" and "composition_delta" in str(info.value)
    BudgetPolicy(window_delta=1e-6, composition="numerical", composition_delta=1e-6)  # equal: allowed
    with pytest.raises(InvalidParameterError, match=r"budget\.composition"):
        BudgetPolicy(composition="renyi")  # type: ignore[arg-type]
    for bad in (0.0, 1.0, -1e-9, True):
        with pytest.raises(InvalidParameterError, match="composition_delta"):
            BudgetPolicy(composition="numerical", composition_delta=bad)


def test_the_composer_is_the_policys_choice_and_one_per_device_ledger(
    served: FakeServer, tmp_path: Path
) -> None:
    assert BudgetPolicy().composer() is compose_basic
    tight = BudgetPolicy(composition="numerical", composition_delta=1e-8)
    assert tight.composer() is composer_named("numerical", 1e-8)  # the same object for the same choice
    assert tight.composer()([(0.05, 0.0, 400)]) == compose_numerical(1e-8)([(0.05, 0.0, 400)])
    with _reporter(served, tmp_path, tight):
        # A second reporter of the process on the same state_dir (one device ledger) with another rule.
        with pytest.raises(InvalidParameterError, match=r"budget\.composition"):
            _reporter(served, tmp_path, BudgetPolicy(), cid="c2")
        with _reporter(
            served, tmp_path, BudgetPolicy(composition="numerical", composition_delta=1e-8), cid="c3"
        ):
            pass
