"""Hadamard response (Acharya, Sun, Zhang, "Hadamard Response: Estimating Distributions Privately,
Efficiently, and with Little Communication", AISTATS 2019).

K = 2**ceil(log2(d + 1)). Value x owns C_x, the K/2 columns j where row r = x + 1 of the Sylvester-Hadamard
matrix H[r, j] = (-1)**popcount(r & j) is +1. The report is j in [0, K): uniform in C_x with probability
p = T/2**32, uniform in its complement otherwise, so P(j | x) = 2p/K on C_x and 2(1-p)/K off it, exactly.

Sampling, exact and O(1): draw j uniform in [0, K); if the parity of popcount(r & j) is not the wanted
one (even for C_x, chosen when a uniform 32-bit word u < T; odd otherwise), flip bit lowbit(r) of j.
Flipping a bit of r changes the parity, so this is a bijection between C_x and its complement, and j is
uniform on the wanted side.

Per report: one 8-byte ``os.urandom`` read (u in bytes 0-3, j from bytes 4-7; K <= 2**25). Batch (seeded
numpy Generator, simulation only): the same, vectorised. Reports are ints in [0, K) (batches: int64).
Importing this module does not import numpy.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.params import HadamardParams

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = ["HadamardEncoder", "exact_report_probability", "in_support"]

_M32 = PROB_ONE - 1
_from_bytes = int.from_bytes


def in_support(value: int, report: int) -> bool:
    """Whether report j is in C_value, i.e. H[value + 1, j] = +1 (popcount((value + 1) & j) even)."""
    return ((value + 1) & report).bit_count() % 2 == 0


def exact_report_probability(params: HadamardParams, value: int, report: int) -> Fraction:
    """P(report | value) exactly: 2p/K on C_value, 2(1-p)/K off it (for tests)."""
    k = params.order
    p = Fraction(params.truth_threshold, PROB_ONE)
    return (2 * p if in_support(value, report) else 2 * (1 - p)) / k


class HadamardEncoder:
    """Encodes one domain value per report with Hadamard response.

    Raises:
        InvalidParameterError: ``params`` is not a :class:`HadamardParams`.
    """

    __slots__ = ("_index_of", "_mask", "_size", "_truth", "params")

    def __init__(self, params: HadamardParams) -> None:
        if not isinstance(params, HadamardParams):
            raise InvalidParameterError("params", type(params).__name__, "a HadamardParams")
        self.params = params
        self._size = params.domain.size
        self._mask = params.order - 1
        self._truth = params.truth_threshold
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"HadamardEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> int:
        """Randomize one value with the OS CSPRNG; returns the reported index j in [0, K).

        Raises:
            DomainError: ``value`` is not in the declared domain.
        """
        return self._encode(self._index_of(value))

    def encode_index(self, index: int) -> int:
        """Like :meth:`encode`, for a value given as its index in ``[0, d)``."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        return self._encode(index)

    def _encode(self, index: int) -> int:
        r = _from_bytes(_rnd._source(8), "little")
        row = index + 1
        j = (r >> 32) & self._mask
        odd = (row & j).bit_count() & 1
        # Wanted parity: even (j in C_x) iff u < T. Flip the lowest set bit of row in j on a mismatch.
        if odd == ((r & _M32) < self._truth):
            j ^= row & -row
        return j

    def encode_batch(self, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.int64]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Returns:
            int64 array of reported indices in [0, K), shape (n,).

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
        inside = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(self._truth)
        j = (_batchbits.raw_words(rng, n) & np.uint64(self._mask)).astype(np.int64)
        row = idx + 1
        odd = np.bitwise_count(row & j) & 1
        flip = odd.astype(bool) == inside
        j ^= np.where(flip, row & -row, 0)
        return j
