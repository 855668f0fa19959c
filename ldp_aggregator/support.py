"""The ``support`` layout's accumulator: the number of reports and, per item, how many support it.

Every frequency oracle is "pure" (Wang, Blocki, Li, Jha, USENIX Security 2017, §4): a report supports a
set of items, and the estimator needs only n and C_v, the number of reports supporting each item v. C_v
is a sum over reports, so the accumulator is (n, C_0, ..., C_{d-1}) and adding a batch adds its counts.
A mechanism's spec computes a batch's counts (``spec.layout_batch``): for unary encoding and subset
selection the number of reports with bit v set (:func:`bit_column_counts`); for local hashing the number
of reports whose seed hashes v to the reported bucket, computed at ingest for the declared domain
(:func:`local_hash_support`), so the accumulator never holds seeds. (Hadamard response keeps the counts
of reported indices instead, in a :class:`~ldp_aggregator.accumulators.CountAccumulator`, and its spec
decodes them with a fast Walsh-Hadamard transform.)

Serialized form of :class:`SupportCountAccumulator` (``to_bytes``), little-endian::

    magic b"LDPS" | version u8 (1) | reserved u8 (0) | reserved u16 (0) | size u64 | n i64
    | size x i64 support counts | crc32 u32 of everything before it

``from_bytes`` checks every field and refuses counts outside [0, n].
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ldp_client.domain import MAX_DOMAIN_SIZE
from ldp_client.errors import InvalidReportError, LdpError
from ldp_client.mechanisms._oracle import bit_column_counts
from ldp_client.mechanisms.olh import local_hash_support

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "SUPPORT_MAGIC",
    "CorruptSupportAccumulatorError",
    "SupportCountAccumulator",
    "bit_column_counts",
    "local_hash_support",
]

SUPPORT_MAGIC = b"LDPS"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBBHQq")
_CRC = struct.Struct("<I")
_I64 = np.dtype("<i8")


class CorruptSupportAccumulatorError(LdpError, ValueError):
    """Serialized support-count bytes are truncated, corrupted, or of an unknown format or version."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"support accumulator bytes: {field}={value!r} is invalid: allowed {allowed}")


class SupportCountAccumulator:
    """``reports`` reports, of which ``support[v]`` support item v (0 <= support[v] <= reports)."""

    __slots__ = ("reports", "support")
    magic: ClassVar[bytes] = SUPPORT_MAGIC

    reports: int
    support: NDArray[np.int64]

    def __init__(self, reports: int, support: Any) -> None:
        if isinstance(reports, bool) or not isinstance(reports, int | np.integer) or int(reports) < 0:
            raise InvalidReportError("reports", reports, "an integer >= 0")
        arr = np.asarray(support)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 1:
            raise InvalidReportError("support", f"{arr.dtype}{arr.shape}", "a 1-D integer array")
        if not 1 <= arr.shape[0] <= MAX_DOMAIN_SIZE:
            raise InvalidReportError("support", arr.shape, f"between 1 and {MAX_DOMAIN_SIZE} counts")
        counts = np.array(arr, dtype=np.int64, copy=True)
        if counts.size and (int(counts.min()) < 0 or int(counts.max()) > int(reports)):
            bad = int(counts.min()) if int(counts.min()) < 0 else int(counts.max())
            raise InvalidReportError("support", bad, f"counts in [0, reports={int(reports)}]")
        self.reports = int(reports)
        self.support = counts

    @classmethod
    def zero(cls, size: int) -> SupportCountAccumulator:
        """The empty accumulator over ``size`` items."""
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_DOMAIN_SIZE:
            raise InvalidReportError("size", size, f"an integer in [1, {MAX_DOMAIN_SIZE}]")
        return cls._trusted(0, np.zeros(size, dtype=np.int64))

    @classmethod
    def _trusted(cls, reports: int, support: NDArray[np.int64]) -> SupportCountAccumulator:
        # For sums of validated accumulators of one shape (the ingest hot path).
        acc = object.__new__(cls)
        acc.reports = reports
        acc.support = support
        return acc

    @property
    def size(self) -> int:
        return int(self.support.shape[0])

    @property
    def n(self) -> int:
        """Total number of reports added."""
        return self.reports

    def add_support(self, reports: int, support: NDArray[np.int64]) -> None:
        """Add a batch's report count and support counts in place (validated as in ``__init__``)."""
        delta = SupportCountAccumulator(reports, support)
        self._check_same_shape(delta)
        self.reports += delta.reports
        self.support += delta.support

    def _check_same_shape(self, other: SupportCountAccumulator) -> None:
        if other.support.shape != self.support.shape:
            raise InvalidReportError(
                "accumulator", f"size {other.size}", f"size {self.size} (accumulators of one campaign)"
            )

    def __add__(self, other: object) -> SupportCountAccumulator:
        if not isinstance(other, SupportCountAccumulator):
            return NotImplemented
        self._check_same_shape(other)
        return SupportCountAccumulator._trusted(self.reports + other.reports, self.support + other.support)

    def __iadd__(self, other: object) -> SupportCountAccumulator:
        if not isinstance(other, SupportCountAccumulator):
            return NotImplemented
        self._check_same_shape(other)
        self.reports += other.reports
        self.support += other.support
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SupportCountAccumulator):
            return NotImplemented
        return self.reports == other.reports and bool(np.array_equal(self.support, other.support))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"SupportCountAccumulator(size={self.size}, n={self.n})"

    def copy(self) -> SupportCountAccumulator:
        return SupportCountAccumulator._trusted(self.reports, self.support.copy())

    # The ``support`` layout (ldp_client.spec.Layout): shape (size,), standard input (n, support counts).
    layout_kind: ClassVar[str] = "support"

    @classmethod
    def of_shape(cls, shape: tuple[int, ...]) -> SupportCountAccumulator:
        """The empty accumulator of a ``support`` layout of shape ``(size,)``."""
        (size,) = shape
        return cls.zero(size)

    @classmethod
    def from_sums(cls, sums: Any) -> SupportCountAccumulator:
        """The accumulator holding a ``support`` layout's sums ``(reports, support)``."""
        reports, support = sums
        return cls(reports, support)

    @classmethod
    def delta_of(cls, shape: tuple[int, ...], batch: Any) -> SupportCountAccumulator:
        """What one batch ``(n, support)`` adds: a fresh accumulator with it added."""
        delta = cls.of_shape(shape)
        delta.add_batch(batch)
        return delta

    @property
    def layout_shape(self) -> tuple[int, ...]:
        return (self.size,)

    def add_batch(self, batch: Any) -> None:
        """Add a ``support`` layout's standard input ``(n, support)`` in place: :meth:`add_support`."""
        reports, support = batch
        self.add_support(reports, support)

    def to_bytes(self) -> bytes:
        """The versioned, checksummed serialization of the module docstring."""
        body = _HEADER.pack(SUPPORT_MAGIC, FORMAT_VERSION, 0, 0, self.size, self.reports)
        body += self.support.astype(_I64, copy=False).tobytes()
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> SupportCountAccumulator:
        """Inverse of :meth:`to_bytes`.

        Raises:
            CorruptSupportAccumulatorError: wrong magic, version, length or checksum, or a count outside
                [0, n].
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CorruptSupportAccumulatorError("data", type(data).__name__, "bytes")
        buf = memoryview(data).cast("B")
        if len(buf) < _HEADER.size + _CRC.size:
            raise CorruptSupportAccumulatorError(
                "length", len(buf), f"at least {_HEADER.size + _CRC.size} bytes"
            )
        magic, version, r1, r2, size, reports = _HEADER.unpack_from(buf, 0)
        if magic != SUPPORT_MAGIC:
            raise CorruptSupportAccumulatorError("magic", bytes(magic), repr(SUPPORT_MAGIC))
        if version != FORMAT_VERSION:
            raise CorruptSupportAccumulatorError("version", version, f"{FORMAT_VERSION}")
        (crc,) = _CRC.unpack_from(buf, len(buf) - _CRC.size)
        if zlib.crc32(buf[: len(buf) - _CRC.size]) != crc:
            raise CorruptSupportAccumulatorError("crc32", crc, "the checksum of the preceding bytes")
        if r1 or r2:
            raise CorruptSupportAccumulatorError("reserved", (r1, r2), "0")
        if not 1 <= size <= MAX_DOMAIN_SIZE:
            raise CorruptSupportAccumulatorError("size", size, f"an integer in [1, {MAX_DOMAIN_SIZE}]")
        payload = buf[_HEADER.size : len(buf) - _CRC.size]
        if len(payload) != 8 * size:
            raise CorruptSupportAccumulatorError("payload length", len(payload), f"{8 * size} bytes")
        if reports < 0:
            raise CorruptSupportAccumulatorError("n", reports, "an integer >= 0")
        support = np.frombuffer(payload, dtype=_I64).astype(np.int64)
        if support.size and (int(support.min()) < 0 or int(support.max()) > reports):
            raise CorruptSupportAccumulatorError(
                "support", "a count outside [0, n]", f"counts in [0, {reports}]"
            )
        return cls._trusted(int(reports), support)
