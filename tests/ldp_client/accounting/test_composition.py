"""Composition of (epsilon, delta) (issue 17): basic, advanced (exact against values computed by hand at 30
digits), heterogeneous advanced, and Kairouz-Oh-Viswanath's optimal composition (against its own formula at
the grid points and against the brute-force hockey-stick divergence of k randomized responses)."""

from __future__ import annotations

import itertools
import math

import pytest

from ldp_client.accounting import (
    Guarantee,
    advanced_composition,
    advanced_composition_heterogeneous,
    basic_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
)
from ldp_client.errors import InvalidParameterError

# sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1), computed with mpmath at 30 digits.
ADVANCED = [
    (0.1, 100, 1e-5, 5.85023509294455745568444713381),
    (0.5, 10, 1e-6, 11.5548970348461903594387259766),
    (1.0, 1000, 1e-9, 1921.86604119149858929678017564),
]


@pytest.mark.parametrize(("eps", "k", "delta_prime", "expected"), ADVANCED)
def test_advanced_composition_matches_hand_computed_values(
    eps: float, k: int, delta_prime: float, expected: float
) -> None:
    g = advanced_composition(eps, 1e-8, k, delta_prime)
    assert g.epsilon == pytest.approx(expected, rel=1e-13)
    assert g.delta == pytest.approx(k * 1e-8 + delta_prime, rel=1e-13)


def test_heterogeneous_advanced_composition() -> None:
    # sum e_i (e^e_i - 1) + sqrt(2 ln(1e6) sum e_i^2) for (0.1, 0.2, 0.3), at 30 digits.
    g = advanced_composition_heterogeneous([(0.1, 1e-7), (0.2, 0.0), Guarantee(0.3, 2e-7)], 1e-6)
    assert g.epsilon == pytest.approx(2.12656563656730523089828914658, rel=1e-13)
    assert g.delta == pytest.approx(1.3e-6, rel=1e-12)
    # Equal epsilons: the homogeneous formula exactly.
    same = advanced_composition_heterogeneous([(0.1, 0.0)] * 100, 1e-5)
    assert same.epsilon == pytest.approx(ADVANCED[0][3], rel=1e-12)
    assert advanced_composition_heterogeneous([(math.inf, 0.0), (1.0, 0.0)], 1e-6).epsilon == math.inf


def test_basic_composition() -> None:
    g = basic_composition([(0.5, 1e-6), (1.25, 0.0), Guarantee(0.25, 2e-6)])
    assert g == Guarantee(2.0, 3e-6)
    assert basic_composition([(1.0, 0.6), (1.0, 0.6)]).delta == 1.0  # capped: a probability


# KOV's delta_i at epsilon = (k - 2i) eps0, computed with mpmath at 30 digits.
@pytest.mark.parametrize(
    ("eps0", "k", "i", "expected"),
    [(1.0, 10, 3, 0.430577144529756477146534783216), (0.5, 20, 7, 0.249747833282620663541576971139)],
)
def test_optimal_composition_at_kov_grid_points(eps0: float, k: int, i: int, expected: float) -> None:
    eps = (k - 2 * i) * eps0
    assert optimal_composition_delta(eps0, k, eps) == pytest.approx(expected, rel=1e-12)
    # The inverse returns the grid point (delta_k is strictly decreasing there).
    assert optimal_composition_epsilon(eps0, k, expected) == pytest.approx(eps, rel=1e-9)


def _brute_force_delta(eps0: float, k: int, eps: float) -> float:
    """sum over all 2^k outputs of max(0, P(o) - e^eps Q(o)) for k binary randomized responses."""
    p = math.exp(eps0) / (1 + math.exp(eps0))
    total = 0.0
    for bits in itertools.product((0, 1), repeat=k):
        ones = sum(bits)
        prob_p = p**ones * (1 - p) ** (k - ones)
        prob_q = (1 - p) ** ones * p ** (k - ones)
        total += max(0.0, prob_p - math.exp(eps) * prob_q)
    return total


@pytest.mark.parametrize(("eps0", "k"), [(0.7, 1), (0.7, 6), (1.3, 9)])
def test_optimal_composition_is_the_exact_divergence(eps0: float, k: int) -> None:
    for eps in (0.0, 0.3, 1.0, 2.2, 4.0):
        assert optimal_composition_delta(eps0, k, eps) == pytest.approx(
            _brute_force_delta(eps0, k, eps), rel=1e-10, abs=1e-15
        )
    for target in (0.3, 0.05, 1e-3):
        eps = optimal_composition_epsilon(eps0, k, target)
        if eps > 0:
            assert _brute_force_delta(eps0, k, eps) == pytest.approx(target, rel=1e-8)
        else:
            assert _brute_force_delta(eps0, k, 0.0) <= target


def test_optimal_composition_with_delta0_and_limits() -> None:
    # With delta0: 1 - (1 - delta0)^k (1 - delta_k).
    pure = optimal_composition_delta(1.0, 10, 4.0)
    assert optimal_composition_delta(1.0, 10, 4.0, 1e-3) == pytest.approx(
        1 - 0.999**10 * (1 - pure), rel=1e-12
    )
    # delta below what the per-step deltas already cost: no epsilon.
    assert optimal_composition_epsilon(1.0, 10, 1e-3, 1e-3) == math.inf
    # Beyond k eps0 there is nothing left: delta 0, and any delta is met at k eps0 at most.
    assert optimal_composition_delta(1.0, 10, 10.0) == 0.0
    assert optimal_composition_epsilon(1.0, 10, 0.0) == pytest.approx(10.0)
    # Never above basic composition, and well below advanced composition for many small steps.
    eps = optimal_composition_epsilon(0.1, 1000, 1e-6)
    assert eps < advanced_composition(0.1, 0.0, 1000, 1e-6).epsilon < 100.0


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: advanced_composition(-0.1, 0.0, 10, 1e-6), "epsilon"),
        (lambda: advanced_composition(math.nan, 0.0, 10, 1e-6), "epsilon"),
        (lambda: advanced_composition(1.0, 1.0, 10, 1e-6), "delta"),
        (lambda: advanced_composition(1.0, -1e-9, 10, 1e-6), "delta"),
        (lambda: advanced_composition(1.0, 0.0, 0, 1e-6), "k"),
        (lambda: advanced_composition(1.0, 0.0, 2.5, 1e-6), "k"),
        (lambda: advanced_composition(1.0, 0.0, True, 1e-6), "k"),
        (lambda: advanced_composition(1.0, 0.0, 10, 0.0), "delta_prime"),
        (lambda: basic_composition([]), "guarantees"),
        (lambda: basic_composition([(1.0, 1.5)]), "guarantees[0].delta"),
        (lambda: basic_composition([(-1.0, 0.0)]), "guarantees[0].epsilon"),
        (lambda: basic_composition([1.0]), "guarantees[0]"),
        (lambda: Guarantee(1.0, 2.0), "delta"),
        (lambda: optimal_composition_epsilon(1.0, 10, 1.0), "delta"),
        (lambda: optimal_composition_delta("1", 10, 1.0), "epsilon0"),
    ],
)
def test_bad_input_names_the_field(call: object, field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        call()  # type: ignore[operator]
    assert info.value.field == field
    assert "allowed" in str(info.value)


def test_composition_and_the_closed_form_need_no_numpy() -> None:
    """A device's ledger composes without numpy: the package, composition and the shuffle closed form."""
    from tests.ldp_client.test_no_numpy import _run

    code = (
        "from ldp_client.accounting import advanced_composition as adv, basic_composition as basic\n"
        "from ldp_client.accounting import optimal_composition_epsilon as opt\n"
        "from ldp_client.accounting.shuffle import ShufflerDeclaration, amplify\n"
        "print(basic([(1.0, 0.0)] * 3).epsilon, adv(0.1, 0.0, 100, 1e-5).epsilon, opt(0.5, 50, 1e-6) > 0)\n"
        "amp = amplify(ShufflerDeclaration(10**6, 1e-6), 4.0, numerical=False)\n"
        "print(round(amp.epsilon_closed_form, 4))\n"
    )
    proc = _run(code, ("numpy", "scipy"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "3.0",
        repr(advanced_composition(0.1, 0.0, 100, 1e-5).epsilon),
        "True",
        "0.201",
    ]


# ------------------------------------------------------------------------------ counted terms (ledger)


def test_counted_basic_composition_is_exact_and_never_rounds_down() -> None:
    from fractions import Fraction

    from ldp_client.accounting.composition import basic_composition_counts

    total = basic_composition_counts([(0.1, 1e-9, 10), (0.7, 0.0, 3), (5.0, 0.0, 0)])
    exact = Fraction(0.1) * 10 + Fraction(0.7) * 3
    # The smallest float at or above the exact sum: never below it, and the float below is.
    assert Fraction(total.epsilon) >= exact > Fraction(math.nextafter(total.epsilon, -math.inf))
    assert Fraction(total.delta) >= Fraction(1e-9) * 10
    assert basic_composition_counts([]) == Guarantee(0.0, 0.0)
    assert basic_composition_counts([(math.inf, 0.0, 1)]).epsilon == math.inf
    with pytest.raises(InvalidParameterError, match=r"terms\[0\]\.k"):
        basic_composition_counts([(0.1, 0.0, -1)])


def test_counted_advanced_composition_is_the_heterogeneous_rule_and_never_looser_than_basic() -> None:
    from ldp_client.accounting.composition import (
        advanced_composition_counts,
        advanced_composition_heterogeneous,
        basic_composition_counts,
    )

    terms = [(0.05, 0.0, 400), (0.1, 1e-10, 100)]
    expanded = [(0.05, 0.0)] * 400 + [(0.1, 1e-10)] * 100
    counted = advanced_composition_counts(terms, 1e-8)
    expected = advanced_composition_heterogeneous(expanded, 1e-8).epsilon
    assert counted.epsilon == pytest.approx(expected, rel=1e-12)
    assert counted.epsilon < basic_composition_counts(terms).epsilon  # 30 by the basic rule
    assert counted.delta == pytest.approx(100 * 1e-10 + 1e-8)
    few = [(2.0, 0.0, 3)]  # large epsilon, few reports: basic is tighter and no delta' is spent
    assert advanced_composition_counts(few, 1e-8) == basic_composition_counts(few)
