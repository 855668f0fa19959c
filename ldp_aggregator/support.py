"""Support counts of the issue-6 frequency oracles: a mergeable accumulator and batch ingest.

Every frequency oracle here is "pure" (Wang, Blocki, Li, Jha, USENIX Security 2017, §4): a report supports
a set of items, and the estimator needs only n and C_v, the number of reports supporting each item v.
C_v is a sum over reports, so the accumulator is (n, C_0, ..., C_{d-1}) and adding a batch adds its
counts. For unary encoding and subset selection C_v is the number of reports with bit v set; for local
hashing it is the number of reports whose seed hashes v to the reported bucket -- computed at ingest for
the declared domain, so the accumulator never holds seeds (Hadamard response keeps the counts of
reported indices instead, in a :class:`~ldp_aggregator.accumulators.CountAccumulator`, and decodes them
with a fast Walsh-Hadamard transform: :mod:`ldp_aggregator.oracles`).

Serialized form of :class:`SupportCountAccumulator` (``to_bytes``), little-endian::

    magic b"LDPS" | version u8 (1) | reserved u8 (0) | reserved u16 (0) | size u64 | n i64
    | size x i64 support counts | crc32 u32 of everything before it

``from_bytes`` checks every field and refuses counts outside [0, n].

Local hashing at ingest (:func:`local_hash_support`): report (a, b, y) supports v iff
(a v + b') mod 2**64 < W with per-report constants b', W (``ldp_client.mechanisms.olh``), evaluated for a
block of reports x all d values at once in uint64 numpy arithmetic (multiply, add, compare), and the
block's booleans summed per value. O(n d) work with no Python loop per report.
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ldp_client.errors import InvalidReportError, LdpError
from ldp_client.params import MAX_DOMAIN_SIZE, OLHParams, OUEParams, SubsetSelectionParams, SUEParams

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
# uint64 elements per (reports x values) block of the local-hashing evaluation: 2 MiB stays in cache.
_HASH_BLOCK = 1 << 18
# Report rows per bincount call when counting bit columns (bounded temporaries, about 16 MiB of indices).
_BIT_ROWS = 1 << 14
# (256, 8) table: row b holds the 8 bits of byte value b, bit 0 first (little bit order).
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(
    np.int64
)


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


# ------------------------------------------------------------------------------------------------ ingest


def _check_bit_rows(bits: object, params: OUEParams | SUEParams | SubsetSelectionParams) -> NDArray[np.uint8]:
    d = params.domain.size
    nb = (d + 7) // 8
    arr = np.asarray(bits)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != nb:
        raise InvalidReportError(
            "reports", f"{arr.dtype}{arr.shape}", f"uint8 rows of shape (n, {nb}) for {params.name} (d={d})"
        )
    if arr.shape[0] == 0:
        return arr
    spare = nb * 8 - d
    if spare and int(np.bitwise_or.reduce(arr[:, -1])) >> (8 - spare):
        raise InvalidReportError("reports", "a set bit at index >= d", f"bits 0..{d - 1} only (padding is 0)")
    if isinstance(params, SubsetSelectionParams):
        counts = np.bitwise_count(arr).sum(axis=1, dtype=np.int64)
        bad = counts != params.k
        if bad.any():
            row = int(np.argmax(bad))
            raise InvalidReportError(
                f"reports[{row}]", f"<{int(counts[row])} bits set>", f"exactly k={params.k}"
            )
    return arr


def bit_column_counts(bits: NDArray[np.uint8], d: int) -> NDArray[np.int64]:
    """How many rows set each bit 0..d-1 of packed rows (n, ceil(d/8)) in little bit order.

    Counts (byte position, byte value) pairs with one ``np.bincount`` per block of rows (n ceil(d/8)
    work, not n d) and turns byte-value counts into bit counts with a (256 x 8) 0/1 matrix.
    """
    n, nb = bits.shape
    table = np.zeros(nb * 256, dtype=np.int64)
    offset = np.arange(nb, dtype=np.intp) * 256
    for start in range(0, n, _BIT_ROWS):
        block = bits[start : start + _BIT_ROWS]
        table += np.bincount((offset + block).ravel(), minlength=nb * 256)
    ones = (table.reshape(nb, 256) @ _BYTE_BITS).reshape(nb * 8)
    return ones[:d]


def local_hash_support(
    a: NDArray[np.uint64], b: NDArray[np.uint64], buckets: NDArray[np.integer], params: OLHParams
) -> NDArray[np.int64]:
    """C_v for v in [0, d): the number of reports (a, b, y) whose seed hashes v into bucket y.

    Vectorised over blocks of reports x all values (module docstring); validated columns expected.
    """
    from ldp_client.mechanisms.olh import support_test_constants

    d, g = params.domain.size, params.g
    n = int(a.shape[0])
    counts = np.zeros(d, dtype=np.int64)
    if n == 0:
        return counts
    b_prime, limit = support_test_constants(b, buckets, g)
    a64 = np.asarray(a, dtype=np.uint64)
    values = np.arange(d, dtype=np.uint64)
    rows = max(1, _HASH_BLOCK // d)
    work = np.empty((min(rows, n), d), dtype=np.uint64)
    hits = np.empty((min(rows, n), d), dtype=np.bool_)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        r = stop - start
        t, m = work[:r], hits[:r]
        # (a v + b') mod 2**64 for every (report, value): numpy's uint64 arithmetic wraps modulo 2**64.
        np.multiply(a64[start:stop, None], values[None, :], out=t)
        np.add(t, b_prime[start:stop, None], out=t)
        np.less(t, limit[start:stop, None], out=m)
        counts += m.sum(axis=0, dtype=np.int64)
    return counts


def _check_hash_columns(columns: object, params: OLHParams) -> tuple[NDArray[np.uint64], ...]:
    if not isinstance(columns, tuple) or len(columns) != 3:
        raise InvalidReportError(
            "reports", type(columns).__name__, f"an (a, b, buckets) tuple for {params.name}"
        )
    a, b, y = (np.asarray(c) for c in columns)
    n = a.shape[0] if a.ndim == 1 else -1
    for name, arr in (("a", a), ("b", b)):
        if arr.dtype != np.uint64 or arr.ndim != 1 or arr.shape[0] != n:
            raise InvalidReportError(f"reports.{name}", f"{arr.dtype}{arr.shape}", "uint64 of shape (n,)")
    if y.ndim != 1 or y.shape[0] != n or not np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_:
        raise InvalidReportError("reports.buckets", f"{y.dtype}{y.shape}", f"integers of shape ({n},)")
    if y.size and (int(y.min()) < 0 or int(y.max()) >= params.g):
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise InvalidReportError("reports.buckets", bad, f"buckets in [0, {params.g - 1}]")
    return a, b, y


def batch_support(
    params: OUEParams | SUEParams | SubsetSelectionParams | OLHParams, columns: object
) -> tuple[int, NDArray[np.int64]]:
    """(n, C) of one batch of columns (``ldp_client.wire`` layouts), validated.

    Raises:
        InvalidReportError: wrong dtype or shape, a padding bit set, an ss row without exactly k bits, or a
            bucket >= g. Nothing is counted when the batch is rejected.
    """
    if isinstance(params, OLHParams):
        a, b, y = _check_hash_columns(columns, params)
        return int(a.shape[0]), local_hash_support(a, b, y, params)
    rows = _check_bit_rows(columns, params)
    return int(rows.shape[0]), bit_column_counts(rows, params.domain.size)
