"""The numerical accountant (issue 17): privacy loss distributions, against exact values and against Google's
dp-accounting (the ``dev`` extra) at several points.

Exact references: k-fold randomized response is Kairouz-Oh-Viswanath's optimal composition (pure Python,
:mod:`ldp_client.accounting.composition`); k Gaussian mechanisms of noise sigma are one of noise
sigma/sqrt(k), whose delta(epsilon) is Balle-Wang's Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu),
mu = s/sigma. Every PLD here is pessimistic: never below the exact value, and above it by at most about
k * step in epsilon.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from ldp_client.accounting import (
    advanced_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
)
from ldp_client.accounting import pld as P
from ldp_client.errors import InvalidParameterError

STEP = 1e-4


def _gaussian_delta(mu: float, eps: float) -> float:
    """Balle and Wang 2018, Theorem 8: the exact delta(epsilon) of a Gaussian mechanism with s/sigma = mu."""
    phi = NormalDist().cdf
    return phi(mu / 2 - eps / mu) - math.exp(eps) * phi(-mu / 2 - eps / mu)


@pytest.mark.parametrize(("eps", "k"), [(1.0, 10), (0.5, 100), (2.0, 30), (0.1, 400), (1 / 3, 20)])
def test_randomized_response_composition_is_the_optimal_composition(eps: float, k: int) -> None:
    composed = P.randomized_response(eps).self_compose(k)
    for delta in (1e-3, 1e-6, 1e-9):
        exact = optimal_composition_epsilon(eps, k, delta)
        got = composed.epsilon_for_delta(delta)
        assert exact - 1e-9 <= got <= exact + k * STEP
    for target in (0.5, 3.0):
        exact_delta = optimal_composition_delta(eps, k, target)
        got_delta = composed.delta_for_epsilon(target)
        assert got_delta >= exact_delta - 1e-12
        assert got_delta == pytest.approx(exact_delta, rel=0.02, abs=1e-12)


def test_thousands_of_reports_neither_overflow_nor_underflow() -> None:
    # Losses of 1500: e^L overflows and e^-L underflows in floating point. On a grid of step eps the
    # randomized response PLD is exact, so it must equal the optimal composition (computed without either).
    for eps, k in ((0.5, 3000), (1.0, 3000)):
        exact = optimal_composition_epsilon(eps, k, 1e-6)
        assert 0 < exact < k * eps
        composed = P.randomized_response(eps, step=eps).self_compose(k)
        assert composed.epsilon_for_delta(1e-6) == pytest.approx(exact, rel=1e-9)
    # 10^5 reports: above the mean loss k eps tanh(eps/2), below advanced composition.
    many = optimal_composition_epsilon(0.1, 10**5, 1e-6)
    assert 10**5 * 0.1 * math.tanh(0.05) < many < advanced_composition(0.1, 0.0, 10**5, 1e-6).epsilon


def test_kary_randomized_response_pair() -> None:
    # One report of k-ary RR: delta(eps') = p - e^eps' q for eps' < eps, p = e^eps/(e^eps+k-1), q = 1/(...).
    eps, k = 2.0, 8
    p = math.exp(eps) / (math.exp(eps) + k - 1)
    q = 1 / (math.exp(eps) + k - 1)
    one = P.randomized_response(eps, k)
    assert one.delta_for_epsilon(0.5) == pytest.approx(p - math.exp(0.5) * q, rel=1e-12)
    assert float(one.pmf.sum()) == pytest.approx(1.0, rel=1e-12)
    # The k-ary pair is strictly better than the binary one (which dominates every eps-DP mechanism).
    assert one.delta_for_epsilon(0.5) < P.randomized_response(eps).delta_for_epsilon(0.5)


@pytest.mark.parametrize(("sigma", "k"), [(1.0, 1), (2.0, 20), (10.0, 100), (0.5, 3)])
def test_gaussian_composition_against_the_exact_formula(sigma: float, k: int) -> None:
    composed = P.gaussian(sigma).self_compose(k)
    mu = math.sqrt(k) / sigma
    for eps in (0.5, 1.0, 3.0):
        exact = _gaussian_delta(mu, eps)
        got = composed.delta_for_epsilon(eps)
        assert got >= exact - 1e-14
        # Rounding losses up by < step each moves delta by about k * step * (its slope), a few percent here.
        assert got == pytest.approx(exact, rel=0.02, abs=1e-13)


def test_laplace_single_release_is_exact_at_its_atoms() -> None:
    # Lap(0, b) vs Lap(1, b): the pure guarantee delta(1/b) = 0, and delta(0) = the total variation distance
    # 1 - e^(-1/(2b)).
    b = 0.5
    one = P.laplace(b)
    assert one.delta_for_epsilon(1 / b) == 0.0
    assert one.delta_for_epsilon(0.0) == pytest.approx(1 - math.exp(-1 / (2 * b)), abs=2 * STEP)
    assert one.delta_for_epsilon(0.0) >= 1 - math.exp(-1 / (2 * b)) - 1e-15
    assert one.epsilon_for_delta(0.0) == pytest.approx(1 / b, abs=STEP)


def test_truncation_is_pessimistic_and_keeps_the_mass() -> None:
    # A coarse tail cut: the lower tail moves up onto the first bucket, the upper tail to +infinity, the
    # infinity masses compose as 1 - (1 - a)(1 - b); nothing is lost.
    one = P.gaussian(1.0, tail_mass=1e-4)
    assert one.infinity_mass > 0
    for composed in (
        one.self_compose(4),
        P.compose([one, P.randomized_response(0.7), P.gaussian(2.0, tail_mass=1e-5)]),
    ):
        assert float(composed.pmf.sum()) + composed.infinity_mass == pytest.approx(1.0, abs=1e-12)
        assert composed.infinity_mass >= 1 - (1 - one.infinity_mass) ** 2 - 1e-15
    four = one.self_compose(4)
    exact = _gaussian_delta(2.0, 1.0)  # four runs at sigma 1 = one at sigma 1/2
    assert exact <= four.delta_for_epsilon(1.0) <= exact + 4e-4


def test_composition_keeps_total_mass_and_is_commutative() -> None:
    a = P.compose([P.laplace(1.0), P.randomized_response(0.3)])
    b = P.compose([P.randomized_response(0.3), P.laplace(1.0)])
    assert a.offset == b.offset
    np.testing.assert_allclose(a.pmf, b.pmf, atol=1e-15)
    assert float(a.pmf.sum()) + a.infinity_mass == pytest.approx(1.0, abs=1e-12)
    assert P.randomized_response(0.3).self_compose(7).epsilon_for_delta(1e-6) == pytest.approx(
        P.compose([(P.randomized_response(0.3), 7)]).epsilon_for_delta(1e-6)
    )


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: P.randomized_response(-1.0), "epsilon"),
        (lambda: P.randomized_response(1.0, 1), "k"),
        (lambda: P.laplace(0.0), "scale"),
        (lambda: P.gaussian(1.0, sensitivity=math.inf), "sensitivity"),
        (lambda: P.gaussian(1.0, step=0.0), "step"),
        (lambda: P.gaussian(1.0, tail_mass=0.5), "tail_mass"),
        (lambda: P.randomized_response(1.0).self_compose(0), "k"),
        (lambda: P.randomized_response(1.0).epsilon_for_delta(1.0), "delta"),
        (lambda: P.randomized_response(1.0).compose(P.randomized_response(1.0, step=1e-3)), "other.step"),
        (lambda: P.compose([]), "plds"),
        (lambda: P.compose([(P.laplace(1.0), 0)]), "plds[0].count"),
    ],
)
def test_bad_input_names_the_field(call: object, field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        call()  # type: ignore[operator]
    assert info.value.field == field


# ------------------------------------------------------------------- counted guarantees (device ledger)


@pytest.mark.parametrize(("eps", "delta0", "k"), [(0.5, 0.0, 40), (0.25, 1e-7, 60), (1.0, 1e-9, 12)])
def test_composed_guarantees_are_the_optimal_composition_of_approximate_dp(
    eps: float, delta0: float, k: int
) -> None:
    """approximate_dp is the pair that dominates every (eps, delta0)-DP mechanism, so k of them composed
    must give Kairouz-Oh-Viswanath's optimal delta(epsilon) (Theorem 3.3, with delta0)."""
    pld = P.compose_guarantees([(eps, delta0, k)], step=1e-4)
    for target in (0.5 * eps * math.sqrt(k), eps * math.sqrt(k)):
        exact = optimal_composition_delta(eps, k, target, delta0)
        assert pld.delta_for_epsilon(target) == pytest.approx(exact, rel=1e-6, abs=1e-12)


def test_composed_guarantees_mix_terms_and_refuse_bad_counts() -> None:
    mixed = P.compose_guarantees([(0.5, 0.0, 10), (1.0, 1e-8, 3), (2.0, 0.0, 0)], step=1e-4)
    by_hand = P.compose([(P.approximate_dp(0.5, 0.0), 10), (P.approximate_dp(1.0, 1e-8), 3)])
    assert mixed.infinity_mass == pytest.approx(1 - (1 - 1e-8) ** 3)
    assert mixed.epsilon_for_delta(1e-6) == pytest.approx(by_hand.epsilon_for_delta(1e-6))
    with pytest.raises(InvalidParameterError, match=r"terms\[0\]\.k"):
        P.compose_guarantees([(0.5, 0.0, -1)])
