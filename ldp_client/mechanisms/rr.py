"""Binary randomized response as a two-coin survey (Warner, JASA 1965).

Algorithm, with the quantized thresholds ``A = params.truth_threshold`` and ``B = params.yes_threshold``
(probabilities a = A/2**32 and b = B/2**32):

1. draw a uniform 32-bit word u; if ``u < A`` report the true value;
2. otherwise draw a second uniform 32-bit word v and report "yes" (True) iff ``v < B``.

So P(yes | yes) = a + (1-a) b and P(yes | no) = (1-a) b, exactly, and the epsilon reported by
:class:`~ldp_client.params.BinaryRRParams` is the one implemented. The per-report path takes u and v
from one 8-byte read of the OS CSPRNG (bytes 0-3 and 4-7, little-endian; see
:mod:`ldp_client.randomness`); the batch path takes them from a seeded numpy Generator, for simulation.

Importing this module does not import numpy.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.params import BinaryRRParams

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = ["BinaryRREncoder", "exact_channel"]

_U32_MASK = PROB_ONE - 1
_from_bytes = int.from_bytes


def exact_channel(params: BinaryRRParams) -> tuple[tuple[Fraction, Fraction], tuple[Fraction, Fraction]]:
    """The exact output distribution the encoder implements: ``channel[x][y] = P(report = y | value = x)``.

    Rows and columns are indexed by ``int(False) = 0`` and ``int(True) = 1``. With a = A/2**32 and
    b = B/2**32 (the quantized thresholds): P(1|1) = a + (1-a) b, P(1|0) = (1-a) b.
    """
    a = Fraction(params.truth_threshold, PROB_ONE)
    b = Fraction(params.yes_threshold, PROB_ONE)
    yes_if_no = (1 - a) * b
    yes_if_yes = a + yes_if_no
    return ((1 - yes_if_no, yes_if_no), (1 - yes_if_yes, yes_if_yes))


class BinaryRREncoder:
    """Encodes one boolean per report with two-coin randomized response.

    Args:
        params: the mechanism parameters (thresholds are taken from them once, here).

    Raises:
        InvalidParameterError: ``params`` is not a :class:`BinaryRRParams`.
    """

    __slots__ = ("_truth", "_yes", "params")

    def __init__(self, params: BinaryRRParams) -> None:
        if not isinstance(params, BinaryRRParams):
            raise InvalidParameterError("params", params, "a BinaryRRParams")
        self.params = params
        # Cached as plain ints: attribute lookups on the frozen dataclass cost more than the comparison.
        self._truth = params.truth_threshold
        self._yes = params.yes_threshold

    def __repr__(self) -> str:
        return f"BinaryRREncoder(params={self.params!r})"

    def encode(self, value: bool) -> bool:
        """Randomize one boolean with the OS CSPRNG (production path; not seedable by design).

        Raises:
            DomainError: ``value`` is not a ``bool`` (ints, numpy bools and strings are rejected rather
                than guessed at).
        """
        # bool cannot be subclassed, so an identity check on the type is exact (and fast).
        if type(value) is not bool:
            raise DomainError("value", value, "a bool (True or False)")
        r = _from_bytes(_rnd._source(8), "little")
        if (r & _U32_MASK) < self._truth:
            return value
        return (r >> 32) < self._yes

    def encode_batch(self, values: ArrayLike, rng: np.random.Generator) -> NDArray[np.bool_]:
        """Randomize a 1-D array of booleans with a seeded numpy Generator. For simulation only.

        Samples with the same quantized thresholds as :meth:`encode`: for each report, a uint32 u
        (truthful iff ``u < A``), then a uint32 v ("yes" iff ``v < B``). All u are drawn before all v,
        so a given seed always gives the same reports.

        Args:
            values: a 1-D array-like of bools, or of integers that are all 0 or 1.
            rng: an explicit :class:`numpy.random.Generator` (never the global numpy state).

        Returns:
            A bool array of shape ``(n,)``.

        Raises:
            DomainError: ``values`` is not 1-D, is not boolean/integer, or holds an integer other than 0/1.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        arr = _as_bool_array(values)
        n = arr.shape[0]
        u = rng.integers(0, PROB_ONE, size=(n,), dtype=np.uint32)
        v = rng.integers(0, PROB_ONE, size=(n,), dtype=np.uint32)
        out: NDArray[np.bool_] = np.less(v, np.uint32(self._yes))
        np.copyto(out, arr, where=np.less(u, np.uint32(self._truth)))
        return out


def _as_bool_array(values: ArrayLike) -> NDArray[np.bool_]:
    """Validate a batch of booleans (bool dtype, or integers all in {0, 1}) and return it as bools."""
    import numpy as np

    arr = np.asarray(values)
    if arr.ndim != 1:
        raise DomainError("values", f"<array of shape {arr.shape}>", "a 1-D array of booleans")
    if arr.size == 0:
        return np.zeros(0, dtype=np.bool_)
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind not in "iu":
        raise DomainError("values", f"<array of dtype {arr.dtype}>", "booleans or integers 0/1")
    if arr.min() < 0 or arr.max() > 1:
        bad = arr[(arr != 0) & (arr != 1)][0]
        raise DomainError("values", bad.item(), "booleans or integers 0/1")
    return arr.astype(np.bool_)
