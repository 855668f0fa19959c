"""Privacy amplification by shuffling: the central (epsilon, delta) of n eps0-LDP reports shuffled together.

When a deployment routes reports through a shuffler (a party that strips identities and permutes each
batch of n reports before the aggregator sees them), an eps0-LDP report is also hidden among the n - 1
others, and the batch as a whole is (epsilon, delta)-DP with respect to any one device's value, with
epsilon much smaller than eps0. Feldman, McMillan and Talwar ("Hiding Among the Clones: A Simple and
Nearly Optimal Analysis of Privacy Amplification by Shuffling", FOCS 2021, arXiv:2012.12803) show this by
a reduction: each other report is, with probability e^-eps0, a "clone" of the differing device's report
on one of its two values, so that the shuffled batch is (epsilon, delta)-DP whenever the pair

    P = (A + D, C - A + 1 - D),   Q = (A + 1 - D, C - A + D),
    C ~ Binomial(n - 1, e^-eps0),  A ~ Binomial(C, 1/2),  D ~ Bernoulli(e^eps0 / (e^eps0 + 1))

is (their Theorem 3.2 / Lemma 3.3). Two bounds follow:

- :func:`closed_form_epsilon` (their Theorem 3.1): for delta in (0, 1) and eps0 <= ln(n / (16 ln(2/delta))),

      epsilon <= ln(1 + (e^eps0 - 1)/(e^eps0 + 1) * (8 sqrt(e^eps0 ln(4/delta)) / sqrt(n) + 8 e^eps0 / n)).

  Pure Python. n = 10^6, eps0 = 4, delta = 10^-6 gives 0.2010.
- :func:`numerical_epsilon` (their section 5, "numerical analysis"): the hockey-stick divergence of (P, Q)
  computed directly. Given C = c, P and Q are distributions of x = A + D on 0..c+1 with
  P(x) = w b(x-1) + (1-w) b(x), Q(x) = w b(x) + (1-w) b(x-1) (b the Binomial(c, 1/2) pmf, w =
  e^eps0/(e^eps0+1)). The likelihood ratio P(x)/Q(x) = (w r + 1 - w) / (w + (1 - w) r), r = b(x-1)/b(x) =
  x / (c - x + 1), increases with x, so the set where P > e^eps Q is {x > beta (c + 1)} with
  beta = R / (1 + R), R = (e^eps w - (1 - w)) / (w - e^eps (1 - w)) (empty for eps >= eps0), and

      D_{e^eps}(P_c || Q_c) = P_c(x > beta (c+1)) - e^eps Q_c(x > beta (c+1)),

  two binomial tail probabilities per c. The map x -> c + 1 - x swaps P and Q, so the divergence is the
  same in both directions. delta(eps) = sum_c P(C = c) D_c, over the values of c outside a tail of mass
  ``tail_mass`` (that mass is added to delta: pessimistic), vectorised over c; epsilon(delta) is the
  smallest eps with delta(eps) <= delta, by bisection to ``tolerance`` (the upper end returned). Needs
  numpy and scipy (the aggregator's extra).

Both bounds are never above eps0 (shuffling is post-processing of the eps0-LDP reports), so each is
reported as min(eps0, bound). They hold for ANY eps0-DP local randomizer, and for one report per device
in the batch; a device sending several reports to one shuffled batch needs their composition first.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ldp_client.accounting.composition import check_delta, check_epsilon
from ldp_client.errors import InvalidParameterError

__all__ = [
    "ShuffleAmplification",
    "ShufflerDeclaration",
    "amplify",
    "closed_form_applies",
    "closed_form_epsilon",
    "numerical_delta",
    "numerical_epsilon",
]

MAX_BATCH_REPORTS = 10**10
"""Largest shuffled batch accepted: far above any deployment, and it keeps the numerical bound's sum over
clone counts (about 12 standard deviations of Binomial(n - 1, e^-eps0), at most 6e5 terms) quick."""


def _check_n(value: object, field: str = "n") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_BATCH_REPORTS:
        raise InvalidParameterError(
            field, value, f"an integer in [2, {MAX_BATCH_REPORTS}] (reports shuffled together)"
        )
    return int(value)


def closed_form_applies(n: int, epsilon0: float, delta: float) -> bool:
    """Whether Theorem 3.1's condition eps0 <= ln(n / (16 ln(2/delta))) holds."""
    count = _check_n(n)
    e0 = check_epsilon("epsilon0", epsilon0)
    d = check_delta("delta", delta, allow_zero=False)
    limit = count / (16.0 * math.log(2.0 / d))
    return limit > 1.0 and e0 <= math.log(limit)


def closed_form_epsilon(n: int, epsilon0: float, delta: float) -> float:
    """Feldman-McMillan-Talwar's Theorem 3.1 bound on the central epsilon (module docstring).

    Outside its condition (:func:`closed_form_applies`) no amplification is claimed and eps0 is returned;
    inside, min(eps0, bound).
    """
    if not closed_form_applies(n, epsilon0, delta):
        return float(epsilon0)
    e = math.exp(epsilon0)
    spread = 8.0 * math.sqrt(e * math.log(4.0 / delta)) / math.sqrt(n) + 8.0 * e / n
    return min(float(epsilon0), math.log1p((e - 1.0) / (e + 1.0) * spread))


def numerical_delta(n: int, epsilon0: float, epsilon: float, *, tail_mass: float = 0.0) -> float:
    """delta(epsilon) of the clone pair (P, Q) for n reports (module docstring), an upper bound.

    ``tail_mass``: the values of C outside [its tail_mass/2 and 1 - tail_mass/2 quantiles] are not summed;
    their probability is added instead (0: every c is summed).
    """
    count = _check_n(n)
    e0 = check_epsilon("epsilon0", epsilon0)
    eps = check_epsilon("epsilon", epsilon)
    tail = check_delta("tail_mass", tail_mass)
    return _delta(count, e0, eps, tail)


def _delta(n: int, e0: float, eps: float, tail: float) -> float:
    import numpy as np
    from scipy.stats import binom

    if eps >= e0:
        return 0.0
    p_clone = math.exp(-e0)
    if tail > 0.0:
        lo = int(binom.ppf(tail / 2.0, n - 1, p_clone))
        hi = int(binom.isf(tail / 2.0, n - 1, p_clone))
    else:
        lo, hi = 0, n - 1
    c = np.arange(lo, hi + 1, dtype=np.int64)
    weight = binom.pmf(c, n - 1, p_clone)
    outside = max(0.0, 1.0 - float(np.sum(weight)))  # the mass of C not summed counts as delta 1
    w = 1.0 / (1.0 + math.exp(-e0))  # e^eps0 / (e^eps0 + 1)
    ee = math.exp(eps)
    ratio = (ee * w - (1.0 - w)) / (w - ee * (1.0 - w))  # R > 0 since eps < eps0
    beta = ratio / (1.0 + ratio)
    # x in the set iff x > beta (c + 1): x >= t = floor(beta (c + 1)) + 1.
    t = np.floor(beta * (c + 1)).astype(np.int64) + 1
    # P(A + D >= t) = w P(A >= t - 1) + (1 - w) P(A >= t); binom.sf(k) = P(A > k).
    sf_t1 = binom.sf(t - 2, c, 0.5)  # P(A >= t - 1)
    sf_t = binom.sf(t - 1, c, 0.5)  # P(A >= t)
    p_set = w * sf_t1 + (1.0 - w) * sf_t
    q_set = w * sf_t + (1.0 - w) * sf_t1
    div = np.clip(p_set - ee * q_set, 0.0, None)
    return min(1.0, float(np.sum(weight * div)) + outside)


def numerical_epsilon(
    n: int, epsilon0: float, delta: float, *, tolerance: float = 1e-4, tail_mass: float | None = None
) -> float:
    """The smallest epsilon (within ``tolerance``, rounded up) with clone-pair delta(epsilon) <= ``delta``.

    ``tail_mass`` defaults to delta / 1000 (at most that much of the delta is spent on not summing the
    improbable clone counts). Results are cached: a campaign's estimate asks the same question each time.
    """
    count = _check_n(n)
    e0 = check_epsilon("epsilon0", epsilon0)
    d = check_delta("delta", delta, allow_zero=False)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0.0 < tolerance <= 0.1:
        raise InvalidParameterError("tolerance", tolerance, "a number in (0, 0.1]")
    tail = d / 1000.0 if tail_mass is None else check_delta("tail_mass", tail_mass)
    if tail >= d:
        raise InvalidParameterError("tail_mass", tail_mass, f"a number below delta={d}")
    return _numerical_epsilon(count, e0, d, float(tolerance), tail)


@functools.lru_cache(maxsize=256)
def _numerical_epsilon(n: int, e0: float, delta: float, tolerance: float, tail: float) -> float:
    if e0 == 0.0:
        return 0.0
    lo, hi = 0.0, e0  # delta(e0) = 0 <= delta always
    if closed_form_applies(n, e0, delta):
        hi = closed_form_epsilon(n, e0, delta)  # a valid start: the numerical bound is never above it
        if _delta(n, e0, hi, tail) > delta:
            hi = e0
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if _delta(n, e0, mid, tail) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True, slots=True)
class ShufflerDeclaration:
    """A campaign's declaration that its reports pass through a shuffler (``Campaign.shuffler``).

    ``batch_reports``: the number of reports the shuffler permutes together (expected; the smaller the
    batch, the smaller the amplification, so declare what every batch reaches); ``delta``: the delta of
    the central guarantee to report.
    """

    batch_reports: int
    delta: float

    def __post_init__(self) -> None:
        _check_n(self.batch_reports, "shuffler.batch_reports")
        object.__setattr__(self, "delta", check_delta("shuffler.delta", self.delta, allow_zero=False))


@dataclass(frozen=True, slots=True)
class ShuffleAmplification:
    """The central (epsilon, delta) of one shuffled batch of eps0-LDP reports, by both bounds."""

    batch_reports: int
    local_epsilon: float
    delta: float
    closed_form_applies: bool
    epsilon_closed_form: float
    """Theorem 3.1 of Feldman-McMillan-Talwar, or eps0 outside its condition."""
    epsilon_numerical: float
    """The numerical clone bound (tighter), or NaN when it was not computed."""


def amplify(
    declaration: ShufflerDeclaration, epsilon0: float, *, numerical: bool = True
) -> ShuffleAmplification:
    """Both bounds for a declared shuffler and a campaign's per-report epsilon (``numerical=False``: the
    closed form only, pure Python). An infinite eps0 (no local guarantee) is not amplified."""
    e0 = check_epsilon("epsilon0", epsilon0, allow_inf=True)
    n, d = declaration.batch_reports, declaration.delta
    if math.isinf(e0):
        return ShuffleAmplification(n, e0, d, False, math.inf, math.inf)
    return ShuffleAmplification(
        batch_reports=n,
        local_epsilon=e0,
        delta=d,
        closed_form_applies=closed_form_applies(n, e0, d),
        epsilon_closed_form=closed_form_epsilon(n, e0, d),
        epsilon_numerical=numerical_epsilon(n, e0, d) if numerical else math.nan,
    )
