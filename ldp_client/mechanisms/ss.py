"""k-subset selection (Ye and Barg, IEEE T-IT 2018; Wang et al. 2016; Wang et al., USENIX Security 2017).

The report is a set Y of exactly k of the d domain values. With the quantized threshold T (p = T/2**32):

1. a uniform 32-bit word u decides whether Y holds the true value x (``u < T``);
2. the other k - 1 (if it does) or k (if not) members are a uniformly random subset of the d - 1 values
   other than x.

So P(Y | x) = p / C(d-1, k-1) if x is in Y and (1-p) / C(d-1, k) otherwise, exactly, and epsilon =
ln(p (d-k) / ((1-p) k)) as :class:`~ldp_client.params.SubsetSelectionParams` reports.

Per report (OS CSPRNG, one read of 4 + (d - 1) + 32 bytes) step 2 is
:func:`ldp_client._bytesample.subset_from_keys` over the d - 1 other positions (one key byte per
position, ties broken uniformly), whose bits are then spread around x. The
batch encoder (seeded numpy Generator, for simulation) builds each row's other members with
:func:`ldp_client.mechanisms._batchbits.adjust_to_counts`: from an empty row for k <= 32, else from
independent Bernoulli(k/(d-1)) bits, adding or removing uniformly random positions until the row has
exactly k - 1 or k of them (equivariant steps from an exchangeable start: a uniform subset).

Reports are ints with exactly k bits set (bit i = value i) per report and packed uint8 rows
``(n, ceil(d/8))`` in little bit order in batches.

Importing this module does not import numpy.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb
from typing import TYPE_CHECKING

from ldp_client import _bytesample
from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.params import SubsetSelectionParams

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = ["SubsetSelectionEncoder", "exact_report_probability"]

_from_bytes = int.from_bytes
# Subset sizes up to this are placed one position at a time from empty rows; above it the batch encoder
# starts from dense Bernoulli rows and corrects the counts (about sqrt(k) corrections per row).
_SPARSE_MAX_K = 32


def exact_report_probability(params: SubsetSelectionParams, value: int, report: int) -> Fraction:
    """P(report | value) exactly: p/C(d-1, k-1) if bit ``value`` is set, (1-p)/C(d-1, k) otherwise, and 0
    for a report without exactly k bits (for tests and small domains)."""
    d, k = params.domain.size, params.k
    if report.bit_count() != k or report >> d:
        return Fraction(0)
    p = Fraction(params.truth_threshold, PROB_ONE)
    if (report >> value) & 1:
        return p / comb(d - 1, k - 1)
    return (1 - p) / comb(d - 1, k)


class SubsetSelectionEncoder:
    """Encodes one domain value per report with k-subset selection.

    Raises:
        InvalidParameterError: ``params`` is not a :class:`SubsetSelectionParams`.
    """

    __slots__ = ("_index_of", "_k", "_size", "_truth", "params")

    def __init__(self, params: SubsetSelectionParams) -> None:
        if not isinstance(params, SubsetSelectionParams):
            raise InvalidParameterError("params", type(params).__name__, "a SubsetSelectionParams")
        self.params = params
        self._size = params.domain.size
        self._k = params.k
        self._truth = params.truth_threshold
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"SubsetSelectionEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> int:
        """Randomize one value (a label, or an int for an integer domain) with the OS CSPRNG.

        Returns:
            The subset as an int with exactly k bits set (bit i = value i).

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
        m = self._size - 1
        # One CSPRNG read: the coin word, m key bytes and spare tie-break words.
        buf = _rnd._source(4 + m + _bytesample.SUBSET_SPARE)
        holds = _from_bytes(buf[:4], "little") < self._truth
        size = self._k - 1 if holds else self._k
        if size == 0:
            others = 0
        elif size == m:
            others = (1 << m) - 1
        else:
            others = _bytesample.subset_from_keys(buf[4 : 4 + m], size, buf[4 + m :])
        # Positions 0..d-2 of the others are the values other than x, in order: spread them around x.
        low = others & ((1 << index) - 1)
        out = low | ((others >> index) << (index + 1))
        return out | (1 << index) if holds else out

    def encode_batch(self, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.uint8]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Per row: ``u < T`` (u a uniform uint32) decides whether x is in the subset; the k - 1 or k other
        members are a uniform subset of the other d - 1 values (module docstring).

        Returns:
            uint8 array ``(n, ceil(d/8))`` with exactly k bits set per row, little bit order.

        Raises:
            DomainError: not a 1-D integer array, or a value outside ``[0, d)``.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        from ldp_client.mechanisms import _batchbits

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        idx = _batchbits.as_index_array(indices, self._size)
        n, d, k = idx.shape[0], self._size, self._k
        holds = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(self._truth)
        others = np.where(holds, k - 1, k).astype(np.int64)
        if k <= _SPARSE_MAX_K:
            rows = np.zeros((n, (d + 7) // 8), dtype=np.uint8)
        else:
            # Start from independent Bernoulli(k/(d-1)) bits (an exchangeable law, about the right count),
            # clear bit x, then add or remove uniformly random positions to reach k' exactly.
            start = min(PROB_ONE - 1, round(k / (d - 1) * PROB_ONE))
            rows = _batchbits.bernoulli_rows_dense(start, n, d, rng)
            _batchbits.set_bit(rows, idx, np.zeros(n, dtype=bool))
        _batchbits.adjust_to_counts(rows, others, d, rng, skip=idx)
        _batchbits.set_bit(rows, idx, holds)
        return rows
