"""Range queries from Haar wavelets (``haar``, issue 18): exactness, weights, the encoders, calibration."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from ldp_aggregator.estimators import estimate_support
from ldp_aggregator.haar_ranges import fit_haar
from ldp_aggregator.ranges import EmptyLevelError, answer_quantiles, answer_ranges, campaign_ranges, cdf
from ldp_client.domain import Domain
from ldp_client.errors import InvalidReportError
from ldp_client.layouts import HaarLevels
from ldp_client.mechanisms.haar import (
    SPEC,
    HaarEncoder,
    HaarParams,
    coefficient_of,
    fwht,
    hadamard_sign,
    synthesize,
)

PARAMS = HaarParams.from_epsilon(23, 1.0)
TRUE = np.array([1000 + 37 * i * (i % 5) for i in range(23)], dtype=np.float64)


def _true_theta(params: HaarParams, counts: np.ndarray) -> list[np.ndarray]:
    f = np.zeros(params.leaves)
    f[: counts.size] = counts / counts.sum()
    out = []
    for level in range(1, params.levels + 1):
        halves = f.reshape(1 << (level - 1), 2, -1).sum(axis=2)
        out.append(halves[:, 0] - halves[:, 1])
    return out


def _expected_levels(params: HaarParams, counts: np.ndarray, per_row: int = 6000) -> HaarLevels:
    """HaarLevels at the expected counts: ``per_row`` reports at every row of every level, the +1 reports
    per_row (1 + a (H theta)_r) / 2."""
    rows, plus = [], []
    for theta in _true_theta(params, counts):
        r = np.full(theta.size, float(per_row))
        rows.append(r)
        plus.append(r * (1.0 + params.bias * fwht(theta)) / 2.0)
    return HaarLevels(
        labels=tuple(str(i) for i in range(counts.size)),
        rows=tuple(rows),
        plus=tuple(plus),
        n=int(counts.sum()),
        bias=params.bias,
    )


def test_ranges_are_exact_at_the_expected_counts() -> None:
    tree = fit_haar(_expected_levels(PARAMS, TRUE))
    ranges = [(0, 22), (0, 0), (3, 17), (5, 6), (22, 22), (1, 21)]
    for ans, (lo, hi) in zip(answer_ranges(tree, ranges), ranges, strict=True):
        assert ans.count == pytest.approx(TRUE[lo : hi + 1].sum(), rel=1e-9)
        assert ans.ci_low < ans.count < ans.ci_high and ans.std_error > 0
    np.testing.assert_allclose(cdf(tree), np.cumsum(TRUE) / TRUE.sum(), atol=1e-12)
    median = answer_quantiles(tree, [0.5])[0].position
    assert np.cumsum(TRUE)[median] / TRUE.sum() >= 0.5 > np.cumsum(TRUE)[median - 1] / TRUE.sum()


def test_the_weights_are_the_answer_s_gradient_on_two_nodes_per_level() -> None:
    tree = fit_haar(_expected_levels(PARAMS, TRUE))
    r = np.zeros(PARAMS.leaves)
    r[5:19] = 1.0
    w = tree.weights(r)
    base = float(r @ synthesize(list(tree.theta))[0])
    for level, wl in enumerate(w):
        assert np.count_nonzero(wl) <= 2
        for j in range(wl.size):
            theta = [t.copy() for t in tree.theta]
            theta[level][j] += 1.0
            assert float(r @ synthesize(theta)[0]) - base == pytest.approx(wl[j], abs=1e-12)


def test_the_hadamard_transform_is_the_sylvester_matrix() -> None:
    x = np.arange(8, dtype=np.float64) ** 2
    h = np.array([[1.0 if hadamard_sign(r, j) else -1.0 for j in range(8)] for r in range(8)])
    np.testing.assert_allclose(fwht(x), h @ x)


def test_the_batch_encoder_reports_the_device_s_true_bit() -> None:
    """At a truth probability of 1 - 1e-7 the reported bits are the true ones: the vectorised parity and
    sides agree with the device's scalar path."""
    params = HaarParams(domain=Domain.of(100), truth_probability=1 - 1e-7)
    rng = np.random.default_rng(2)
    values = rng.integers(0, 100, size=5000)
    levels, rows, bits = SPEC.encode_batch(params, values, rng, campaign_id="c", labels=())
    for x, lv, row, bit in zip(values, levels, rows, bits, strict=True):
        node, left = coefficient_of(params, int(lv), int(x))
        assert bool(bit) == (left == hadamard_sign(int(row), node))
    report = HaarEncoder(params, level=3).encode(41)
    node, left = coefficient_of(params, 3, 41)
    assert report.level == 3 and 0 <= report.row < 4
    assert report.bit == (left == hadamard_sign(report.row, node))


def test_a_row_beyond_its_level_is_refused_in_one_line() -> None:
    cols = (np.array([1, 3], np.uint16), np.array([0, 4], np.uint32), np.array([True, False]))
    with pytest.raises(InvalidReportError, match=r"reports\.rows=4 .*a row in \[0, 3\] at level 3"):
        SPEC.layout_batch(PARAMS, cols)


def test_a_level_without_reports_is_named() -> None:
    cols = SPEC.encode_batch(PARAMS, np.arange(23), np.random.default_rng(1), campaign_id="c", labels=())
    keep = cols[0] != 2
    n, support = SPEC.layout_batch(PARAMS, tuple(c[keep] for c in cols))
    with pytest.raises(EmptyLevelError, match="level 2 has none"):
        campaign_ranges(PARAMS, SimpleNamespace(n=n, support=support), [(0, 3)])


def _repeats(params: HaarParams, n: int, repeats: int, seed: int) -> tuple[list[Any], np.ndarray]:
    rng = np.random.default_rng(seed)
    d = params.domain.size
    probs = np.exp(-np.arange(d) / 9.0)
    probs /= probs.sum()
    out = []
    for _ in range(repeats):
        values = rng.choice(d, size=n, p=probs)
        cols = SPEC.encode_batch(params, values, rng, campaign_id="c", labels=())
        m, support = SPEC.layout_batch(params, cols)
        out.append((values, SimpleNamespace(n=m, support=support)))
    return out, probs


@pytest.mark.statistical
def test_range_answers_are_calibrated() -> None:
    """Seeded repeats through the real batch encoder and ingest: MSE / mean reported variance in
    [0.9, 1.1] and 95% coverage in [0.93, 0.97], pooled over ranges of several lengths (with R = 1000
    repeats the ratio's standard deviation is about sqrt(2/R) = 0.045 per range, less pooled)."""
    params = HaarParams.from_epsilon(40, 1.5)
    ranges = [(0, 39), (0, 9), (10, 29), (17, 17), (3, 36), (30, 39)]
    err, var, hit = [], [], []
    runs, _ = _repeats(params, 4000, 1000, 18)
    for values, acc in runs:
        answers, _ = campaign_ranges(params, acc, ranges)
        for (lo, hi), a in zip(ranges, answers, strict=True):
            truth = np.count_nonzero((values >= lo) & (values <= hi))
            err.append((a.count - truth) ** 2)
            var.append(a.std_error**2)
            hit.append(a.ci_low <= truth <= a.ci_high)
    ratio = float(np.mean(err) / np.mean(var))
    coverage = float(np.mean(hit))
    assert 0.9 <= ratio <= 1.1, ratio
    assert 0.93 <= coverage <= 0.97, coverage


@pytest.mark.statistical
def test_leaf_frequencies_are_calibrated() -> None:
    """The generic frequency estimate (the spec's Support of estimated leaves): MSE / variance and
    coverage pooled over the 40 leaves and R = 400 repeats."""
    params = HaarParams.from_epsilon(40, 1.5)
    runs, _ = _repeats(params, 4000, 400, 7)
    err, var, hit = [], [], []
    for values, acc in runs:
        est = estimate_support(SPEC.support(params, acc), mechanism="haar", epsilon=params.epsilon)
        truth = np.bincount(values, minlength=40)
        for it, t in zip(est.items, truth, strict=True):
            err.append((it.count - t) ** 2)
            var.append(it.std_error**2)
            hit.append(it.ci_low <= t <= it.ci_high)
    ratio = float(np.mean(err) / np.mean(var))
    assert 0.9 <= ratio <= 1.1, ratio
    assert 0.93 <= float(np.mean(hit)) <= 0.97


@pytest.mark.statistical
def test_the_level_sampling_variance_is_calibrated() -> None:
    """The levels' users are random subsets of one fixed population: the answer from the subsets' exact
    coefficients (no oracle noise) varies only by that sampling, which the variance's sampling part (a tree
    whose oracle part vanishes: bias -> infinity) must match. R = 2000 partitions: the ratio's standard
    deviation is about sqrt(2/R) = 0.03 per range."""
    from ldp_aggregator.haar_ranges import HaarTree

    rng = np.random.default_rng(5)
    params = HaarParams(domain=Domain.of(64), truth_probability=0.5)
    h, n = params.levels, 3000
    probs = np.exp(-np.arange(64) / 9.0)
    values = rng.choice(64, size=n, p=probs / probs.sum())
    ranges = [(0, 9), (10, 29), (5, 5), (3, 50)]
    per_level = np.full(h, n // h)
    answers = []
    for _ in range(2000):
        order = rng.permutation(n)
        theta = []
        for level in range(1, h + 1):
            x = values[order[(level - 1) * (n // h) : level * (n // h)]]
            node, left = np.array([coefficient_of(params, level, int(v)) for v in x]).T
            theta.append(
                np.bincount(node, weights=np.where(left, 1.0, -1.0), minlength=1 << (level - 1)) / x.size
            )
        leaves = synthesize(theta)[0]
        answers.append([leaves[lo : hi + 1].sum() for lo, hi in ranges])
    true_theta = _true_theta(params, np.bincount(values, minlength=64).astype(np.float64))
    leaves, masses = synthesize(true_theta)
    tree = HaarTree(
        labels=tuple(str(i) for i in range(64)),
        n=int(per_level.sum()),
        reports=tuple(int(c) for c in per_level),
        bias=1e9,
        theta=tuple(true_theta),
        masses=tuple(masses),
        leaves=leaves,
    )
    observed = np.var(np.array(answers), axis=0, ddof=1)
    for (lo, hi), obs in zip(ranges, observed, strict=True):
        r = np.zeros(params.leaves)
        r[lo : hi + 1] = 1.0
        assert 0.88 <= obs / tree.variance(r) <= 1.12, (lo, hi, obs / tree.variance(r))
