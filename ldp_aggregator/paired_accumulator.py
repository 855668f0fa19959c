"""The accumulator of a paired campaign (issue 5: association): both sides' sums, and joint patterns.

:class:`PairedAccumulator` holds, for the reports of a :class:`~ldp_client.params.PairedParams`
campaign:

* ``first`` and ``second``: each side's own accumulator (what a campaign of the side's mechanism would
  hold), so each variable can be estimated or decoded on its own;
* ``joint``: when both sides have few possible reports (rr 2, boolean RAPPOR 2, grr d, basic RAPPOR 2^d
  for d <= 12) and their product is at most 65,536, the count of every joint report pattern
  (report of the first side, report of the second side). That table is a mergeable sufficient statistic
  of the paired reports: the EM of :mod:`ldp_aggregator.association` reads it without raw reports. A
  string-RAPPOR side has too many possible reports (m 2^k), so its association needs the raw reports
  (``Store.raw_payloads``) and ``joint`` is None.

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
from typing import TYPE_CHECKING, Any, ClassVar, Final

import numpy as np

from ldp_client.errors import InvalidReportError
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    GRRParams,
    PairedParams,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ldp_aggregator.accumulators import Accumulator
    from ldp_client.params import PairedSide

__all__ = [
    "PAIRED_MAGIC",
    "PairedAccumulator",
    "check_paired",
    "paired_accumulator_for",
    "side_pattern_count",
    "side_patterns",
]

PAIRED_MAGIC: Final = b"LDPP"
_VERSION: Final = 1
_FLAG_JOINT: Final = 1
_MAX_JOINT_CELLS: Final = 1 << 16
_MAX_BASIC_PATTERN_BITS: Final = 12
_HEAD = struct.Struct("<4sBB")
_U32 = struct.Struct("<I")
_I64 = np.dtype("<i8")


def _corrupt(field: str, value: object, allowed: str) -> Exception:
    from ldp_aggregator.accumulators import CorruptAccumulatorError

    return CorruptAccumulatorError(field, value, allowed)


def side_pattern_count(params: PairedSide) -> int | None:
    """Number of distinct reports a side can send, if small enough to count (else None: string RAPPOR,
    or basic RAPPOR over more than 12 values)."""
    if isinstance(params, BinaryRRParams | BooleanRapporParams):
        return 2
    if isinstance(params, GRRParams):
        return params.domain.size
    if isinstance(params, BasicRapporParams) and params.k <= _MAX_BASIC_PATTERN_BITS:
        return 1 << params.k
    return None


def _joint_shape(params: PairedParams) -> tuple[int, int] | None:
    a, b = side_pattern_count(params.first), side_pattern_count(params.second)
    if a is None or b is None or a * b > _MAX_JOINT_CELLS:
        return None
    return a, b


def side_patterns(params: PairedSide, columns: Any) -> NDArray[np.int64]:
    """Pattern index of each report of a side with :func:`side_pattern_count` patterns.

    rr: 0 = no, 1 = yes; grr: the reported index; boolean RAPPOR: the bit; basic RAPPOR: the report bits
    as an integer (bit i = report bit i).
    """
    if isinstance(params, BinaryRRParams):
        return np.asarray(columns).astype(np.int64)
    if isinstance(params, GRRParams):
        return np.asarray(columns, dtype=np.int64)
    rows = np.asarray(columns, dtype=np.uint8)
    if isinstance(params, BooleanRapporParams):
        return (rows[:, 0] & 1).astype(np.int64)
    # basic RAPPOR, k <= 12: at most 2 bytes per row, little-endian.
    out = rows[:, 0].astype(np.int64)
    if rows.shape[1] > 1:
        out |= rows[:, 1].astype(np.int64) << 8
    return out


class PairedAccumulator:
    """Sums of a paired campaign: each side's accumulator and (small sides) the joint pattern counts."""

    __slots__ = ("first", "joint", "second")
    kind: ClassVar[str] = "paired"

    first: Accumulator
    second: Accumulator
    joint: NDArray[np.int64] | None

    def __init__(self, first: Accumulator, second: Accumulator, joint: NDArray[np.int64] | None) -> None:
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

    @classmethod
    def zero(cls, params: PairedParams) -> PairedAccumulator:
        """The empty accumulator of a paired campaign."""
        from ldp_aggregator.accumulators import accumulator_for

        shape = _joint_shape(params)
        joint = None if shape is None else np.zeros(shape, dtype=np.int64)
        return cls(accumulator_for(params.first), accumulator_for(params.second), joint)

    @property
    def n(self) -> int:
        """Number of paired reports added."""
        return self.first.n

    def add_columns(self, params: PairedParams, columns: Any) -> None:
        """Add a batch ``(first columns, second columns)`` in place; nothing is added if it is rejected.

        Raises:
            InvalidReportError: not a pair of column sets, a side's columns malformed (named by side), or
                sides with different numbers of rows.
        """
        from ldp_aggregator.accumulators import accumulator_for, add_columns

        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError(
                "reports", type(columns).__name__, "a (first columns, second columns) pair for paired"
            )
        deltas = []
        for side, side_params, cols in zip(("first", "second"), params.sides, columns, strict=True):
            delta = accumulator_for(side_params)
            try:
                add_columns(delta, side_params, cols)
            except InvalidReportError as exc:
                raise InvalidReportError(f"paired.{side}.{exc.field}", exc.value, exc.allowed) from exc
            deltas.append(delta)
        if deltas[0].n != deltas[1].n:
            raise InvalidReportError(
                "paired.second", f"{deltas[1].n} rows", f"{deltas[0].n} rows, one per device like the first"
            )
        joint_delta = None
        if self.joint is not None:
            a = side_patterns(params.first, columns[0])
            b = side_patterns(params.second, columns[1])
            rows, cols_ = self.joint.shape
            joint_delta = np.bincount(a * cols_ + b, minlength=rows * cols_).reshape(rows, cols_)
        # Every check passed: now merge (the += below cannot fail for deltas of the same params).
        self.first = self.first + deltas[0]
        self.second = self.second + deltas[1]
        if joint_delta is not None and self.joint is not None:
            self.joint = self.joint + joint_delta

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
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> PairedAccumulator:
        """Inverse of :meth:`to_bytes`.

        Raises:
            CorruptAccumulatorError: bad magic, version, checksum, lengths, or inconsistent counts.
        """
        from ldp_aggregator.accumulators import accumulator_from_bytes

        buf = memoryview(bytes(data))
        if len(buf) < _HEAD.size + 3 * _U32.size:
            raise _corrupt("length", len(buf), "a paired accumulator (at least 14 bytes)")
        magic, version, flags = _HEAD.unpack_from(buf, 0)
        if magic != PAIRED_MAGIC:
            raise _corrupt("magic", bytes(magic), repr(PAIRED_MAGIC))
        if version != _VERSION:
            raise _corrupt("version", version, f"{_VERSION}")
        (crc,) = _U32.unpack_from(buf, len(buf) - _U32.size)
        if zlib.crc32(buf[: len(buf) - _U32.size]) != crc:
            raise _corrupt("crc32", crc, "the checksum of the preceding bytes (data corrupted)")
        end = len(buf) - _U32.size
        pos = _HEAD.size
        subs = []
        for side in ("first", "second"):
            if pos + _U32.size > end:
                raise _corrupt(f"{side} length", end - pos, "a 4-byte length")
            (length,) = _U32.unpack_from(buf, pos)
            pos += _U32.size
            if pos + length > end:
                raise _corrupt(f"{side} length", length, f"at most {end - pos} bytes")
            subs.append(accumulator_from_bytes(bytes(buf[pos : pos + length])))
            pos += length
        joint = None
        if flags & _FLAG_JOINT:
            if pos + 2 * _U32.size > end:
                raise _corrupt("joint shape", end - pos, "8 bytes")
            (rows,) = _U32.unpack_from(buf, pos)
            (cols,) = _U32.unpack_from(buf, pos + _U32.size)
            pos += 2 * _U32.size
            if rows * cols > _MAX_JOINT_CELLS or end - pos != 8 * rows * cols:
                raise _corrupt("joint", (rows, cols), f"{(end - pos) // 8} int64 counts")
            joint = np.frombuffer(buf[pos:end], dtype=_I64).astype(np.int64).reshape(rows, cols)
        elif pos != end:
            raise _corrupt("length", len(buf), f"{pos + _U32.size} bytes")
        try:
            return cls(subs[0], subs[1], joint)
        except InvalidReportError as exc:
            raise _corrupt(exc.field, exc.value, exc.allowed) from exc


def paired_accumulator_for(params: PairedParams) -> PairedAccumulator:
    """The empty accumulator of a paired campaign."""
    return PairedAccumulator.zero(params)


def check_paired(acc: object, params: PairedParams) -> PairedAccumulator:
    """``acc`` as a PairedAccumulator of ``params`` (each side's kind and shape), or InvalidReportError."""
    from ldp_aggregator.accumulators import check_matches

    if not isinstance(acc, PairedAccumulator):
        raise InvalidReportError("accumulator", type(acc).__name__, "a PairedAccumulator (mechanism paired)")
    check_matches(acc.first, params.first)
    check_matches(acc.second, params.second)
    shape = _joint_shape(params)
    actual = None if acc.joint is None else acc.joint.shape
    if actual != shape:
        raise InvalidReportError("accumulator.joint", actual, f"{shape} for these sides")
    return acc
