"""How many reports took each value: the ``counts`` layout's accumulator (binary RR, GRR).

Its byte form is the ``LDPA`` frame of :mod:`ldp_aggregator.accumulator_format`; the contract every
accumulator keeps (mergeable, in-place batches, checked byte round trip) is in
:mod:`ldp_aggregator.accumulators`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ldp_aggregator.accumulator_errors import CorruptAccumulatorError
from ldp_aggregator.accumulator_format import (
    I64,
    KIND_COUNTS,
    as_int64_vector,
    check_size,
    frame,
    payload_int64,
    unframe,
)
from ldp_client.errors import InvalidReportError
from ldp_client.params import MAX_DOMAIN_SIZE

if TYPE_CHECKING:
    from numpy.typing import NDArray


class CountAccumulator:
    """Number of reports per reported value: ``counts[v]`` for v in [0, size).

    Binary RR: size 2, index 0 = "no", 1 = "yes". GRR: size d, index = reported domain index.
    """

    __slots__ = ("counts",)
    kind: ClassVar[int] = KIND_COUNTS

    counts: NDArray[np.int64]

    def __init__(self, counts: Any) -> None:
        arr = as_int64_vector("counts", counts)
        check_size("size", arr.shape[0], MAX_DOMAIN_SIZE)
        self.counts = arr

    @classmethod
    def zero(cls, size: int) -> CountAccumulator:
        """The empty accumulator over ``size`` values."""
        return cls(np.zeros(check_size("size", size, MAX_DOMAIN_SIZE), dtype=np.int64))

    @property
    def size(self) -> int:
        return int(self.counts.shape[0])

    @property
    def n(self) -> int:
        """Total number of reports added."""
        return int(self.counts.sum())

    def add_values(self, values: NDArray[Any]) -> None:
        """Add a batch of reported value indices (any integer or bool dtype, shape (n,)) in place.

        Raises:
            InvalidReportError: not a 1-D integer/bool array, or a value outside [0, size). Nothing is
                added when the batch is rejected.
        """
        arr = np.asarray(values)
        if arr.ndim != 1:
            raise InvalidReportError("values", arr.shape, "a 1-D array of shape (n,)")
        if arr.size == 0:
            return
        if arr.dtype == np.bool_:
            if self.size < 2:
                raise InvalidReportError("values", "bool", f"integers in [0, {self.size - 1}]")
            arr = arr.view(np.uint8)
        elif not np.issubdtype(arr.dtype, np.integer):
            raise InvalidReportError("values", str(arr.dtype), "an integer (or bool) array")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= self.size:
            bad = lo if lo < 0 else hi
            raise InvalidReportError("values", bad, f"integers in [0, {self.size - 1}]")
        # bincount needs intp input; the range check above makes the cast lossless.
        self.counts += np.bincount(arr.astype(np.intp, copy=False), minlength=self.size)

    def _check_same_shape(self, other: CountAccumulator) -> None:
        if other.counts.shape != self.counts.shape:
            raise InvalidReportError(
                "accumulator", f"size {other.size}", f"size {self.size} (accumulators of one campaign)"
            )

    def __add__(self, other: object) -> CountAccumulator:
        if not isinstance(other, CountAccumulator):
            return NotImplemented
        self._check_same_shape(other)
        return CountAccumulator(self.counts + other.counts)

    def __iadd__(self, other: object) -> CountAccumulator:
        if not isinstance(other, CountAccumulator):
            return NotImplemented
        self._check_same_shape(other)
        self.counts += other.counts
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CountAccumulator):
            return NotImplemented
        return bool(np.array_equal(self.counts, other.counts))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"CountAccumulator(size={self.size}, n={self.n})"

    def copy(self) -> CountAccumulator:
        return CountAccumulator(self.counts)

    # The ``counts`` layout (ldp_client.spec.Layout): shape (size,), standard input value indices (n,).
    layout_kind: ClassVar[str] = "counts"

    @classmethod
    def of_shape(cls, shape: tuple[int, ...]) -> CountAccumulator:
        """The empty accumulator of a ``counts`` layout of shape ``(size,)``."""
        (size,) = shape
        return cls.zero(size)

    @classmethod
    def from_sums(cls, sums: Any) -> CountAccumulator:
        """The accumulator holding a ``counts`` layout's sums: the number of reports of each value."""
        return cls(sums)

    @classmethod
    def delta_of(cls, shape: tuple[int, ...], batch: Any) -> CountAccumulator:
        """What one batch (the layout's standard input) adds: a fresh accumulator with it added."""
        delta = cls.of_shape(shape)
        delta.add_values(batch)
        return delta

    @property
    def layout_shape(self) -> tuple[int, ...]:
        return (self.size,)

    def add_batch(self, batch: Any) -> None:
        """Add a ``counts`` layout's standard input (reported value indices) in place: :meth:`add_values`."""
        self.add_values(batch)

    def to_bytes(self) -> bytes:
        """The versioned, checksummed serialization (:mod:`ldp_aggregator.accumulator_format`)."""
        return frame(KIND_COUNTS, (self.size,), self.counts.astype(I64, copy=False).tobytes())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> CountAccumulator:
        """Inverse of :meth:`to_bytes`.

        Raises:
            CorruptAccumulatorError: wrong magic/version/kind/shape/length, bad checksum, negative counts.
        """
        kind, shape, payload = unframe(data)
        if kind != KIND_COUNTS:
            raise CorruptAccumulatorError("kind", kind, f"{KIND_COUNTS} (a CountAccumulator)")
        (size,) = shape
        if not 1 <= size <= MAX_DOMAIN_SIZE:
            raise CorruptAccumulatorError("size", size, f"an integer in [1, {MAX_DOMAIN_SIZE}]")
        return cls(payload_int64(payload, size))
