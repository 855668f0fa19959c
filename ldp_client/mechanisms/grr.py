"""Generalized (k-ary) randomized response over a declared domain of size d.

Algorithm (Kairouz, Bonawitz, Ramage, ICML 2016; "direct encoding" in Wang, Blocki, Li, Jha, USENIX
Security 2017), with the quantized threshold ``T = params.truth_threshold`` (p = T/2**32):

1. draw a uniform 32-bit word u; if ``u < T`` report the true index i;
2. otherwise draw o uniformly from ``[0, d-1)`` and report ``o + 1`` if ``o >= i`` else ``o`` -- a
   uniformly random index *other than* i.

So P(report = i | i) = p and P(report = j | i) = (1-p)/(d-1) for each j != i, exactly; epsilon =
ln(p (d-1) / (1-p)) as :class:`~ldp_client.params.GRRParams` reports. The per-report path takes u and
the word for o from one 8-byte read of the OS CSPRNG (bytes 0-3 and 4-7, little-endian), and draws o
with Lemire's unbiased method (:func:`ldp_client.randomness.uniform_below`), which needs another CSPRNG
read only on a rejection (probability below (d-1)/2**32). The batch path uses a seeded numpy Generator,
for simulation.

Importing this module does not import numpy.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.params import GRRParams

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = ["GRREncoder", "exact_channel"]

_U32_MASK = PROB_ONE - 1
_from_bytes = int.from_bytes
_uniform_below = _rnd.uniform_below


def exact_channel(params: GRRParams) -> tuple[tuple[Fraction, ...], ...]:
    """The exact output distribution the encoder implements: ``channel[i][j] = P(report = j | value = i)``.

    p = T/2**32 on the diagonal and (1-p)/(d-1) elsewhere. It has d**2 entries: meant for tests and small
    domains.
    """
    d = params.domain.size
    p = Fraction(params.truth_threshold, PROB_ONE)
    q = (1 - p) / (d - 1)
    return tuple(tuple(p if j == i else q for j in range(d)) for i in range(d))


class GRREncoder:
    """Encodes one domain value per report with generalized randomized response.

    Args:
        params: the mechanism parameters (domain and truth threshold are read once, here).

    Raises:
        InvalidParameterError: ``params`` is not a :class:`GRRParams`.
    """

    __slots__ = ("_index_of", "_others", "_size", "_truth", "params")

    def __init__(self, params: GRRParams) -> None:
        if not isinstance(params, GRRParams):
            raise InvalidParameterError("params", params, "a GRRParams")
        self.params = params
        # Cached as plain ints / a bound method: the per-report path is dominated by lookups otherwise.
        self._truth = params.truth_threshold
        self._size = params.domain.size
        self._others = params.domain.size - 1
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"GRREncoder(params={self.params!r})"

    def encode(self, value: str | int) -> int:
        """Randomize one value (a domain label, or an int for an integer domain) with the OS CSPRNG.

        Production path; not seedable by design.

        Returns:
            The reported index in ``[0, d)``.

        Raises:
            DomainError: ``value`` is not in the declared domain (it is never mapped to another value).
        """
        index = self._index_of(value)
        r = _from_bytes(_rnd._source(8), "little")
        if (r & _U32_MASK) < self._truth:
            return index
        other = _uniform_below(self._others, r >> 32)
        return other + 1 if other >= index else other

    def encode_index(self, index: int) -> int:
        """Like :meth:`encode`, for a value already given as its index in ``[0, d)``.

        Raises:
            DomainError: ``index`` is not an int in ``[0, d)``.
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        r = _from_bytes(_rnd._source(8), "little")
        if (r & _U32_MASK) < self._truth:
            return index
        other = _uniform_below(self._others, r >> 32)
        return other + 1 if other >= index else other

    def encode_batch(self, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.int64]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Same quantized probabilities as :meth:`encode`: per report a uint32 u (truthful iff ``u < T``);
        then ``o = rng.integers(0, d-1)`` (numpy's unbiased bounded integers) and ``o + (o >= i)`` as the
        "other" value. All u are drawn before all o, so a given seed always gives the same reports.

        Args:
            indices: a 1-D array-like of integers in ``[0, d)``.
            rng: an explicit :class:`numpy.random.Generator` (never the global numpy state).

        Returns:
            An int64 array of reported indices, shape ``(n,)``.

        Raises:
            DomainError: ``indices`` is not a 1-D integer array, or holds a value outside ``[0, d)`` (the
                message names the first offending value).
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        idx = _as_index_array(indices, self._size)
        n = idx.shape[0]
        u = rng.integers(0, PROB_ONE, size=(n,), dtype=np.uint32)
        out: NDArray[np.int64] = rng.integers(0, self._others, size=(n,), dtype=np.int64)
        out += np.greater_equal(out, idx)
        np.copyto(out, idx, where=np.less(u, np.uint32(self._truth)))
        return out


def _as_index_array(indices: ArrayLike, size: int) -> NDArray[np.int64]:
    """Validate a batch of indices (1-D, integer dtype, all in [0, size)) and return it as int64."""
    import numpy as np

    arr = np.asarray(indices)
    allowed = f"integers in [0, {size - 1}]"
    if arr.ndim != 1:
        raise DomainError("indices", f"<array of shape {arr.shape}>", f"a 1-D array of {allowed}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise DomainError("indices", f"<array of dtype {arr.dtype}>", allowed)
    # min/max first (two fast passes); locate the offender only on failure. Checking before the int64
    # conversion keeps huge uint64 values from wrapping into range.
    if arr.min() < 0 or arr.max() >= size:
        bad = arr[(arr < 0) | (arr >= size)][0]
        raise DomainError("indices", bad.item(), allowed)
    return arr.astype(np.int64, copy=False)
