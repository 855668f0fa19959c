"""Amplification by shuffling (issue 17): Feldman-McMillan-Talwar's closed form against the paper's formula
(computed by hand at 30 digits), the numerical clone bound against a brute-force sum over every clone
count and output, and both against the exact central epsilon of shuffled binary randomized response (an
eps0-LDP mechanism, so never above either bound)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from ldp_client.accounting import shuffle as S
from ldp_client.errors import InvalidParameterError


def test_closed_form_at_the_issue_point() -> None:
    # ln(1 + (e^4-1)/(e^4+1) (8 sqrt(e^4 ln(4e6)) / 1000 + 8 e^4 / 1e6)), mpmath at 30 digits.
    eps = S.closed_form_epsilon(10**6, 4.0, 1e-6)
    assert eps == pytest.approx(0.200985229523743508927609910175, rel=1e-13)
    assert round(eps, 2) == 0.20
    assert S.closed_form_applies(10**6, 4.0, 1e-6)  # 4 <= ln(1e6 / (16 ln 2e6)) = 8.368
    assert S.numerical_epsilon(10**6, 4.0, 1e-6) <= 0.20  # the numerical bound is well inside


def test_closed_form_at_the_issue_point_by_hand() -> None:
    """Feldman, McMillan, Talwar, "Hiding Among the Clones" (FOCS 2021), Theorem 3.1 at n = 10^6,
    eps0 = 4, delta = 10^-6, worked by hand (four-figure tables suffice):

        condition: eps0 <= ln(n / (16 ln(2/delta))) = ln(10^6 / (16 x 14.5087)) = ln(4307.7) = 8.368: holds;
        e^4 = 54.598;  ln(4/delta) = ln(4 x 10^6) = 15.2018;  e^4 ln(4/delta) = 829.99;  sqrt = 28.810;
        8 x 28.810 / sqrt(10^6) = 0.23048;  8 e^4 / 10^6 = 0.00044;  sum = 0.23092;
        (e^4 - 1) / (e^4 + 1) = 53.598 / 55.598 = 0.96403;  product = 0.22261;
        eps = ln(1 + 0.22261) = 0.20099, i.e. 0.2010.

    The issue's "at most 0.20" is this figure to two places (0.2010 > 0.20): the closed form gives 0.2010;
    the numerical bound of their section 5 gives 0.0494 (docs/privacy-accounting.md).
    """
    assert abs(S.closed_form_epsilon(10**6, 4.0, 1e-6) - 0.2010) < 1e-4
    assert abs(S.closed_form_epsilon(10**6, 4.0, 1e-6) - 0.20099) < 1e-5
    assert abs(S.numerical_epsilon(10**6, 4.0, 1e-6) - 0.0494) < 1e-4


def test_closed_form_condition() -> None:
    # eps0 <= ln(n / (16 ln(2/delta))): 8.368 at n = 1e6, delta = 1e-6.
    assert S.closed_form_applies(10**6, 8.36, 1e-6)
    assert not S.closed_form_applies(10**6, 8.37, 1e-6)
    assert S.closed_form_epsilon(10**6, 8.37, 1e-6) == 8.37  # no amplification claimed outside it
    assert not S.closed_form_applies(100, 0.1, 1e-6)  # n / (16 ln(2/delta)) < 1: never


def _clone_delta_brute_force(n: int, eps0: float, eps: float) -> float:
    """sum over c and x of P(C=c) max(0, P(x|c) - e^eps Q(x|c)), P(x|c) = w b(x-1) + (1-w) b(x)."""
    w = math.exp(eps0) / (math.exp(eps0) + 1)
    total = 0.0
    for c in range(n):
        x = np.arange(c + 2)
        b_x = binom.pmf(x, c, 0.5)
        b_prev = binom.pmf(x - 1, c, 0.5)
        p = w * b_prev + (1 - w) * b_x
        q = w * b_x + (1 - w) * b_prev
        total += binom.pmf(c, n - 1, math.exp(-eps0)) * float(np.sum(np.clip(p - math.exp(eps) * q, 0, None)))
    return total


@pytest.mark.parametrize(("n", "eps0"), [(30, 1.0), (60, 2.5), (200, 0.3)])
def test_numerical_delta_is_the_clone_divergence(n: int, eps0: float) -> None:
    for eps in (0.0, 0.1, 0.5, 0.9 * eps0):
        assert S.numerical_delta(n, eps0, eps) == pytest.approx(
            _clone_delta_brute_force(n, eps0, eps), rel=1e-9, abs=1e-15
        )
    assert S.numerical_delta(n, eps0, eps0) == 0.0


def _shuffled_rr_delta(n: int, eps0: float, eps: float) -> float:
    """Exact delta(eps) of n shuffled binary randomized responses, worst case over the others' values.

    The shuffled output is the number K of 1s; device 1 holds 1 or 0, the others hold m ones: K = K_o + Y1,
    K_o = Bin(m, p) + Bin(n-1-m, 1-p), Y1 ~ Bern(p) or Bern(1-p).
    """
    p = math.exp(eps0) / (1 + math.exp(eps0))
    worst = 0.0
    for m in range(n):
        others = np.convolve(binom.pmf(np.arange(m + 1), m, p), binom.pmf(np.arange(n - m), n - 1 - m, 1 - p))
        shifted = np.append(0.0, others)
        base = np.append(others, 0.0)
        one = p * shifted + (1 - p) * base
        zero = (1 - p) * shifted + p * base
        for a, b in ((one, zero), (zero, one)):
            worst = max(worst, float(np.sum(np.clip(a - math.exp(eps) * b, 0, None))))
    return worst


@pytest.mark.parametrize(("n", "eps0"), [(50, 1.0), (120, 3.0), (150, 0.5)])
def test_shuffled_randomized_response_is_within_the_bounds(n: int, eps0: float) -> None:
    delta = 1e-3
    numerical = S.numerical_epsilon(n, eps0, delta)
    assert _shuffled_rr_delta(n, eps0, numerical) <= delta
    # The bound is not vacuous: RR's own epsilon is below it but not far (at most 3x smaller here).
    lo, hi = 0.0, numerical
    for _ in range(25):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _shuffled_rr_delta(n, eps0, mid) <= delta else (mid, hi)
    assert numerical / 3 < hi <= numerical
    if S.closed_form_applies(n, eps0, delta):
        assert numerical <= S.closed_form_epsilon(n, eps0, delta)


@pytest.mark.parametrize(("n", "eps0", "delta"), [(10**4, 1.0, 1e-6), (10**5, 2.0, 1e-8), (10**6, 0.5, 1e-6)])
def test_numerical_is_below_closed_form_and_eps0(n: int, eps0: float, delta: float) -> None:
    numerical = S.numerical_epsilon(n, eps0, delta)
    closed = S.closed_form_epsilon(n, eps0, delta)
    assert 0 < numerical < closed < eps0
    # The tail cut is pessimistic: its mass is counted in delta.
    assert S.numerical_delta(n, eps0, numerical, tail_mass=delta / 1000) <= delta
    # Within the tolerance of the smallest epsilon the same computation allows.
    assert S.numerical_delta(n, eps0, numerical - 2e-4, tail_mass=delta / 1000) > delta


def test_tail_cut_of_the_clone_count_is_pessimistic() -> None:
    full = S.numerical_delta(2000, 1.0, 0.1)
    for tail in (1e-6, 1e-3):
        cut = S.numerical_delta(2000, 1.0, 0.1, tail_mass=tail)
        assert full <= cut <= full + tail


def test_amplify_a_declaration() -> None:
    decl = S.ShufflerDeclaration(batch_reports=10**6, delta=1e-6)
    amp = S.amplify(decl, 4.0)
    assert amp.closed_form_applies
    assert amp.epsilon_closed_form == pytest.approx(0.2009852295, rel=1e-9)
    assert amp.epsilon_numerical <= amp.epsilon_closed_form
    assert math.isnan(S.amplify(decl, 4.0, numerical=False).epsilon_numerical)
    assert S.amplify(decl, math.inf).epsilon_numerical == math.inf


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: S.closed_form_epsilon(1, 1.0, 1e-6), "n"),
        (lambda: S.closed_form_epsilon(10.5, 1.0, 1e-6), "n"),
        (lambda: S.closed_form_epsilon(1000, -1.0, 1e-6), "epsilon0"),
        (lambda: S.closed_form_epsilon(1000, 1.0, 0.0), "delta"),
        (lambda: S.numerical_epsilon(1000, 1.0, 1.5), "delta"),
        (lambda: S.numerical_epsilon(1000, 1.0, 1e-6, tolerance=0), "tolerance"),
        (lambda: S.numerical_epsilon(1000, 1.0, 1e-6, tail_mass=1e-5), "tail_mass"),
        (lambda: S.ShufflerDeclaration(batch_reports=0, delta=1e-6), "shuffler.batch_reports"),
        (lambda: S.ShufflerDeclaration(batch_reports=100, delta=1.0), "shuffler.delta"),
    ],
)
def test_bad_input_names_the_field(call: object, field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        call()  # type: ignore[operator]
    assert info.value.field == field
