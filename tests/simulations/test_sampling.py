"""Sum-only samplers: exact invariants, and seeded moments against the exact theory.

Moment checks: over R seeded repetitions, every sample mean must lie within z * sd / sqrt(R) of the exact
mean, and every sample (co)variance within z * sd(sample covariance) of the exact (co)variance, where the
sd of a sample covariance is computed exactly from the fourth joint cumulant:
Var(s_ab) = kappa_aabb / R + (sigma_aa sigma_bb + sigma_ab^2) / (R - 1). z is the two-sided Bonferroni
quantile at family-wise alpha = 1e-6 over all the checks of a test (and at least 5).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.rappor import bloom_positions
from ldp_client.mechanisms.rappor import sampling as rappor_sampling
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    Domain,
    GRRParams,
    RapporParams,
)
from simulations.populations import ZipfPopulation
from simulations.sampling import (
    basic_rappor_set_counts,
    bloom_position_table,
    boolean_rappor_set_counts,
    rappor_set_counts,
    sample_bit_counts,
    sample_grr_counts,
    sample_rappor_bits,
    sample_rappor_counts,
    sample_rr_counts,
    split_by_cohort,
    spread_uniform_others,
)

ALPHA = 1e-6
Moments = tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]


def _z(n_tests: int) -> float:
    return max(5.0, float(stats.norm.isf(ALPHA / (2 * n_tests))))


def _categorical_sum_moments(rows: Sequence[tuple[int, NDArray[np.float64]]]) -> Moments:
    """Exact mean, covariance and fourth joint cumulant kappa(a,a,b,b) of sum_rows Multinomial(count, pi).

    Cumulants add over independent trials, so each trial's cumulants (from its d outcomes) are multiplied
    by the row's count.
    """
    d = rows[0][1].size
    mean = np.zeros(d)
    cov = np.zeros((d, d))
    k4 = np.zeros((d, d))
    for count, pi in rows:
        z = np.eye(d) - pi[None, :]  # row y: the centred indicator vector of outcome y
        cov1 = np.diag(pi) - np.outer(pi, pi)
        z2 = z * z
        m22 = z2.T @ (pi[:, None] * z2)  # E[z_a^2 z_b^2]
        var1 = np.diag(cov1)
        mean += count * pi
        cov += count * cov1
        k4 += count * (m22 - np.outer(var1, var1) - 2 * cov1 * cov1)
    return mean, cov, k4


def _check_moments(
    samples: NDArray[np.int64], mean: NDArray[np.float64], cov: NDArray[np.float64], k4: NDArray[np.float64]
) -> None:
    """Sample mean vector and covariance matrix of (R, d) samples against the exact values."""
    r, d = samples.shape
    x = samples.astype(np.float64)
    z = _z(d + d * (d + 1) // 2)
    mean_tol = z * np.sqrt(np.diag(cov) / r)
    assert np.all(np.abs(x.mean(axis=0) - mean) <= mean_tol), (x.mean(axis=0), mean, mean_tol)
    s = np.atleast_2d(np.cov(x, rowvar=False, ddof=1))
    var_s = k4 / r + (np.outer(np.diag(cov), np.diag(cov)) + cov * cov) / (r - 1)
    assert np.all(np.abs(s - cov) <= z * np.sqrt(var_s) + 1e-9), (s, cov, z * np.sqrt(var_s))


def _bernoulli_sum_moments(counts: NDArray[np.int64], probs: NDArray[np.float64]) -> Moments:
    """Per-cell mean, variance and fourth cumulant of independent sums of Bin(count, prob) (last axis)."""
    pq = probs * (1 - probs)
    return (
        (counts * probs).sum(axis=-1),
        (counts * pq).sum(axis=-1),
        (counts * pq * (1 - 6 * pq)).sum(axis=-1),
    )


def _check_cells(
    samples: NDArray[np.int64], mean: NDArray[np.float64], var: NDArray[np.float64], k4: NDArray[np.float64]
) -> None:
    """Per-cell sample means and variances of (R, ...) samples of independent cells."""
    r = samples.shape[0]
    x = samples.astype(np.float64)
    z = _z(2 * mean.size)
    assert np.all(np.abs(x.mean(axis=0) - mean) <= z * np.sqrt(var / r))
    s2 = x.var(axis=0, ddof=1)
    assert np.all(np.abs(s2 - var) <= z * np.sqrt(k4 / r + 2 * var * var / (r - 1)) + 1e-9)


def _reps(fn: Callable[[np.random.Generator], NDArray[np.int64]], r: int, seed: int) -> NDArray[np.int64]:
    rng = np.random.default_rng(seed)
    return np.stack([fn(rng) for _ in range(r)])


# ------------------------------------------------------------------------------------------------ RR


@pytest.mark.parametrize(
    "params", [BinaryRRParams.two_coin(), BinaryRRParams(truth_probability=0.3, yes_probability=0.2)]
)
def test_rr_counts_sum_to_users(params: BinaryRRParams) -> None:
    rng = np.random.default_rng(10)
    for counts in ([0, 0], [10**9, 3], [5, 0]):
        out = sample_rr_counts(params, np.asarray(counts), rng)
        assert out.dtype == np.int64 and out.shape == (2,) and int(out.sum()) == sum(counts)
        assert np.all(out >= 0)


@pytest.mark.statistical
@pytest.mark.parametrize(
    "params", [BinaryRRParams.two_coin(), BinaryRRParams(truth_probability=0.3, yes_probability=0.2)]
)
def test_rr_counts_moments(params: BinaryRRParams) -> None:
    counts = (700, 300)  # (no, yes)
    p1, p0 = params.p_yes_given_yes, params.p_yes_given_no
    mean, cov, k4 = _categorical_sum_moments(
        [(counts[0], np.array([1 - p0, p0])), (counts[1], np.array([1 - p1, p1]))]
    )
    samples = _reps(lambda g: sample_rr_counts(params, counts, g), 20_000, 11)
    _check_moments(samples, mean, cov, k4)


@pytest.mark.statistical
def test_rr_counts_exact_distribution() -> None:
    """Chi-square of the yes count against the exact law Bin(c_yes, P1) * Bin(c_no, P0), alpha = 1e-6."""
    params = BinaryRRParams(truth_probability=0.6, yes_probability=0.5)
    c_no, c_yes, r = 20, 12, 40_000
    pmf = np.convolve(
        stats.binom.pmf(np.arange(c_yes + 1), c_yes, params.p_yes_given_yes),
        stats.binom.pmf(np.arange(c_no + 1), c_no, params.p_yes_given_no),
    )
    yes = _reps(lambda g: sample_rr_counts(params, [c_no, c_yes], g), r, 12)[:, 1]
    observed = np.bincount(yes, minlength=pmf.size).astype(np.float64)
    expected = r * pmf
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    assert chi2 < stats.chi2.isf(ALPHA, obs.size - 1)


# ----------------------------------------------------------------------------------------------- GRR


def _uniform_others(d: int, v: int) -> NDArray[np.float64]:
    pi = np.full(d, 1.0 / (d - 1))
    pi[v] = 0.0
    return pi


def test_spread_is_exact_in_its_invariants() -> None:
    rng = np.random.default_rng(20)
    m = np.array([40, 0, 7, 100, 3])
    for _ in range(200):
        out = spread_uniform_others(m, rng)
        assert out.dtype == np.int64 and int(out.sum()) == int(m.sum()) and np.all(out >= 0)
    # A single source never lands on itself.
    for v in range(4):
        single = np.zeros(4, dtype=np.int64)
        single[v] = 1000
        assert spread_uniform_others(single, rng)[v] == 0
    np.testing.assert_array_equal(spread_uniform_others(np.zeros(3, dtype=np.int64), rng), [0, 0, 0])
    with pytest.raises(InvalidParameterError):
        spread_uniform_others(np.array([5]), rng)


@pytest.mark.statistical
@pytest.mark.parametrize("m", [[40, 0, 7, 100, 3], [0, 0, 60, 0], [9, 11]])
def test_spread_matches_independent_multinomials(m: list[int]) -> None:
    """L = sum_v Multinomial(M_v, uniform on the others): each other value gets M_v/(d-1) on average,
    and the covariance is the multinomial-mixture sum_v M_v (diag(u_v) - u_v u_v^T)."""
    d = len(m)
    mean, cov, k4 = _categorical_sum_moments([(mv, _uniform_others(d, v)) for v, mv in enumerate(m)])
    samples = _reps(lambda g: spread_uniform_others(np.asarray(m), g), 20_000, 21)
    _check_moments(samples, mean, cov, k4)


def _grr_channel(params: GRRParams) -> NDArray[np.float64]:
    d = params.domain.size
    ch = np.full((d, d), (1.0 - params.p) / (d - 1))
    np.fill_diagonal(ch, params.p)
    return ch


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("d", "p", "counts"), [(4, 0.55, [50, 10, 0, 25]), (3, 0.9, [5, 200, 40]), (6, 0.2, [0, 0, 0, 0, 0, 90])]
)
def test_grr_counts_mean_and_covariance(d: int, p: float, counts: list[int]) -> None:
    params = GRRParams(domain=Domain.of(d), truth_probability=p)
    ch = _grr_channel(params)
    mean, cov, k4 = _categorical_sum_moments([(c, ch[v]) for v, c in enumerate(counts)])
    samples = _reps(lambda g: sample_grr_counts(params, np.asarray(counts), g), 20_000, 22)
    assert np.all(samples.sum(axis=1) == sum(counts))
    _check_moments(samples, mean, cov, k4)


@pytest.mark.statistical
def test_grr_at_a_billion_users() -> None:
    """d = 1024, 10^9 Zipf users, one draw: each count within its Bonferroni band around the exact mean."""
    d, n = 1024, 10**9
    rng = np.random.default_rng(23)
    counts = ZipfPopulation(s=1.1).sample_counts(n, d, rng)
    params = GRRParams.from_epsilon(d, 4.0)
    out = sample_grr_counts(params, counts, rng)
    assert int(out.sum()) == n
    p, q = params.p, params.q
    mean = counts * p + (n - counts) * q
    var = counts * p * (1 - p) + (n - counts) * q * (1 - q)
    assert np.all(np.abs(out - mean) <= _z(d) * np.sqrt(var))


def test_grr_validates_counts() -> None:
    params = GRRParams(domain=Domain.of(3), truth_probability=0.5)
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidParameterError, match="shape"):
        sample_grr_counts(params, np.array([1, 2]), rng)
    with pytest.raises(InvalidParameterError, match="non-negative"):
        sample_grr_counts(params, np.array([1, -2, 3]), rng)
    with pytest.raises(InvalidParameterError, match="integers"):
        sample_grr_counts(params, np.array([1.0, 2.0, 3.0]), rng)
    with pytest.raises(InvalidParameterError, match="rng"):
        sample_grr_counts(params, np.array([1, 2, 3]), None)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- RAPPOR


@pytest.mark.statistical
def test_bit_counts_moments() -> None:
    q, p = 0.6875, 0.5625
    s = np.array([[0, 5, 10], [3, 3, 0]])
    n = np.array([10, 4])
    counts = np.stack([s, n[:, None] - s], axis=-1)
    mean, var, k4 = _bernoulli_sum_moments(counts, np.array([q, p]))
    samples = _reps(lambda g: sample_bit_counts(q, p, s, n, g), 20_000, 30)
    assert samples.shape == (20_000, 2, 3)
    _check_cells(samples, mean, var, k4)


def test_bit_counts_validation() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidParameterError, match=r"set_counts\[1, 0\]"):
        sample_bit_counts(0.7, 0.3, np.array([[1, 2], [5, 0]]), np.array([2, 4]), rng)
    with pytest.raises(InvalidParameterError, match="cohort_reports"):
        sample_bit_counts(0.7, 0.3, np.array([[1, 2]]), np.array([2, 4]), rng)
    with pytest.raises(InvalidParameterError, match="prob_one_if_set"):
        sample_bit_counts(1.5, 0.3, np.array([[1, 2]]), np.array([2]), rng)
    with pytest.raises(InvalidParameterError, match="set_counts"):
        sample_bit_counts(0.5, 0.3, np.array([1, 2]), np.array([2]), rng)


def test_extreme_rates_are_deterministic() -> None:
    s, n = np.array([[0, 3, 7]]), np.array([7])
    np.testing.assert_array_equal(sample_bit_counts(1.0, 0.0, s, n, np.random.default_rng(0)), s)


def test_set_counts_from_a_hand_made_table() -> None:
    """k = 6, h = 3, m = 2; a repeated position sets its bit once."""
    params = RapporParams(k=6, h=3, m=2)
    table = np.array(
        [
            [[0, 1, 2], [2, 2, 5], [4, 4, 4]],  # cohort 0: labels a, b, c
            [[5, 0, 1], [3, 4, 3], [0, 0, 1]],  # cohort 1
        ]
    )
    counts = np.array([[3, 10, 100], [1, 2, 0]])
    expected = np.array(
        [
            # bit: 0   1   2    3  4    5
            [3, 3, 13, 0, 100, 10],
            [1, 1, 0, 2, 2, 1],
        ]
    )
    got = rappor_set_counts(
        params, campaign_id="x", labels=["a", "b", "c"], counts_by_cohort=counts, position_table=table
    )
    np.testing.assert_array_equal(got, expected)


def _naive_set_counts(
    params: RapporParams, campaign_id: str, labels: Sequence[str], counts: NDArray[np.int64]
) -> NDArray[np.int64]:
    s = np.zeros((params.m, params.k), dtype=np.int64)
    for j in range(params.m):
        for li, label in enumerate(labels):
            for i in set(bloom_positions(campaign_id, j, label, params.k, params.h)):
                s[j, i] += counts[j, li]
    return s


def test_set_counts_match_the_client_bloom_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    params = RapporParams(k=16, h=3, m=3)
    labels = [f"v{i}" for i in range(40)]
    rng = np.random.default_rng(31)
    counts = rng.integers(0, 50, size=(3, 40))
    counts[:, 7] = 0  # a label nobody holds is never hashed
    hashed: list[str] = []

    def recording(campaign_id: str, cohort: int, value: str, k: int, h: int) -> tuple[int, ...]:
        hashed.append(value)
        return bloom_positions(campaign_id, cohort, value, k, h)

    monkeypatch.setattr(rappor_sampling, "_bloom_positions_fn", lambda: recording)
    got = rappor_set_counts(params, campaign_id="camp", labels=labels, counts_by_cohort=counts)
    np.testing.assert_array_equal(got, _naive_set_counts(params, "camp", labels, counts))
    assert "v7" not in hashed and len(hashed) == 3 * 39
    table = bloom_position_table(params, campaign_id="camp", labels=labels)
    assert table.shape == (3, 40, 3)
    np.testing.assert_array_equal(
        rappor_set_counts(
            params, campaign_id="camp", labels=labels, counts_by_cohort=counts, position_table=table
        ),
        got,
    )


def test_set_counts_validation() -> None:
    params = RapporParams(k=8, h=2, m=2)
    counts = np.ones((2, 2), dtype=np.int64)
    with pytest.raises(InvalidParameterError, match="shape"):
        rappor_set_counts(params, campaign_id="c", labels=["a", "b", "c"], counts_by_cohort=counts)
    with pytest.raises(InvalidParameterError, match="position_table"):
        rappor_set_counts(
            params,
            campaign_id="c",
            labels=["a", "b"],
            counts_by_cohort=counts,
            position_table=np.zeros((2, 2, 3), dtype=np.int64),
        )
    with pytest.raises(InvalidParameterError, match="position_table"):
        rappor_set_counts(
            params,
            campaign_id="c",
            labels=["a", "b"],
            counts_by_cohort=counts,
            position_table=np.full((2, 2, 2), 8),
        )


@pytest.mark.statistical
def test_cohort_split_moments() -> None:
    counts = np.array([30, 0, 12])
    m = 3
    samples = _reps(lambda g: split_by_cohort(counts, m, g), 20_000, 32)
    assert np.all(samples.sum(axis=1) == counts) and np.all(samples[:, :, 1] == 0)
    pi = np.full(m, 1.0 / m)
    for li, c in enumerate(counts.tolist()):
        if c:
            _check_moments(samples[:, :, li], *_categorical_sum_moments([(c, pi)]))
    np.testing.assert_array_equal(split_by_cohort(counts, 1, np.random.default_rng(0)), counts[None, :])


@pytest.mark.statistical
def test_rappor_end_to_end_per_bit_moments() -> None:
    """k = 8, h = 2, m = 2 with hand-made Bloom bits; each (cohort, bit) count is a sum over users of
    independent Bernoulli(r) with r = (1/m) (q* if the user's Bloom bit is set in that cohort else p*)."""
    params = RapporParams(k=8, h=2, m=2)
    labels = ["a", "b", "c"]
    table = np.array([[[0, 1], [1, 2], [7, 7]], [[3, 4], [4, 4], [0, 5]]])
    true_counts = np.array([300, 100, 0])
    q, p = params.prob_one_if_set, params.prob_one_if_clear
    bloom = np.zeros((2, 3, 8), dtype=bool)
    for j in range(2):
        for li in range(3):
            bloom[j, li, table[j, li]] = True
    rates = np.where(bloom, q, p) / params.m  # (m, labels, k)
    mean, var, k4 = _bernoulli_sum_moments(
        np.broadcast_to(true_counts[None, :, None], rates.shape).transpose(0, 2, 1), rates.transpose(0, 2, 1)
    )

    def draw(g: np.random.Generator) -> NDArray[np.int64]:
        ones, n = sample_rappor_counts(
            params, campaign_id="c", labels=labels, true_counts=true_counts, rng=g, position_table=table
        )
        assert int(n.sum()) == 400 and np.all(ones <= n[:, None])
        return ones

    samples = _reps(draw, 20_000, 33)
    _check_cells(samples, mean, var, k4)


@pytest.mark.statistical
def test_basic_and_boolean_rappor() -> None:
    s, n = basic_rappor_set_counts([3, 0, 5])
    np.testing.assert_array_equal(s, [[3, 0, 5]])
    np.testing.assert_array_equal(n, [8])
    s2, n2 = boolean_rappor_set_counts([3, 5])
    np.testing.assert_array_equal(s2, [[5]])
    np.testing.assert_array_equal(n2, [8])
    basic = BasicRapporParams(domain=Domain.of(3))
    boolean = BooleanRapporParams(f=0.25)
    cases: list[tuple[BasicRapporParams | BooleanRapporParams, NDArray[np.int64], NDArray[np.int64], int]] = [
        (basic, s, n, 34),
        (boolean, s2, n2, 35),
    ]
    for params, sc, nc, seed in cases:
        counts = np.stack([sc, nc[:, None] - sc], axis=-1)
        mean, var, k4 = _bernoulli_sum_moments(
            counts, np.array([params.prob_one_if_set, params.prob_one_if_clear])
        )
        rng = np.random.default_rng(seed)
        samples = np.stack([sample_rappor_bits(params, sc, nc, rng) for _ in range(20_000)])
        _check_cells(samples, mean, var, k4)


def test_sum_sampler_is_fast_enough_at_scale() -> None:
    """Smoke test at 10^9 users (no timing assertion; the benchmark measures it)."""
    rng = np.random.default_rng(36)
    params = RapporParams(k=32, h=2, m=4)
    labels = [str(i) for i in range(50)]
    counts = ZipfPopulation(s=1.1).sample_counts(10**9, 50, rng)
    ones, n = sample_rappor_counts(params, campaign_id="big", labels=labels, true_counts=counts, rng=rng)
    assert int(n.sum()) == 10**9 and ones.shape == (4, 32)
    assert math.isfinite(float(ones.mean()))
