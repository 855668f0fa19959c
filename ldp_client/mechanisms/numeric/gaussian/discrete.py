"""The discrete Gaussian on the integers: its exact sampler, its privacy profile and its variance.

``N_Z(0, sigma^2)`` puts mass ``exp(-y^2 / (2 sigma^2)) / N`` on each integer y (N the sum over all
integers). Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020
(CKS below), show that adding it to an integer-valued function of L2 sensitivity Delta gives the same kind
of guarantee as the continuous Gaussian, and that it can be sampled **exactly** with integer arithmetic.

**Sampler** (:func:`sample_discrete_gaussian`; CKS Algorithms 1-3), for sigma^2 = a/b rational:

1. Bernoulli(exp(-gamma)), gamma = p/q in [0, 1]: k = 1; while Bernoulli(gamma/k): k += 1; return k odd.
   For gamma > 1: floor(gamma) coins Bernoulli(exp(-1)) must all succeed, then Bernoulli(exp(-frac)).
2. Discrete Laplace of integer scale t (P(y) proportional to exp(-|y|/t)): U uniform in [0, t), keep it
   with Bernoulli(exp(-U/t)); V = number of successes of Bernoulli(exp(-1)) before a failure; X = U + tV;
   a uniform sign; reject (sign -, X = 0); return +-X.
3. Discrete Gaussian: t = floor(sigma) + 1; Y discrete Laplace(t); accept with
   Bernoulli(exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))) = Bernoulli(exp(-(|Y| b t - a)^2 / (2 a b t^2))).

Every coin is ``below(q) < p`` for a uniform integer below q drawn by rejection from uniform bytes, so the
output follows N_Z(0, a/b) exactly, whatever the float arithmetic. The batch sampler
(:func:`batch_discrete_gaussian`, simulation only, seeded numpy Generator) runs the same two-stage
algorithm vectorised (a discrete Laplace as the difference of two geometric variables, the acceptance
coin as ``u < exp(-gamma)`` in float64): the same distribution up to float64 rounding of each
acceptance probability (relative 1e-16).

**Privacy profile** (:func:`delta_profile`, :func:`epsilon_for`). For an integer shift Delta, the
hockey-stick divergence of N_Z(0, sigma^2) and N_Z(Delta, sigma^2) at e^epsilon is the sum over the integer
support of ``max(0, p(y) - e^epsilon p(y - Delta))``; the privacy loss ``ln p(y)/p(y - Delta) =
(Delta^2 - 2 y Delta) / (2 sigma^2)`` exceeds epsilon exactly for ``y < Delta/2 - epsilon sigma^2/Delta``,
so by symmetry the sum is (CKS Theorem 7)

    delta(Delta, eps) = P[Y > eps sigma^2/Delta - Delta/2] - e^eps P[Y > eps sigma^2/Delta + Delta/2].

The tails P[Y >= m] are summed numerically from the pmf over y in [0, M], M = ceil(38.6 sigma) + 2 (the
mass beyond is below e^-745, under the smallest float64), from the far end inward so that every tail keeps
its relative precision. The test suite checks the formula against the direct sum at 60 digits.

Importing this module does not import numpy (the functions that need it import it when called).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING

from ldp_client import randomness as _rnd
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.gaussian.calibration import smallest_meeting

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "MAX_SIGMA",
    "MIN_SIGMA",
    "SIGMA_BITS",
    "CsprngWords",
    "DiscreteGaussianTails",
    "auto_grid",
    "batch_discrete_gaussian",
    "clamped_distribution",
    "delta_profile",
    "epsilon_for",
    "sample_discrete_gaussian",
    "sigma_quantum",
    "tails",
]

SIGMA_BITS = 32
"""sigma is a multiple of 2**-32: sigma = q / 2**32, sigma^2 = q^2 / 2**64 (a rational for the sampler)."""
_TAIL_SIGMAS = 38.6  # exp(-38.6^2 / 2) < 2.2e-324: the pmf beyond M = 38.6 sigma is below every float64
MAX_EPSILON = 500.0
"""The largest epsilon the profile is searched over (e^epsilon stays finite in float64)."""

MIN_SIGMA = 0.5
MAX_SIGMA = 65536.0
"""sigma in grid steps: the privacy computation sums about 77 sigma terms, and codes stay far below 2**32."""
_AUTO_SIGMA = 8192.0  # from_epsilon's default grids keep sigma below this many grid steps


def sigma_quantum(sigma: object) -> int:
    """q = ceil(sigma 2**32): sigma (grid steps, in [0.5, 65536]) rounded up, toward privacy, to a multiple
    of 2**-32; InvalidParameterError naming ``sigma`` otherwise."""
    allowed = f"a number of grid steps in [{MIN_SIGMA}, {MAX_SIGMA:g}] (the noise's scale)"
    if isinstance(sigma, bool) or not isinstance(sigma, int | float):
        raise InvalidParameterError("sigma", sigma, allowed)
    s = float(sigma)
    if not (math.isfinite(s) and MIN_SIGMA <= s <= MAX_SIGMA):
        raise InvalidParameterError("sigma", sigma, allowed)
    return math.ceil(s * (1 << SIGMA_BITS))  # exact: a power-of-two scaling of a float


def auto_grid(sigma_per_unit: float, largest: int) -> int:
    """The default grid: ``largest`` steps, or the largest power of two (>= 2) keeping sigma within 8192
    steps (the rounding's variance, at most 1/4 step^2, stays negligible beside sigma^2)."""
    return max(2, min(largest, 1 << max(1, int(_AUTO_SIGMA / sigma_per_unit).bit_length() - 1)))


Below = Callable[[int], int]
"""A source of exactly uniform integers in [0, n)."""


# ------------------------------------------------------------------------------------------- sampler


class CsprngWords:
    """Exactly uniform integers below any n from the OS CSPRNG (one report's randomness).

    ``below(n)`` takes the next ``bits(n-1)`` bits of a pool of CSPRNG bits and rejects values >= n (fewer
    than 2 tries on average): exactly uniform. The pool is refilled 512 bits at a time from
    :mod:`ldp_client.randomness`; an object serves one report and is then dropped.
    """

    __slots__ = ("_bits", "_pool")

    def __init__(self) -> None:
        self._pool = 0
        self._bits = 0

    def below(self, n: int) -> int:
        if n <= 1:
            return 0
        bits = (n - 1).bit_length()
        mask = (1 << bits) - 1
        while True:
            while self._bits < bits:
                nbytes = max(64, (bits + 7) >> 3)
                self._pool |= int.from_bytes(_rnd._source(nbytes), "little") << self._bits
                self._bits += 8 * nbytes
            w = self._pool & mask
            self._pool >>= bits
            self._bits -= bits
            if w < n:
                return w


def _bernoulli_exp_le1(p: int, q: int, below: Below) -> bool:
    """Bernoulli(exp(-p/q)) for 0 <= p <= q (CKS Algorithm 1): count Bernoulli(gamma/k) successes."""
    k = 1
    while below(q * k) < p:  # Bernoulli(p / (q k))
        k += 1
    return k % 2 == 1


def _bernoulli_exp(p: int, q: int, below: Below) -> bool:
    """Bernoulli(exp(-p/q)) for any p >= 0, q >= 1 (CKS Algorithm 1, gamma > 1 by repeated exp(-1))."""
    while p > q:
        if not _bernoulli_exp_le1(1, 1, below):
            return False
        p -= q
    return _bernoulli_exp_le1(p, q, below)


def _discrete_laplace(t: int, below: Below) -> int:
    """P(y) proportional to exp(-|y|/t) over the integers (CKS Algorithm 2 with s = 1)."""
    while True:
        u = below(t)
        if not _bernoulli_exp(u, t, below):
            continue
        v = 0
        while _bernoulli_exp_le1(1, 1, below):
            v += 1
        x = u + t * v
        negative = below(2) == 1
        if negative and x == 0:
            continue  # +0 and -0 would both map to 0: reject one of them
        return -x if negative else x


def sample_discrete_gaussian(sigma_q: int, below: Below) -> int:
    """One exact draw of N_Z(0, sigma^2), sigma = ``sigma_q`` / 2**32 (CKS Algorithm 3).

    ``below(n)`` must return exactly uniform integers in [0, n) (:class:`CsprngWords` on a device).
    """
    a, b = sigma_q * sigma_q, 1 << (2 * SIGMA_BITS)  # sigma^2 = a / b
    t = math.isqrt(a // b) + 1  # floor(sigma) + 1
    den = 2 * a * b * t * t
    while True:
        y = _discrete_laplace(t, below)
        # gamma = (|y| - sigma^2/t)^2 / (2 sigma^2) = (|y| b t - a)^2 / (2 a b t^2)
        diff = abs(y) * b * t - a
        if _bernoulli_exp(diff * diff, den, below):
            return y


def batch_discrete_gaussian(sigma: float, n: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """``n`` draws of N_Z(0, sigma^2) with a seeded Generator, vectorised. For simulation only.

    CKS Algorithm 3 over arrays: a discrete Laplace of scale t = floor(sigma) + 1 as G1 - G2 with G_i
    geometric (failures before a success of probability 1 - e^(-1/t)), accepted with probability
    exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)) compared in float64; the rejected are redrawn (about 1/0.7
    rounds each).
    """
    import numpy as np

    t = math.floor(sigma) + 1
    s2 = sigma * sigma
    p = -math.expm1(-1.0 / t)
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        m = todo.size
        y = rng.geometric(p, m).astype(np.int64) - rng.geometric(p, m).astype(np.int64)
        gamma = (np.abs(y) - s2 / t) ** 2 / (2.0 * s2)
        ok = rng.random(m) < np.exp(-gamma)
        out[todo[ok]] = y[ok]
        todo = todo[~ok]
    return out


# ------------------------------------------------------------------------------------ privacy profile


class DiscreteGaussianTails:
    """The tails of N_Z(0, sigma^2), sigma = q / 2**32: ``upper[m] = P[Y >= m]`` for m = 0..M+1 (0 at M+1),
    and the variance ``E[Y^2]``."""

    __slots__ = ("sigma", "sigma2", "upper", "variance")

    def __init__(self, sigma_q: int) -> None:
        import numpy as np

        self.sigma = sigma_q / float(1 << SIGMA_BITS)
        self.sigma2 = self.sigma * self.sigma
        m = math.ceil(_TAIL_SIGMAS * self.sigma) + 2
        y = np.arange(m + 1, dtype=np.float64)
        w = np.exp(-(y * y) / (2.0 * self.sigma2))
        total = float(w[0] + 2.0 * np.sum(w[1:][::-1]))  # numpy's pairwise sum: ~1e-16 relative
        pmf = w / total
        upper = np.zeros(m + 2, dtype=np.float64)
        upper[: m + 1] = np.cumsum(pmf[::-1])[::-1]  # smallest terms first: each tail keeps its precision
        self.upper: NDArray[np.float64] = upper
        self.variance = float(2.0 * np.sum((y * y * pmf)[::-1]))

    def at_least(self, k: NDArray[np.int64]) -> NDArray[np.float64]:
        """P[Y >= k] for integer arrays k (by symmetry for k <= 0: 1 - P[Y >= 1 - k])."""
        import numpy as np

        last = self.upper.shape[0] - 1
        pos = self.upper[np.minimum(np.maximum(k, 0), last)]
        neg = 1.0 - self.upper[np.minimum(np.maximum(1 - k, 0), last)]
        return np.asarray(np.where(k >= 0, pos, neg), dtype=np.float64)


@functools.lru_cache(maxsize=4)  # up to 2.5M floats each
def tails(sigma_q: int) -> DiscreteGaussianTails:
    """:class:`DiscreteGaussianTails` of sigma = ``sigma_q`` / 2**32 (cached)."""
    return DiscreteGaussianTails(sigma_q)


def delta_profile(sigma_q: int, max_shift: int, epsilon: float) -> NDArray[np.float64]:
    """delta(Delta, epsilon) of N_Z(0, sigma^2) for Delta = 1..``max_shift`` (CKS Theorem 7; see the module
    docstring). Index Delta - 1."""
    import numpy as np

    tl = tails(sigma_q)
    shifts = np.arange(1, max_shift + 1, dtype=np.float64)
    centre = epsilon * tl.sigma2 / shifts
    # P[Y > x] = P[Y >= floor(x) + 1] for real x.
    first = tl.at_least(np.floor(centre - shifts / 2.0).astype(np.int64) + 1)
    second = tl.at_least(np.floor(centre + shifts / 2.0).astype(np.int64) + 1)
    scaled = np.where(second > 0.0, math.exp(epsilon) * second, 0.0)
    return np.asarray(np.maximum(first - scaled, 0.0))


def max_delta(sigma_q: int, max_shift: int, epsilon: float) -> float:
    """The largest delta(Delta, epsilon) over shifts 1..``max_shift``."""
    return float(delta_profile(sigma_q, max_shift, epsilon).max())


@functools.lru_cache(maxsize=256)
def epsilon_for(sigma_q: int, max_shift: int, delta: float) -> float | None:
    """The smallest epsilon >= 0 with ``max_delta(sigma_q, max_shift, epsilon) <= delta`` (bisection to
    one ulp, the upper end returned: rounded toward privacy), or None when even epsilon = 500 does not
    meet delta (too little noise for the shift)."""
    if max_delta(sigma_q, max_shift, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while max_delta(sigma_q, max_shift, hi) > delta:
        if hi >= MAX_EPSILON:
            return None
        lo, hi = hi, min(hi * 2.0, MAX_EPSILON)
    return smallest_meeting(lambda eps: max_delta(sigma_q, max_shift, eps) <= delta, lo, hi)


def clamped_distribution(sigma: float, position: float, low: int, high: int) -> dict[int, Fraction]:
    """P(code) for code = clamp(i + Y, low, high) - low, i the encoders' 64-bit randomized rounding of
    ``position`` and Y ~ N_Z(0, sigma^2): every code in [0, high - low], for tests and small parameters.

    The discrete Gaussian's masses are irrational: each is the float64 ``exp(-z^2 / (2 sigma^2))`` taken
    as an exact rational and normalised exactly over the integers (the terms beyond 38.6 sigma are below
    every float64), so the distribution sums to 1 exactly and each mass is within about 1e-15 (relative)
    of the true one; the clamped end codes carry their whole tails. The rounding coin's probabilities are
    exact (``floor(frac 2**64) / 2**64``).
    """
    base = math.floor(position)
    up = Fraction(int((position - base) * float(1 << 64)), 1 << 64)
    far = math.ceil(_TAIL_SIGMAS * sigma) + abs(base) + abs(low) + abs(high) + 2
    s2 = sigma * sigma
    weight = [Fraction(math.exp(-(z * z) / (2.0 * s2))) for z in range(far + 1)]
    total = weight[0] + 2 * sum(weight[1:])
    dist: dict[int, Fraction] = {}
    for i, w in ((base, 1 - up), (base + 1, up)):
        if w == 0:
            continue
        for z in range(-far, far + 1):
            code = min(max(i + z, low), high) - low
            dist[code] = dist.get(code, Fraction(0)) + w * weight[abs(z)] / total
    return dist
