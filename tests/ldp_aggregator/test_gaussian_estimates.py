"""Means and sums of the Gaussian mechanism (issue 17) through the one MEAN estimator: unbiased, with
calibrated standard errors and intervals over seeded repeats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.means import estimate_means
from ldp_client.mechanisms.numeric.gaussian.mechanism import GaussianEncoder, GaussianParams


@pytest.mark.statistical
@pytest.mark.parametrize(("eps", "delta"), [(0.5, 1e-6), (1.0, 1e-9), (4.0, 1e-6)])
def test_mean_and_sum_are_unbiased_and_calibrated(eps: float, delta: float) -> None:
    # R = 2000 repeats of n = 500 users from Beta(2, 5) on [0, 10] (mean 20/7): MSE / mean SE^2 in [0.9, 1.1]
    # (its standard deviation is about sqrt(2/R) = 0.032, so the bounds are 3 of them), coverage of the 95%
    # intervals of the mean and of the sum (over the n reporting users) in [0.93, 0.97] (binomial sd
    # 0.0049: 4 of them), and the average error within 5 standard errors of the mean of R estimates.
    params = GaussianParams.from_epsilon(0.0, 10.0, eps, delta=delta)
    enc = GaussianEncoder(params)
    rng = np.random.default_rng(20261125)
    reps, n = 2000, 500
    mu = 10 * 2 / 7
    errors, variances = np.empty(reps), np.empty(reps)
    covered = covered_sum = 0
    for r in range(reps):
        acc = accumulator_for(params)
        add_columns(acc, params, enc.encode_batch(10 * rng.beta(2, 5, n), rng))
        m = estimate_means(params, acc).means[0]
        errors[r] = m.mean - mu
        variances[r] = m.std_error**2
        covered += m.ci_low <= mu <= m.ci_high
        covered_sum += m.sum_ci_low <= n * mu <= m.sum_ci_high
        assert m.sum == pytest.approx(n * m.mean) and m.sum_std_error == pytest.approx(n * m.std_error)
    ratio = float(np.mean(errors**2) / np.mean(variances))
    assert 0.9 <= ratio <= 1.1, f"MSE / variance {ratio:.3f}"
    assert 0.93 <= covered / reps <= 0.97, f"coverage {covered / reps:.4f}"
    assert 0.93 <= covered_sum / reps <= 0.97, f"coverage of the sum {covered_sum / reps:.4f}"
    assert abs(errors.mean()) <= 5 * math.sqrt(np.mean(variances) / reps), "biased"
    # The standard error is the mechanism's and the data's: sigma^2 + Var(x) per user.
    expected_se = math.sqrt((params.sigma_value**2 + 100 * 10 / (49 * 8)) / n)
    assert float(np.sqrt(np.mean(variances))) == pytest.approx(expected_se, rel=0.05)
