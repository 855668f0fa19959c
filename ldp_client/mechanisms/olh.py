"""Local hashing: OLH and BLH (Wang, Blocki, Li, Jha, USENIX Security 2017, §4.4).

Hash family (chosen so that the server can evaluate it for all reports and all values at once with
numpy). A report carries a fresh seed (a, b) of two uniform 64-bit words; the 32-bit hash of a value
index x < 2**24 is the multiply-add-shift

    h_{a,b}(x) = ((a x + b) mod 2**64) >> 32,

which is *strongly universal* (pairwise independent and uniform) from w-bit keys to l-bit values whenever
64 >= w + l - 1 (Dietzfelbinger 1996, "Universal hashing and k-wise independent random variables via
integer arithmetic without primes"; Thorup 2015, "High Speed Hashing for Integers and Strings", §3.3):
here w <= 24 and l = 32. The bucket of x is floor(h(x) g / 2**32) in [0, g) ("multiply-shift" range
reduction), whose buckets hold floor(2**32/g) or floor(2**32/g) + 1 hash values. So for x != v the
buckets of x and v are independent, each with that exact law, and they coincide with probability
S = sum_y P(y)^2 = 1/g + O(g/2**64) (:func:`ldp_client._oracle_math.hash_collision_mass`). The
estimator's q* uses this exact S, not the idealised 1/g (they agree to about 1e-19 relative).

Client, with the quantized threshold T (p = T/2**32): compute the bucket y0 of x, then report y0 if a
uniform 32-bit word u < T, else a uniformly random other bucket (Lemire's unbiased method). Report =
(a, b, y). Given the seed, P(y | x) = p or (1-p)/(g-1), so epsilon = ln(p (g-1)/(1-p)); the seed is
independent of x.

Server: report (a, b, y) supports v iff bucket(h_{a,b}(v)) == y. Writing [lo, lo + w) for the hash values
of bucket y, that is ((a v + b - lo 2**32) mod 2**64) < w 2**32: one multiply, one add and one compare
per (report, value) pair in uint64 (:func:`support_test_constants`).

Per report: one 24-byte ``os.urandom`` read (a, b, u, and a word for the other bucket; Lemire rejection
draws more only with probability < g/2**32). Batch (seeded numpy Generator, simulation only): the same
construction vectorised. Importing this module does not import numpy.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.params import OLHParams

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "LocalHashEncoder",
    "LocalHashReport",
    "bucket_of",
    "exact_report_probability",
    "hash_buckets",
    "support_test_constants",
]

_M64 = (1 << 64) - 1
_M32 = PROB_ONE - 1
_from_bytes = int.from_bytes
_uniform_below = _rnd.uniform_below


class LocalHashReport(NamedTuple):
    """One local-hashing report: the hash seed (a, b), two 64-bit words, and the bucket in [0, g)."""

    a: int
    b: int
    bucket: int


def bucket_of(a: int, b: int, x: int, g: int) -> int:
    """floor(h_{a,b}(x) g / 2**32) with h_{a,b}(x) = ((a x + b) mod 2**64) >> 32 (module docstring)."""
    return (((((a * x + b) & _M64) >> 32) * g) >> 32) & _M32


def hash_buckets(
    a: NDArray[np.uint64], b: NDArray[np.uint64], values: NDArray[np.uint64], g: int
) -> NDArray[np.uint64]:
    """numpy version of :func:`bucket_of`, broadcasting ``a``, ``b`` against ``values`` (uint64 arrays,
    arithmetic modulo 2**64 as numpy's unsigned arrays wrap)."""
    import numpy as np

    a64 = np.atleast_1d(np.asarray(a, dtype=np.uint64))
    b64 = np.atleast_1d(np.asarray(b, dtype=np.uint64))
    v64 = np.atleast_1d(np.asarray(values, dtype=np.uint64))
    h = (a64 * v64 + b64) >> np.uint64(32)
    out: NDArray[np.uint64] = (h * np.uint64(g)) >> np.uint64(32)
    return out


def support_test_constants(
    b: NDArray[np.uint64], buckets: NDArray[np.integer], g: int
) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """(b', W) per report such that report (a, b, y) supports v iff ``(a v + b') mod 2**64 < W``.

    With bucket y = [lo, lo + w) of hash values: b' = (b - lo 2**32) mod 2**64 and W = w 2**32. The top 32
    bits of a v + b' are (h(v) - lo) mod 2**32 (subtracting a multiple of 2**32 leaves the low bits and
    their carries alone), which is < w exactly when lo <= h(v) < lo + w.
    """
    import numpy as np

    y = np.asarray(buckets, dtype=np.int64)
    # Bucket bounds lo_y = ceil(y 2**32 / g) for every bucket, in exact int64 arithmetic (y 2**32 < 2**52
    # for g <= 2**20), then gathered per report.
    edges = -((-(np.arange(g + 1, dtype=np.int64) << 32)) // g)
    lo_table = edges[:-1].astype(np.uint64)
    width_table = np.diff(edges).astype(np.uint64)
    b_prime = np.asarray(b, dtype=np.uint64) - (lo_table[y] << np.uint64(32))
    limit = width_table[y] << np.uint64(32)
    return b_prime, limit


def exact_report_probability(params: OLHParams, value: int, a: int, b: int, bucket: int) -> Fraction:
    """P(bucket | value, seed (a, b)) exactly: p if ``bucket`` is the value's bucket, else (1-p)/(g-1).

    The seed itself is uniform and independent of the value (for tests).
    """
    p = Fraction(params.truth_threshold, PROB_ONE)
    if bucket_of(a, b, value, params.g) == bucket:
        return p
    return (1 - p) / (params.g - 1)


class LocalHashEncoder:
    """Encodes one domain value per report with local hashing (OLH or BLH parameters).

    Raises:
        InvalidParameterError: ``params`` is not an :class:`OLHParams` (BLHParams included).
    """

    __slots__ = ("_g", "_index_of", "_others", "_size", "_truth", "params")

    def __init__(self, params: OLHParams) -> None:
        if not isinstance(params, OLHParams):
            raise InvalidParameterError("params", type(params).__name__, "OLHParams or BLHParams")
        self.params = params
        self._size = params.domain.size
        self._g = params.g
        self._others = params.g - 1
        self._truth = params.truth_threshold
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"LocalHashEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> LocalHashReport:
        """Randomize one value (a label, or an int for an integer domain) with the OS CSPRNG.

        Raises:
            DomainError: ``value`` is not in the declared domain.
        """
        return self._encode(self._index_of(value))

    def encode_index(self, index: int) -> LocalHashReport:
        """Like :meth:`encode`, for a value given as its index in ``[0, d)``."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        return self._encode(index)

    def _encode(self, index: int) -> LocalHashReport:
        r = _from_bytes(_rnd._source(24), "little")
        a = r & _M64
        b = (r >> 64) & _M64
        g = self._g
        own = (((((a * index + b) & _M64) >> 32) * g) >> 32) & _M32
        if ((r >> 128) & _M32) < self._truth:
            return LocalHashReport(a, b, own)
        other = _uniform_below(self._others, r >> 160)
        return LocalHashReport(a, b, other + 1 if other >= own else other)

    def encode_batch(
        self, indices: ArrayLike, rng: np.random.Generator
    ) -> tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[np.uint32]]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Per row: a, b uniform 64-bit words, u a uniform uint32 (truthful iff u < T), and an "other" bucket
        ``o + (o >= own)`` with o uniform in [0, g-1) -- the per-report law, vectorised.

        Returns:
            ``(a uint64 (n,), b uint64 (n,), buckets uint32 (n,))``.

        Raises:
            DomainError: not a 1-D integer array, or a value outside ``[0, d)``.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        from ldp_client.mechanisms import _batchbits

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        idx = _batchbits.as_index_array(indices, self._size)
        n = idx.shape[0]
        a = _batchbits.raw_words(rng, n).astype(np.uint64)
        b = _batchbits.raw_words(rng, n).astype(np.uint64)
        own = hash_buckets(a, b, idx.astype(np.uint64), self._g).astype(np.int64)
        truthful = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(self._truth)
        other: NDArray[np.int64] = np.asarray(rng.integers(0, self._others, size=n, dtype=np.int64))
        other = other + (other >= own)
        buckets = np.where(truthful, own, other).astype(np.uint32)
        return a, b, buckets
