"""Composition of (epsilon, delta) guarantees, in pure Python (no numpy: a device's ledger uses it).

A mechanism is (epsilon, delta)-DP when, for all neighbouring inputs x, x' and every set S of outputs,
P(M(x) in S) <= e^epsilon P(M(x') in S) + delta. For local DP the "neighbouring inputs" are any two values
of one device, so everything here applies to the reports of one device as much as to a central release.
Running k such mechanisms on the same data (each possibly chosen after seeing the previous outputs: the
adaptive composition) is again DP, with the parameters below.

- :func:`basic_composition`: (sum epsilon_i, sum delta_i) (Dwork, McSherry, Nissim, Smith, TCC 2006;
  Dwork and Roth, "The Algorithmic Foundations of Differential Privacy", 2014, Theorem 3.16). Exact for
  k = 1 and always valid; tight for pure DP when delta may not grow.
- :func:`advanced_composition`: k mechanisms, each (epsilon, delta)-DP, are (epsilon', k delta +
  delta')-DP for every delta' in (0, 1) with

      epsilon' = sqrt(2 k ln(1/delta')) epsilon + k epsilon (e^epsilon - 1)

  (Dwork, Rothblum, Vadhan, "Boosting and Differential Privacy", FOCS 2010, Theorem III.3; Dwork and Roth
  2014, Theorem 3.20).
- :func:`advanced_composition_heterogeneous`: the same argument with different epsilon_i: the privacy loss
  of step i has |L_i| <= epsilon_i and E[L_i] <= epsilon_i (e^epsilon_i - 1), so Azuma-Hoeffding gives
  (sum epsilon_i (e^epsilon_i - 1) + sqrt(2 ln(1/delta') sum epsilon_i^2), sum delta_i + delta')-DP
  (Dwork-Rothblum-Vadhan's proof with per-step bounds; stated so in Kairouz, Oh, Viswanath, "The
  Composition Theorem for Differential Privacy", ICML 2015 / IEEE Trans. IT 2017, Theorem 3.5, whose
  sharper mean term we do not use). With equal epsilon_i it is :func:`advanced_composition` exactly.
- :func:`optimal_composition_delta` / :func:`optimal_composition_epsilon`: the exact (optimal) k-fold
  composition of one (epsilon_0, delta_0)-DP mechanism (Kairouz, Oh, Viswanath, Theorem 3.3): with
  p = e^eps0 / (1 + e^eps0) and q = 1 - p, the composition is (epsilon, delta)-DP exactly when

      delta >= 1 - (1 - delta_0)^k (1 - delta_k(epsilon)),
      delta_k(epsilon) = sum over l with (k - 2l) eps0 > epsilon of
                         C(k, l) (p^(k-l) q^l - e^epsilon q^(k-l) p^l),

  which is the hockey-stick divergence of k independent randomized responses (the worst case of every
  eps0-DP mechanism). At epsilon = (k - 2i) eps0 it is KOV's delta_i = sum_{l<i} C(k, l) (e^((k-l) eps0) -
  e^((k-2i+l) eps0)) / (1 + e^eps0)^k.

Each function validates its input and raises :class:`~ldp_client.errors.InvalidParameterError` naming the
argument, the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction

from ldp_client.errors import InvalidParameterError

__all__ = [
    "Guarantee",
    "advanced_composition",
    "advanced_composition_heterogeneous",
    "basic_composition",
    "check_count",
    "check_delta",
    "check_epsilon",
    "optimal_composition_delta",
    "optimal_composition_epsilon",
]


def check_epsilon(field: str, value: object, *, allow_inf: bool = False) -> float:
    """``value`` as an epsilon: a real number >= 0 (and finite unless ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameterError(field, value, "a number >= 0")
    x = float(value)
    if math.isnan(x) or x < 0.0 or (math.isinf(x) and not allow_inf):
        raise InvalidParameterError(field, value, "a number >= 0" + ("" if allow_inf else " (finite)"))
    return x


def check_delta(field: str, value: object, *, allow_zero: bool = True) -> float:
    """``value`` as a delta: a real number in [0, 1) (in (0, 1) when ``allow_zero`` is False)."""
    allowed = "a number in [0, 1)" if allow_zero else "a number in (0, 1)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameterError(field, value, allowed)
    x = float(value)
    if not (0.0 <= x < 1.0) or (x == 0.0 and not allow_zero):
        raise InvalidParameterError(field, value, allowed)
    return x


def check_count(field: str, value: object) -> int:
    """``value`` as a number of compositions: an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParameterError(field, value, "an integer >= 1")
    return int(value)


@dataclass(frozen=True, slots=True)
class Guarantee:
    """An (epsilon, delta)-DP guarantee: epsilon >= 0 (infinite allowed: no guarantee), delta in [0, 1]."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon("epsilon", self.epsilon, allow_inf=True))
        d = self.delta
        if isinstance(d, bool) or not isinstance(d, int | float) or not 0.0 <= float(d) <= 1.0:
            raise InvalidParameterError("delta", d, "a number in [0, 1]")
        object.__setattr__(self, "delta", float(d))


def _pairs(guarantees: Iterable[Guarantee | tuple[float, float]]) -> list[Guarantee]:
    out: list[Guarantee] = []
    for i, g in enumerate(guarantees):
        if isinstance(g, Guarantee):
            out.append(g)
            continue
        if not isinstance(g, tuple) or len(g) != 2:
            raise InvalidParameterError(f"guarantees[{i}]", g, "a Guarantee or an (epsilon, delta) pair")
        eps = check_epsilon(f"guarantees[{i}].epsilon", g[0], allow_inf=True)
        delta = check_delta(f"guarantees[{i}].delta", g[1])
        out.append(Guarantee(eps, delta))
    if not out:
        raise InvalidParameterError("guarantees", [], "at least one (epsilon, delta) pair")
    return out


def basic_composition(guarantees: Iterable[Guarantee | tuple[float, float]]) -> Guarantee:
    """Sequential composition: (sum epsilon_i, min(1, sum delta_i)) (Dwork-Roth 2014, Theorem 3.16).

    The delta sum is capped at 1 (a probability bound); ``math.fsum`` keeps the sums exact to rounding.
    """
    gs = _pairs(guarantees)
    return Guarantee(math.fsum(g.epsilon for g in gs), min(1.0, math.fsum(g.delta for g in gs)))


def advanced_composition(epsilon: float, delta: float, k: int, delta_prime: float) -> Guarantee:
    """k-fold adaptive composition of an (epsilon, delta)-DP mechanism (Dwork-Rothblum-Vadhan 2010).

    Returns (sqrt(2 k ln(1/delta')) epsilon + k epsilon (e^epsilon - 1), k delta + delta'); the delta is
    capped at 1. It can exceed the basic k epsilon (small k or large epsilon): both are valid, the smaller
    is the better bound, which the caller chooses (``ldp-sim privacy compose`` shows both).
    """
    eps = check_epsilon("epsilon", epsilon)
    d = check_delta("delta", delta)
    n = check_count("k", k)
    dp = check_delta("delta_prime", delta_prime, allow_zero=False)
    eps_total = math.sqrt(2.0 * n * math.log(1.0 / dp)) * eps + n * eps * math.expm1(eps)
    return Guarantee(eps_total, min(1.0, n * d + dp))


def advanced_composition_heterogeneous(
    guarantees: Iterable[Guarantee | tuple[float, float]], delta_prime: float
) -> Guarantee:
    """Adaptive composition of (epsilon_i, delta_i)-DP mechanisms (heterogeneous advanced composition).

    epsilon' = sum epsilon_i (e^epsilon_i - 1) + sqrt(2 ln(1/delta') sum epsilon_i^2), delta = sum delta_i +
    delta' (module docstring: Dwork-Rothblum-Vadhan's Azuma argument with per-step bounds). Infinite
    epsilon_i give an infinite epsilon'.
    """
    gs = _pairs(guarantees)
    dp = check_delta("delta_prime", delta_prime, allow_zero=False)
    if any(math.isinf(g.epsilon) for g in gs):
        return Guarantee(math.inf, 1.0)
    mean = math.fsum(g.epsilon * math.expm1(g.epsilon) for g in gs)
    spread = math.sqrt(2.0 * math.log(1.0 / dp) * math.fsum(g.epsilon**2 for g in gs))
    return Guarantee(mean + spread, min(1.0, math.fsum(g.delta for g in gs) + dp))


def basic_composition_counts(terms: Iterable[tuple[float, float, int]]) -> Guarantee:
    """Sequential composition of ``(epsilon, delta, k)`` terms (k reports of one guarantee), rounded UP.

    (sum k epsilon, min(1, sum k delta)) (Dwork-Roth 2014, Theorem 3.16), summed exactly (fractions) and
    rounded to the next float above, so a total is never below the true sum: what a budget cap is checked
    against (the device ledger's rule, :mod:`ldp_client.reporter.policy`). No terms: (0, 0).
    """
    eps = Fraction(0)
    delta = Fraction(0)
    for i, (term_eps, term_delta, k) in enumerate(terms):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidParameterError(f"terms[{i}].k", k, "an integer >= 0")
        e = check_epsilon(f"terms[{i}].epsilon", term_eps, allow_inf=True)
        d = check_delta(f"terms[{i}].delta", term_delta)
        if k == 0:
            continue
        if math.isinf(e):
            return Guarantee(math.inf, 1.0)
        eps += Fraction(e) * k
        delta += Fraction(d) * k
    return Guarantee(_ceil_float(eps), min(1.0, _ceil_float(delta)))


def advanced_composition_counts(terms: Iterable[tuple[float, float, int]], delta_prime: float) -> Guarantee:
    """Heterogeneous advanced composition of ``(epsilon, delta, k)`` terms, never looser than the basic rule.

    epsilon' = min(sum k eps, sum k eps (e^eps - 1) + sqrt(2 ln(1/delta') sum k eps^2)); delta' is added to
    the delta only when the advanced bound is the smaller (as :func:`advanced_composition_heterogeneous`
    with each term repeated k times, without building the k copies). Rounded up.
    """
    listed = list(terms)
    basic = basic_composition_counts(listed)
    dp = check_delta("delta_prime", delta_prime, allow_zero=False)
    if math.isinf(basic.epsilon) or basic.epsilon == 0.0:
        return basic
    mean = math.fsum(k * e * math.expm1(e) for e, _, k in listed)
    spread = math.sqrt(2.0 * math.log(1.0 / dp) * math.fsum(k * e * e for e, _, k in listed))
    advanced = math.nextafter(mean + spread, math.inf)
    if advanced >= basic.epsilon:
        return basic
    return Guarantee(advanced, min(1.0, math.nextafter(basic.delta + dp, math.inf)))


def _ceil_float(x: Fraction) -> float:
    """The smallest float >= x."""
    f = float(x)
    return math.nextafter(f, math.inf) if Fraction(f) < x else f


def _rr_terms(epsilon0: float, k: int) -> Iterator[tuple[float, float]]:
    """(loss, P-mass) of the k-fold randomized-response pair, for l = 0..k answers flipped, lazily.

    Under P the number of flipped answers l is Binomial(k, q) and the privacy loss is (k - 2l) eps0; the
    mass is computed from logarithms so that a large k neither overflows nor loses the small terms.
    """
    log_p = -math.log1p(math.exp(-epsilon0))  # ln(e^eps0 / (1 + e^eps0))
    log_q = -math.log1p(math.exp(epsilon0))  # ln(1 / (1 + e^eps0))
    lg_k = math.lgamma(k + 1)
    for ell in range(k + 1):
        log_c = lg_k - math.lgamma(ell + 1) - math.lgamma(k - ell + 1)
        yield (k - 2 * ell) * epsilon0, math.exp(log_c + (k - ell) * log_p + ell * log_q)


def _pure_delta(epsilon0: float, k: int, epsilon: float) -> float:
    """delta_k(epsilon) of the module docstring: each positive term computed as P_l (1 - e^(eps - L_l))."""
    if epsilon0 == 0.0:
        return 0.0
    total = []
    for loss, mass in _rr_terms(epsilon0, k):
        if loss <= epsilon:
            break  # losses decrease with l
        total.append(mass * -math.expm1(epsilon - loss))
    return math.fsum(total)


def optimal_composition_delta(epsilon0: float, k: int, epsilon: float, delta0: float = 0.0) -> float:
    """The smallest delta for which k-fold composition of an (epsilon0, delta0)-DP mechanism is
    (epsilon, delta)-DP, for every such mechanism (Kairouz-Oh-Viswanath 2015, Theorem 3.3).

    delta = 1 - (1 - delta0)^k (1 - delta_k(epsilon)), delta_k as in the module docstring (O(k) terms).
    """
    e0 = check_epsilon("epsilon0", epsilon0)
    n = check_count("k", k)
    eps = check_epsilon("epsilon", epsilon)
    d0 = check_delta("delta0", delta0)
    pure = _pure_delta(e0, n, eps)
    return -math.expm1(n * math.log1p(-d0) + math.log1p(-pure)) if pure < 1.0 else 1.0


def optimal_composition_epsilon(epsilon0: float, k: int, delta: float, delta0: float = 0.0) -> float:
    """The smallest epsilon for which k-fold composition of any (epsilon0, delta0)-DP mechanism is
    (epsilon, delta)-DP (Kairouz-Oh-Viswanath 2015, Theorem 3.3); ``math.inf`` when delta < 1 - (1 -
    delta0)^k (the deltas alone exceed it).

    delta_k(epsilon) is convex and decreasing, and between two consecutive losses L_{l+1} <= epsilon <= L_l
    it equals A_l - e^epsilon B_l (A_l, B_l: the P- and Q-masses of the outcomes 0..l). With
    T_l = e^(L_{l+1}) B_l = sum_{m<=l} P_m e^(L_{l+1} - L_m), kept by the recursion T_l = (T_{l-1} + P_l)
    e^(-2 eps0) (no overflow for any k), delta_k(L_{l+1}) = A_l - T_l, and on the first segment where it
    exceeds the target the answer is L_{l+1} + ln((A_l - target) / T_l).
    """
    e0 = check_epsilon("epsilon0", epsilon0)
    n = check_count("k", k)
    d = check_delta("delta", delta)
    d0 = check_delta("delta0", delta0)
    # 1 - (1 - d0)^k (1 - pure) <= d  <=>  pure <= 1 - (1 - d) / (1 - d0)^k
    target = -math.expm1(math.log1p(-d) - n * math.log1p(-d0))
    if target < 0.0:
        return math.inf
    if e0 == 0.0:
        return 0.0
    shrink = math.exp(-2.0 * e0)  # e^(L_{l+1} - L_l)
    mass_p = 0.0
    scaled = 0.0  # T_l
    for loss, mass in _rr_terms(e0, n):
        mass_p += mass
        scaled = (scaled + mass) * shrink
        next_loss = loss - 2.0 * e0
        if next_loss <= 0.0 or mass_p - scaled > target:
            # The answer lies in [max(next_loss, 0), loss], where delta_k = mass_p - e^(eps - next_loss) T_l.
            if mass_p <= target:
                return max(0.0, next_loss)
            if scaled <= 0.0:  # every mass so far underflowed: the segment's top is an upper bound
                return max(0.0, loss)
            return max(0.0, min(loss, next_loss + math.log((mass_p - target) / scaled)))
    return 0.0
