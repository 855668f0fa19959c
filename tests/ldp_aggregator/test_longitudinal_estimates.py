"""The longitudinal mechanisms' estimators (issue 17) over seeded repeats: unbiased, with the variance the
Support contract (or the means contract) states, and 95% intervals that cover.

Every repeat encodes one report per simulated device with the mechanism's batch encoder (each device with
its own memoized part, drawn from the seeded generator) and estimates through the aggregator's facades.
Pooled over items and repeats: MSE / theoretical variance in [0.9, 1.1] and coverage in [0.93, 0.97]
(with these repeats, about 4 standard errors of either figure; seeds fixed).
"""

from __future__ import annotations

import zlib
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.estimators import estimate_frequencies
from ldp_aggregator.means import estimate_means
from ldp_client import registry
from ldp_client.mechanisms.longitudinal.onebitmean import exact_distribution
from ldp_client.params import make_params

FREQUENCY_CASES = [
    ("dbitflip", {"d": 2}),
    ("lgrr", {"epsilon_inf": 2.0}),
    ("losue", {"epsilon_inf": 2.0}),
]


def frequency_calibration(name: str, fields: dict[str, Any], *, reps: int, seed: int) -> tuple[float, float]:
    """(MSE / variance, coverage) of a frequency mechanism's count estimates, pooled over 8 items."""
    d, n = 8, 3000
    params = make_params(name, epsilon=1.0, domain=d, fields=fields)
    spec = registry.spec_for(params)
    truth = np.array([900, 600, 450, 350, 300, 200, 150, 50])
    values = np.repeat(np.arange(d), truth)
    p_star, q_star = spec.support_rates(params)
    var = (n * q_star * (1 - q_star) + truth * (p_star - q_star) * (1 - p_star - q_star)) / (
        p_star - q_star
    ) ** 2
    rng = np.random.default_rng(seed)
    sq = np.zeros(d)
    covered = 0
    for _ in range(reps):
        acc = accumulator_for(params)
        add_columns(acc, params, spec.encode_batch(params, values, rng, campaign_id="c", labels=[]))
        est = estimate_frequencies(params, acc)
        counts = np.array([it.count for it in est.items])
        sq += (counts - truth) ** 2
        covered += sum(it.ci_low <= t <= it.ci_high for it, t in zip(est.items, truth, strict=True))
    return float(np.mean(sq / reps / var)), covered / (reps * d)


def mean_calibration(*, reps: int, seed: int) -> tuple[float, float]:
    """(MSE / variance, coverage) of onebitmean's mean estimate, values between and on grid points."""
    params = make_params("onebitmean", epsilon=1.0, fields={"lo": 0.0, "hi": 10.0, "buckets": 4})
    spec = registry.spec_for(params)
    points = np.array([0.0, 0.7, 2.5, 3.3, 5.0, 6.1, 9.9, 10.0])
    values = np.repeat(points, 250)[:, None]
    n = values.shape[0]
    truth = float(values.mean())
    # Var(x_hat) per user = (hi - lo)^2 pi (1 - pi) / (2p - 1)^2, pi = P(1 | x) exactly.
    p = params.truth_threshold / 2**32
    pis = np.array([float(exact_distribution(params, params.position(float(x)))[1]) for x in points])
    var = float(np.sum(250 * 100.0 * pis * (1 - pis) / (2 * p - 1) ** 2) / n**2)
    rng = np.random.default_rng(seed)
    sq = 0.0
    covered = 0
    for _ in range(reps):
        acc = accumulator_for(params)
        add_columns(acc, params, spec.encode_values(params, values, rng))
        est = estimate_means(params, acc).mean()
        sq += (est.mean - truth) ** 2
        covered += est.ci_low <= truth <= est.ci_high
    return sq / reps / var, covered / reps


@pytest.mark.statistical
@pytest.mark.parametrize(("name", "fields"), FREQUENCY_CASES)
def test_frequency_estimates_are_calibrated(name: str, fields: dict[str, Any]) -> None:
    ratio, coverage = frequency_calibration(name, fields, reps=500, seed=zlib.crc32(name.encode()))
    assert 0.9 <= ratio <= 1.1, ratio
    assert 0.93 <= coverage <= 0.97, coverage


@pytest.mark.statistical
def test_onebitmean_means_are_calibrated() -> None:
    ratio, coverage = mean_calibration(reps=2000, seed=17)
    assert 0.9 <= ratio <= 1.1, ratio
    assert 0.93 <= coverage <= 0.97, coverage


def test_onebitmean_expected_bit_is_the_position() -> None:
    # Exact: over devices, E[bit] = (1 - p) + (2p - 1) s up to the 2**-63 rounding of alpha and the float
    # product s * buckets (unbiased mean to about 1e-16 of the range).
    params = make_params("onebitmean", fields={"lo": 0.0, "hi": 1.0, "truth_probability": 0.75, "buckets": 3})
    for s in (0.0, 0.1, 1 / 3, 0.5, 0.77, 1.0):
        one = exact_distribution(params, s)[1]
        assert abs(one - (Fraction(1, 4) + Fraction(1, 2) * Fraction(s))) <= Fraction(1, 2**50)


@pytest.mark.parametrize(("name", "fields"), FREQUENCY_CASES)
def test_estimates_carry_the_longitudinal_bound(name: str, fields: dict[str, Any]) -> None:
    params = make_params(name, epsilon=1.0, domain=4, fields=fields)
    spec = registry.spec_for(params)
    acc = accumulator_for(params)
    rng = np.random.default_rng(5)
    add_columns(
        acc, params, spec.encode_batch(params, np.arange(4).repeat(50), rng, campaign_id="c", labels=[])
    )
    est = estimate_frequencies(params, acc)
    assert est.epsilon_inf == spec.epsilon_inf(params) < float("inf")
