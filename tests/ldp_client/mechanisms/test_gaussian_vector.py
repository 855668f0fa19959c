"""The vector Gaussian mechanism (issue 17): the zCDP conversion against an independent minimisation and the
exact Gaussian curve, the discrete Gaussian's Renyi bound, (epsilon, delta) over every integer shift of the
rounded vectors, the device encoder's distribution, calibrated per-coordinate means, bad input."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from scipy import optimize, stats

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.means import estimate_means
from ldp_client import randomness
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.numeric.gaussian import calibration
from ldp_client.mechanisms.numeric.gaussian.vector import (
    VECTOR_SPEC,
    GaussianVectorEncoder,
    GaussianVectorParams,
)
from ldp_client.params import make_params


@pytest.mark.parametrize("rho", [0.01, 0.05, 0.3, 2.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-9])
def test_zcdp_conversion_is_valid_and_minimal(rho: float, delta: float) -> None:
    got = calibration.epsilon_from_zcdp(rho, delta)

    def eps_at(log_am1: float) -> float:  # CKS Proposition 12 at alpha = 1 + e^log_am1, written anew
        a = 1.0 + math.exp(log_am1)
        return a * rho + math.log((a - 1.0) / a) - (math.log(delta) + math.log(a)) / (a - 1.0)

    ref = optimize.minimize_scalar(eps_at, bounds=(-12.0, 14.0), method="bounded", options={"xatol": 1e-12})
    assert got == pytest.approx(ref.fun, rel=1e-7)
    # Valid: the Gaussian mechanism with rho = 1/(2 sigma^2) (sensitivity 1) is exactly (eps, delta_exact)
    # with delta_exact <= delta at the converted epsilon; and no looser than Bun-Steinke's bound.
    sigma = 1.0 / math.sqrt(2.0 * rho)
    assert calibration.analytic_delta(got, sigma) <= delta
    assert got <= rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


@pytest.mark.parametrize(("sigma", "shift"), [(0.6, 1), (1.25, 3), (3.0, 7)])
def test_discrete_gaussian_renyi_divergence_is_at_most_the_continuous_one(sigma: float, shift: int) -> None:
    # D_alpha(N_Z(0, s^2) || N_Z(v, s^2)) <= alpha v^2 / (2 s^2): what the zCDP accounting rests on.
    y = np.arange(-60 * math.ceil(sigma) - shift, 60 * math.ceil(sigma) + shift + 1, dtype=np.float64)
    logw = -(y * y) / (2 * sigma * sigma)
    logp = logw - np.log(np.sum(np.exp(logw)))
    logq = -((y - shift) ** 2) / (2 * sigma * sigma) - np.log(np.sum(np.exp(logw)))
    for alpha in (1.5, 2.0, 5.0, 20.0):
        terms = alpha * logp + (1 - alpha) * logq
        top = terms.max()
        d_alpha = (top + math.log(np.sum(np.exp(terms - top)))) / (alpha - 1)
        assert d_alpha <= alpha * shift * shift / (2 * sigma * sigma) * (1 + 1e-12)


def _pmf(sigma: float, half: int) -> np.ndarray:
    z = np.arange(-half, half + 1, dtype=np.float64)
    w = np.exp(-(z * z) / (2 * sigma * sigma))
    return w / w.sum()


def test_every_integer_shift_of_the_rounded_vectors_is_within_delta() -> None:
    # dim 2: rounded vectors are integer points at most Delta = 2K + 2 sqrt(2) apart; for each such shift
    # v the hockey-stick divergence of the product discrete Gaussian at e^epsilon, summed over a 2-D grid,
    # is at most delta (the zCDP bound holds shift by shift).
    params = VECTOR_SPEC.examples()[1]
    sigma, k = params.sigma, params.grid
    reach = 2 * k + 3
    half = math.ceil(40 * sigma) + reach
    p1 = _pmf(sigma, half)
    joint = np.outer(p1, p1)
    limit = 2 * k + 2 * math.sqrt(2)
    worst = 0.0
    for a, b in itertools.product(range(0, reach + 1), range(0, reach + 1)):
        if (a, b) == (0, 0) or math.hypot(a, b) > limit:
            continue
        shifted = np.zeros_like(joint)
        shifted[a:, b:] = joint[: joint.shape[0] - a, : joint.shape[1] - b]
        worst = max(worst, float(np.sum(np.maximum(0.0, joint - math.exp(params.epsilon) * shifted))))
    assert 0 < worst <= params.delta


def test_device_encoder_follows_the_exact_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    # Per coordinate (marginals of exact_outputs), with the CSPRNG replaced by seeded bytes: chi-square.
    params = VECTOR_SPEC.examples()[1]
    value = (0.7, -0.45)
    monkeypatch.setattr(randomness, "_source", random.Random(11).randbytes)
    enc = GaussianVectorEncoder(params)
    n = 30_000
    codes = np.array([enc.encode(value) for _ in range(n)])
    exact = VECTOR_SPEC.exact_outputs(params, value)
    for j in range(params.dim):
        expected = np.zeros(params.layout.num_codes)
        for combo, p in exact.items():
            expected[combo[j]] += float(p) * n  # type: ignore[index]
        observed = np.bincount(codes[:, j], minlength=expected.size)
        keep = expected >= 5
        obs = np.append(observed[keep], observed[~keep].sum())
        exp_ = np.append(expected[keep], expected[~keep].sum())
        assert float(stats.chisquare(obs, exp_).pvalue) > 1e-6


@pytest.mark.statistical
def test_per_coordinate_means_are_unbiased_and_calibrated() -> None:
    # R = 1500 repeats of n = 400 users holding vectors of norm <= 1 in 3 dimensions: over all coordinates
    # and repeats MSE / mean SE^2 in [0.9, 1.1] and coverage of the 95% intervals in [0.93, 0.97].
    params = GaussianVectorParams.from_epsilon(3, 1.0, 2.0, delta=1e-6)
    enc = GaussianVectorEncoder(params)
    rng = np.random.default_rng(17)
    reps, n = 1500, 400
    mu = np.array([0.3, -0.2, 0.0])
    errors, variances, covered = [], [], 0
    for _ in range(reps):
        x = mu + rng.uniform(-0.3, 0.3, size=(n, 3))  # norms below 1: no scaling onto the ball
        acc = accumulator_for(params)
        add_columns(acc, params, enc.encode_batch(x, rng))
        for j, m in enumerate(estimate_means(params, acc).means):
            errors.append(m.mean - mu[j])
            variances.append(m.std_error**2)
            covered += m.ci_low <= mu[j] <= m.ci_high
    ratio = float(np.mean(np.square(errors)) / np.mean(variances))
    assert 0.9 <= ratio <= 1.1, f"MSE / variance {ratio:.3f}"
    assert 0.93 <= covered / (3 * reps) <= 0.97, f"coverage {covered / (3 * reps):.4f}"
    assert abs(float(np.mean(errors))) <= 5 * math.sqrt(np.mean(variances) / (3 * reps))


def test_parameters_by_name_and_the_noise_they_need() -> None:
    p = make_params("gaussian_vector", epsilon=1.0, fields={"dim": 10, "bound": 2.0, "delta": 1e-6})
    assert isinstance(p, GaussianVectorParams) and VECTOR_SPEC.delta(p) == 1e-6
    assert p.epsilon <= 1.0
    # sigma per unit of the sensitivity 2B: the zCDP calibration's, plus the rounding's 2 sqrt(d) steps.
    per_unit = calibration.zcdp_sigma(1.0, 1e-6)
    assert p.sigma / (2 * p.grid + 2 * math.sqrt(10)) == pytest.approx(per_unit, rel=1e-6)
    assert per_unit < 1.1 * calibration.analytic_sigma(1.0, 1e-6)  # the bound costs under 10% of noise


def test_a_longer_vector_is_scaled_onto_the_ball_or_refused() -> None:
    params = GaussianVectorParams(dim=2, bound=1.0, grid=4, sigma=3.0, delta=1e-5)
    assert params.positions_of([3.0, 4.0]) == pytest.approx([0.6 * 4, 0.8 * 4])
    batch = params.positions(np.array([[3.0, 4.0], [0.5, 0.0]]))
    np.testing.assert_allclose(batch, [[2.4, 3.2], [2.0, 0.0]])
    strict = GaussianVectorParams(dim=2, bound=1.0, grid=4, sigma=3.0, delta=1e-5, out_of_range="reject")
    with pytest.raises(DomainError, match="reject"):
        GaussianVectorEncoder(strict).encode([3.0, 4.0])
    with pytest.raises(DomainError, match="reject"):
        GaussianVectorEncoder(strict).encode_batch(
            np.array([[0.1, 0.1], [3.0, 4.0]]), np.random.default_rng(1)
        )


@pytest.mark.parametrize(
    ("value", "field"),
    [([0.1], "value"), ([0.1, math.nan], "value[1]"), ("ab", "value"), ([0.1, True], "value[1]")],
)
def test_bad_vectors_are_named(value: object, field: str) -> None:
    params = GaussianVectorParams(dim=2, bound=1.0, grid=4, sigma=3.0, delta=1e-5)
    with pytest.raises(DomainError) as err:
        GaussianVectorEncoder(params).encode(value)  # type: ignore[arg-type]
    assert str(err.value).startswith(field)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dim": 0, "bound": 1.0, "sigma": 3.0, "delta": 1e-5}, "dim"),
        ({"dim": 2, "bound": -1.0, "sigma": 3.0, "delta": 1e-5}, "bound"),
        ({"dim": 2, "bound": 1.0, "sigma": 0.1, "delta": 1e-5}, "sigma"),
        ({"dim": 2, "bound": 1.0, "sigma": 3.0, "delta": 0.0}, "delta"),
        ({"dim": 2, "bound": 1.0, "sigma": 0.5, "delta": 1e-9, "grid": 4096}, "sigma"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameterError) as err:
        GaussianVectorParams(**kwargs)  # type: ignore[arg-type]
    assert str(err.value).startswith(field) and "\n" not in str(err.value)
    with pytest.raises(InvalidParameterError, match="delta"):
        make_params("gaussian_vector", epsilon=1.0, fields={"dim": 2, "bound": 1.0})
