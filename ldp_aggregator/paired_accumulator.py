"""The accumulator of a paired campaign (issue 5: association): both sides' sums, and joint patterns.

:class:`PairedAccumulator` is the ``paired`` layout (:class:`ldp_client.spec.Layout`), a composite: for the
reports of a :class:`~ldp_client.mechanisms.paired.PairedParams` campaign it holds

* ``first`` and ``second``: each side's own accumulator (what a campaign of the side's mechanism would
  hold; the layouts ``Layout.parts``), so each variable can be estimated or decoded on its own;
* ``joint``: when both sides have few possible reports (rr 2, boolean RAPPOR 2, grr d, basic RAPPOR 2^d
  for d <= 12: ``spec.report_patterns``) and their product is at most 65,536, the count of every joint
  report pattern (report of the first side, report of the second side). That table is a mergeable
  sufficient statistic of the paired reports: the EM of :mod:`ldp_aggregator.association` reads it without
  raw reports. A string-RAPPOR side has too many possible reports (m 2^k), so its association needs the
  raw reports (``Store.raw_payloads``) and ``joint`` is None.

This module knows neither the mechanisms nor the other layouts: :mod:`ldp_aggregator.accumulators` makes a
paired accumulator of its sides' empty accumulators (:meth:`PairedAccumulator.of_parts`) and reads the sides'
bytes with its own reader (:meth:`PairedAccumulator.from_bytes`), and the paired spec turns a batch into the
layout's standard input (each side's, and each report's joint cell).

Serialized form (little-endian)::

    magic b"LDPP" | version u8 (1) | flags u8 (bit 0: joint present)
    u32 length | first side's accumulator bytes | u32 length | second side's accumulator bytes
    [u32 rows | u32 cols | rows*cols int64 joint counts]   (if flag bit 0)
    crc32 u32 of everything before it

Sub-accumulators carry their own checksummed formats (:mod:`ldp_aggregator.accumulators`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final

import numpy as np

from ldp_aggregator.accumulator_errors import CorruptAccumulatorError
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.paired import MAX_JOINT_CELLS

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["PAIRED_MAGIC", "PairedAccumulator"]

PAIRED_MAGIC: Final = b"LDPP"
_VERSION: Final = 1
_FLAG_JOINT: Final = 1
_HEAD = struct.Struct("<4sBB")
_U32 = struct.Struct("<I")
_I64 = np.dtype("<i8")
_SIDES: Final = ("first", "second")


def _side_error(exc: InvalidReportError, side: str) -> InvalidReportError:
    return InvalidReportError(f"paired.{side}.{exc.field}", exc.value, exc.allowed)


class PairedAccumulator:
    """Sums of a paired campaign: each side's accumulator and (small sides) the joint pattern counts."""

    __slots__ = ("first", "joint", "second")
    kind: ClassVar[str] = "paired"
    layout_kind: ClassVar[str] = "paired"

    first: Any
    second: Any
    joint: NDArray[np.int64] | None

    def __init__(self, first: Any, second: Any, joint: NDArray[np.int64] | None) -> None:
        if first.n != second.n:
            raise InvalidReportError("second.n", second.n, f"{first.n} reports, as many as the first side")
        if joint is not None:
            joint = np.array(joint, dtype=np.int64, copy=True)
            if joint.ndim != 2 or (joint.size and int(joint.min()) < 0) or int(joint.sum()) != first.n:
                raise InvalidReportError(
                    "joint", joint.shape, f"a 2-D table of non-negative counts summing to {first.n}"
                )
        self.first = first
        self.second = second
        self.joint = joint

    # ------------------------------------------------------------------ the ``paired`` layout

    @classmethod
    def of_parts(cls, parts: tuple[Any, ...], shape: tuple[int, ...]) -> PairedAccumulator:
        """The empty accumulator made of the sides' empty accumulators, with a zero joint table of
        ``shape`` (rows, cols), or none when ``shape`` is ()."""
        first, second = parts
        return cls(first, second, np.zeros(shape, dtype=np.int64) if shape else None)

    @classmethod
    def of_shape(cls, shape: tuple[int, ...]) -> PairedAccumulator:
        """Not for a composite layout: its sides' accumulators are needed (:meth:`of_parts`)."""
        raise InvalidParameterError(
            "layout", "paired", "its sides' accumulators (PairedAccumulator.of_parts; accumulator_for)"
        )

    @classmethod
    def delta_of(cls, shape: tuple[int, ...], batch: Any) -> PairedAccumulator:
        """Not for a composite layout: the increment is an empty accumulator with the batch added."""
        raise InvalidParameterError(
            "layout", "paired", "its sides' accumulators (an empty one of_parts, then add_batch)"
        )

    @classmethod
    def from_sums(cls, sums: Any) -> PairedAccumulator:
        """The accumulator holding a ``paired`` layout's sums ``(first, second, joint)``: the two sides'
        accumulators and the joint counts (or None)."""
        first, second, joint = sums
        return cls(first, second, joint)

    @property
    def layout_shape(self) -> tuple[int, ...]:
        """The joint table's shape (rows, cols), or () without one."""
        return () if self.joint is None else (int(self.joint.shape[0]), int(self.joint.shape[1]))

    @property
    def layout_parts(self) -> tuple[Any, Any]:
        """The sides' accumulators, in the order of the layout's parts."""
        return self.first, self.second

    @property
    def n(self) -> int:
        """Number of paired reports added."""
        return int(self.first.n)

    def add_batch(self, batch: Any) -> None:
        """Add a ``paired`` layout's standard input ``(first input, second input, joint)`` in place
        (``joint``: None, or a function giving each report's joint cell, called once both sides accepted the
        batch). Nothing is added if the batch is rejected.

        Raises:
            InvalidReportError: a side's reports malformed (named by side), or sides with different numbers
                of rows.
        """
        first_batch, second_batch, joint_cells = batch
        deltas = []
        batches = (first_batch, second_batch)
        for side, part, side_batch in zip(_SIDES, self.layout_parts, batches, strict=True):
            try:
                deltas.append(type(part).delta_of(part.layout_shape, side_batch))
            except InvalidReportError as exc:
                raise _side_error(exc, side) from exc
        if deltas[0].n != deltas[1].n:
            raise InvalidReportError(
                "paired.second",
                f"{deltas[1].n} rows",
                f"{deltas[0].n} rows, one per device like the first",
            )
        joint_delta = None
        if self.joint is not None:
            if joint_cells is None:  # a batch made for another layout
                raise InvalidReportError("reports", "no joint cells", "the joint cell of each paired report")
            rows, cols = self.joint.shape
            joint_delta = np.bincount(joint_cells(), minlength=rows * cols).reshape(rows, cols)
        # Every check passed: now merge (the additions below cannot fail for deltas of the same layout).
        self.first = self.first + deltas[0]
        self.second = self.second + deltas[1]
        if joint_delta is not None and self.joint is not None:
            self.joint = self.joint + joint_delta

    # ------------------------------------------------------------------------------- merging

    def _check_same(self, other: PairedAccumulator) -> None:
        same_joint = (self.joint is None) == (other.joint is None) and (
            self.joint is None or other.joint is None or self.joint.shape == other.joint.shape
        )
        if type(self.first) is not type(other.first) or type(self.second) is not type(other.second):
            same_joint = False
        if not same_joint:
            raise InvalidReportError("accumulator", repr(other), f"the shape of {self!r} (one campaign)")

    def __add__(self, other: object) -> PairedAccumulator:
        if not isinstance(other, PairedAccumulator):
            return NotImplemented
        self._check_same(other)
        joint = None if self.joint is None or other.joint is None else self.joint + other.joint
        return PairedAccumulator(
            self.first + other.first,
            self.second + other.second,
            joint,
        )

    def __iadd__(self, other: object) -> PairedAccumulator:
        if not isinstance(other, PairedAccumulator):
            return NotImplemented
        merged = self + other
        self.first, self.second, self.joint = merged.first, merged.second, merged.joint
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PairedAccumulator):
            return NotImplemented
        if (self.joint is None) != (other.joint is None):
            return False
        joint_eq = self.joint is None or other.joint is None or bool(np.array_equal(self.joint, other.joint))
        return bool(self.first == other.first and self.second == other.second and joint_eq)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        shape = None if self.joint is None else self.joint.shape
        return f"PairedAccumulator(first={self.first!r}, second={self.second!r}, joint={shape}, n={self.n})"

    def copy(self) -> PairedAccumulator:
        return PairedAccumulator(self.first.copy(), self.second.copy(), self.joint)

    # --------------------------------------------------------------------------------- bytes

    def to_bytes(self) -> bytes:
        """The versioned, checksummed serialization of the module docstring."""
        a, b = self.first.to_bytes(), self.second.to_bytes()
        flags = _FLAG_JOINT if self.joint is not None else 0
        parts = [_HEAD.pack(PAIRED_MAGIC, _VERSION, flags), _U32.pack(len(a)), a, _U32.pack(len(b)), b]
        if self.joint is not None:
            rows, cols = self.joint.shape
            parts += [_U32.pack(rows), _U32.pack(cols), self.joint.astype(_I64, copy=False).tobytes()]
        body = b"".join(parts)
        return body + _U32.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, read_side: Callable[[bytes], Any]
    ) -> PairedAccumulator:
        """Inverse of :meth:`to_bytes`; ``read_side`` decodes a side's accumulator bytes (any layout:
        ``ldp_aggregator.accumulators.accumulator_from_bytes``).

        Raises:
            CorruptAccumulatorError: bad magic, version, checksum, lengths, or inconsistent counts.
        """
        buf = memoryview(bytes(data))
        if len(buf) < _HEAD.size + 3 * _U32.size:
            raise CorruptAccumulatorError("length", len(buf), "a paired accumulator (at least 14 bytes)")
        magic, version, flags = _HEAD.unpack_from(buf, 0)
        if magic != PAIRED_MAGIC:
            raise CorruptAccumulatorError("magic", bytes(magic), repr(PAIRED_MAGIC))
        if version != _VERSION:
            raise CorruptAccumulatorError("version", version, f"{_VERSION}")
        (crc,) = _U32.unpack_from(buf, len(buf) - _U32.size)
        if zlib.crc32(buf[: len(buf) - _U32.size]) != crc:
            raise CorruptAccumulatorError(
                "crc32", crc, "the checksum of the preceding bytes (data corrupted)"
            )
        end = len(buf) - _U32.size
        pos = _HEAD.size
        subs = []
        for side in _SIDES:
            if pos + _U32.size > end:
                raise CorruptAccumulatorError(f"{side} length", end - pos, "a 4-byte length")
            (length,) = _U32.unpack_from(buf, pos)
            pos += _U32.size
            if pos + length > end:
                raise CorruptAccumulatorError(f"{side} length", length, f"at most {end - pos} bytes")
            subs.append(read_side(bytes(buf[pos : pos + length])))
            pos += length
        joint = None
        if flags & _FLAG_JOINT:
            if pos + 2 * _U32.size > end:
                raise CorruptAccumulatorError("joint shape", end - pos, "8 bytes")
            (rows,) = _U32.unpack_from(buf, pos)
            (cols,) = _U32.unpack_from(buf, pos + _U32.size)
            pos += 2 * _U32.size
            if rows * cols > MAX_JOINT_CELLS or end - pos != 8 * rows * cols:
                raise CorruptAccumulatorError("joint", (rows, cols), f"{(end - pos) // 8} int64 counts")
            joint = np.frombuffer(buf[pos:end], dtype=_I64).astype(np.int64).reshape(rows, cols)
        elif pos != end:
            raise CorruptAccumulatorError("length", len(buf), f"{pos + _U32.size} bytes")
        try:
            return cls(subs[0], subs[1], joint)
        except InvalidReportError as exc:
            raise CorruptAccumulatorError(exc.field, exc.value, exc.allowed) from exc
