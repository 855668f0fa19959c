"""Adaptive pem rounds (issue 16): each round's oracle over the published candidates, its exact epsilon,
the device's encoder, the checks of a round's reports and the calibration of the estimates."""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ldp_aggregator.discovery_rounds import batch_round, discover_published
from ldp_client import randomness, wire
from ldp_client._prob import PROB_ONE
from ldp_client.errors import InvalidParameterError, InvalidReportError, RoundNotOpenError
from ldp_client.mechanisms.pem import PEMParams, Prefix, group_of, prefix_of
from ldp_client.mechanisms.pem.rounds import (
    GRRRoundEncoder,
    check_round_columns,
    encode_round_batch,
    grr_round_threshold,
    round_encoder,
    round_plan,
)
from ldp_client.secret import ClientSecret

KEPT = [(4, ord("k")), (3, ord("f")), (4, ord("p")), (2, ord("a")), (4, ord("z"))]


def _params(eps: float = 4.0, **changes: int) -> PEMParams:
    fields = {"max_length": 4, "top_k": 5, "step_bits": 4} | changes
    return PEMParams.from_epsilon(eps, adaptive=True, **fields)


def _tail(n: int) -> list[str]:
    g = np.random.default_rng(99)
    words = {"".join(chr(97 + c) for c in g.integers(0, 26, size=4)) for _ in range(n + 100)}
    return sorted(words - {"kiwi", "plum"})[:n]


def test_rounds_is_a_parameter_named_on_the_command_line() -> None:
    from ldp_client.mechanisms.pem import SPEC

    made = SPEC.make(epsilon=4.0, domain=None, fields={"rounds": "adaptive", "max_length": "4"})
    args = SPEC.make_args(made)
    assert made.adaptive and SPEC.make(epsilon=None, domain=None, fields=dict(args.fields)) == made
    assert not SPEC.make(epsilon=4.0, domain=None, fields={"rounds": "one"}).adaptive
    with pytest.raises(InvalidParameterError, match=r"rounds=.*'one' .* or 'adaptive'"):
        SPEC.make(epsilon=4.0, domain=None, fields={"rounds": "two"})
    # The one-round encoder refuses adaptive parameters: the round comes from the server's campaign.
    with pytest.raises(InvalidParameterError, match="server's campaign"):
        SPEC.encoder(made, campaign_id="c", secret=ClientSecret.generate())


def test_grr_is_chosen_where_its_variance_is_lower() -> None:
    # GRR over d + 1 symbols beats local hashing when d + 1 < 3 e^eps + 2 (Wang et al. 2017).
    p4 = _params(4.0)
    first = round_plan(p4, 0, ())
    assert len(first.candidates) == 4 * 256 and not first.grr  # 1025 symbols at eps 4: local hashing
    second = round_plan(p4, 1, KEPT)
    assert len(second.candidates) == 5 * 16 and second.grr  # 81 symbols at eps 4: GRR
    assert round_plan(_params(8.0), 0, ()).grr  # 1025 symbols at eps 8: GRR
    assert not round_plan(_params(2.0), 1, KEPT).grr  # 81 symbols at eps 2 (3 e^2 + 2 = 24): hashing


@pytest.mark.parametrize("eps", [0.5, 2.0, 4.0, 8.0])
@pytest.mark.parametrize("d", [1, 2, 7, 80, 1024, 65536])
def test_a_grr_rounds_epsilon_is_at_most_the_campaigns_exactly(eps: float, d: int) -> None:
    # P(y | x) is T/2^32 for y = x and (2^32 - T)/(2^32 d) otherwise: the worst ratio over two inputs is
    # T d / (2^32 - T); local hashing's is T_lh (g - 1) / (2^32 - T_lh). Exact integers, by enumeration
    # of the outputs of two different inputs (every other pair of inputs is the same up to relabelling).
    p = PEMParams.from_epsilon(eps, max_length=4, top_k=5, step_bits=4, adaptive=True)
    t = grr_round_threshold(p, d)
    symbols = d + 1

    def law(x: int) -> list[Fraction]:
        return [
            Fraction(t, PROB_ONE) if y == x else Fraction(PROB_ONE - t, PROB_ONE * d) for y in range(symbols)
        ]

    if symbols <= 1025:
        a, b = law(0), law(1)
        worst = max(max(u / v, v / u) for u, v in zip(a, b, strict=True))
    else:
        worst = Fraction(t * d, PROB_ONE - t)
    campaign = Fraction(p.truth_threshold * (p.g - 1), PROB_ONE - p.truth_threshold)
    assert worst <= campaign
    # ... and it is the largest such threshold: one more would exceed it.
    assert Fraction((t + 1) * d, PROB_ONE - t - 1) > campaign or t + 1 == PROB_ONE


@pytest.fixture
def seeded_source(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    rng = np.random.default_rng(3)
    monkeypatch.setattr(randomness, "_source", rng.bytes)
    yield


def _law(plan: object, symbol: int, n: int) -> np.ndarray:
    d = len(plan.candidates)  # type: ignore[attr-defined]
    t = plan.threshold  # type: ignore[attr-defined]
    expected = np.full(d + 1, n * (PROB_ONE - t) / PROB_ONE / d)
    expected[symbol] = n * t / PROB_ONE
    return expected


def test_the_grr_device_encoder_draws_the_plans_law(seeded_source: None) -> None:
    p = _params(4.0)
    plan = round_plan(p, 1, KEPT)
    assert plan.grr
    d = len(plan.candidates)
    encode = GRRRoundEncoder(plan).encode
    n = 40_000
    symbol = plan.index[prefix_of(p, 1, b"kiwi")]
    out = np.bincount([encode("kiwi").bucket for _ in range(n)], minlength=d + 1)
    assert stats.chisquare(out, _law(plan, symbol, n)).pvalue > 1e-4
    # A value whose prefix is no candidate answers "none of them" (symbol d) with the same law.
    none = np.bincount([encode("bbbb").bucket for _ in range(n)], minlength=d + 1)
    assert stats.chisquare(none, _law(plan, d, n)).pvalue > 1e-4


def test_the_batch_encoder_draws_the_same_law() -> None:
    p = _params(4.0)
    plan = round_plan(p, 1, KEPT)
    rng = np.random.default_rng(5)
    n = 40_000
    groups, a, b, y = encode_round_batch(plan, np.zeros(n, dtype=np.int64), ["fig", "bbbb"], rng)
    assert np.all(groups == 1) and np.all(a == 0) and np.all(b == 0)
    d = len(plan.candidates)
    expected = _law(plan, plan.index[prefix_of(p, 1, b"fig")], n)
    assert stats.chisquare(np.bincount(y, minlength=d + 1), expected).pvalue > 1e-4


def test_a_device_encodes_only_in_its_round() -> None:
    p = _params(4.0)
    secrets = [ClientSecret.from_bytes(bytes([i]) * 32) for i in range(64)]
    kept = KEPT
    mine = next(s for s in secrets if group_of(p, "c", s) == 1)
    other = next(s for s in secrets if group_of(p, "c", s) == 3)
    report = round_encoder(p, campaign_id="c", secret=mine, current=1, published=[kept])("kiwi")
    assert report.group == 1 and report.a == report.b == 0 and 0 <= report.bucket <= 5 * 16
    with pytest.raises(RoundNotOpenError, match="round 3 of campaign_id='c' is not open yet"):
        round_encoder(p, campaign_id="c", secret=other, current=1, published=[kept])
    done = next(s for s in secrets if group_of(p, "c", s) == 0)
    with pytest.raises(RoundNotOpenError, match="round 0 of campaign_id='c' is closed"):
        round_encoder(p, campaign_id="c", secret=done, current=1, published=[kept])


@pytest.mark.parametrize(
    ("kept", "where"),
    [
        ([(0, 1)], "kept[0]"),  # length 0
        ([(5, 1)], "kept[0]"),  # longer than max_length
        ([(4, 1 << 8)], "kept[0]"),  # more bits than level 0 holds
        ([(4, 1), (4, 1 << 9)], "kept[1]"),
    ],
)
def test_published_prefixes_are_checked(kept: list[tuple[int, int]], where: str) -> None:
    with pytest.raises(InvalidParameterError, match=rf"discovery_rounds\[0\]\.{re.escape(where)}"):
        round_plan(_params(), 1, kept)
    with pytest.raises(InvalidParameterError, match="round"):
        round_plan(_params(), 9, [(4, 1)])


def test_a_rounds_reports_are_checked() -> None:
    p = _params(4.0)
    plan = round_plan(p, 1, round_plan(p, 0, ()).candidates[:5])
    d = len(plan.candidates)
    ok = (
        np.ones(3, np.uint16),
        np.zeros(3, np.uint64),
        np.zeros(3, np.uint64),
        np.array([0, 5, d], np.uint32),
    )
    check_round_columns(plan, ok, "c")
    with pytest.raises(InvalidReportError, match=rf"pem.buckets\[1\]=.* a bucket in \[0, {d}\]"):
        check_round_columns(plan, (*ok[:3], np.array([0, d + 1, 0], np.uint32)), "c")
    with pytest.raises(InvalidReportError, match=r"pem.a\[2\].*a = b = 0"):
        check_round_columns(plan, (ok[0], np.array([0, 0, 9], np.uint64), *ok[2:]), "c")
    info = wire.CampaignInfo(
        campaign_id="c",
        params=p,
        discovery_round=1,
        discovery_rounds=(
            wire.DiscoveryRoundInfo(
                round=0,
                reports=9,
                tested=1024,
                threshold=1.0,
                kept=tuple(tuple(c) for c in round_plan(p, 0, ()).candidates[:5]),
            ),  # type: ignore[misc]
        ),
    )
    with pytest.raises(InvalidReportError, match=r"pem.groups\[1\]=2 .*one round per batch"):
        batch_round(info, (np.array([1, 2, 1], np.uint16), *ok[1:]))
    assert batch_round(info, ok) == 1
    assert batch_round(info, (np.zeros(3, np.uint16), *ok[1:])) == 0  # refused by the store's commit


def _run_rounds(
    p: PEMParams, labels: list[str], probs: np.ndarray, n: int, seed: int
) -> tuple[object, np.ndarray]:
    rng = np.random.default_rng(seed)
    vals = rng.choice(len(labels), size=n, p=probs)
    groups = rng.integers(0, p.levels, size=n)
    published: list[tuple[Prefix, ...]] = []
    parts: list[tuple[np.ndarray, ...]] = []
    cache: dict[object, object] = {}
    result = None
    for r in range(p.levels):
        plan = round_plan(p, r, published[-1] if r else ())
        parts.append(encode_round_batch(plan, vals[groups == r], labels, rng))
        cols = tuple(np.concatenate([q[i] for q in parts]) for i in range(4))
        result = discover_published(p, published, cols, int(cols[0].size), r + 1, cache=cache)  # type: ignore[arg-type]
        published.append(result.kept)  # type: ignore[arg-type]
    return result, vals


@pytest.mark.slow
@pytest.mark.parametrize("eps", [4.0, 8.0])
def test_estimates_over_rounds_are_calibrated_over_seeded_repeats(eps: float) -> None:
    # Heavy values (some short: pooled over the rounds where they are whole, some rounds GRR, some local
    # hashing) are discovered; MSE/variance near 1 and the intervals cover at the nominal rate (binomial
    # bounds at alpha 1e-4), conditional on discovery.
    p = _params(eps)
    heavy = ["kiwi", "fig", "plum", "ab"]
    labels = heavy + _tail(500)
    probs = np.array([0.2, 0.1, 0.05, 0.05] + [0.6 / 500] * 500)
    sq_err, var, covered, cells = 0.0, 0.0, 0, 0
    for seed in range(200):
        result, vals = _run_rounds(p, labels, probs, 40_000, seed)
        for i, label in enumerate(heavy):
            try:
                it = result.item(label)  # type: ignore[attr-defined]
            except KeyError:
                continue
            truth = int(np.count_nonzero(vals == i))
            sq_err += (it.count - truth) ** 2
            var += it.std_error**2
            covered += it.ci_low <= truth <= it.ci_high
            cells += 1
    assert cells >= 0.95 * 4 * 200
    assert 0.85 <= sq_err / var <= 1.15, sq_err / var
    lo, hi = stats.binom.ppf([5e-5, 1 - 5e-5], cells, 0.95) / cells
    assert lo <= covered / cells <= hi, covered / cells


def test_rounds_take_a_declared_alphabet_but_no_verification_group() -> None:
    letters = "abcdefghijklmnopqrstuvwxyz"
    p = PEMParams.from_epsilon(8.0, adaptive=True, max_length=4, top_k=5, alphabet=letters)
    assert p.adaptive and p.symbol_bits == 5 and p.levels < _params(8.0).levels
    with pytest.raises(InvalidParameterError, match=r"rounds.*verification_share"):
        PEMParams.from_epsilon(8.0, adaptive=True, max_length=4, verification_share=0.2)


def test_a_round_over_an_alphabet_extends_by_its_characters_and_encodes_a_device_there(
    seeded_source: None,
) -> None:
    """Round 1 over "a".."z" (5-bit symbols, 2 letters first, one more per round): the candidates are the
    published 2-letter prefixes extended by one letter (or ended), a device's symbol is its prefix's index,
    and a published prefix with bits set past its length in symbols (5 bits each, not 8) is refused."""
    from ldp_client.mechanisms.pem.core import value_bytes

    letters = "abcdefghijklmnopqrstuvwxyz"
    p = PEMParams.from_epsilon(8.0, adaptive=True, max_length=4, top_k=5, alphabet=letters)
    first = round_plan(p, 0, ())
    ki = prefix_of(p, 0, value_bytes(p, "kiwi"))
    pl = prefix_of(p, 0, value_bytes(p, "plum"))
    assert ki in first.index and pl in first.index
    plan = round_plan(p, 1, [tuple(ki), tuple(pl)])
    assert plan.grr
    # Each parent of 4 letters extended by one of the 26 letters (no other digit), plus nothing else.
    assert len(plan.candidates) == 2 * 26
    kiw = prefix_of(p, 1, value_bytes(p, "kiwi"))
    assert kiw in plan.index
    encode = GRRRoundEncoder(plan).encode
    n = 20_000
    out = np.bincount([encode("kiwi").bucket for _ in range(n)], minlength=plan.symbols)
    assert stats.chisquare(out, _law(plan, plan.index[kiw], n)).pvalue > 1e-4
    # Level 0 holds 2 symbols (10 bits): a 1-letter prefix must have its second symbol zero. Bit 2 set is
    # refused (a check in bytes would look at the low 10 - 8 = 2 bits only and let it through).
    with pytest.raises(InvalidParameterError, match=r"discovery_rounds\[0\]\.kept\[0\]"):
        round_plan(p, 1, [(1, (10 << 5) | 4)])
    round_plan(p, 1, [(1, 10 << 5)])  # "k" alone: its second symbol zero
