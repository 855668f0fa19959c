"""Range queries from hierarchical intervals (issue 18): consistency, exactness, weights, calibration."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ldp_aggregator.ranges import (
    EmptyLevelError,
    answer_quantiles,
    answer_ranges,
    cdf,
    fit_tree,
    parse_range,
)
from ldp_client.errors import InvalidParameterError
from ldp_client.layouts import RangeLevels
from ldp_client.mechanisms.hio import SPEC, HIOParams


def _expected_levels(params: HIOParams, true_counts: np.ndarray) -> RangeLevels:
    """The RangeLevels at the expected support counts: n_l = floor(n/h) reports per level, each node's
    count n_l (q* + f_v (p* - q*))."""
    n = int(true_counts.sum())
    h = params.levels
    rates = [params.level_rates(level) for level in range(1, h + 1)]
    padded = np.zeros(params.leaves)
    padded[: true_counts.size] = true_counts / n
    counts = []
    for level, (p, q) in enumerate(rates, start=1):
        f = padded.reshape(params.branching**level, -1).sum(axis=1)
        counts.append((n // h) * (q + f * (p - q)))
    return RangeLevels(
        labels=tuple(str(i) for i in range(true_counts.size)),
        branching=params.branching,
        counts=tuple(counts),
        reports=(n // h,) * h,
        n=n,
        p_star=tuple(r[0] for r in rates),
        q_star=tuple(r[1] for r in rates),
    )


PARAMS = HIOParams.from_epsilon(23, 1.0, branching=3)
TRUE = np.array([1000 + 37 * i * (i % 5) for i in range(23)], dtype=np.float64)


def test_ranges_are_exact_at_the_expected_counts() -> None:
    tree = fit_tree(_expected_levels(PARAMS, TRUE))
    ranges = [(0, 22), (0, 0), (3, 17), (5, 6), (22, 22), (1, 21)]
    for ans, (lo, hi) in zip(answer_ranges(tree, ranges), ranges, strict=True):
        assert ans.count == pytest.approx(TRUE[lo : hi + 1].sum(), rel=1e-9)
        assert ans.ci_low < ans.count < ans.ci_high and ans.std_error > 0


def test_the_consistent_tree_sums_every_node_of_its_children() -> None:
    rng = np.random.default_rng(3)
    levels = _expected_levels(PARAMS, TRUE)
    noisy = tuple(c + rng.normal(0, 30, c.shape) for c in levels.counts)
    tree = fit_tree(RangeLevels(**{**levels.__dict__, "counts": noisy}))
    assert tree.leaves.sum() == pytest.approx(1.0)
    # A range's answer does not depend on how it is cut: [lo, hi] = [lo, m] + [m+1, hi].
    whole, left, right = answer_ranges(tree, [(2, 20), (2, 9), (10, 20)])
    assert whole.count == pytest.approx(left.count + right.count)


def test_the_adjoint_weights_are_the_answer_s_gradient() -> None:
    """The variance rests on the weights of each per-level estimate: check them by finite differences."""
    from ldp_aggregator.ranges import _adjoint

    levels = _expected_levels(PARAMS, TRUE)
    tree = fit_tree(levels)
    r = np.zeros(tree.leaves.size)
    r[4:15] = 1.0
    w = _adjoint(tree, r)
    base = float(r @ tree.leaves)
    for i, n_l in enumerate(levels.reports):
        delta = levels.p_star[i] - levels.q_star[i]
        for v in (0, levels.counts[i].size // 2, levels.counts[i].size - 1):
            bumped = list(levels.counts)
            bumped[i] = bumped[i].copy()
            bumped[i][v] += 1.0
            t2 = fit_tree(RangeLevels(**{**levels.__dict__, "counts": tuple(bumped)}))
            # x_{l,v} moves by 1 / (n_l delta) per unit of support count.
            assert (float(r @ t2.leaves) - base) * n_l * delta == pytest.approx(w[i][v], abs=1e-6)


def test_quantiles_and_cdf_follow_the_consistent_leaves() -> None:
    tree = fit_tree(_expected_levels(PARAMS, TRUE))
    true_cdf = np.cumsum(TRUE) / TRUE.sum()
    np.testing.assert_allclose(cdf(tree), true_cdf, rtol=1e-9)
    (median,) = answer_quantiles(tree, [0.5])
    assert median.position == int(np.flatnonzero(true_cdf >= 0.5)[0])


@pytest.mark.parametrize(("lo", "hi"), [(5, 4), (0, 23), (-1, 3)])
def test_a_bad_range_is_refused_in_one_line(lo: int, hi: int) -> None:
    tree = fit_tree(_expected_levels(PARAMS, TRUE))
    with pytest.raises(InvalidParameterError, match=r"range.*0 <= lo <= hi <= 22"):
        answer_ranges(tree, [(0, 3), (lo, hi)])


@pytest.mark.parametrize("text", ["3", "a:b", "1:2:3", "x:4"])
def test_parse_range_refuses_what_is_not_lo_hi(text: str) -> None:
    with pytest.raises(InvalidParameterError, match="range"):
        parse_range(text, tuple(str(i) for i in range(10)))


def test_parse_range_takes_positions_and_labels() -> None:
    assert parse_range("2:7", ("a", "b", "c", "d", "e", "f", "g", "h")) == (2, 7)
    assert parse_range("b:e", ("a", "b", "c", "d", "e")) == (1, 4)


def test_a_level_without_reports_is_named() -> None:
    levels = _expected_levels(PARAMS, TRUE)
    with pytest.raises(EmptyLevelError, match="level 2 has none"):
        fit_tree(RangeLevels(**{**levels.__dict__, "reports": (5, 0, 5)}))


@pytest.mark.statistical
def test_range_answers_are_calibrated() -> None:
    """Seeded repeats through the real batch encoder and ingest: MSE / mean reported variance in
    [0.9, 1.1] and 95% coverage in [0.93, 0.97], pooled over ranges of several lengths.

    With R repeats the ratio's standard deviation is about sqrt(2/R) per range (0.045 at R = 1000), less
    pooled over six ranges; coverage's is sqrt(0.05 * 0.95 / (6 R)) < 0.003."""
    params = HIOParams.from_epsilon(40, 1.5, branching=4)
    rng = np.random.default_rng(18)
    n, repeats = 4000, 1000
    probs = np.exp(-np.arange(40) / 9.0)
    probs /= probs.sum()
    ranges = [(0, 39), (0, 9), (10, 29), (17, 17), (3, 36), (30, 39)]
    labels = [str(i) for i in range(40)]
    err, var, hit = [], [], []
    for _ in range(repeats):
        values = rng.choice(40, size=n, p=probs)
        cols = SPEC.encode_batch(params, values, rng, campaign_id="c", labels=labels)
        m, support = SPEC.layout_batch(params, cols)
        tree = fit_tree(SPEC.range_levels(params, SimpleNamespace(n=m, support=support)))
        for (lo, hi), a in zip(ranges, answer_ranges(tree, ranges), strict=True):
            truth = np.count_nonzero((values >= lo) & (values <= hi))
            err.append((a.count - truth) ** 2)
            var.append(a.std_error**2)
            hit.append(a.ci_low <= truth <= a.ci_high)
    ratio = float(np.mean(err) / np.mean(var))
    coverage = float(np.mean(hit))
    assert 0.9 <= ratio <= 1.1, ratio
    assert 0.93 <= coverage <= 0.97, coverage


@pytest.mark.statistical
def test_the_level_sampling_variance_is_calibrated() -> None:
    """The levels' users are random subsets of one fixed population: with a (nearly) noiseless oracle the
    only error left is that sampling, which the range variance's sampling part must match. Over R = 2000
    seeded partitions the ratio's standard deviation is about sqrt(2/R) = 0.03 per range."""
    rng = np.random.default_rng(5)
    b, h, d, n = 4, 3, 64, 3000
    probs = np.exp(-np.arange(d) / 9.0)
    values = rng.choice(d, size=n, p=probs / probs.sum())
    ranges = [(0, 9), (10, 29), (17, 17), (3, 36), (30, 60)]
    truth = np.array([np.count_nonzero((values >= lo) & (values <= hi)) for lo, hi in ranges])
    p, q = 1 - 1e-9, 1e-9
    err, var = [], []
    for _ in range(2000):
        level = rng.integers(1, h + 1, size=n)
        counts, reports = [], []
        for lv in range(1, h + 1):
            held = values[level == lv] // b ** (h - lv)
            counts.append(np.bincount(held, minlength=b**lv) * (p - q) + held.size * q)
            reports.append(int(held.size))
        tree = fit_tree(
            RangeLevels(
                labels=tuple(str(i) for i in range(d)),
                branching=b,
                counts=tuple(counts),
                reports=tuple(reports),
                n=n,
                p_star=(p,) * h,
                q_star=(q,) * h,
            )
        )
        answers = answer_ranges(tree, ranges)
        err.append([(a.count - t) ** 2 for a, t in zip(answers, truth, strict=True)])
        var.append([a.std_error**2 for a in answers])
    ratio = np.mean(err, axis=0) / np.mean(var, axis=0)
    assert np.all((ratio >= 0.9) & (ratio <= 1.1)), ratio
