"""Metrics on hand-made cases with exactly known answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldp_client.errors import InvalidParameterError
from simulations.metrics import (
    compute_metrics,
    coverage,
    detection,
    max_abs_error,
    mse,
    mse_over_variance,
    per_item_error,
    per_item_mse,
    total_variation,
)

TRUTH = np.array([10, 20, 30, 40])
EST = np.array([[12.0, 18.0, 30.0, 35.0], [-5.0, 25.0, 30.0, 50.0]])
# errors: [2, -2, 0, -5] and [-15, 5, 0, 10]; squares sum to 33 and 350.


def test_errors_and_mse() -> None:
    np.testing.assert_array_equal(per_item_error(TRUTH, EST), [[2, -2, 0, -5], [-15, 5, 0, 10]])
    np.testing.assert_array_equal(per_item_mse(TRUTH, EST), [114.5, 14.5, 0.0, 62.5])
    assert mse(TRUTH, EST) == 383 / 8
    assert mse_over_variance(TRUTH, EST, [40, 40, 60, 60]) == pytest.approx(383 / 8 / 50, rel=1e-15)
    assert mse(TRUTH, EST[0]) == 33 / 4  # a single repeat as (D,)
    assert mse(np.tile(TRUTH, (2, 1)), EST) == 383 / 8  # truth given per repeat


def test_total_variation_clips_and_renormalises() -> None:
    # Repeat 0: P = (19, 38, 57, 76)/190, Q = (24, 36, 60, 70)/190 -> TV = 8/190.
    # Repeat 1: clipped (0, 25, 30, 50)/105 = (0, 50, 60, 100)/210, P = (21, 42, 63, 84)/210 -> TV = 24/210.
    np.testing.assert_allclose(total_variation(TRUTH, EST), [4 / 95, 4 / 35], rtol=1e-14)
    assert total_variation(TRUTH, TRUTH * 3)[0] == 0.0
    assert total_variation([1, 0], [0, 5])[0] == 1.0
    assert total_variation([1, 1], [-1, -2])[0] == 1.0  # no estimated mass at all: maximal distance


def test_max_abs_error_is_per_repeat() -> None:
    np.testing.assert_array_equal(max_abs_error(TRUTH, EST), [5.0, 15.0])


def test_coverage_is_inclusive() -> None:
    assert coverage(TRUTH, EST - 3, EST + 3) == 0.5  # covered: 10, 20, 30 in repeat 0; 30 in repeat 1
    assert coverage(TRUTH, TRUTH, TRUTH) == 1.0
    assert coverage(TRUTH, TRUTH + 1e-9, TRUTH + 1) == 0.0


D_TRUTH = np.array([100, 50, 0, 5])
D_EST = np.array([[90.0, 60.0, 10.0, -3.0], [110.0, 20.0, 30.0, 8.0]])
D_DET = np.array([[True, True, True, False], [True, False, True, True]])


def test_detection_counts_and_allocated_mass() -> None:
    det = detection(D_TRUTH, D_DET, D_EST)
    np.testing.assert_array_equal(det.detected, [3, 3])
    np.testing.assert_array_equal(det.false_positives, [1, 1])
    np.testing.assert_array_equal(det.false_negatives, [1, 1])
    np.testing.assert_allclose(det.allocated_mass, [160 / 155, 148 / 155], rtol=1e-15)

    strict = detection(D_TRUTH, D_DET, D_EST, present_threshold=5, n_users=200)
    np.testing.assert_array_equal(strict.false_positives, [1, 2])
    np.testing.assert_array_equal(strict.false_negatives, [0, 1])
    np.testing.assert_allclose(strict.allocated_mass, [0.8, 0.74], rtol=1e-15)


def test_compute_metrics_and_to_dict() -> None:
    m = compute_metrics(TRUTH, EST, variance=[40, 40, 60, 60], ci_low=EST - 3, ci_high=EST + 3)
    assert (m.n_repeats, m.n_items, m.mse, m.max_abs_error, m.coverage) == (2, 4, 383 / 8, 10.0, 0.5)
    assert m.mse_over_variance == 383 / 8 / 50
    assert m.total_variation == pytest.approx((4 / 95 + 4 / 35) / 2, rel=1e-14)
    assert m.detected is m.false_positives is m.false_negatives is m.allocated_mass is None
    d = m.to_dict()
    assert d["n_repeats"] == 2 and d["max_abs_error"] == 10.0 and d["coverage"] == 0.5
    assert d["detected"] is None and d["allocated_mass"] is None
    json.dumps(d)

    md = compute_metrics(D_TRUTH, D_EST, detected=D_DET)
    assert md.detected == 3.0 and md.false_positives == 1.0 and md.false_negatives == 1.0
    assert md.allocated_mass == pytest.approx(154 / 155, rel=1e-15)
    assert md.coverage is None and md.mse_over_variance is None
    with pytest.raises(AttributeError):
        md.mse = 0.0  # type: ignore[misc]


def test_validation() -> None:
    with pytest.raises(InvalidParameterError, match="shapes"):
        mse(TRUTH, np.zeros((2, 3)))
    with pytest.raises(InvalidParameterError, match="finite"):
        mse(TRUTH, [1.0, np.nan, 2.0, 3.0])
    with pytest.raises(InvalidParameterError, match="positive total"):
        total_variation([0, 0], [1, 1])
    with pytest.raises(InvalidParameterError, match="ci_low/ci_high"):
        compute_metrics(TRUTH, EST, ci_low=EST)
    with pytest.raises(InvalidParameterError, match="boolean"):
        detection(D_TRUTH, [1, 0, 1, 0], D_EST)
    with pytest.raises(InvalidParameterError, match="variance"):
        mse_over_variance(TRUTH, EST, [0, 0, 0, 0])
    with pytest.raises(InvalidParameterError):
        mse(np.zeros((2, 2, 2)), np.zeros((2, 2, 2)))
