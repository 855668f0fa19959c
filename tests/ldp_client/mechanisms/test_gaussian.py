"""The Gaussian mechanism (issue 17): calibration against independent computations, the discrete Gaussian's
privacy profile against the direct sum over its support, the exact sampler's distribution, the parameters'
(epsilon, delta) within budget, and the messages of bad input."""

from __future__ import annotations

import math
import random
from decimal import Decimal, localcontext

import numpy as np
import pytest
from scipy import optimize, stats

from ldp_client import randomness
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.numeric.gaussian import calibration, discrete, gaussian_report
from ldp_client.mechanisms.numeric.gaussian.mechanism import SPEC, GaussianEncoder, GaussianParams
from ldp_client.params import make_params

# (epsilon, delta) points of the reference table in calibration's docstring, and two more.
POINTS = [(0.1, 1e-5), (0.5, 1e-6), (1.0, 1e-5), (4.0, 1e-9), (1.0, 1e-6), (0.5, 1e-9), (8.0, 1e-12)]


def _scipy_delta(sigma: float, eps: float, s: float) -> float:
    # Balle-Wang Theorem 8 with scipy's normal CDF in log space (independent of math.erfc).
    a = stats.norm.logcdf(s / (2 * sigma) - eps * sigma / s)
    b = stats.norm.logcdf(-s / (2 * sigma) - eps * sigma / s)
    return float(math.exp(a) - math.exp(eps + b))


@pytest.mark.parametrize(("eps", "delta"), POINTS)
@pytest.mark.parametrize("sens", [1.0, 3.5])
def test_analytic_sigma_matches_an_independent_root_finder(eps: float, delta: float, sens: float) -> None:
    ref = optimize.brentq(lambda s: _scipy_delta(s, eps, sens) - delta, 1e-3 * sens, 500 * sens, xtol=1e-15)
    got = calibration.analytic_sigma(eps, delta, sens)
    assert got == pytest.approx(ref, rel=1e-9)
    assert calibration.analytic_delta(eps, got, sens) <= delta
    assert calibration.analytic_delta(eps, got * (1 - 1e-7), sens) > delta  # the smallest such sigma


def test_analytic_sigma_reference_values() -> None:
    # The docstring's table (scipy brentq at 1e-15; sensitivity 1).
    table = {(0.1, 1e-5): 30.749566131977, (0.5, 1e-6): 8.057618480725, (1.0, 1e-5): 3.730631634816}
    for (eps, delta), sigma in table.items():
        assert calibration.analytic_sigma(eps, delta) == pytest.approx(sigma, rel=1e-11)
    assert calibration.analytic_sigma(4.0, 1e-9) == pytest.approx(1.487803677103, rel=1e-11)


def test_classical_sigma_formula_and_its_validity() -> None:
    got = calibration.classical_sigma(0.5, 1e-6, 2.0)
    assert got == pytest.approx(2.0 * math.sqrt(2 * math.log(1.25e6)) / 0.5, rel=1e-15)
    # It is (epsilon, delta)-DP for epsilon < 1 (its exact delta is below the request), and larger.
    assert calibration.analytic_delta(0.5, got, 2.0) <= 1e-6
    assert got > calibration.analytic_sigma(0.5, 1e-6, 2.0)
    with pytest.raises(InvalidParameterError, match=r"epsilon.*epsilon < 1"):
        calibration.classical_sigma(1.0, 1e-6)
    with pytest.raises(InvalidParameterError, match="delta"):
        calibration.classical_sigma(0.5, 0.0)


def test_gaussian_report_gives_both_sigmas_and_the_discrete_mechanism() -> None:
    rep = gaussian_report(0.5, 1e-6, 2.0)
    assert rep["chosen"] == "analytic" and rep["chosen_sigma"] == rep["analytic_sigma"]
    assert isinstance(rep["classical_sigma"], float) and rep["classical_sigma"] > rep["analytic_sigma"]
    assert 0 < rep["chosen_delta"] <= 1e-6  # type: ignore[operator]
    disc = rep["discrete"]
    assert isinstance(disc, dict)
    assert disc["epsilon"] <= 0.5 and disc["delta"] == 1e-6
    assert disc["sigma"] == pytest.approx(rep["analytic_sigma"], rel=1e-3)
    high = gaussian_report(2.0, 1e-6)
    assert high["classical_sigma"] is None and "epsilon < 1" in str(high["classical_note"])


# ------------------------------------------------------------------------------------- exact privacy


def _direct_delta(sigma: float, shift: int, eps: float) -> float:
    """sum over the integers of max(0, p(y) - e^eps p(y - shift)) for N_Z(0, sigma^2), at 50 digits."""
    with localcontext() as ctx:
        ctx.prec = 50
        s2 = Decimal(sigma) ** 2
        reach = int(45 * sigma) + shift + 2
        w = {y: (-(Decimal(y) ** 2) / (2 * s2)).exp() for y in range(-reach - shift, reach + 1)}
        total = sum(w[y] for y in range(-reach, reach + 1))
        scale = Decimal(eps).exp()
        excess = sum(max(Decimal(0), w[y] - scale * w[y - shift]) for y in range(-reach, reach + 1))
        return float(excess / total)


@pytest.mark.parametrize("sigma", [0.5, 1.25, 2.899910082342103, 7.75])
def test_privacy_profile_is_the_direct_sum_over_the_support(sigma: float) -> None:
    q = math.ceil(sigma * 2**32)
    for eps in (0.3, 1.0, 2.5):
        profile = discrete.delta_profile(q, 4, eps)
        for shift in range(1, 5):
            ref = _direct_delta(q / 2**32, shift, eps)
            assert profile[shift - 1] == pytest.approx(ref, rel=1e-9, abs=1e-300)


def _pld_delta(params: GaussianParams, shift: int) -> float:
    # From the privacy-loss distribution: delta = E_{y ~ N_Z(0)}[(1 - e^(eps - L(y)))_+], L(y) =
    # ln p(y)/p(y - shift) = (shift^2 - 2 y shift) / (2 sigma^2); float64, vectorised, over +-40 sigma.
    sigma = params.sigma
    y = np.arange(-math.ceil(40 * sigma) - shift, math.ceil(40 * sigma) + shift + 1, dtype=np.float64)
    p = np.exp(-(y * y) / (2 * sigma * sigma))
    p /= p.sum()
    loss = (shift * shift - 2.0 * y * shift) / (2 * sigma * sigma)
    return float(np.sum(p * np.maximum(0.0, -np.expm1(params.epsilon - loss))))


@pytest.mark.parametrize(
    ("eps", "delta", "grid"), [(1.0, 1e-6, None), (0.25, 1e-9, None), (4.0, 1e-5, 64), (2.0, 1e-3, 2)]
)
def test_parameters_are_within_their_declared_budget(eps: float, delta: float, grid: int | None) -> None:
    params = GaussianParams.from_epsilon(0.0, 1.0, eps, delta=delta, grid=grid)
    assert params.epsilon <= eps
    k = params.grid
    # The worst pair of rounded inputs is K steps apart; every shift 1..K stays within delta.
    shifts = range(1, k + 1) if k <= 64 else (1, k // 2, k - 1, k)
    worst = max(_pld_delta(params, d) for d in shifts)
    assert worst <= delta * (1 + 1e-6)
    assert worst >= delta * (1 - 1e-4)  # and epsilon is the smallest that meets delta
    assert _pld_delta(params, k) == pytest.approx(worst)


# ------------------------------------------------------------------------------------------- sampler


def _chi_square_pvalue(draws: np.ndarray, sigma: float) -> float:
    half = math.ceil(6 * sigma)
    z = np.arange(-half, half + 1)
    pmf = np.exp(-(z * z) / (2 * sigma * sigma))
    pmf /= pmf.sum()
    observed = np.bincount(np.clip(draws, -half, half) + half, minlength=2 * half + 1)
    expected = pmf * draws.size
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp_ = np.append(expected[keep], expected[~keep].sum())
    return float(stats.chisquare(obs, exp_ * obs.sum() / exp_.sum()).pvalue)


@pytest.mark.parametrize("sigma", [0.5, 1.7, 6.25])
def test_exact_sampler_follows_the_discrete_gaussian(sigma: float) -> None:
    gen = random.Random(17)
    q = math.ceil(sigma * 2**32)
    draws = np.array([discrete.sample_discrete_gaussian(q, gen.randrange) for _ in range(40_000)])
    assert _chi_square_pvalue(draws, sigma) > 1e-6


@pytest.mark.parametrize("sigma", [0.5, 1.7, 6.25, 300.5])
def test_batch_sampler_follows_the_discrete_gaussian(sigma: float) -> None:
    draws = discrete.batch_discrete_gaussian(sigma, 400_000, np.random.default_rng(5))
    assert _chi_square_pvalue(draws, sigma) > 1e-6
    assert abs(draws.mean()) < 5 * sigma / math.sqrt(draws.size)


def test_device_encoder_reads_only_the_os_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    params = GaussianParams.from_epsilon(0.0, 1.0, 1.0, delta=1e-6)
    reads: list[int] = []
    real = randomness._source

    def counting(n: int) -> bytes:
        reads.append(n)
        return real(n)

    monkeypatch.setattr(randomness, "_source", counting)
    enc = GaussianEncoder(params)
    codes = [enc.encode(0.25) for _ in range(200)]
    assert reads and all(0 <= c < params.layout.num_codes for c in codes)
    # Unbiased around the rounded position (z = 6 over 200 reports of sd sigma).
    mean = float(np.mean([float(params.decode(c)) for c in codes]))
    assert abs(mean - 0.25) < 6 * params.sigma_value / math.sqrt(200)


# ---------------------------------------------------------------------------------------- parameters


def test_parameters_by_name_and_their_quantities() -> None:
    p = make_params("gaussian", epsilon=1.0, fields={"lo": -5, "hi": 5, "delta": 1e-6})
    assert isinstance(p, GaussianParams) and p.grid == 1024 and SPEC.delta(p) == 1e-6
    assert p.sensitivity == 10.0
    assert p.sigma_value == pytest.approx(10.0 * calibration.analytic_sigma(1.0, 1e-6), rel=1e-3)
    assert p.noise_variance <= p.sigma**2 * (1 + 1e-12)  # below sigma^2 (CKS), to float rounding
    assert p.sigma * 2**32 == p.sigma_q  # sigma is kept as the multiple of 2**-32 it was rounded to
    assert GaussianParams(lo=0, hi=1, grid=8, sigma=3.0000000001, delta=1e-3).sigma > 3.0000000001 - 1e-12
    small = GaussianParams.from_epsilon(0.0, 1.0, 0.01, delta=1e-9)
    assert small.sigma <= 8192 and small.grid < 1024  # the grid shrinks instead of sigma growing


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sigma": 0.1, "delta": 1e-6}, "sigma"),
        ({"sigma": math.nan, "delta": 1e-6}, "sigma"),
        ({"sigma": 3.0, "delta": 0.0}, "delta"),
        ({"sigma": 3.0, "delta": 1.0}, "delta"),
        ({"sigma": 0.6, "delta": 1e-12, "grid": 1024}, "sigma"),  # too little noise: epsilon over 500
        ({"sigma": 3.0, "delta": 1e-6, "grid": 1}, "grid"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameterError) as err:
        GaussianParams(lo=0.0, hi=1.0, **kwargs)  # type: ignore[arg-type]
    assert str(err.value).startswith(field) or f"{field}=" in str(err.value) or field in str(err.value)
    assert "\n" not in str(err.value)


def test_from_epsilon_needs_a_delta_and_rejects_values() -> None:
    with pytest.raises(InvalidParameterError, match="delta"):
        make_params("gaussian", epsilon=1.0, fields={"lo": 0, "hi": 1})
    params = GaussianParams(lo=0.0, hi=1.0, grid=4, sigma=3.0, delta=1e-6, out_of_range="reject")
    with pytest.raises(DomainError):
        GaussianEncoder(params).encode(1.5)


@pytest.mark.parametrize("value", [0.0, 0.3, 1.0])
def test_device_encoder_follows_the_exact_distribution(monkeypatch: pytest.MonkeyPatch, value: float) -> None:
    # The per-report path (rounding coin, CKS sampler, clamp) against exact_distribution, with the CSPRNG
    # replaced by seeded bytes so that the check is reproducible: chi-square, alpha 1e-6.
    params = SPEC.examples()[0]
    gen = random.Random(int(value * 10) + 3)
    monkeypatch.setattr(randomness, "_source", gen.randbytes)
    enc = GaussianEncoder(params)
    n = 30_000
    codes = np.array([enc.encode(value) for _ in range(n)])
    dist = SPEC.distribution(params, params.position(value))
    expected = np.zeros(params.layout.num_codes)
    for code, p in dist.items():
        expected[code] = float(p) * n
    observed = np.bincount(codes, minlength=expected.size)
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp_ = np.append(expected[keep], expected[~keep].sum())
    assert float(stats.chisquare(obs, exp_).pvalue) > 1e-6


def test_an_epsilon_between_256_and_500_is_found() -> None:
    # The search doubles epsilon up to its cap of 500: an epsilon of about 310 (the largest parameters)
    # must be found, not refused as "over 500".
    params = SPEC.largest()[0]
    assert 256 < params.epsilon < 500
    assert discrete.max_delta(params.sigma_q, params.grid, params.epsilon) <= params.delta
    assert discrete.max_delta(params.sigma_q, params.grid, params.epsilon * (1 - 1e-6)) > params.delta
