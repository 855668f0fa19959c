"""Unary encoding: OUE and SUE (Wang, Blocki, Li, Jha, USENIX Security 2017, §4.3).

The value x in a domain of size d becomes a one-hot d-bit vector; the reported bit x is 1 with probability
p and every other bit is 1 with probability q, independently. With the quantized thresholds P, Q
(p = P/2**32, q = Q/2**32) the encoders implement exactly:

* per report (OS CSPRNG, one read of about d + 4 bytes): all d bits are drawn Bernoulli(q) by
  :class:`ldp_client._bytesample.ByteBernoulli` (about one random byte per bit, a lexicographic comparison
  of a uniform 32-bit word with Q evaluated lazily), then bit x is replaced by an independent coin
  ``u < P`` (u a uniform 32-bit word from the same read). Bits stay
  independent, bit x is Bernoulli(p), the others Bernoulli(q).
* batch (seeded numpy Generator, for simulation): the same law, sampled either densely (a uniform byte
  per position compared with Q >> 24, ties broken by a 24-bit word) or, when q d is small, sparsely:
  the number of noise ones of a row is Binomial(d, q) and their positions are a uniformly random subset
  of that size (drawn with replacement and topped up until the row has its count: a procedure
  equivariant under permutations of the positions, hence uniform), so no d uniforms per report.

Reports are ints (bit i = report bit i) per report and packed uint8 rows ``(n, ceil(d/8))`` in little
bit order in batches (``docs/rappor-encoding.md``; bit i is ``(row[i // 8] >> (i % 8)) & 1``).

Importing this module does not import numpy.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from ldp_client._bytesample import ByteBernoulli
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.params import OUEParams, SUEParams

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = ["UnaryEncoder", "exact_report_probability", "sparse_or_dense"]

# Expected noise ones per row below which the batch encoder samples positions sparsely (measured on the
# project machine: the sparse path costs about 25 ns per one, the dense path about 1 us per 1024 bits).
_SPARSE_MAX_ONES = 40.0


def exact_report_probability(params: OUEParams | SUEParams, value: int, report: int) -> Fraction:
    """P(report | value) exactly, from the quantized thresholds: prod over bits of p, 1-p, q or 1-q.

    For tests and small domains (the caller enumerates the 2**d reports).
    """
    d = params.domain.size
    p = Fraction(params.p_threshold, PROB_ONE)
    q = Fraction(params.q_threshold, PROB_ONE)
    out = Fraction(1)
    for i in range(d):
        bit = (report >> i) & 1
        rate = p if i == value else q
        out *= rate if bit else 1 - rate
    return out


def sparse_or_dense(params: OUEParams | SUEParams) -> str:
    """Which batch sampler :meth:`UnaryEncoder.encode_batch` uses: ``"sparse"`` or ``"dense"``."""
    return "sparse" if params.q_star * params.domain.size <= _SPARSE_MAX_ONES else "dense"


class UnaryEncoder:
    """Encodes one domain value per report with unary encoding (OUE or SUE parameters).

    Args:
        params: :class:`~ldp_client.params.OUEParams` or :class:`~ldp_client.params.SUEParams`.

    Raises:
        InvalidParameterError: ``params`` is neither.
    """

    __slots__ = ("_coin", "_index_of", "_noise", "_size", "params")

    def __init__(self, params: OUEParams | SUEParams) -> None:
        if not isinstance(params, OUEParams | SUEParams):
            raise InvalidParameterError("params", type(params).__name__, "OUEParams or SUEParams")
        self.params = params
        self._size = params.domain.size
        self._coin = params.p_threshold
        self._noise = ByteBernoulli(params.q_threshold, params.domain.size)
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"UnaryEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> int:
        """Randomize one value (a domain label, or an int for an integer domain) with the OS CSPRNG.

        Returns:
            The d report bits as an int (bit i = report bit i).

        Raises:
            DomainError: ``value`` is not in the declared domain.
        """
        return self._encode(self._index_of(value))

    def encode_index(self, index: int) -> int:
        """Like :meth:`encode`, for a value given as its index in ``[0, d)``.

        Raises:
            DomainError: ``index`` is not an int in ``[0, d)``.
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        return self._encode(index)

    def _encode(self, index: int) -> int:
        noise, word = self._noise.sample_with_word()  # one CSPRNG read for both
        coin = word < self._coin
        bit = 1 << index
        return (noise | bit) if coin else (noise & ~bit)

    def encode_batch(self, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.uint8]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Same law and quantized thresholds as :meth:`encode` (module docstring): the noise bits of a row
        are Bernoulli(Q/2**32), sampled sparsely when q d <= 40 (see :func:`sparse_or_dense`) and densely
        otherwise, then bit x of each row is an independent ``u < P`` coin.

        Args:
            indices: 1-D integers in ``[0, d)``.
            rng: an explicit :class:`numpy.random.Generator` (never the global numpy state).

        Returns:
            uint8 array ``(n, ceil(d/8))``, little bit order, padding bits 0.

        Raises:
            DomainError: not a 1-D integer array, or a value outside ``[0, d)``.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        from ldp_client.mechanisms import _batchbits

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        idx = _batchbits.as_index_array(indices, self._size)
        d = self._size
        if sparse_or_dense(self.params) == "sparse":
            rows = _batchbits.bernoulli_rows_sparse(self.params.q_threshold, idx.shape[0], d, rng)
        else:
            rows = _batchbits.bernoulli_rows_dense(self.params.q_threshold, idx.shape[0], d, rng)
        coins = rng.integers(0, PROB_ONE, size=idx.shape[0], dtype=np.uint32) < np.uint32(self._coin)
        _batchbits.set_bit(rows, idx, coins)
        return rows
