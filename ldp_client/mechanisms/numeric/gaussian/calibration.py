"""Calibration of the Gaussian mechanism under (epsilon, delta)-DP: the noise scale sigma for an L2
sensitivity, and the delta a given sigma achieves. Pure functions of floats (no numpy, no randomness).

A Gaussian mechanism releases f(x) + N(0, sigma^2 I) for a function f of L2 sensitivity
``s = max ||f(x) - f(x')||_2`` over neighbouring inputs (in local DP: any two inputs of one user; a value
declared in [lo, hi] has s = hi - lo, a vector of L2 norm at most B has s = 2 B).

* **Classical** (Dwork and Roth, "The Algorithmic Foundations of Differential Privacy", 2014, Theorem A.1):
  ``sigma = s sqrt(2 ln(1.25 / delta)) / epsilon`` gives (epsilon, delta)-DP **only for epsilon < 1**
  (the proof bounds the privacy loss's tail with a step that needs epsilon < 1; for larger epsilon the
  formula is not a guarantee and it is also far from tight). :func:`classical_sigma` refuses epsilon >= 1.
* **Analytic** (Balle and Wang, "Improving the Gaussian Mechanism for Differential Privacy: Analytical
  Calibration and Optimal Denoising", ICML 2018, Theorem 8): the mechanism is (epsilon, delta)-DP if and
  only if ``Phi(s/(2 sigma) - epsilon sigma/s) - e^epsilon Phi(-s/(2 sigma) - epsilon sigma/s) <= delta``
  (:func:`analytic_delta`, the exact delta of a sigma, valid for every epsilon >= 0). The left side falls
  as sigma grows, so :func:`analytic_sigma` finds the smallest sigma meeting it by bisection (the
  paper's own algorithm searches the same monotone function; bisection to one ulp gives the same sigma).

Reference values (s = 1; checked to the digits shown, against the paper's Algorithm 1 computed
independently in mpmath at 50 digits and against Google's ``dp_accounting.get_sigma_gaussian``, in
``tests/ldp_client/mechanisms/test_gaussian_calibration.py``):

=========  ========  ==================  ==================
epsilon    delta     analytic sigma      classical sigma
=========  ========  ==================  ==================
0.1        1e-5      30.7495...          48.4480...
0.5        1e-6      8.0576...           10.5976...
1.0        1e-5      3.7306...           (epsilon >= 1: none)
4.0        1e-9      1.4878...           (none)
=========  ========  ==================  ==================

Numerics: Phi through ``math.erfc`` (relative accuracy ~1e-15 down to 1e-300), and the difference as
``Phi(a) (1 - exp(epsilon + ln Phi(b) - ln Phi(a)))`` with ``expm1``, so the cancellation of two close
terms costs no digits.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ldp_client.errors import InvalidParameterError

__all__ = [
    "MIN_DELTA",
    "analytic_delta",
    "analytic_sigma",
    "check_delta",
    "check_sensitivity",
    "classical_sigma",
    "epsilon_from_zcdp",
    "gaussian_calibration",
    "smallest_meeting",
    "zcdp_sigma",
]

MIN_DELTA = 1e-30
"""The smallest delta accepted: below it the tails the discrete computation sums leave float64's reach."""
_SQRT2 = math.sqrt(2.0)


def check_delta(delta: object, field: str = "delta") -> float:
    """``delta`` as a float in [1e-30, 1), else InvalidParameterError naming ``field``."""
    allowed = f"a number in [{MIN_DELTA:g}, 1) (the probability the epsilon bound may fail)"
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise InvalidParameterError(field, delta, allowed)
    d = float(delta)
    if not (math.isfinite(d) and MIN_DELTA <= d < 1.0):
        raise InvalidParameterError(field, delta, allowed)
    return d


def _check_positive(value: object, field: str, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameterError(field, value, allowed)
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise InvalidParameterError(field, value, allowed)
    return v


def check_sensitivity(sensitivity: object, field: str = "sensitivity") -> float:
    """``sensitivity`` as a finite float > 0, else InvalidParameterError."""
    return _check_positive(sensitivity, field, "a finite number > 0 (the L2 sensitivity)")


def _check_epsilon(epsilon: object) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not math.isfinite(epsilon):
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    if epsilon <= 0:
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    return float(epsilon)


def _log_phi(x: float) -> float:
    """ln Phi(x) for the standard normal CDF (-inf where Phi underflows)."""
    p = 0.5 * math.erfc(-x / _SQRT2)
    return math.log(p) if p > 0.0 else -math.inf


def analytic_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """The exact delta of the Gaussian mechanism N(f(x), sigma^2 I) at ``epsilon`` (Balle-Wang 2018, Thm 8).

    ``delta = Phi(s/(2 sigma) - epsilon sigma/s) - e^epsilon Phi(-s/(2 sigma) - epsilon sigma/s)``, the
    hockey-stick divergence of N(0, sigma^2) and N(s, sigma^2): the smallest delta for which the mechanism
    is (epsilon, delta)-DP, for any epsilon >= 0.
    """
    s = check_sensitivity(sensitivity)
    sigma = _check_positive(sigma, "sigma", "a finite number > 0 (the noise's standard deviation)")
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not math.isfinite(epsilon):
        raise InvalidParameterError("epsilon", epsilon, "a finite number >= 0")
    if epsilon < 0:
        raise InvalidParameterError("epsilon", epsilon, "a finite number >= 0")
    return _analytic_delta(float(epsilon), float(sigma), s)


def _analytic_delta(eps: float, sigma: float, s: float) -> float:
    a = s / (2.0 * sigma) - eps * sigma / s
    b = -s / (2.0 * sigma) - eps * sigma / s
    log_a = _log_phi(a)
    if log_a == -math.inf:
        return 0.0
    # Phi(a) - e^eps Phi(b) = Phi(a) * (1 - exp(eps + ln Phi(b) - ln Phi(a))); b < a, so the exponent's
    # argument is below eps and the bracket is in (0, 1] for the sigmas that matter.
    ratio = eps + _log_phi(b) - log_a
    return max(0.0, -math.expm1(ratio) * math.exp(log_a))


def classical_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """``s sqrt(2 ln(1.25/delta)) / epsilon`` (Dwork-Roth 2014, Theorem A.1), for epsilon < 1 only.

    Raises:
        InvalidParameterError: epsilon >= 1 (the theorem does not hold there: use :func:`analytic_sigma`),
            or a bad epsilon, delta or sensitivity.
    """
    eps = _check_epsilon(epsilon)
    d = check_delta(delta)
    s = check_sensitivity(sensitivity)
    if eps >= 1.0:
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            "a number in (0, 1) for the classical calibration (Dwork-Roth Theorem A.1 holds only for "
            "epsilon < 1); use the analytic calibration (Balle-Wang 2018) for larger epsilon",
        )
    return s * math.sqrt(2.0 * math.log(1.25 / d)) / eps


def analytic_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest sigma whose exact delta (:func:`analytic_delta`) at ``epsilon`` is <= ``delta``.

    Bisection on sigma (the delta falls strictly as sigma grows) until the bracket is one ulp wide; the
    upper end is returned, so ``analytic_delta(epsilon, result, s) <= delta`` holds as computed.
    """
    eps = _check_epsilon(epsilon)
    d = check_delta(delta)
    s = check_sensitivity(sensitivity)
    lo, hi = s * 1e-3, s
    while _analytic_delta(eps, hi, s) > d:
        lo, hi = hi, hi * 2.0
    while _analytic_delta(eps, lo, s) <= d:  # a large epsilon: sigma far below s
        lo, hi = lo / 2.0, lo
    return smallest_meeting(lambda sigma: _analytic_delta(eps, sigma, s) <= d, lo, hi)


def smallest_meeting(meets: Callable[[float], bool], lo: float, hi: float) -> float:
    """Bisection of a monotone condition to one ulp: ``meets(hi)`` holds, ``meets(lo)`` does not; returns the
    upper end of the final bracket (a value that meets the condition as computed)."""
    for _ in range(2000):
        mid = (lo + hi) / 2.0
        if mid <= lo or mid >= hi:
            break
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def gaussian_calibration(epsilon: float, delta: float, sensitivity: float = 1.0) -> dict[str, object]:
    """Both calibrations for one (epsilon, delta, sensitivity), as a JSON-ready dict.

    Keys: ``epsilon``, ``delta``, ``sensitivity``; ``analytic_sigma`` and its exact ``analytic_delta``;
    ``classical_sigma`` (None when epsilon >= 1, with ``classical_note`` saying why) and its exact
    ``classical_delta`` (the classical sigma is always larger: its true delta is below the request);
    ``ratio``, classical over analytic sigma (the noise the analytic calibration saves).
    """
    eps = _check_epsilon(epsilon)
    d = check_delta(delta)
    s = check_sensitivity(sensitivity)
    sigma_a = analytic_sigma(eps, d, s)
    out: dict[str, object] = {
        "epsilon": eps,
        "delta": d,
        "sensitivity": s,
        "analytic_sigma": sigma_a,
        "analytic_delta": _analytic_delta(eps, sigma_a, s),
    }
    if eps < 1.0:
        sigma_c = classical_sigma(eps, d, s)
        out.update(
            classical_sigma=sigma_c,
            classical_delta=_analytic_delta(eps, sigma_c, s),
            classical_note=None,
            ratio=sigma_c / sigma_a,
        )
    else:
        out.update(
            classical_sigma=None,
            classical_delta=None,
            classical_note="the classical calibration holds only for epsilon < 1 (Dwork-Roth Theorem A.1)",
            ratio=None,
        )
    return out


def _zcdp_epsilon_at(rho: float, log_delta: float, alpha: float) -> float:
    # CKS 2020 Proposition 12 for (alpha, alpha rho)-RDP:
    # eps = alpha rho - (ln delta + ln alpha) / (alpha - 1) + ln((alpha - 1) / alpha).
    return alpha * rho - (log_delta + math.log(alpha)) / (alpha - 1.0) + math.log1p(-1.0 / alpha)


def epsilon_from_zcdp(rho: float, delta: float) -> float:
    """An epsilon for which a rho-zCDP mechanism is (epsilon, delta)-DP.

    rho-zCDP means Renyi DP of every order alpha > 1 with epsilon_alpha = alpha rho; each order gives
    (Canonne, Kamath, Steinke, NeurIPS 2020, Proposition 12; the conversion Google's dp_accounting uses)

        epsilon(alpha) = alpha rho - (ln delta + ln alpha) / (alpha - 1) + ln(1 - 1/alpha),

    and every one of them is a valid epsilon, so the smallest found is: a log-spaced scan of alpha - 1 over
    [1e-4, 1e6], refined by golden-section search around the best (the function is unimodal in alpha).
    Tighter than rho + 2 sqrt(rho ln(1/delta)) (Bun and Steinke 2016, Proposition 1.3).
    """
    r = _check_positive(rho, "rho", "a finite number > 0 (the zCDP parameter)")
    log_delta = math.log(check_delta(delta))
    grid = [1.0 + 10.0 ** (-4.0 + 10.0 * i / 400.0) for i in range(401)]
    values = [_zcdp_epsilon_at(r, log_delta, a) for a in grid]
    best = min(range(len(grid)), key=values.__getitem__)
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(100):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if _zcdp_epsilon_at(r, log_delta, a) <= _zcdp_epsilon_at(r, log_delta, b):
            hi = b
        else:
            lo = a
    found = min(values[best], _zcdp_epsilon_at(r, log_delta, (lo + hi) / 2.0))
    return max(0.0, math.nextafter(found, math.inf))


def zcdp_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest sigma (Gaussian noise, L2 ``sensitivity``) whose zCDP epsilon at ``delta`` is <=
    ``epsilon``: rho = s^2 / (2 sigma^2) through :func:`epsilon_from_zcdp`, by bisection on sigma."""
    eps = _check_epsilon(epsilon)
    d = check_delta(delta)
    s = check_sensitivity(sensitivity)

    def meets(sigma: float) -> bool:
        return epsilon_from_zcdp(s * s / (2.0 * sigma * sigma), d) <= eps

    lo, hi = s * 1e-3, s
    while not meets(hi):
        lo, hi = hi, hi * 2.0
    while meets(lo):
        lo, hi = lo / 2.0, lo
    return smallest_meeting(meets, lo, hi)
