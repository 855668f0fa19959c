"""Estimators: exact tests (expected counts in -> truth out; interval coverage by full enumeration) and
seeded sampling against theory (unbiasedness, variance, calibration), sampling reports directly from the
exact channel with numpy.

Tolerances are derived, never tuned: means within z * SE/sqrt(R) with z = max(5, Bonferroni z at
alpha = 1e-6 over items); variances in the chi-square(R-1) band at alpha = 1e-6 (Bonferroni); coverage
counts in the binomial(R, 0.95) acceptance band at alpha = 1e-6 (Bonferroni over items).
"""

from __future__ import annotations

import itertools
import math
import warnings
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats

from ldp_aggregator import rappor_estimates as rappor_est_mod
from ldp_aggregator.accumulators import BitCountAccumulator, CountAccumulator
from ldp_aggregator.estimators import (
    FrequencyEstimate,
    NoReportsError,
    estimate_frequencies,
    normal_quantile,
    pure_oracle_arrays,
    pure_oracle_estimate,
)
from ldp_aggregator.rappor_estimates import estimate_rappor_bits, estimate_rappor_candidates, rappor_design
from ldp_client.errors import InvalidParameterError, InvalidReportError, PrivacyQuantizationWarning
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    GRRParams,
    RapporParams,
)

ALPHA = 1e-6
CAMPAIGN = "test-campaign"


def _grr(d: int, eps: float) -> GRRParams:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        return GRRParams.from_epsilon(d, eps)


def _rr(eps: float) -> BinaryRRParams:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        return BinaryRRParams.from_epsilon(eps)


def _z_bonferroni(items: int) -> float:
    return max(5.0, NormalDist().inv_cdf(1.0 - ALPHA / (2 * items)))


def _theory_var(n: int, c: np.ndarray, p: float, q: float) -> np.ndarray:
    """Var[count_hat] = (n q(1-q) + c (p-q)(1-p-q)) / (p-q)^2 (Wang et al. 2017), c the true count."""
    d = p - q
    return (n * q * (1 - q) + np.asarray(c, float) * d * (1 - p - q)) / d**2


def _support_pmf(n: int, c: int, p: float, q: float) -> np.ndarray:
    """Exact distribution of C = Bin(c, p) + Bin(n - c, q) on 0..n."""
    a = stats.binom.pmf(np.arange(c + 1), c, p)
    b = stats.binom.pmf(np.arange(n - c + 1), n - c, q)
    return np.clip(np.convolve(a, b), 0.0, None)


def _exact_coverage(n: int, c: int, p: float, q: float, confidence: float = 0.95) -> float:
    """P(interval covers c), summing the exact probability of every outcome C the interval covers."""
    res = pure_oracle_arrays(np.arange(n + 1), n, p, q, confidence)
    covered = (res.ci_low <= c) & (c <= res.ci_high)
    return float(_support_pmf(n, c, p, q)[covered].sum())


def _coverage_band(reps: int, items: int, level: float = 0.95) -> tuple[int, int]:
    """Two-sided binomial(reps, level) acceptance band at ALPHA, Bonferroni over ``items``."""
    a = ALPHA / (2 * items)
    return int(stats.binom.ppf(a, reps, level)), int(stats.binom.isf(a, reps, level))


def _chi2_band(reps: int, items: int) -> tuple[float, float]:
    a = ALPHA / (2 * items)
    df = reps - 1
    return float(stats.chi2.ppf(a, df) / df), float(stats.chi2.isf(a, df) / df)


def _counts(e: FrequencyEstimate) -> np.ndarray:
    return np.array([it.count for it in e.items])


def _field(ests: list[FrequencyEstimate], name: str) -> np.ndarray:
    return np.array([[getattr(it, name) for it in e.items] for e in ests])


# ============================================================================ exact: expected counts in


@pytest.mark.parametrize(
    ("p", "q"),
    [(0.75, 0.25), (0.5, 1 / 55), (0.6875, 0.5625), (0.5625, 0.6875), (0.0026, 0.00097), (0.9, 0.05)],
)
def test_pure_oracle_recovers_expected_counts(p: float, q: float) -> None:
    n = 10_000
    c = np.array([0.0, 1.0, 10.0, 333.0, 2500.0, n - 2844.0, 0.0])
    support = n * q + c * (p - q)
    res = pure_oracle_arrays(support, n, p, q)
    np.testing.assert_allclose(res.count / n, c / n, rtol=0, atol=1e-9)
    np.testing.assert_allclose(res.std_error**2, _theory_var(n, c, p, q), rtol=1e-9)
    assert np.all(res.ci_low < res.count) and np.all(res.count < res.ci_high)


def test_std_error_matches_grr_closed_form() -> None:
    """n Var* = (e^eps + d - 2)/(e^eps - 1)^2 for an absent item (Wang et al. 2017, GRR/DE)."""
    for d, eps in [(2, 1.0), (16, 2.0), (1024, 4.0)]:
        params = _grr(d, eps)
        n = 5000
        e = params.p / params.q  # the effective e^eps of the quantized p
        res = pure_oracle_arrays(np.array([n * params.q]), n, params.p, params.q)
        assert res.count[0] == pytest.approx(0.0, abs=1e-9)
        assert res.std_error[0] ** 2 / n == pytest.approx((e + d - 2) / (e - 1) ** 2, rel=1e-12)


def test_rr_exact() -> None:
    params = BinaryRRParams.two_coin()  # P(yes|yes) = 3/4, P(yes|no) = 1/4
    n, yes = 400, 100
    acc = CountAccumulator(np.array([n - (n // 4 + yes // 2), n // 4 + yes // 2]))
    e = estimate_frequencies(params, acc)
    assert (e.mechanism, e.n, e.epsilon_inf, e.confidence) == ("rr", n, None, 0.95)
    assert e.epsilon == pytest.approx(math.log(3))
    assert [it.label for it in e.items] == ["no", "yes"]
    assert e.item("yes").count == pytest.approx(yes, abs=1e-9)
    assert e.item("no").count == pytest.approx(n - yes, abs=1e-9)
    assert e.item("yes").frequency == pytest.approx(0.25, abs=1e-12)
    # Both items are functions of the same count: equal standard errors.
    assert e.item("yes").std_error == pytest.approx(e.item("no").std_error, rel=1e-12)


def test_rr_from_epsilon_expected_counts() -> None:
    params = _rr(1.0)
    n, yes = 1000, 137.0
    pyy, pyn = params.p_yes_given_yes, params.p_yes_given_no
    c_yes = n * pyn + yes * (pyy - pyn)
    items = pure_oracle_estimate([c_yes], n, pyy, pyn, ["yes"])
    assert items[0].count == pytest.approx(yes, abs=1e-9)
    no = pure_oracle_estimate([n - c_yes], n, 1 - pyn, 1 - pyy, ["no"])
    assert no[0].count == pytest.approx(n - yes, abs=1e-9)


def test_grr_exact_with_labels() -> None:
    params = GRRParams(domain=["a", "b", "c", "d", "e"], truth_probability=0.5)  # q = 1/8
    c = np.array([0, 8, 16, 400, 376])
    n = int(c.sum())
    support = (n + 3 * c) // 8  # n q + c (p - q) = n/8 + 3c/8, exact integers
    assert np.array_equal(support * 8, n + 3 * c)
    e = estimate_frequencies(params, CountAccumulator(support))
    assert [it.label for it in e.items] == ["a", "b", "c", "d", "e"]
    np.testing.assert_allclose(_counts(e), c, atol=1e-9)
    assert e.epsilon == pytest.approx(params.epsilon)
    assert sum(it.frequency for it in e.items) == pytest.approx(1.0, abs=1e-12)


def test_basic_rappor_exact() -> None:
    params = BasicRapporParams(domain=6)  # p* = 9/16 (P(1|Bloom 0)), q* = 11/16 (P(1|Bloom 1))
    assert (params.prob_one_if_clear, params.prob_one_if_set) == (9 / 16, 11 / 16)
    c = np.array([0, 8, 24, 200, 400, 392])
    n = int(c.sum())  # 1024
    ones = (9 * n + 2 * c) // 16
    assert np.array_equal(ones * 16, 9 * n + 2 * c)
    acc = BitCountAccumulator(np.array([n]), ones[None, :])
    e = estimate_frequencies(params, acc)
    np.testing.assert_allclose(_counts(e), c, atol=1e-9)
    assert [it.label for it in e.items] == [str(i) for i in range(6)]
    assert e.epsilon_inf == pytest.approx(params.epsilon_inf)
    assert e.epsilon == pytest.approx(params.epsilon)


def test_boolean_rappor_exact() -> None:
    params = BooleanRapporParams()
    n, true = 1024, 200
    acc = BitCountAccumulator(np.array([n]), np.array([[(9 * n + 2 * true) // 16]]))
    e = estimate_frequencies(params, acc)
    assert [it.label for it in e.items] == ["false", "true"]
    assert e.item("true").count == pytest.approx(true, abs=1e-9)
    assert e.item("false").count == pytest.approx(n - true, abs=1e-9)


def _rappor_expected_ones(
    params: RapporParams, pos: np.ndarray, n_vj: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cohort_reports N_j, true Bloom counts t_ij, expected ones N_j p* + (q*-p*) t_ij)."""
    M, m, _ = pos.shape
    t = np.zeros((m, params.k))
    for v in range(M):
        for j in range(m):
            t[j, np.unique(pos[v, j])] += n_vj[v, j]
    N = n_vj.sum(axis=0)
    return (
        N,
        t,
        N[:, None] * params.prob_one_if_clear + (params.prob_one_if_set - params.prob_one_if_clear) * t,
    )


def test_rappor_bits_exact() -> None:
    params = RapporParams(k=16, h=2, m=3)
    pos = rappor_design(params, CAMPAIGN, ["x", "y"])
    n_vj = np.array([[16, 32, 0], [48, 16, 16]])
    N, t, ones = _rappor_expected_ones(params, pos, n_vj)
    assert np.array_equal(ones, np.round(ones))
    acc = BitCountAccumulator(N, ones.astype(np.int64))
    be = estimate_rappor_bits(params, acc)
    np.testing.assert_allclose(be.counts, t, atol=1e-9)
    assert be.cohort_reports.tolist() == N.tolist()
    # decode.R: Var = N r(1-r)/(q*-p*)^2 with r = clamp(c/N, p*, q*).
    r = np.clip(ones / N[:, None], params.prob_one_if_clear, params.prob_one_if_set)
    np.testing.assert_allclose(
        be.std_errors**2,
        N[:, None] * r * (1 - r) / (params.prob_one_if_set - params.prob_one_if_clear) ** 2,
        rtol=1e-12,
    )


def test_rappor_bits_empty_cohort() -> None:
    params = RapporParams(k=8, h=1, m=2)
    acc = BitCountAccumulator(np.array([16, 0]), np.zeros((2, 8), np.int64))
    be = estimate_rappor_bits(params, acc)
    assert be.counts[1].tolist() == [0.0] * 8 and be.std_errors[1].tolist() == [0.0] * 8
    assert np.all(be.counts[0] < 0)  # no ones at all: below the noise floor


def test_rappor_candidates_exact() -> None:
    params = RapporParams(k=32, h=2, m=4)
    cands = [f"site-{i}.example" for i in range(10)]
    pos = rappor_design(params, CAMPAIGN, cands)
    b = np.array([5, 0, 1, 3, 2, 7, 1, 0, 4, 1])  # candidate weights (two absent)
    s = np.array([1, 2, 3, 1])  # cohort sizes
    n_vj = 16 * np.outer(b, s)  # the same proportions in every cohort: the model holds exactly
    N, _, ones = _rappor_expected_ones(params, pos, n_vj)
    assert np.array_equal(ones, np.round(ones))
    acc = BitCountAccumulator(N, ones.astype(np.int64))
    e = estimate_rappor_candidates(params, acc, campaign_id=CAMPAIGN, candidates=cands)
    truth = n_vj.sum(axis=1)
    np.testing.assert_allclose(_counts(e), truth, atol=1e-9)
    assert [it.label for it in e.items] == cands
    assert e.n == int(N.sum()) and e.mechanism == "rappor"
    assert e.epsilon == pytest.approx(params.epsilon_one) and e.epsilon_inf == pytest.approx(
        params.epsilon_inf
    )
    for it in e.items:
        assert it.std_error > 0
        assert it.ci_low < it.count < it.ci_high
        assert it.ci_high - it.count == pytest.approx(1.959963984540054 * it.std_error, rel=1e-12)


def test_rappor_candidates_unused_cohort_is_ignored() -> None:
    params = RapporParams(k=32, h=2, m=3)
    cands = ["a", "b", "c"]
    pos = rappor_design(params, CAMPAIGN, cands)
    n_vj = 16 * np.outer([1, 2, 5], [2, 0, 1])
    N, _, ones = _rappor_expected_ones(params, pos, n_vj)
    assert N[1] == 0
    e = estimate_rappor_candidates(
        params, BitCountAccumulator(N, ones.astype(np.int64)), campaign_id=CAMPAIGN, candidates=cands
    )
    np.testing.assert_allclose(_counts(e), n_vj.sum(axis=1), atol=1e-9)


def test_design_matches_bloom_positions() -> None:
    from ldp_client.mechanisms.rappor import bloom_positions

    params = RapporParams(k=64, h=3, m=5)
    pos = rappor_design(params, "cid", ["u", "v"])
    assert pos.shape == (2, 5, 3)
    assert tuple(pos[1, 4]) == bloom_positions("cid", 4, "v", 64, 3)
    assert not pos.flags.writeable


# ============================================================================ exact: interval coverage


_COVERAGE_CONFIGS = (
    [
        (f"grr d={d} eps={eps}", math.exp(eps) / (math.exp(eps) + d - 1), 1 / (math.exp(eps) + d - 1))
        for d in (2, 16, 128, 1024)
        for eps in (0.5, 2.0, 6.0)
    ]
    + [(f"oue eps={eps}", 0.5, 1 / (math.exp(eps) + 1)) for eps in (1.0, 4.0)]
    + [
        ("rr two-coin", 0.75, 0.25),
        ("rappor defaults", 11 / 16, 9 / 16),
        ("rappor complement", 7 / 16, 5 / 16),
    ]
)


@pytest.mark.parametrize("n", [50, 100, 500, 2000])
def test_interval_coverage_by_enumeration(n: int) -> None:
    """Exact coverage (every outcome of C weighted by its probability) of the 95% interval.

    Includes rare items (c = 0, 1, 2) and regimes with fewer than one expected false support
    (n q* < 1), where Wald and Wilson intervals fall to 0.5-0.85.
    """
    covs = []
    for name, p, q in _COVERAGE_CONFIGS:
        for c in sorted({0, 1, 2, 5, n // 100, n // 10, n // 2, n - 1, n}):
            cov = _exact_coverage(n, c, p, q)
            covs.append(cov)
            assert cov >= 0.945, (name, n, c, cov)
    assert 0.95 <= float(np.mean(covs)) <= 0.98


def test_interval_monotone_in_confidence() -> None:
    n, p, q = 1000, 0.6, 0.2
    support = np.array([150.0, 300.0, 700.0])
    widths = [
        pure_oracle_arrays(support, n, p, q, conf).ci_high - pure_oracle_arrays(support, n, p, q, conf).ci_low
        for conf in (0.5, 0.9, 0.95, 0.99)
    ]
    assert all(np.all(a < b) for a, b in itertools.pairwise(widths))
    assert normal_quantile(0.95) == pytest.approx(1.959963984540054, rel=1e-12)


# ============================================================================ errors


def test_no_reports() -> None:
    for params, acc in [
        (BinaryRRParams.two_coin(), CountAccumulator.zero(2)),
        (_grr(4, 1.0), CountAccumulator.zero(4)),
        (BooleanRapporParams(), BitCountAccumulator.zero(1, 1)),
    ]:
        with pytest.raises(NoReportsError, match="n_reports=0") as info:
            estimate_frequencies(params, acc)
        assert info.value.field == "n_reports"
        assert isinstance(info.value, InvalidReportError)
    with pytest.raises(NoReportsError):
        estimate_rappor_candidates(
            RapporParams(k=8, h=1, m=1), BitCountAccumulator.zero(1, 8), campaign_id="c", candidates=["a"]
        )
    with pytest.raises(NoReportsError):
        pure_oracle_arrays([0], 0, 0.5, 0.1)


def test_parameter_and_input_errors() -> None:
    with pytest.raises(InvalidParameterError, match="estimate_rappor_candidates"):
        estimate_frequencies(RapporParams(k=8, h=1, m=1), BitCountAccumulator.zero(1, 8))
    with pytest.raises(InvalidReportError, match="accumulator"):
        estimate_frequencies(_grr(4, 1.0), CountAccumulator([1, 2, 3]))
    with pytest.raises(InvalidReportError, match="accumulator"):
        estimate_frequencies(BasicRapporParams(domain=4), CountAccumulator([1, 2, 3, 4]))
    for bad in (0.0, 1.0, 1.5, float("nan"), True):
        with pytest.raises(InvalidParameterError, match="confidence"):
            estimate_frequencies(BinaryRRParams.two_coin(), CountAccumulator([1, 2]), confidence=bad)
    with pytest.raises(InvalidParameterError, match="p_star"):
        pure_oracle_arrays([1], 10, 0.3, 0.3)
    with pytest.raises(InvalidParameterError, match="q_star"):
        pure_oracle_arrays([1], 10, 0.3, 1.2)
    with pytest.raises(InvalidReportError, match="support_counts"):
        pure_oracle_arrays([11], 10, 0.5, 0.1)
    with pytest.raises(InvalidParameterError, match="labels"):
        pure_oracle_estimate([1, 2], 10, 0.5, 0.1, ["a"])


@pytest.mark.parametrize(
    ("candidates", "match"),
    [([], "at least one"), (["a", "b", "a"], "repeated"), ("abc", "sequence"), (["a", 3], "strings")],
)
def test_candidate_list_errors(candidates: object, match: str) -> None:
    params = RapporParams(k=8, h=1, m=1)
    acc = BitCountAccumulator(np.array([16]), np.full((1, 8), 9))
    with pytest.raises(InvalidParameterError, match=match):
        estimate_rappor_candidates(params, acc, campaign_id="c", candidates=candidates)  # type: ignore[arg-type]


def test_too_many_candidates() -> None:
    params = RapporParams(k=8, h=2, m=2)
    acc = BitCountAccumulator(np.array([16, 0]), np.array([[9] * 8, [0] * 8]))  # one cohort has reports
    with pytest.raises(InvalidParameterError, match="at most 8") as info:
        estimate_rappor_candidates(params, acc, campaign_id="c", candidates=[f"s{i}" for i in range(9)])
    assert info.value.field == "candidates"


def test_identical_bloom_filters_are_named() -> None:
    from ldp_client.mechanisms.rappor import bloom_positions

    params = RapporParams(k=8, h=1, m=1)
    seen: dict[tuple[int, ...], str] = {}
    pair: tuple[str, str] | None = None
    for i in range(200):  # 8 possible filters: a collision among the first 9 strings is certain
        s = f"s{i}"
        key = bloom_positions("c", 0, s, 8, 1)
        if key in seen:
            pair = (seen[key], s)
            break
        seen[key] = s
    assert pair is not None
    acc = BitCountAccumulator(np.array([16]), np.full((1, 8), 9))
    with pytest.raises(InvalidParameterError, match="collide") as info:
        estimate_rappor_candidates(params, acc, campaign_id="c", candidates=list(pair))
    assert repr(pair[0]) in str(info.value) and repr(pair[1]) in str(info.value)


def test_linear_dependence_reports_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filters {0,1}, {2,3}, {0,2}, {1,3}: a + b = c + d, no two identical: rank 3 of 4."""
    pos = np.array([[[0, 1]], [[2, 3]], [[0, 2]], [[1, 3]]])
    monkeypatch.setattr(rappor_est_mod, "rappor_design", lambda *_args, **_kw: pos)
    params = RapporParams(k=8, h=2, m=1)
    acc = BitCountAccumulator(np.array([16]), np.full((1, 8), 9))
    with pytest.raises(InvalidParameterError, match="only 3 of 4 are identifiable"):
        estimate_rappor_candidates(params, acc, campaign_id="c", candidates=["a", "b", "c", "d"])


# ============================================================================ sampling against theory


def _grr_sample(rng: np.random.Generator, params: GRRParams, c: np.ndarray, reps: int) -> np.ndarray:
    """Support counts (reps, d) of a fixed population with true counts c: each true-value group
    reports through the GRR channel (row v: p on v, q elsewhere), i.e. a multinomial per group."""
    d = params.domain.size
    P = np.full((d, d), params.q)
    np.fill_diagonal(P, params.p)
    P /= P.sum(axis=1, keepdims=True)  # exact up to rounding; multinomial needs sums of 1
    return rng.multinomial(c, P, size=(reps, d)).sum(axis=1)


@pytest.mark.statistical
def test_grr_unbiased_with_theoretical_variance() -> None:
    rng = np.random.default_rng(20240601)
    params = _grr(16, 2.0)
    n, reps = 20_000, 400
    c = np.array([20, 0, 0, 100, 200, 400, 800, 1600, 3200, 6000, 7680, 0, 0, 0, 0, 0])  # 20 = 0.1%
    assert c.sum() == n
    support = _grr_sample(rng, params, c, reps)
    ests = [estimate_frequencies(params, CountAccumulator(row)) for row in support]
    counts = _field(ests, "count")
    var = _theory_var(n, c, params.p, params.q)
    z = _z_bonferroni(16)
    assert np.all(np.abs(counts.mean(axis=0) - c) <= z * np.sqrt(var / reps))
    lo, hi = _chi2_band(reps, 16)
    ratio = counts.var(axis=0, ddof=1) / var
    assert np.all((lo <= ratio) & (ratio <= hi)), ratio
    # The reported (plug-in) SE estimates the theoretical one (unbiased: V is linear in count_hat).
    reported = (_field(ests, "std_error") ** 2).mean(axis=0) / var
    assert np.all(np.abs(reported - 1) < 0.05), reported


@pytest.mark.statistical
def test_pure_oracle_calibration_small_n_rare_items() -> None:
    """n = 500 with items of count 0, 1, 2: coverage of 95% intervals over 1000 seeded repetitions."""
    rng = np.random.default_rng(7)
    reps, n = 1000, 500
    cases: list[tuple[str, np.ndarray, list[FrequencyEstimate]]] = []

    grr = _grr(16, 2.0)
    c_grr = np.array([1, 0, 0, 2, 5, 10, 25, 50, 100, 150, 157, 0, 0, 0, 0, 0])
    cases.append(
        (
            "grr",
            c_grr,
            [estimate_frequencies(grr, CountAccumulator(r)) for r in _grr_sample(rng, grr, c_grr, reps)],
        )
    )

    rr = _rr(1.0)
    yes = rng.binomial(1, rr.p_yes_given_yes, reps) + rng.binomial(n - 1, rr.p_yes_given_no, reps)
    cases.append(
        (
            "rr",
            np.array([n - 1, 1]),
            [estimate_frequencies(rr, CountAccumulator([n - y, y])) for y in yes],
        )
    )

    basic = BasicRapporParams(domain=8)
    c_b = np.array([1, 0, 4, 20, 75, 100, 150, 150])
    # Bits are randomized independently: bit v is 1 w.p. q* for the c_v holders of v, p* otherwise.
    ones = rng.binomial(c_b, basic.prob_one_if_set, (reps, 8)) + rng.binomial(
        n - c_b, basic.prob_one_if_clear, (reps, 8)
    )
    cases.append(
        ("basic", c_b, [estimate_frequencies(basic, BitCountAccumulator([n], row[None, :])) for row in ones])
    )

    boolean = BooleanRapporParams()
    t = rng.binomial(2, boolean.prob_one_if_set, reps) + rng.binomial(n - 2, boolean.prob_one_if_clear, reps)
    cases.append(
        (
            "boolean",
            np.array([n - 2, 2]),
            [estimate_frequencies(boolean, BitCountAccumulator([n], [[x]])) for x in t],
        )
    )

    items = sum(len(c) for _, c, _ in cases)
    lo, hi = _coverage_band(reps, items)
    z = _z_bonferroni(items)
    for name, c, ests in cases:
        covered = ((_field(ests, "ci_low") <= c) & (c <= _field(ests, "ci_high"))).sum(axis=0)
        assert np.all((lo <= covered) & (covered <= hi)), (name, covered, (lo, hi))
        counts = _field(ests, "count")
        p_q = {
            "grr": (grr.p, grr.q),
            "rr": (rr.p_yes_given_yes, rr.p_yes_given_no),
            "basic": (basic.prob_one_if_set, basic.prob_one_if_clear),
            "boolean": (boolean.prob_one_if_set, boolean.prob_one_if_clear),
        }[name]
        var = _theory_var(n, c, *p_q)  # equal for an item and its complement
        assert np.all(np.abs(counts.mean(axis=0) - c) <= z * np.sqrt(var / reps)), name


@pytest.mark.statistical
def test_grr_reported_variance_is_unbiased_at_small_n() -> None:
    """Issue 13 item 12: GRR at n = 200, eps = 0.7, d = 37 (about 5 false supports per item).

    The reported variance V(count_hat) = A + B count_hat, A = n q*(1-q*)/Delta^2, B = (1-p*-q*)/Delta, is
    linear in the unbiased count_hat, so its mean over repetitions is the true variance V(c) and its
    sampling sd is |B| sqrt(V(c)/R): per-item tolerance z |B| sqrt(V/R). Clipping count_hat at 0 before
    plugging it in (the earlier code) inflated it by about 15% on rare items (MSE / variance 0.87).
    The pooled ratio MSE / mean reported variance has relative sd about sqrt(2 sum V^2/R + R sum B^2 V)
    / (R sum V) (delta method; independent items, Gaussian squares), and the tolerance is z times that.
    Coverage matches the interval's exact coverage item by item (>= 0.95: conservative here, which
    ``ldp-sim`` says in one line when n q* < 10, see simulations.metrics).
    """
    rng = np.random.default_rng(20261121)
    n, d, reps = 200, 37, 2000
    params = _grr(d, 0.7)
    p, q = params.p, params.q
    # A Zipf(1.1)-like population over 37 items, as `ldp-sim --population zipf:1.1` draws it.
    weights = 1.0 / np.arange(1, d + 1) ** 1.1
    c = np.floor(n * weights / weights.sum()).astype(np.int64)
    c[0] += n - int(c.sum())
    assert c.sum() == n and 5.0 < n * q < 5.5
    support = _grr_sample(rng, params, c, reps)
    res = pure_oracle_arrays(support.ravel(), n, p, q)
    counts = res.count.reshape(reps, d)
    reported = (res.std_error**2).reshape(reps, d)
    var = _theory_var(n, c, p, q)
    b = (1.0 - p - q) / (p - q)
    z = _z_bonferroni(d)
    assert np.all(np.abs(reported.mean(axis=0) - var) <= z * abs(b) * np.sqrt(var / reps)), (
        reported.mean(axis=0) / var
    )
    mse = ((counts - c) ** 2).mean(axis=0)
    ratio = float(mse.sum() / reported.mean(axis=0).sum())
    rel_sd = math.sqrt(2.0 * float((var**2).sum()) * reps + reps * float((b * b * var).sum())) / (
        reps * float(var.sum())
    )
    assert abs(ratio - 1.0) <= 5.0 * rel_sd, (ratio, rel_sd)
    covered = ((res.ci_low.reshape(reps, d) <= c) & (c <= res.ci_high.reshape(reps, d))).sum(axis=0)
    for i, ci in enumerate(c):
        exact = _exact_coverage(n, int(ci), p, q)
        assert exact >= 0.95, (ci, exact)
        a = ALPHA / (2 * d)
        assert stats.binom.ppf(a, reps, exact) <= covered[i] <= stats.binom.isf(a, reps, exact), (ci, exact)


@pytest.mark.statistical
def test_calibration_when_few_false_supports() -> None:
    """GRR d=128, eps=4, n=500: about 2.7 false supports expected per item (Poisson-like regime)."""
    rng = np.random.default_rng(99)
    params = _grr(128, 4.0)
    n, reps = 500, 1000
    c = np.array([0, 1, 2, 5, 50])
    assert n * params.q < 3
    support = rng.binomial(c, params.p, (reps, 5)) + rng.binomial(n - c, params.q, (reps, 5))
    res = pure_oracle_arrays(support.ravel(), n, params.p, params.q)
    lo_ci, hi_ci = res.ci_low.reshape(reps, 5), res.ci_high.reshape(reps, 5)
    covered = ((lo_ci <= c) & (c <= hi_ci)).sum(axis=0)
    lo, hi = _coverage_band(reps, 5)
    assert np.all((lo <= covered) & (covered <= hi)), covered
    # and the sampled rate agrees with the exact coverage of each item
    for i, ci in enumerate(c):
        exact = _exact_coverage(n, int(ci), params.p, params.q)
        assert exact >= 0.95
        lo_e, hi_e = stats.binom.ppf(ALPHA / 10, reps, exact), stats.binom.isf(ALPHA / 10, reps, exact)
        assert lo_e <= covered[i] <= hi_e


@pytest.mark.statistical
def test_rappor_candidates_against_theory() -> None:
    """Unbiasedness, variance and calibration of the WLS candidate estimate (exact channel per bit)."""
    rng = np.random.default_rng(314159)
    params = RapporParams(k=32, h=2, m=8)
    cands = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    b = np.array([400, 250, 150, 100, 45, 5])  # per cohort; "zeta" is 0.5%
    n_vj = np.repeat(b[:, None], params.m, axis=1)
    pos = rappor_design(params, CAMPAIGN, cands)
    N, t, _ = _rappor_expected_ones(params, pos, n_vj)
    n, reps, M = int(N.sum()), 400, len(cands)
    truth = n_vj.sum(axis=1).astype(float)

    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    ti = t.astype(np.int64)
    ones = rng.binomial(ti, qs, (reps, *ti.shape)) + rng.binomial(N[:, None] - ti, ps, (reps, *ti.shape))
    ests = [
        estimate_rappor_candidates(params, BitCountAccumulator(N, o), campaign_id=CAMPAIGN, candidates=cands)
        for o in ones
    ]
    counts = _field(ests, "count")

    # Theory: count_hat = n G^-1 X' t_hat with t_hat = (c - p* N)/(q*-p*), c_ij independent with
    # Var c_ij = t_ij q*(1-q*) + (N_j - t_ij) p*(1-p*) (fixed population, exact channel).
    X = np.zeros((params.m * params.k, M))
    for v in range(M):
        for j in range(params.m):
            X[j * params.k + np.unique(pos[v, j]), v] = 1.0
    W = np.repeat(N.astype(float), params.k)
    G_inv = np.linalg.inv(X.T @ (W[:, None] * X))
    var_c = (t * qs * (1 - qs) + (N[:, None] - t) * ps * (1 - ps)).ravel() / (qs - ps) ** 2
    L = n * G_inv @ X.T
    var = np.einsum("ij,j,ij->i", L, var_c, L)

    z = _z_bonferroni(M)
    assert np.all(np.abs(counts.mean(axis=0) - truth) <= z * np.sqrt(var / reps))
    lo, hi = _chi2_band(reps, M)
    ratio = counts.var(axis=0, ddof=1) / var
    assert np.all((lo <= ratio) & (ratio <= hi)), ratio
    reported = (_field(ests, "std_error") ** 2).mean(axis=0) / var
    assert np.all((reported > 0.97) & (reported < 1.1)), reported  # r(1-r) form: slightly conservative
    covered = ((_field(ests, "ci_low") <= truth) & (truth <= _field(ests, "ci_high"))).sum(axis=0)
    clo, chi = _coverage_band(reps, M)
    assert np.all((clo <= covered) & (covered <= chi)), covered


@pytest.mark.statistical
def test_rappor_candidates_random_cohort_assignment() -> None:
    """Users pick cohorts at random (as in production): still unbiased, intervals still calibrated."""
    rng = np.random.default_rng(2718)
    params = RapporParams(k=32, h=2, m=8)
    cands = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    truth = np.array([3200, 2000, 1200, 800, 360, 40])
    pos = rappor_design(params, CAMPAIGN, cands)
    M, reps, n = len(cands), 400, int(truth.sum())
    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    ests = []
    for _ in range(reps):  # a loop over repetitions, not reports
        n_vj = rng.multinomial(truth, np.full(params.m, 1 / params.m))  # (M, m)
        N, t, _ = _rappor_expected_ones(params, pos, n_vj)
        ti = t.astype(np.int64)
        ones = rng.binomial(ti, qs) + rng.binomial(N[:, None] - ti, ps)
        ests.append(
            estimate_rappor_candidates(
                params, BitCountAccumulator(N, ones), campaign_id=CAMPAIGN, candidates=cands
            )
        )
    counts = _field(ests, "count")
    se2 = (_field(ests, "std_error") ** 2).mean(axis=0)
    z = _z_bonferroni(M)
    assert np.all(np.abs(counts.mean(axis=0) - truth) <= z * np.sqrt(se2 / reps))
    # the reported SE tracks the spread (chi-square band, with the SE itself estimated: +-10% slack)
    lo, hi = _chi2_band(reps, M)
    ratio = counts.var(axis=0, ddof=1) / se2
    assert np.all((0.9 * lo <= ratio) & (ratio <= 1.1 * hi)), ratio
    covered = ((_field(ests, "ci_low") <= truth) & (truth <= _field(ests, "ci_high"))).sum(axis=0)
    clo, chi = _coverage_band(reps, M)
    assert np.all((clo <= covered) & (covered <= chi)), (covered, n)


# ------------------------------------------------------------- issue 14: per-item rates, Support estimator


def test_per_item_rates_give_each_item_exactly_its_scalar_result() -> None:
    rng = np.random.default_rng(14)
    for _ in range(200):
        d = int(rng.integers(1, 6))
        n = int(rng.integers(1, 10**6))
        counts = rng.integers(0, n + 1, size=d)
        p = rng.uniform(0.0, 1.0, size=d)
        q = rng.uniform(0.0, 1.0, size=d)
        conf = float(rng.choice([0.5, 0.95, 0.999]))
        together = pure_oracle_arrays(counts, n, p, q, conf)
        for i in range(d):  # p < q on some items: those count non-supporting reports, as a scalar call does
            alone = pure_oracle_arrays(counts[i : i + 1], n, float(p[i]), float(q[i]), conf)
            for name in ("count", "std_error", "ci_low", "ci_high"):
                assert getattr(together, name)[i] == getattr(alone, name)[0], (name, i)


def test_per_item_rates_are_checked_item_by_item() -> None:
    with pytest.raises(InvalidParameterError) as info:
        pure_oracle_arrays([1, 2], 10, [0.5, 0.3], [0.2, 0.3])
    assert info.value.field == "p_star[1]" and "q_star[1]" in info.value.allowed
    with pytest.raises(InvalidParameterError) as info:
        pure_oracle_arrays([1, 2], 10, [0.5, 1.5], 0.2)
    assert info.value.field == "p_star" and info.value.value == 1.5
    with pytest.raises(InvalidParameterError) as info:
        pure_oracle_arrays([1, 2], 10, [0.5, 0.6, 0.7], 0.2)
    assert info.value.field == "p_star" and info.value.value == (3,)
    # One rate for all items keeps the scalar checks and messages.
    with pytest.raises(InvalidParameterError) as info:
        pure_oracle_arrays([1, 2], 10, "0.5", 0.2)  # type: ignore[arg-type]
    assert info.value.field == "p_star" and info.value.allowed == "a probability in [0, 1]"


def test_estimate_support_is_the_pure_oracle_estimate() -> None:
    from ldp_aggregator.estimators import estimate_support
    from ldp_client.spec import Support

    sup = Support(labels=("a", "b"), counts=[30, 70], n=100, p_star=(0.8, 0.7), q_star=(0.1, 0.2))
    est = estimate_support(sup, mechanism="m", epsilon=1.5, confidence=0.9)
    assert (est.mechanism, est.n, est.epsilon, est.epsilon_inf, est.confidence) == ("m", 100, 1.5, None, 0.9)
    for i, it in enumerate(est.items):
        p, q = (0.8, 0.7)[i], (0.1, 0.2)[i]
        assert it == pure_oracle_estimate([(30, 70)[i]], 100, p, q, [it.label], confidence=0.9)[0]
    empty = Support(labels=("a",), counts=[0], n=0, p_star=0.5, q_star=0.1)
    with pytest.raises(NoReportsError):
        estimate_support(empty, mechanism="m", epsilon=1.0)
    mismatched = Support(labels=("a",), counts=[1, 2], n=5, p_star=0.5, q_star=0.1)
    with pytest.raises(InvalidParameterError) as info:
        estimate_support(mismatched, mechanism="m", epsilon=1.0)
    assert info.value.field == "labels"


def test_extra_variance_adds_to_the_variance_and_widens_the_interval() -> None:
    from ldp_aggregator.estimators import estimate_support
    from ldp_client.spec import Support

    n, p, q, z = 1000, 0.7, 0.3, NormalDist().inv_cdf(0.975)
    base = Support(labels=("a", "b"), counts=[420, 250], n=n, p_star=p, q_star=q)
    extra = Support(
        labels=("a", "b"), counts=[420, 250], n=n, p_star=p, q_star=q, extra_variance=(0.0, 900.0)
    )
    plain = estimate_support(base, mechanism="m", epsilon=1.0)
    wider = estimate_support(extra, mechanism="m", epsilon=1.0)
    # No extra variance: the same floats, bit for bit.
    assert wider.items[0] == plain.items[0]
    assert (
        estimate_support(
            Support(labels=("a", "b"), counts=[420, 250], n=n, p_star=p, q_star=q, extra_variance=0.0),
            mechanism="m",
            epsilon=1.0,
        )
        == plain
    )
    b0, b1 = plain.items[1], wider.items[1]
    assert b1.count == b0.count
    assert b1.std_error**2 == pytest.approx(b0.std_error**2 + 900.0, rel=1e-12)
    assert b1.ci_low < b0.ci_low and b1.ci_high > b0.ci_high
    # The ends solve the score test with the extra variance: (C' - n q - c D)^2 = z^2 (V(c) + D^2 E).
    delta = p - q
    for end, c_prime in ((b1.ci_low, 250 - 0.5), (b1.ci_high, 250 + 0.5)):
        lhs = (c_prime - n * q - end * delta) ** 2
        rhs = z * z * (n * q * (1 - q) + end * delta * (1 - p - q) + delta**2 * 900.0)
        assert lhs == pytest.approx(rhs, rel=1e-9)


@pytest.mark.parametrize(
    ("extra", "allowed"),
    [
        (-1.0, "finite variances >= 0"),
        (math.nan, "finite variances >= 0"),
        ((1.0, 2.0, 3.0), "(one per item)"),
    ],
)
def test_extra_variance_is_checked(extra: object, allowed: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        pure_oracle_arrays([10, 20], 100, 0.6, 0.2, extra_variance=extra)  # type: ignore[arg-type]
    assert info.value.field == "extra_variance" and allowed in info.value.allowed


def test_more_rappor_candidates_than_cohort_bits_with_reports_are_refused() -> None:
    """Issue 19: the count check comes first (before the M x M normal matrix, 16 s at M = 10^4; the web
    view's campaign page asks GetEstimate for such campaigns), and names the limit."""
    params = RapporParams(k=8, h=2, m=2)
    acc = BitCountAccumulator.from_sums((np.array([100, 0]), np.zeros((2, 8), dtype=np.int64)))
    cands = [f"c{i}" for i in range(9)]  # one cohort with reports x 8 bits = 8 equations
    with pytest.raises(InvalidParameterError, match=r"at most 8 \(cohorts with reports x k bits\)"):
        estimate_rappor_candidates(params, acc, campaign_id="x", candidates=cands)
    # With both cohorts reported, 9 candidates are no longer refused for their number.
    both = BitCountAccumulator.from_sums((np.array([100, 100]), np.full((2, 8), 30, dtype=np.int64)))
    try:
        estimate_rappor_candidates(params, both, campaign_id="x", candidates=cands)
    except InvalidParameterError as exc:
        assert "cohorts with reports x k bits" not in str(exc)
