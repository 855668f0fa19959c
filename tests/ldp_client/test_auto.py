"""``auto``: the lowest-variance frequency oracle, exactly, with the budget and the explanation."""

from __future__ import annotations

import math
import warnings

import pytest

from ldp_client.auto import AUTO_CANDIDATES, auto_choice, choose_mechanism
from ldp_client.errors import InvalidParameterError, PrivacyQuantizationWarning
from ldp_client.params import (
    GRRParams,
    HadamardParams,
    SubsetSelectionParams,
    make_params,
    oracle_rates,
    oracle_report_bits,
)


def _variance(name: str, d: int, eps: float) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        p = make_params(name, epsilon=eps, domain=d)
    ps, qs = oracle_rates(p)  # type: ignore[arg-type]
    return qs * (1 - qs) / (ps - qs) ** 2


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("d", [2, 16, 128, 1024])
def test_auto_is_the_exact_minimum(d: int, eps: float) -> None:
    choice = choose_mechanism(d, eps)
    variances = {name: _variance(name, d, eps) for name in AUTO_CANDIDATES}
    assert choice.variance == pytest.approx(min(variances.values()), rel=1e-12)
    assert choice.variance == pytest.approx(variances[choice.mechanism], rel=1e-12)
    assert choice.params.epsilon <= eps
    assert choice.runner_up is not None and choice.runner_up.variance >= choice.variance
    assert choice.mechanism in choice.reason and choice.runner_up.mechanism in choice.reason
    assert [c.variance for c in choice.candidates] == sorted(c.variance for c in choice.candidates)


def test_regimes() -> None:
    # GRR wins (tied with SS at k = 1, at fewer bits) for d < 3 e^eps + 2; SS otherwise.
    assert choose_mechanism(16, 4.0).mechanism == "grr"
    assert choose_mechanism(1024, 1.0).mechanism == "ss"
    assert choose_mechanism(2, 1.0).mechanism == "grr"


def test_budget_excludes_large_reports_and_says_so() -> None:
    choice = choose_mechanism(1024, 2.0, max_report_bits=64)
    assert choice.mechanism in ("hr", "grr")
    assert choice.report_bits <= 64
    allowed = [
        n for n in AUTO_CANDIDATES if oracle_report_bits(make_params(n, epsilon=2.0, domain=1024)) <= 64
    ]  # type: ignore[arg-type]
    assert choice.variance == pytest.approx(min(_variance(n, 1024, 2.0) for n in allowed), rel=1e-12)
    assert "excludes" in choice.reason and "ss" in choice.reason
    # 131 bits admit local hashing (seed + bucket) but not the d-bit reports.
    assert choose_mechanism(1024, 2.0, max_report_bits=140).mechanism == "olh"
    with pytest.raises(InvalidParameterError, match="max_report_bits"):
        choose_mechanism(1024, 2.0, max_report_bits=5)
    with pytest.raises(InvalidParameterError, match="max_report_bits"):
        choose_mechanism(1024, 2.0, max_report_bits=0)


def test_make_params_auto_and_cli_form() -> None:
    p = make_params("auto", epsilon=2.0, domain=128)
    assert isinstance(p, SubsetSelectionParams)
    q = make_params("auto", epsilon=2.0, domain=128, fields={"max_report_bits": "16"})
    assert isinstance(q, GRRParams | HadamardParams)
    assert auto_choice(epsilon=2.0, domain=128, fields={}).mechanism == "ss"
    with pytest.raises(InvalidParameterError, match="epsilon"):
        make_params("auto", domain=128)
    with pytest.raises(InvalidParameterError, match="domain"):
        make_params("auto", epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="param k"):
        make_params("auto", epsilon=1.0, domain=8, fields={"k": 2})
    with pytest.raises(InvalidParameterError, match="epsilon"):
        choose_mechanism(8, math.nan)
    with pytest.raises(InvalidParameterError, match="mechanisms"):
        choose_mechanism(8, 1.0, mechanisms=("rappor",))


def test_auto_reissues_only_the_chosen_quantization_warning() -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        choice = choose_mechanism(64, 1.0)
    assert all(issubclass(w.category, PrivacyQuantizationWarning) for w in record)
    assert choice.params.epsilon <= 1.0


def test_auto_iterates_the_specs_that_offer_themselves() -> None:
    # The candidates come from the registry through the specs' hook, not from a table of names.
    from ldp_client import registry

    offered = tuple(s.name for s in registry.SPECS if s.chosen_by_auto)
    assert AUTO_CANDIDATES == offered == ("grr", "oue", "sue", "olh", "blh", "ss", "hr")
    assert not registry.spec_named("rr").chosen_by_auto
    assert not registry.spec_named("set-valued").chosen_by_auto


def test_the_comparison_asks_each_spec_for_its_variance_and_report_size() -> None:
    from ldp_client._oracle_choice import compare
    from ldp_client.mechanisms.grr import GRRSpec
    from ldp_client.mechanisms.ss import SubsetSelectionSpec

    class CheapGRR(GRRSpec):
        """GRR claiming no variance: the comparison must take the spec's word for it."""

        def variance(self, params: object, frequency: float = 0.0) -> float:
            return 0.0

    class SmallSS(SubsetSelectionSpec):
        def report_bits(self, params: object) -> int:
            return 1

    choice, _ = compare([SubsetSelectionSpec(), CheapGRR()], 1024, 1.0, None)
    assert choice.mechanism == "grr" and choice.variance == 0.0  # ss wins at d=1024 otherwise
    # A budget of 8 bits admits only the spec that reports 1 bit.
    choice, _ = compare([SmallSS(), GRRSpec()], 1024, 1.0, 8)
    assert choice.mechanism == "ss" and choice.report_bits == 1
    assert [c.mechanism for c in choice.candidates if not c.eligible] == ["grr"]
