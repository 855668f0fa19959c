"""A tight numerical accountant: discretised privacy loss distributions (PLDs), composed by FFT.

For a pair of output distributions (P, Q) of a mechanism on two neighbouring inputs, the privacy loss of
an output o is L(o) = ln(P(o) / Q(o)), and its distribution under o ~ P is the PLD (Dwork and Rothblum,
"Concentrated Differential Privacy", 2016; Sommer, Meiser, Mohammadi, "Privacy Loss Classes: The Central
Limit Theorem in Differential Privacy", PoPETs 2019). The pair is (epsilon, delta)-indistinguishable for

    delta(epsilon) = P(L = +inf) + E_P[(1 - e^(epsilon - L))_+]                       (hockey-stick)

and the PLD of a composition is the convolution of the PLDs: adaptive composition of mechanisms whose
worst-case pairs are (P_i, Q_i) is bounded by the product pair (Koskela, Jalko, Honkela, "Computing Tight
Differential Privacy Guarantees Using FFT", AISTATS 2020; Meiser and Mohammadi, "Tight on Budget?",
CCS 2018).

Discretisation is pessimistic, so every delta and epsilon computed here is an upper bound of the true one
(up to floating-point rounding of the FFT, about 1e-16 of the largest mass):

- every loss is rounded UP to the grid {i * step}: delta(epsilon) is increasing in each loss, so it can
  only grow (the "pessimistic estimate" of Google's dp-accounting, whose construction we follow in
  spirit: Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, "Connect the Dots: Tighter Discrete
  Approximations of Privacy Loss Distributions", PoPETs 2022, section 3);
- a continuous PLD gives bucket i the P-probability of L in ((i-1) step, i step], computed from the CDF
  of L in closed form;
- truncation moves lower-tail mass up to the first kept bucket and upper-tail mass to +infinity.

Every pair here is symmetric (the PLD of (Q, P) equals that of (P, Q): randomized response, Laplace and
Gaussian are symmetric under relabelling the outputs), so one PLD gives both directions and the
epsilon(delta) below is the guarantee of the composition. The worst-case pairs:

- :func:`randomized_response`: k-ary randomized response with truth probability p = e^eps / (e^eps + k - 1):
  L = +eps w.p. p, -eps w.p. (1-p)/(k-1), 0 otherwise. With ``k=None`` it is the binary pair
  (e^eps / (1 + e^eps), 1 / (1 + e^eps)), which dominates EVERY eps-DP mechanism (Kairouz, Oh, Viswanath,
  ICML 2015, Theorem 3.3 and its proof; Murtagh and Vadhan, TCC 2016): the accountant of any eps-LDP
  report.
- :func:`laplace`: Lap(0, b) against Lap(s, b) (sensitivity s): L = s/b for x <= 0, -s/b for x >= s and
  (s - 2x)/b in between, so P(L <= t) = e^(-(s/b - t)/2) / 2 for -s/b <= t < s/b, and 1 from s/b on.
- :func:`gaussian`: N(0, sigma^2) against N(s, sigma^2): L ~ N(mu, 2 mu) with mu = s^2 / (2 sigma^2)
  (Balle and Wang, "Improving the Gaussian Mechanism for Differential Privacy", ICML 2018, Lemma 3).

numpy is imported by the functions, not by this module (the device ledger imports the package without it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ldp_client.accounting.composition import check_count, check_delta, check_epsilon
from ldp_client.errors import InvalidParameterError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "DEFAULT_STEP",
    "DEFAULT_TAIL_MASS",
    "PrivacyLossDistribution",
    "approximate_dp",
    "compose",
    "compose_guarantees",
    "gaussian",
    "laplace",
    "randomized_response",
]

DEFAULT_STEP = 1e-4
"""Grid of the losses (the value discretisation interval): an epsilon comes out at most about k * step
above the exact one after k compositions; dp-accounting's default is the same."""

DEFAULT_TAIL_MASS = 1e-15
"""Probability mass a continuous PLD or a composition may cut from each tail (pessimistically: the upper
tail counts as infinite loss, so it adds at most this much to every delta)."""

_MAX_BUCKETS = 1 << 24
"""Largest grid a PLD may span (128 MiB of float64, twice that for its FFT): a coarser ``step`` beyond it."""


def _check_step(step: object) -> float:
    if isinstance(step, bool) or not isinstance(step, int | float) or not (0.0 < float(step) <= 1.0):
        raise InvalidParameterError("step", step, "a number in (0, 1] (the loss grid)")
    return float(step)


def _check_tail(tail_mass: object) -> float:
    if isinstance(tail_mass, bool) or not isinstance(tail_mass, int | float):
        raise InvalidParameterError("tail_mass", tail_mass, "a number in [0, 1e-3]")
    if not 0.0 <= float(tail_mass) <= 1e-3:
        raise InvalidParameterError("tail_mass", tail_mass, "a number in [0, 1e-3]")
    return float(tail_mass)


def _noise_arguments(
    field: str, noise: object, sensitivity: object, step: object, tail_mass: object
) -> tuple[float, float, float, float]:
    """(noise, sensitivity, step, tail mass) of a noise-adding mechanism's PLD, checked."""
    return (
        _check_positive(field, noise),
        _check_positive("sensitivity", sensitivity),
        _check_step(step),
        _check_tail(tail_mass),
    )


def _check_positive(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameterError(field, value, "a finite number > 0")
    x = float(value)
    if not (math.isfinite(x) and x > 0.0):
        raise InvalidParameterError(field, value, "a finite number > 0")
    return x


@dataclass(frozen=True, eq=False)
class PrivacyLossDistribution:
    """A discretised PLD: mass ``pmf[j]`` at loss ``(offset + j) * step``, plus ``infinity_mass`` at +inf.

    Build one with :func:`randomized_response`, :func:`laplace` or :func:`gaussian`; compose with
    :meth:`compose`, :meth:`self_compose` or :func:`compose`; read it with :meth:`delta_for_epsilon` and
    :meth:`epsilon_for_delta`.
    """

    step: float
    offset: int
    pmf: npt.NDArray[np.float64]
    infinity_mass: float
    tail_mass: float = DEFAULT_TAIL_MASS

    @property
    def losses(self) -> npt.NDArray[np.float64]:
        """The loss of every entry of ``pmf`` (grid values)."""
        import numpy as np

        return (self.offset + np.arange(self.pmf.size, dtype=np.float64)) * self.step

    def delta_for_epsilon(self, epsilon: float) -> float:
        """delta(epsilon) = P(L = inf) + sum over L_j > epsilon of pmf_j (1 - e^(epsilon - L_j))."""
        import numpy as np

        eps = check_epsilon("epsilon", epsilon)
        losses = self.losses
        above = losses > eps
        gain = -np.expm1(eps - losses[above])
        return min(1.0, self.infinity_mass + float(np.sum(self.pmf[above] * gain)))

    def epsilon_for_delta(self, delta: float) -> float:
        """The smallest epsilon >= 0 with delta(epsilon) <= ``delta`` (``math.inf`` if none exists).

        delta(epsilon) is convex and decreasing; between consecutive grid losses L_{j+1} <= epsilon <= L_j
        it is inf_mass + A_j - e^epsilon B_j with A_j, B_j the sums of pmf and pmf e^(-L) over losses >=
        L_j, so the answer is found on the grid segment, in closed form (no bisection).
        """
        import numpy as np

        d = check_delta("delta", delta)
        budget = d - self.infinity_mass
        if budget < 0.0:
            return math.inf
        # Only positive losses matter for epsilon >= 0; descending, so exp(-L) <= 1 never overflows.
        positive = self.losses > 0.0
        losses = self.losses[positive][::-1]
        mass = self.pmf[positive][::-1]
        if losses.size == 0:
            return 0.0
        a = np.cumsum(mass)
        # ln B_j, B_j = sum of pmf e^(-L) over losses >= L_j, by a running log-sum-exp: e^(-L) underflows
        # for losses of several hundred (thousands of compositions), its logarithm does not.
        with np.errstate(divide="ignore"):
            log_b = np.logaddexp.accumulate(np.log(mass) - losses)
        lower_end = np.append(losses[1:], 0.0)  # segment j is [lower_end[j], losses[j]]
        at_lower_end = a - np.exp(lower_end + log_b)
        hit = np.flatnonzero(at_lower_end > budget)
        if hit.size == 0:
            return 0.0  # delta(0) <= budget
        j = int(hit[0])
        return max(0.0, min(float(losses[j]), math.log(float(a[j]) - budget) - float(log_b[j])))

    def compose(self, other: PrivacyLossDistribution) -> PrivacyLossDistribution:
        """The PLD of running both mechanisms (the convolution of the two PLDs; same ``step`` required)."""
        if not isinstance(other, PrivacyLossDistribution):
            raise InvalidParameterError("other", type(other).__name__, "a PrivacyLossDistribution")
        if other.step != self.step:
            raise InvalidParameterError(
                "other.step", other.step, f"the same loss grid as this PLD (step={self.step})"
            )
        pmf = _convolve(self.pmf, other.pmf)
        inf = 1.0 - (1.0 - self.infinity_mass) * (1.0 - other.infinity_mass)
        tail = max(self.tail_mass, other.tail_mass)
        return _truncated(self.step, self.offset + other.offset, pmf, inf, tail)

    def self_compose(self, k: int) -> PrivacyLossDistribution:
        """The PLD of k runs of this mechanism (binary powering: O(log k) convolutions, each truncated)."""
        n = check_count("k", k)
        base = self
        while not n & 1:  # the lowest set bit of k: result starts as base^(2^i)
            base = base.compose(base)
            n >>= 1
        result = base
        n >>= 1
        while n:
            base = base.compose(base)
            if n & 1:
                result = result.compose(base)
            n >>= 1
        return result


def _convolve(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Linear convolution by real FFT, negative rounding noise clipped to 0."""
    import numpy as np

    size = a.size + b.size - 1
    if size > _MAX_BUCKETS:
        raise InvalidParameterError(
            "step",
            "too fine",
            f"a coarser grid: the composition would span {size:,} buckets (max {_MAX_BUCKETS:,})",
        )
    if min(a.size, b.size) <= 64:  # direct is exact and as fast for short kernels
        out = np.convolve(a, b)
    else:
        n = 1 << (size - 1).bit_length()
        out = np.fft.irfft(np.fft.rfft(a, n) * np.fft.rfft(b, n), n)[:size]
    return np.clip(out, 0.0, None)


def _truncated(
    step: float, offset: int, pmf: npt.NDArray[np.float64], infinity_mass: float, tail_mass: float
) -> PrivacyLossDistribution:
    """Drop up to ``tail_mass / 2`` from each end: the lower tail onto the first kept bucket (losses only
    rise), the upper tail into the infinity mass (pessimistic)."""
    import numpy as np

    half = tail_mass / 2.0
    lo = 0
    hi = pmf.size
    if half > 0.0 and pmf.size > 1:
        low_cum = np.cumsum(pmf)
        lo = int(np.searchsorted(low_cum, half, side="right"))  # entries [0, lo) sum to <= half
        high_cum = np.cumsum(pmf[::-1])
        cut = int(np.searchsorted(high_cum, half, side="right"))
        hi = pmf.size - cut
        lo = min(lo, hi - 1)
    kept = pmf[lo:hi].copy()
    if lo > 0:
        kept[0] += float(pmf[:lo].sum())
    moved_up = float(pmf[hi:].sum())
    return PrivacyLossDistribution(
        step=step,
        offset=offset + lo,
        pmf=kept,
        infinity_mass=min(1.0, infinity_mass + moved_up),
        tail_mass=tail_mass,
    )


def _from_atoms(
    atoms: Iterable[tuple[float, float]], step: float, tail_mass: float
) -> PrivacyLossDistribution:
    """A discrete PLD from (loss, probability) pairs, each loss rounded up to the grid."""
    import numpy as np

    pairs = [(math.ceil(loss / step - 1e-9), p) for loss, p in atoms if p > 0.0]
    lo = min(i for i, _ in pairs)
    hi = max(i for i, _ in pairs)
    pmf = np.zeros(hi - lo + 1)
    for i, p in pairs:
        pmf[i - lo] += p
    return PrivacyLossDistribution(step=step, offset=lo, pmf=pmf, infinity_mass=0.0, tail_mass=tail_mass)


def _from_cdf(
    cdf: Callable[[Any], Any],
    sf: Callable[[Any], Any],
    lowest: float,
    highest: float,
    step: float,
    tail_mass: float,
) -> PrivacyLossDistribution:
    """A PLD whose loss has CDF ``cdf`` (and survival ``sf``, for accuracy in the upper tail) on
    [``lowest``, ``highest``]: bucket i gets P(L in ((i-1) step, i step]); below ``lowest`` goes to its
    bucket, above ``highest`` to infinity (both pessimistic)."""
    import numpy as np

    lo = math.ceil(lowest / step - 1e-9)
    hi = math.ceil(highest / step - 1e-9)
    if hi - lo + 1 > _MAX_BUCKETS:
        raise InvalidParameterError(
            "step",
            step,
            f"a coarser grid: this PLD would span {hi - lo + 1:,} buckets (max {_MAX_BUCKETS:,})",
        )
    edges = np.arange(lo - 1, hi + 1, dtype=np.float64) * step  # bucket i covers (edges[i-lo], edges[i-lo+1]]
    upper = edges[1:]
    lower = edges[:-1]
    # P(lower < L <= upper): the CDF difference below the median, the survival difference above it,
    # so that neither tail loses its small masses to cancellation against 1.
    below = cdf(upper) <= 0.5
    pmf = np.where(below, cdf(upper) - cdf(lower), sf(lower) - sf(upper))
    pmf[0] = cdf(upper[:1])[0]  # everything at or below the first bucket's top
    pmf = np.clip(pmf, 0.0, None)
    infinity = float(sf(upper[-1:])[0])  # above the last bucket
    return PrivacyLossDistribution(step=step, offset=lo, pmf=pmf, infinity_mass=infinity, tail_mass=tail_mass)


def randomized_response(
    epsilon: float, k: int | None = None, *, step: float = DEFAULT_STEP, tail_mass: float = DEFAULT_TAIL_MASS
) -> PrivacyLossDistribution:
    """The PLD of k-ary randomized response at ``epsilon``; ``k=None``: of any epsilon-DP mechanism.

    k-ary RR reports its input w.p. p = e^eps / (e^eps + k - 1) and each other value w.p. q = 1 / (e^eps +
    k - 1): between inputs x and x', output x has loss +eps (mass p), x' has -eps (mass q) and the k - 2
    others 0 (mass (k-2) q). k = 2 (or None) is the binary pair that dominates every eps-DP mechanism.
    """
    eps = check_epsilon("epsilon", epsilon)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 2):
        raise InvalidParameterError("k", k, "an integer >= 2 (the number of values), or None")
    size = 2 if k is None else k
    h = _check_step(step)
    tail = _check_tail(tail_mass)
    # p and q from e^-eps so that a large epsilon does not overflow.
    q = math.exp(-eps) / (1.0 + (size - 1) * math.exp(-eps))
    p = 1.0 - (size - 1) * q
    return _from_atoms([(eps, p), (-eps, q), (0.0, (size - 2) * q)], h, tail)


def approximate_dp(
    epsilon: float, delta: float, *, step: float = DEFAULT_STEP, tail_mass: float = DEFAULT_TAIL_MASS
) -> PrivacyLossDistribution:
    """The PLD of the pair that dominates every (epsilon, delta)-DP mechanism (Kairouz-Oh-Viswanath 2015):
    loss +inf with mass delta, and randomized response at epsilon with the remaining 1 - delta.

    delta = 0 gives :func:`randomized_response` (any epsilon-DP mechanism). Composing these is how a list
    of per-report guarantees, whatever their mechanisms, gets a tight (epsilon, delta) total.
    """
    d = check_delta("delta", delta)
    rr = randomized_response(epsilon, step=step, tail_mass=tail_mass)
    if d == 0.0:
        return rr
    return PrivacyLossDistribution(
        step=rr.step, offset=rr.offset, pmf=rr.pmf * (1.0 - d), infinity_mass=d, tail_mass=rr.tail_mass
    )


def compose_guarantees(
    terms: Iterable[tuple[float, float, int]],
    *,
    step: float = DEFAULT_STEP,
    tail_mass: float = DEFAULT_TAIL_MASS,
) -> PrivacyLossDistribution:
    """The PLD of ``k`` runs of each ``(epsilon, delta, k)`` term's dominating pair (:func:`approximate_dp`).

    Raises InvalidParameterError for no term with k >= 1.
    """
    parts: list[tuple[PrivacyLossDistribution, int]] = []
    for i, (eps, delta, k) in enumerate(terms):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidParameterError(f"terms[{i}].k", k, "an integer >= 0")
        if k:
            parts.append((approximate_dp(eps, delta, step=step, tail_mass=tail_mass), k))
    return compose(parts)


def laplace(
    scale: float,
    sensitivity: float = 1.0,
    *,
    step: float = DEFAULT_STEP,
    tail_mass: float = DEFAULT_TAIL_MASS,
) -> PrivacyLossDistribution:
    """The PLD of the Laplace mechanism with noise scale b and L1 sensitivity s (module docstring).

    Its loss lies in [-s/b, s/b], so nothing is truncated; s/b is its pure epsilon.
    """
    b, s, h, tail = _noise_arguments("scale", scale, sensitivity, step, tail_mass)
    top = s / b

    def cdf(t: Any) -> Any:
        import numpy as np

        t = np.asarray(t, dtype=np.float64)
        return np.where(
            t >= top, 1.0, np.where(t < -top, 0.0, 0.5 * np.exp(-(top - np.minimum(t, top)) / 2.0))
        )

    def sf(t: Any) -> Any:
        return 1.0 - cdf(t)

    return _from_cdf(cdf, sf, -top, top, h, tail)


def gaussian(
    sigma: float,
    sensitivity: float = 1.0,
    *,
    step: float = DEFAULT_STEP,
    tail_mass: float = DEFAULT_TAIL_MASS,
) -> PrivacyLossDistribution:
    """The PLD of the Gaussian mechanism with noise standard deviation sigma and L2 sensitivity s.

    L ~ N(mu, 2 mu), mu = s^2 / (2 sigma^2) (Balle-Wang 2018); truncated at ``tail_mass / 2`` on each side
    (the lower tail onto the lowest bucket, the upper tail to infinity).
    """
    sd, s, h, tail = _noise_arguments("sigma", sigma, sensitivity, step, tail_mass)
    mu = s * s / (2.0 * sd * sd)
    spread = math.sqrt(2.0 * mu)
    from statistics import NormalDist

    z = -NormalDist().inv_cdf(tail / 2.0) if tail > 0.0 else 40.0
    erfc = _vectorised_erfc()

    def cdf(t: Any) -> Any:
        import numpy as np

        return 0.5 * erfc(-(np.asarray(t, dtype=np.float64) - mu) / (spread * math.sqrt(2.0)))

    def sf(t: Any) -> Any:
        import numpy as np

        return 0.5 * erfc((np.asarray(t, dtype=np.float64) - mu) / (spread * math.sqrt(2.0)))

    return _from_cdf(cdf, sf, mu - z * spread, mu + z * spread, h, tail)


def _vectorised_erfc() -> Callable[[Any], Any]:
    """erfc on arrays: scipy's when installed (the aggregator has it), else ``math.erfc`` element-wise."""
    try:
        from scipy.special import erfc as scipy_erfc
    except ImportError:  # a device with numpy but not scipy: slower, same values
        import numpy as np

        frompy = np.frompyfunc(math.erfc, 1, 1)
        return lambda x: frompy(x).astype(np.float64)
    return scipy_erfc  # type: ignore[no-any-return]


def compose(
    plds: Iterable[PrivacyLossDistribution | tuple[PrivacyLossDistribution, int]],
) -> PrivacyLossDistribution:
    """The PLD of running every given mechanism (each, or ``(pld, count)`` for ``count`` runs of it)."""
    result: PrivacyLossDistribution | None = None
    for i, item in enumerate(plds):
        if isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[0], PrivacyLossDistribution):
                raise InvalidParameterError(f"plds[{i}]", item, "a PrivacyLossDistribution or (pld, count)")
            part = item[0].self_compose(check_count(f"plds[{i}].count", item[1]))
        elif isinstance(item, PrivacyLossDistribution):
            part = item
        else:
            raise InvalidParameterError(f"plds[{i}]", item, "a PrivacyLossDistribution or (pld, count)")
        result = part if result is None else result.compose(part)
    if result is None:
        raise InvalidParameterError("plds", [], "at least one privacy loss distribution")
    return result
