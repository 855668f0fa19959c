"""Mergeable sufficient statistics of report batches: ``zero()``, add a batch, ``+``, bytes round trip.

Every estimator in :mod:`ldp_aggregator.estimators` is a function of these sums only, so ingest,
simulation and scale-out all reduce to "map batches to accumulators, merge, estimate" (the design of
PipelineDP's accumulators).

A mechanism registered in :mod:`ldp_client.registry` names its accumulator by *layout*
(:class:`ldp_client.spec.Layout`): :data:`LAYOUT_ACCUMULATORS` maps the layout kind to the class
(``counts`` -> :class:`CountAccumulator`, ``bits`` -> :class:`BitCountAccumulator`, ``support`` ->
:class:`~ldp_aggregator.support.SupportCountAccumulator`, ``moments`` ->
:class:`~ldp_aggregator.moments.MeanAccumulator`, ``paired`` ->
:class:`~ldp_aggregator.paired_accumulator.PairedAccumulator`), and every function below creates, checks and
feeds a campaign's accumulator through that table and the spec (``spec.layout(params)``,
``spec.layout_batch(params, columns)``), never by mechanism. The two layouts defined here:

- :class:`CountAccumulator`: how many reports took each value. Binary RR uses size 2 (index 0 = "no",
  1 = "yes"); GRR uses the domain size d.
- :class:`BitCountAccumulator`: per cohort, the number of reports and, per bit, how many reports set it.
  String RAPPOR has m cohorts of k bits; basic RAPPOR (k = d) and boolean RAPPOR (k = 1) use m = 1.

Adding a batch mutates the accumulator in place (the store adds every committed batch to one running
accumulator, and d or m*k can be large, so a copy per batch would dominate); ``a + b`` returns a new
accumulator and ``a += b`` merges in place. The batch column formats are the shared report contract
(see ``.cache/HELPER_BRIEF.md``): rr a bool array, grr an int64 array, rappor ``(cohorts uint32 (n,),
bits uint8 (n, ceil(k/8)))`` with little bit order, basic/boolean RAPPOR a bits array.

Serialized form (``to_bytes``), little-endian throughout::

    magic  b"LDPA"        4 bytes
    version               u8   (currently 1)
    kind                  u8   (1 = CountAccumulator, 2 = BitCountAccumulator)
    ndim                  u16  (1 for counts: (size,), 2 for bit counts: (m, k))
    shape                 ndim x u64
    payload               int64: counts, or cohort_reports (m) followed by ones (m*k, row-major)
    crc32                 u32 of everything before it (zlib.crc32)

``from_bytes`` checks every field and the checksum and raises :class:`CorruptAccumulatorError` naming
what is wrong; it never returns an accumulator that violates its invariants (non-negative counts,
ones <= reports per cohort).
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, Self, cast

import numpy as np

from ldp_aggregator.accumulator_errors import CorruptAccumulatorError
from ldp_aggregator.moments import MEAN_MAGIC, MeanAccumulator
from ldp_aggregator.paired_accumulator import PAIRED_MAGIC, PairedAccumulator
from ldp_aggregator.support import SUPPORT_MAGIC, SupportCountAccumulator
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.params import MAX_COHORTS, MAX_DOMAIN_SIZE, MAX_RAPPOR_BITS

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ldp_client.params import MechanismParams
    from ldp_client.spec import Layout

__all__ = [
    "LAYOUT_ACCUMULATORS",
    "Accumulator",
    "BitCountAccumulator",
    "BitRows",
    "CompositeAccumulator",
    "CorruptAccumulatorError",
    "CountAccumulator",
    "LayoutAccumulator",
    "accumulator_for",
    "accumulator_from_bytes",
    "accumulator_from_sums",
    "accumulator_nbytes",
    "add_columns",
    "batch_delta",
    "check_matches",
]

MAGIC = b"LDPA"
FORMAT_VERSION = 1
_KIND_COUNTS = 1
_KIND_BIT_COUNTS = 2
_HEADER = struct.Struct("<4sBBH")
_CRC = struct.Struct("<I")
_I64 = np.dtype("<i8")

# The byte-table path of BitCountAccumulator.add_bits counts (cohort, byte position, byte value) triples
# with np.bincount; it is used while one byte position's m * 256 counters fit in this many entries
# (16 MiB, m <= 8192), otherwise reports are sorted by cohort (see add_bits).
_BYTE_TABLE_MAX_ENTRIES = 1 << 21
# Counters per bincount call on the byte-table path (2 MiB: stays in cache; measured fastest).
_TABLE_TARGET = 1 << 18
# Elements of the index array built per chunk (2 MiB of intp: stays in cache; measured fastest).
_CHUNK_ELEMENTS = 1 << 18
# Report bits as a (256, 8) table: row b holds the 8 bits of byte value b, bit 0 first (little order).
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(
    np.int64
)


def _as_int64_vector(name: str, values: Any, length: int | None = None) -> NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidReportError(name, str(arr.dtype), "an integer array")
    if arr.ndim != 1 or (length is not None and arr.shape[0] != length):
        want = f"({length},)" if length is not None else "(n,)"
        raise InvalidReportError(name, arr.shape, f"a 1-D array of shape {want}")
    if arr.size and int(arr.min()) < 0:
        raise InvalidReportError(name, int(arr.min()), "non-negative counts")
    return np.array(arr, dtype=np.int64, copy=True)


def _check_size(name: str, value: object, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= int(value) <= hi:
        raise InvalidReportError(name, value, f"an integer in [1, {hi}]")
    return int(value)


def _frame(kind: int, shape: tuple[int, ...], payload: bytes) -> bytes:
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, kind, len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
    body = head + payload
    return body + _CRC.pack(zlib.crc32(body))


def _unframe(data: bytes | bytearray | memoryview) -> tuple[int, tuple[int, ...], memoryview]:
    """Check magic, version, checksum and lengths; return (kind, shape, payload view)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CorruptAccumulatorError("data", type(data).__name__, "bytes")
    buf = memoryview(data).cast("B")
    if len(buf) < _HEADER.size + _CRC.size:
        raise CorruptAccumulatorError("length", len(buf), f"at least {_HEADER.size + _CRC.size} bytes")
    magic, version, kind, ndim = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptAccumulatorError("magic", bytes(magic), f"{MAGIC!r}")
    if version != FORMAT_VERSION:
        raise CorruptAccumulatorError("version", version, f"{FORMAT_VERSION} (this build reads only that)")
    (crc,) = _CRC.unpack_from(buf, len(buf) - _CRC.size)
    if zlib.crc32(buf[: len(buf) - _CRC.size]) != crc:
        raise CorruptAccumulatorError("crc32", crc, "the checksum of the preceding bytes (data corrupted)")
    expected_ndim = {_KIND_COUNTS: 1, _KIND_BIT_COUNTS: 2}.get(kind)
    if expected_ndim is None:
        raise CorruptAccumulatorError("kind", kind, f"{_KIND_COUNTS} (counts) or {_KIND_BIT_COUNTS} (bits)")
    if ndim != expected_ndim:
        raise CorruptAccumulatorError("ndim", ndim, f"{expected_ndim} for kind {kind}")
    shape_end = _HEADER.size + 8 * ndim
    if len(buf) < shape_end + _CRC.size:
        raise CorruptAccumulatorError("length", len(buf), f"at least {shape_end + _CRC.size} bytes")
    shape = struct.unpack_from(f"<{ndim}Q", buf, _HEADER.size)
    return kind, tuple(int(s) for s in shape), buf[shape_end : len(buf) - _CRC.size]


def _payload_int64(payload: memoryview, count: int) -> NDArray[np.int64]:
    if len(payload) != 8 * count:
        raise CorruptAccumulatorError("payload length", len(payload), f"{8 * count} bytes ({count} int64)")
    arr = np.frombuffer(payload, dtype=_I64).astype(np.int64)
    if arr.size and int(arr.min()) < 0:
        raise CorruptAccumulatorError("counts", int(arr.min()), "non-negative counts")
    return arr


class CountAccumulator:
    """Number of reports per reported value: ``counts[v]`` for v in [0, size).

    Binary RR: size 2, index 0 = "no", 1 = "yes". GRR: size d, index = reported domain index.
    """

    __slots__ = ("counts",)
    kind: ClassVar[int] = _KIND_COUNTS

    counts: NDArray[np.int64]

    def __init__(self, counts: Any) -> None:
        arr = _as_int64_vector("counts", counts)
        _check_size("size", arr.shape[0], MAX_DOMAIN_SIZE)
        self.counts = arr

    @classmethod
    def zero(cls, size: int) -> CountAccumulator:
        """The empty accumulator over ``size`` values."""
        return cls(np.zeros(_check_size("size", size, MAX_DOMAIN_SIZE), dtype=np.int64))

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
        """The versioned, checksummed serialization described in the module docstring."""
        return _frame(_KIND_COUNTS, (self.size,), self.counts.astype(_I64, copy=False).tobytes())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> CountAccumulator:
        """Inverse of :meth:`to_bytes`.

        Raises:
            CorruptAccumulatorError: wrong magic/version/kind/shape/length, bad checksum, negative counts.
        """
        kind, shape, payload = _unframe(data)
        if kind != _KIND_COUNTS:
            raise CorruptAccumulatorError("kind", kind, f"{_KIND_COUNTS} (a CountAccumulator)")
        (size,) = shape
        if not 1 <= size <= MAX_DOMAIN_SIZE:
            raise CorruptAccumulatorError("size", size, f"an integer in [1, {MAX_DOMAIN_SIZE}]")
        return cls(_payload_int64(payload, size))


# Batches up to this size are added row by row (np.add.at) instead of through an (m, k) partial sum.
_SMALL_BATCH = 16


def _check_packed(
    bits: Any, cohorts: Any, m: int, k: int
) -> tuple[NDArray[np.uint8], NDArray[np.intp] | None]:
    """Validated packed reports (n, ceil(k/8)) and cohorts (None when m == 1); see ``add_bits``.

    Raises:
        InvalidReportError: wrong dtype or shape, a cohort out of range, or an unused bit set.
    """
    b = np.asarray(bits)
    nb = (k + 7) // 8
    if b.dtype != np.uint8:
        raise InvalidReportError("bits", str(b.dtype), "a uint8 array of packed reports")
    if b.ndim != 2 or b.shape[1] != nb:
        raise InvalidReportError("bits", b.shape, f"shape (n, {nb}) (ceil(k/8) bytes per report)")
    n = b.shape[0]
    spare = nb * 8 - k
    if spare and n and (np.bitwise_or.reduce(b[:, -1]) >> (8 - spare)):
        raise InvalidReportError(
            "bits", "a set bit at index >= k", f"bits 0..{k - 1} only (unused high bits must be 0)"
        )
    if cohorts is None:
        if m != 1:
            raise InvalidReportError("cohorts", None, f"a cohort array of shape ({n},) (m = {m})")
        coh: NDArray[np.intp] | None = None
    else:
        c = np.asarray(cohorts)
        if c.dtype == np.bool_ or not np.issubdtype(c.dtype, np.integer):
            raise InvalidReportError("cohorts", str(c.dtype), "an integer array")
        if c.ndim != 1 or c.shape[0] != n:
            raise InvalidReportError("cohorts", c.shape, f"a 1-D array of shape ({n},)")
        if n:
            lo, hi = int(c.min()), int(c.max())
            if lo < 0 or hi >= m:
                raise InvalidReportError("cohort", lo if lo < 0 else hi, f"an integer in [0, {m - 1}]")
        coh = c.astype(np.intp, copy=False) if m > 1 else None
    return np.ascontiguousarray(b), coh


class BitRows:
    """A few validated reports of a bit-count campaign, kept as rows: the increment of a tiny batch.

    ``accumulator += rows`` adds them in place without an (m, k) temporary. A single-report Submit
    builds one of these instead of a zero BitCountAccumulator: allocating (fresh pages) and merging
    64 x 128 counters per report was about a sixth of the aggregator's work per single report
    (``bench/bench_single_report.py``; figures in ``bench/RESULTS.md``, issue 3).
    """

    __slots__ = ("cohorts", "k", "m", "rows")

    def __init__(self, m: int, k: int, bits: Any, cohorts: Any) -> None:
        b, coh = _check_packed(bits, cohorts, m, k)
        if b.shape[0] > _SMALL_BATCH:
            raise InvalidReportError(
                "bits", b.shape[0], f"at most {_SMALL_BATCH} reports (a larger batch is summed)"
            )
        self.m, self.k = m, k
        self.rows: NDArray[np.uint8] = np.unpackbits(b, axis=1, count=k, bitorder="little")
        self.cohorts = coh

    @property
    def n(self) -> int:
        """Number of reports."""
        return int(self.rows.shape[0])

    def __repr__(self) -> str:
        return f"BitRows(m={self.m}, k={self.k}, n={self.n})"


class BitCountAccumulator:
    """Per cohort j: ``cohort_reports[j]`` reports, of which ``ones[j, i]`` set report bit i.

    String RAPPOR: m cohorts x k bits. Basic RAPPOR (k = d) and boolean RAPPOR (k = 1): m = 1.
    """

    __slots__ = ("cohort_reports", "ones")
    kind: ClassVar[int] = _KIND_BIT_COUNTS

    cohort_reports: NDArray[np.int64]
    ones: NDArray[np.int64]

    def __init__(self, cohort_reports: Any, ones: Any) -> None:
        reports = _as_int64_vector("cohort_reports", cohort_reports)
        m = _check_size("m", reports.shape[0], MAX_COHORTS)
        arr = np.asarray(ones)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InvalidReportError("ones", str(arr.dtype), "an integer array")
        if arr.ndim != 2 or arr.shape[0] != m:
            raise InvalidReportError("ones", arr.shape, f"a 2-D array of shape ({m}, k)")
        _check_size("k", arr.shape[1], MAX_RAPPOR_BITS)
        ones64 = np.array(arr, dtype=np.int64, copy=True)
        if ones64.size and int(ones64.min()) < 0:
            raise InvalidReportError("ones", int(ones64.min()), "non-negative counts")
        over = ones64 > reports[:, None]
        if over.any():
            j, i = (int(x) for x in np.argwhere(over)[0])
            raise InvalidReportError(
                f"ones[{j}, {i}]", int(ones64[j, i]), f"at most cohort_reports[{j}] = {int(reports[j])}"
            )
        self.cohort_reports = reports
        self.ones = ones64

    @classmethod
    def zero(cls, m: int, k: int) -> BitCountAccumulator:
        """The empty accumulator for ``m`` cohorts of ``k`` bits."""
        m = _check_size("m", m, MAX_COHORTS)
        k = _check_size("k", k, MAX_RAPPOR_BITS)
        return cls._trusted(np.zeros(m, dtype=np.int64), np.zeros((m, k), dtype=np.int64))

    @classmethod
    def _trusted(cls, cohort_reports: NDArray[np.int64], ones: NDArray[np.int64]) -> BitCountAccumulator:
        # Skips validation: for results of arithmetic on validated accumulators of one shape (the
        # ingest hot path adds one per request, and validating 64 x 128 cells each time cost ~10%).
        acc = object.__new__(cls)
        acc.cohort_reports = cohort_reports
        acc.ones = ones
        return acc

    @property
    def m(self) -> int:
        return int(self.ones.shape[0])

    @property
    def k(self) -> int:
        return int(self.ones.shape[1])

    @property
    def num_bytes(self) -> int:
        """Bytes of one packed report: ceil(k/8)."""
        return (self.k + 7) // 8

    @property
    def n(self) -> int:
        """Total number of reports added."""
        return int(self.cohort_reports.sum())

    def add_bits(self, bits: NDArray[np.uint8], cohorts: NDArray[Any] | None = None) -> None:
        """Add a batch of packed reports in place.

        Args:
            bits: uint8 array (n, ceil(k/8)); report bit i is ``(bits[r, i // 8] >> (i % 8)) & 1``
                (numpy ``packbits(..., bitorder="little")``). Unused high bits of the last byte must be 0.
            cohorts: integer array (n,) of cohorts in [0, m), or None when m == 1.

        Raises:
            InvalidReportError: wrong dtype or shape, a cohort out of range, or an unused bit set. Nothing
                is added when the batch is rejected.

        Performance: no per-report Python loop. For batches large enough to amortise it (n >= 32 m,
        i.e. n * k >= m * ceil(k/8) * 256) and m <= 8192, ``np.bincount`` counts (cohort, byte position,
        byte value) triples over a few byte positions at a time (a cache-sized table), and a (256 x 8)
        0/1 matrix turns byte-value counts into bit counts: n * ceil(k/8) work instead of n * k.
        Otherwise reports are sorted by cohort per chunk, unpacked, and summed per cohort with
        ``np.add.reduceat``.
        """
        m, nb = self.m, self.num_bytes
        b, coh = _check_packed(bits, cohorts, m, self.k)
        n = b.shape[0]
        if n == 0:
            return
        if n <= _SMALL_BATCH:
            # Single reports and tiny batches: add the unpacked rows in place. Building an (m, k)
            # partial sum (and sorting by cohort) would cost more than the rows themselves.
            self._add_rows(np.unpackbits(b, axis=1, count=self.k, bitorder="little"), coh)
            return
        table_size = m * nb * 256
        # The byte table costs O(table) to set up and O(n * ceil(k/8)) per batch; unpacking costs
        # O(n * k). So the table only pays off once n * k exceeds its size (n > 32 m): large simulation
        # chunks take it, a 1,000-report network batch (or a single report) does not.
        if m * 256 <= _BYTE_TABLE_MAX_ENTRIES and n * self.k >= table_size:
            ones = self._count_by_byte_table(b, coh)
        else:
            ones = self._count_by_sorting(b, coh)
        self.ones += ones
        if coh is None:
            self.cohort_reports[0] += n
        else:
            self.cohort_reports += np.bincount(coh, minlength=m)

    def _add_rows(self, rows: NDArray[np.uint8], coh: NDArray[np.intp] | None) -> None:
        """Add unpacked report rows (n, k) of cohorts ``coh`` (None when m == 1) in place."""
        n = rows.shape[0]
        if coh is None:
            self.ones[0] += rows.sum(axis=0, dtype=np.int64)
            self.cohort_reports[0] += n
        elif n == 1:  # the single-report RPC: plain indexing, no ufunc.at machinery
            self.ones[coh[0]] += rows[0]
            self.cohort_reports[coh[0]] += 1
        else:
            np.add.at(self.ones, coh, rows)
            np.add.at(self.cohort_reports, coh, 1)

    def _count_by_byte_table(self, b: NDArray[np.uint8], coh: NDArray[np.intp] | None) -> NDArray[np.int64]:
        m, nb, n = self.m, self.num_bytes, b.shape[0]
        ones = np.zeros((m, nb * 8), dtype=np.int64)
        # g byte positions per bincount, so that one call's table of (cohort, position, byte value)
        # counters (m * g * 256 of them) stays cache-sized; rows per call >= m * 256 so that building
        # and adding each call's table never costs more than the bytes it counts.
        g = max(1, min(nb, _TABLE_TARGET // (m * 256)))
        rows = max(_CHUNK_ELEMENTS // g, m * 256)
        for g0 in range(0, nb, g):
            gg = min(g, nb - g0)
            size = m * gg * 256
            table = np.zeros(size, dtype=np.int64)
            offset = np.arange(gg, dtype=np.intp) * 256
            for start in range(0, n, rows):
                block = b[start : start + rows, g0 : g0 + gg]
                if coh is None:
                    idx = offset + block
                else:
                    idx = (coh[start : start + rows] * (gg * 256))[:, None] + offset
                    idx += block
                table += np.bincount(idx.ravel(), minlength=size)
            # (m, gg, 256) byte-value counts -> (m, gg, 8) bit counts, bit 0 of each byte first.
            ones[:, 8 * g0 : 8 * (g0 + gg)] = (table.reshape(m, gg, 256) @ _BYTE_BITS).reshape(m, 8 * gg)
        return ones[:, : self.k]

    def _count_by_sorting(self, b: NDArray[np.uint8], coh: NDArray[np.intp] | None) -> NDArray[np.int64]:
        m, k = self.m, self.k
        out = np.zeros((m, k), dtype=np.int64)
        chunk = max(1, _CHUNK_ELEMENTS // k)
        for start in range(0, b.shape[0], chunk):
            block = b[start : start + chunk]
            unpacked = np.unpackbits(block, axis=1, count=k, bitorder="little")
            if coh is None:
                out[0] += unpacked.sum(axis=0, dtype=np.int64)
                continue
            c = coh[start : start + chunk]
            order = np.argsort(c, kind="stable")
            sorted_c = c[order]
            starts = np.flatnonzero(np.r_[True, sorted_c[1:] != sorted_c[:-1]])
            sums = np.add.reduceat(unpacked[order].astype(np.int64), starts, axis=0)
            out[sorted_c[starts]] += sums
        return out

    def _check_same_shape(self, other: BitCountAccumulator) -> None:
        if other.ones.shape != self.ones.shape:
            raise InvalidReportError(
                "accumulator",
                f"m={other.m}, k={other.k}",
                f"m={self.m}, k={self.k} (accumulators of one campaign)",
            )

    def __add__(self, other: object) -> BitCountAccumulator:
        if isinstance(other, BitRows):
            out = self.copy()
            out += other
            return out
        if not isinstance(other, BitCountAccumulator):
            return NotImplemented
        self._check_same_shape(other)
        return BitCountAccumulator._trusted(
            self.cohort_reports + other.cohort_reports, self.ones + other.ones
        )

    def __iadd__(self, other: object) -> BitCountAccumulator:
        if isinstance(other, BitRows):
            if (other.m, other.k) != (self.m, self.k):
                raise InvalidReportError(
                    "reports",
                    f"m={other.m}, k={other.k}",
                    f"m={self.m}, k={self.k} (reports of this campaign)",
                )
            self._add_rows(other.rows, other.cohorts)
            return self
        if not isinstance(other, BitCountAccumulator):
            return NotImplemented
        self._check_same_shape(other)
        self.cohort_reports += other.cohort_reports
        self.ones += other.ones
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BitCountAccumulator):
            return NotImplemented
        return bool(
            np.array_equal(self.cohort_reports, other.cohort_reports)
            and np.array_equal(self.ones, other.ones)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"BitCountAccumulator(m={self.m}, k={self.k}, n={self.n})"

    def copy(self) -> BitCountAccumulator:
        return BitCountAccumulator._trusted(self.cohort_reports.copy(), self.ones.copy())

    # The ``bits`` layout (ldp_client.spec.Layout): shape (m, k), standard input (cohorts or None, bits).
    layout_kind: ClassVar[str] = "bits"

    @classmethod
    def of_shape(cls, shape: tuple[int, ...]) -> BitCountAccumulator:
        """The empty accumulator of a ``bits`` layout of shape ``(m, k)``."""
        m, k = shape
        return cls.zero(m, k)

    @classmethod
    def from_sums(cls, sums: Any) -> BitCountAccumulator:
        """The accumulator holding a ``bits`` layout's sums ``(cohort_reports, ones)``."""
        cohort_reports, ones = sums
        return cls(cohort_reports, ones)

    @classmethod
    def delta_of(cls, shape: tuple[int, ...], batch: Any) -> BitCountAccumulator | BitRows:
        """What one batch ``(cohorts, bits)`` adds: its :class:`BitRows` for at most 16 reports (no (m, k)
        temporary: the single-report RPC's case), otherwise a fresh accumulator with the batch added."""
        cohorts, bits = batch
        m, k = shape
        if np.shape(bits)[:1] and np.shape(bits)[0] <= _SMALL_BATCH:
            return BitRows(m, k, bits, cohorts)
        delta = cls.of_shape(shape)
        delta.add_bits(bits, cohorts)
        return delta

    @property
    def layout_shape(self) -> tuple[int, ...]:
        return (self.m, self.k)

    def add_batch(self, batch: Any) -> None:
        """Add a ``bits`` layout's standard input ``(cohorts or None, bits)`` in place: :meth:`add_bits`."""
        cohorts, bits = batch
        self.add_bits(bits, cohorts)

    def to_bytes(self) -> bytes:
        """The versioned, checksummed serialization described in the module docstring."""
        payload = (
            self.cohort_reports.astype(_I64, copy=False).tobytes()
            + self.ones.astype(_I64, copy=False).tobytes()
        )
        return _frame(_KIND_BIT_COUNTS, (self.m, self.k), payload)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> BitCountAccumulator:
        """Inverse of :meth:`to_bytes`.

        Raises:
            CorruptAccumulatorError: wrong magic/version/kind/shape/length, bad checksum, negative counts,
                or a bit count above its cohort's report count.
        """
        kind, shape, payload = _unframe(data)
        if kind != _KIND_BIT_COUNTS:
            raise CorruptAccumulatorError("kind", kind, f"{_KIND_BIT_COUNTS} (a BitCountAccumulator)")
        m, k = shape
        if not 1 <= m <= MAX_COHORTS:
            raise CorruptAccumulatorError("m", m, f"an integer in [1, {MAX_COHORTS}]")
        if not 1 <= k <= MAX_RAPPOR_BITS:
            raise CorruptAccumulatorError("k", k, f"an integer in [1, {MAX_RAPPOR_BITS}]")
        arr = _payload_int64(payload, m + m * k)
        reports, ones = arr[:m], arr[m:].reshape(m, k)
        if (ones > reports[:, None]).any():
            raise CorruptAccumulatorError("ones", "a bit count above its cohort's reports", "ones <= reports")
        return cls(reports, ones)


Accumulator = (
    CountAccumulator | BitCountAccumulator | MeanAccumulator | SupportCountAccumulator | PairedAccumulator
)
"""MeanAccumulator (numeric mechanisms, issue 6) is defined in :mod:`ldp_aggregator.moments`, with its own
magic b"LDPM" and format; SupportCountAccumulator (frequency oracles, issue 6) in
:mod:`ldp_aggregator.support`, with magic b"LDPS"; PairedAccumulator (paired campaigns, issue 5) in
:mod:`ldp_aggregator.paired_accumulator`, with magic b"LDPP"."""


class LayoutAccumulator(Protocol):
    """The interface of a layout's accumulator class (:data:`LAYOUT_ACCUMULATORS`)."""

    layout_kind: ClassVar[str]

    @classmethod
    def of_shape(cls, shape: tuple[int, ...]) -> Self: ...

    @classmethod
    def from_sums(cls, sums: Any) -> Self: ...

    @classmethod
    def delta_of(cls, shape: tuple[int, ...], batch: Any) -> Any: ...

    @property
    def layout_shape(self) -> tuple[int, ...]: ...

    def add_batch(self, batch: Any) -> None: ...


LAYOUT_ACCUMULATORS: Final[dict[str, type[LayoutAccumulator]]] = {
    cls.layout_kind: cls
    for cls in (
        CountAccumulator,
        BitCountAccumulator,
        SupportCountAccumulator,
        MeanAccumulator,
        PairedAccumulator,
    )
}
"""The accumulator class of each layout kind (:class:`ldp_client.spec.Layout`). A composite layout (with
``parts``: ``paired``) is made of its parts' accumulators (:func:`_empty`), and its class shows them as
``layout_parts``."""


def _layout_class(layout: Layout) -> type[LayoutAccumulator]:
    cls = LAYOUT_ACCUMULATORS.get(layout.kind)
    if cls is None:  # a spec names a layout this aggregator has no accumulator for
        raise InvalidParameterError("layout", layout.kind, f"one of {', '.join(LAYOUT_ACCUMULATORS)}")
    return cls


class CompositeAccumulator(LayoutAccumulator, Protocol):
    """A composite layout's accumulator (``Layout.parts``): made of its parts' accumulators."""

    @classmethod
    def of_parts(cls, parts: tuple[Any, ...], shape: tuple[int, ...]) -> Self: ...

    @property
    def layout_parts(self) -> tuple[Any, ...]: ...


def _empty(layout: Layout) -> LayoutAccumulator:
    """The empty accumulator of a layout (of its parts' empty accumulators, for a composite layout)."""
    cls = _layout_class(layout)
    if layout.parts:
        composite = cast("type[CompositeAccumulator]", cls)
        return composite.of_parts(tuple(_empty(part) for part in layout.parts), layout.shape)
    return cls.of_shape(layout.shape)


def _matches(acc: object, layout: Layout) -> bool:
    """``acc`` is the accumulator ``layout`` describes: its class and shape, and its parts' (recursively)."""
    if not isinstance(acc, _layout_class(layout)) or acc.layout_shape != layout.shape:
        return False
    if not layout.parts:
        return True
    parts = cast(CompositeAccumulator, acc).layout_parts
    return len(parts) == len(layout.parts) and all(
        _matches(part, part_layout) for part, part_layout in zip(parts, layout.parts, strict=True)
    )


def accumulator_from_bytes(data: bytes | bytearray | memoryview) -> Accumulator:
    """Decode any accumulator from its ``to_bytes`` (the format is told by its magic bytes)."""
    if isinstance(data, bytes | bytearray | memoryview) and bytes(data[:4]) == MEAN_MAGIC:
        return MeanAccumulator.from_bytes(data)
    if isinstance(data, bytes | bytearray | memoryview) and bytes(data[:4]) == SUPPORT_MAGIC:
        return SupportCountAccumulator.from_bytes(data)
    if isinstance(data, bytes | bytearray | memoryview) and bytes(data[:4]) == PAIRED_MAGIC:  # issue 5
        return PairedAccumulator.from_bytes(data, accumulator_from_bytes)
    kind, _, _ = _unframe(data)
    if kind == _KIND_COUNTS:
        return CountAccumulator.from_bytes(data)
    return BitCountAccumulator.from_bytes(data)


def accumulator_for(params: MechanismParams) -> Accumulator:
    """The empty accumulator for a campaign's mechanism parameters: its layout's (``spec.layout``)."""
    return cast(Accumulator, _empty(registry.spec_for(params).layout(params)))


def accumulator_nbytes(params: MechanismParams) -> int:
    """About how many bytes a campaign's accumulator takes (in memory and serialized), without building it.

    Its layout's ``nbytes``: 64-bit counters times 8, plus a small allowance for the headers (a bound, for
    a layout whose exact integers grow). The service refuses a campaign whose accumulator would exceed its
    limit before allocating anything (the largest RAPPOR campaign the parameters allow, k = 4096 and
    m = 65536, would need 2 GiB).
    """
    return registry.spec_for(params).layout(params).nbytes


def check_matches(acc: Accumulator, params: MechanismParams) -> None:
    """Raise :class:`InvalidReportError` unless ``acc`` is the accumulator ``params``' layout describes (its
    class and shape, and its parts', for a composite layout)."""
    layout = registry.spec_for(params).layout(params)
    if _matches(acc, layout):
        return
    if isinstance(acc, tuple(LAYOUT_ACCUMULATORS.values())):
        value = f"{type(acc).__name__} of shape {cast(LayoutAccumulator, acc).layout_shape}"
    else:  # not an accumulator at all
        value = repr(acc)
    allowed = f"a {_layout_class(layout).__name__} of shape {layout.shape} for mechanism {params.name!r}"
    raise InvalidReportError("accumulator", value, allowed)


def add_columns(acc: Accumulator, params: MechanismParams, columns: Any) -> None:
    """Add one batch of decoded columns (``ldp_client.wire``'s contract) to ``acc`` (in place): the layout's
    standard input (``spec.layout_batch``), added by the layout's class.

    Raises:
        InvalidReportError: the accumulator does not belong to ``params``, or the batch is malformed.
    """
    spec = registry.spec_for(params)
    check_matches(acc, params)
    cast(LayoutAccumulator, acc).add_batch(spec.layout_batch(params, columns))


def batch_delta(params: MechanismParams, columns: Any) -> Accumulator | BitRows:
    """What one validated batch adds to its campaign's accumulator (``committed + delta``).

    For the bit-count mechanisms (rappor, basic-rappor, boolean-rappor) and at most 16 reports, a
    :class:`BitRows` (no (m, k) temporary: the single-report RPC's case); otherwise a fresh accumulator
    with the batch added (:func:`add_columns`).

    Raises:
        InvalidReportError: the batch is malformed (as :func:`add_columns`).
    """
    spec = registry.spec_for(params)
    layout = spec.layout(params)
    batch = spec.layout_batch(params, columns)
    if layout.parts:  # a composite: an empty one with the batch added
        empty = _empty(layout)
        empty.add_batch(batch)
        return cast(Accumulator, empty)
    return cast("Accumulator | BitRows", _layout_class(layout).delta_of(layout.shape, batch))


def accumulator_from_sums(params: MechanismParams, sums: Any) -> Accumulator:
    """The accumulator of a registered mechanism's campaign holding ``sums`` (in its layout's form, as a
    spec's exact sum sampler returns them: :class:`ldp_client.spec.SumSampler`).

    Raises:
        InvalidParameterError: ``params`` is not the parameters of a registered mechanism.
        InvalidReportError: ``sums`` do not fit the layout.
    """
    spec = registry.spec_for(params)
    layout = spec.layout(params)
    acc = _layout_class(layout).from_sums(sums)
    check_matches(cast(Accumulator, acc), params)
    return cast(Accumulator, acc)
