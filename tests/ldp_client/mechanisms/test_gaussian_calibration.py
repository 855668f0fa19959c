"""The analytic Gaussian calibration (Balle and Wang, ICML 2018) against two independent computations, and
the reference table of ``calibration``'s docstring against the code (issue 17).

1. The paper's own Algorithm 1, written here in mpmath at 50 digits: it does not bisect the Theorem 8
   condition on sigma as the implementation does, but solves for the paper's variable v (or u) in
   B+(v) = Phi(sqrt(eps v)) - e^eps Phi(-sqrt(eps (v + 2))) = delta when delta >= delta_0 =
   Phi(0) - e^eps Phi(-sqrt(2 eps)) (else B-(u) = Phi(-sqrt(eps u)) - e^eps Phi(-sqrt(eps (u + 2)))), then
   alpha = sqrt(1 + v/2) - sqrt(v/2) (or + sqrt(u/2)) and sigma = alpha s / sqrt(2 eps).
2. Google's ``dp_accounting.get_sigma_gaussian`` (scipy's log-CDF and brentq, another code base).

No table of numeric sigmas is printed in the paper, so its examples enter as its algorithm; the points
cover both branches of it (delta above and below delta_0), epsilon from 0.01 to 8 and delta from 1e-12 to
1e-2.
"""

from __future__ import annotations

import re

import mpmath
import pytest

from ldp_client.mechanisms.numeric.gaussian import calibration

mpmath.mp.dps = 50

POINTS = [
    (0.01, 1e-10),
    (0.1, 1e-5),
    (0.5, 1e-6),
    (1.0, 1e-5),
    (1.0, 1e-6),
    (2.0, 1e-2),
    (4.0, 1e-9),
    (8.0, 1e-12),
    (0.05, 0.3),  # delta above delta_0 = 0.1048...: the B+ branch
]


def _solve(f: object, target: mpmath.mpf) -> mpmath.mpf:
    """The root of the decreasing f(x) = target for x >= 0 by bisection in mpmath (to 1e-40 relative)."""
    lo, hi = mpmath.mpf(0), mpmath.mpf(1)
    while f(hi) > target:  # type: ignore[operator]
        lo, hi = hi, hi * 2
    for _ in range(400):
        mid = (lo + hi) / 2
        if f(mid) > target:  # type: ignore[operator]
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _algorithm1_sigma(eps: float, delta: float, s: float = 1.0) -> mpmath.mpf:
    """Balle-Wang 2018, Algorithm 1 (analytic Gaussian mechanism), in mpmath."""
    e, d, phi = mpmath.mpf(eps), mpmath.mpf(delta), mpmath.ncdf
    delta0 = phi(0) - mpmath.exp(e) * phi(-mpmath.sqrt(2 * e))
    if d >= delta0:
        # B+ increases in v: the sup of {v : B+(v) <= delta} is the root of -B+(v) = -delta.
        v = _solve(lambda v: -(phi(mpmath.sqrt(e * v)) - mpmath.exp(e) * phi(-mpmath.sqrt(e * (v + 2)))), -d)
        alpha = mpmath.sqrt(1 + v / 2) - mpmath.sqrt(v / 2)
    else:
        u = _solve(lambda u: phi(-mpmath.sqrt(e * u)) - mpmath.exp(e) * phi(-mpmath.sqrt(e * (u + 2))), d)
        alpha = mpmath.sqrt(1 + u / 2) + mpmath.sqrt(u / 2)
    return alpha * s / mpmath.sqrt(2 * e)


@pytest.mark.parametrize(("eps", "delta"), POINTS)
def test_analytic_sigma_is_the_papers_algorithm_1(eps: float, delta: float) -> None:
    ref = _algorithm1_sigma(eps, delta)
    got = calibration.analytic_sigma(eps, delta)
    assert float(abs(got - ref) / ref) < 1e-12, (got, float(ref))
    assert calibration.analytic_sigma(eps, delta, 3.5) == pytest.approx(3.5 * float(ref), rel=1e-12)


@pytest.mark.parametrize(("eps", "delta"), POINTS)
def test_analytic_sigma_matches_dp_accounting(eps: float, delta: float) -> None:
    from dp_accounting import gaussian_mechanism

    ref = gaussian_mechanism.get_sigma_gaussian(eps, delta, tol=1e-15)
    assert calibration.analytic_sigma(eps, delta) == pytest.approx(ref, rel=1e-9)


def test_the_docstring_table_is_what_the_code_computes() -> None:
    """Each row of calibration's reference table (s = 1) to the digits printed, and the test named there."""
    doc = calibration.__doc__ or ""
    rows = re.findall(r"^(\d+\.\d+)\s+(\S+)\s+(\d+\.\d+)\.\.\.\s+(\d+\.\d+\.\.\.|\(.*?\))\s*$", doc, re.M)
    assert len(rows) == 4, rows
    for eps_text, delta_text, analytic, classical in rows:
        eps, delta = float(eps_text), float(delta_text)
        digits = len(analytic.split(".")[1])
        assert f"{calibration.analytic_sigma(eps, delta):.{digits + 4}f}".startswith(analytic), (eps, delta)
        assert f"{float(_algorithm1_sigma(eps, delta)):.{digits + 4}f}".startswith(analytic)
        if eps < 1:
            want = classical.removesuffix("...")
            got = f"{calibration.classical_sigma(eps, delta):.{len(want.split('.')[1]) + 4}f}"
            assert got.startswith(want), (eps, delta, got)
        else:
            assert classical.startswith("(")
    assert "test_gaussian_calibration.py" in doc
