"""Norm-Sub and clipping: the projection onto the simplex, its equivalence with Wang et al.'s iteration."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_aggregator.estimators import FrequencyEstimate, ItemEstimate
from ldp_aggregator.postprocess import clip, norm_sub, norm_sub_iterative, postprocess
from ldp_client.errors import InvalidParameterError
from ldp_client.params import GRRParams, SetValuedParams


def test_norm_sub_is_the_simplex_projection() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(200):
        d = int(rng.integers(1, 40))
        c = rng.normal(0, 50, size=d) + rng.random(d) * 100
        total = float(rng.integers(1, 500))
        out = norm_sub(c, total)
        assert out.min() >= 0 and out.sum() == pytest.approx(total)
        # KKT: out = max(c - theta, 0) with one theta for every positive entry.
        pos = out > 0
        theta = c[pos] - out[pos]
        assert np.ptp(theta) < 1e-9 * max(1.0, total)
        assert np.all(c[~pos] <= theta[0] + 1e-9)
        if np.maximum(c, 0).sum() >= total:  # the usual case: the iteration only subtracts
            np.testing.assert_allclose(out, norm_sub_iterative(c, total), atol=1e-9 * max(1.0, total))
            checked += 1
    assert checked > 50


def test_norm_sub_differs_from_the_literal_iteration_only_when_adding_mass() -> None:
    c = [60.0, 30.0, -1.0]  # positive parts 90 < 100: the projection lifts the -1 (theta = -3.67)
    np.testing.assert_allclose(norm_sub(c, 100), [60 + 11 / 3, 30 + 11 / 3, 11 / 3 - 1])
    np.testing.assert_allclose(norm_sub_iterative(c, 100), [65.0, 35.0, 0.0])


def test_norm_sub_examples_and_errors() -> None:
    np.testing.assert_allclose(norm_sub([60.0, 50.0, -10.0], 100), [55.0, 45.0, 0.0])
    np.testing.assert_allclose(norm_sub([1.0, 2.0], 0), [0.0, 0.0])
    np.testing.assert_allclose(norm_sub([-5.0, -5.0], 10), [5.0, 5.0])
    np.testing.assert_allclose(clip([-3.0, 5.0, 12.0], 10), [0.0, 5.0, 10.0])
    with pytest.raises(InvalidParameterError, match="counts"):
        norm_sub([1.0, float("nan")], 1)
    with pytest.raises(InvalidParameterError, match="total"):
        norm_sub([1.0], -1)
    with pytest.raises(InvalidParameterError, match="counts"):
        clip([], 1)


def _estimate(counts: list[float], n: int) -> FrequencyEstimate:
    items = tuple(
        ItemEstimate(label=str(i), count=c, frequency=c / n, std_error=1.0, ci_low=c - 2, ci_high=c + 2)
        for i, c in enumerate(counts)
    )
    return FrequencyEstimate(mechanism="x", n=n, epsilon=1.0, epsilon_inf=None, confidence=0.95, items=items)


def test_postprocess_totals() -> None:
    est = _estimate([70.0, 40.0, -10.0], 100)
    norm, clipped = postprocess(est, GRRParams.from_epsilon(3, 1.0))
    assert (norm.method, clipped.method) == ("norm-sub", "clip")
    assert sum(norm.counts) == pytest.approx(100) and norm.total == 100
    assert clipped.counts == (70.0, 40.0, 0.0)
    sv = SetValuedParams.from_epsilon(3, 1.0, max_items=2, inner="grr")
    norm2, _ = postprocess(_estimate([90.0, 80.0, -10.0], 100), sv)
    assert norm2.total == pytest.approx(160.0)  # the unbiased number of items held, within [0, L n]
    norm3, _ = postprocess(_estimate([150.0, 140.0, 5.0], 100), sv)
    assert norm3.total == pytest.approx(200.0)  # clipped to L n
