"""Per cohort, how many reports and how many set each bit: the ``bits`` layout's accumulator (the RAPPOR
variants), and :class:`BitRows`, the increment of a tiny batch.

Its byte form is the ``LDPA`` frame of :mod:`ldp_aggregator.accumulator_format`; the contract every
accumulator keeps is in :mod:`ldp_aggregator.accumulators`. The tuning constants below choose how
:meth:`BitCountAccumulator.add_bits` counts (tests set them small to exercise every path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ldp_aggregator.accumulator_errors import CorruptAccumulatorError
from ldp_aggregator.accumulator_format import (
    I64,
    KIND_BIT_COUNTS,
    as_int64_vector,
    check_size,
    frame,
    payload_int64,
    unframe,
)
from ldp_client.errors import InvalidReportError
from ldp_client.params import MAX_COHORTS, MAX_RAPPOR_BITS

if TYPE_CHECKING:
    from numpy.typing import NDArray

# The byte-table path of BitCountAccumulator.add_bits counts (cohort, byte position, byte value) triples
# with np.bincount; it is used while one byte position's m * 256 counters fit in this many entries
# (16 MiB, m <= 8192), otherwise reports are sorted by cohort (see add_bits).
_BYTE_TABLE_MAX_ENTRIES = 1 << 21
# Counters per bincount call on the byte-table path (2 MiB: stays in cache; measured fastest).
_TABLE_TARGET = 1 << 18
# Elements of the index array built per chunk (2 MiB of intp: stays in cache; measured fastest).
_CHUNK_ELEMENTS = 1 << 18
# Above this many unpacked 0/1 bytes per chunk, _count_by_sorting sums bytes into int64 directly instead
# of summing an int64 copy (which then outgrows the cache).
_WIDE_CHUNK_ELEMENTS = 1 << 17
# Report bits as a (256, 8) table: row b holds the 8 bits of byte value b, bit 0 first (little order).
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(
    np.int64
)


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
    kind: ClassVar[int] = KIND_BIT_COUNTS

    cohort_reports: NDArray[np.int64]
    ones: NDArray[np.int64]

    def __init__(self, cohort_reports: Any, ones: Any) -> None:
        reports = as_int64_vector("cohort_reports", cohort_reports)
        m = check_size("m", reports.shape[0], MAX_COHORTS)
        arr = np.asarray(ones)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InvalidReportError("ones", str(arr.dtype), "an integer array")
        if arr.ndim != 2 or arr.shape[0] != m:
            raise InvalidReportError("ones", arr.shape, f"a 2-D array of shape ({m}, k)")
        check_size("k", arr.shape[1], MAX_RAPPOR_BITS)
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
        m = check_size("m", m, MAX_COHORTS)
        k = check_size("k", k, MAX_RAPPOR_BITS)
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
            if unpacked.size <= _WIDE_CHUNK_ELEMENTS:
                sums = np.add.reduceat(unpacked[order].astype(np.int64), starts, axis=0)
            else:
                # Wide reports (a sketch's 1,024-bit rows): an int64 copy of the chunk no longer fits
                # the cache, so sum the 0/1 bytes straight into int64 (2-4x faster at k >= 256; slower
                # than the copy below that, measured at n = 1,000).
                sums = np.add.reduceat(unpacked[order], starts, axis=0, dtype=np.int64)
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
        """The versioned, checksummed serialization (:mod:`ldp_aggregator.accumulator_format`)."""
        payload = (
            self.cohort_reports.astype(I64, copy=False).tobytes()
            + self.ones.astype(I64, copy=False).tobytes()
        )
        return frame(KIND_BIT_COUNTS, (self.m, self.k), payload)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> BitCountAccumulator:
        """Inverse of :meth:`to_bytes`.

        Raises:
            CorruptAccumulatorError: wrong magic/version/kind/shape/length, bad checksum, negative counts,
                or a bit count above its cohort's report count.
        """
        kind, shape, payload = unframe(data)
        if kind != KIND_BIT_COUNTS:
            raise CorruptAccumulatorError("kind", kind, f"{KIND_BIT_COUNTS} (a BitCountAccumulator)")
        m, k = shape
        if not 1 <= m <= MAX_COHORTS:
            raise CorruptAccumulatorError("m", m, f"an integer in [1, {MAX_COHORTS}]")
        if not 1 <= k <= MAX_RAPPOR_BITS:
            raise CorruptAccumulatorError("k", k, f"an integer in [1, {MAX_RAPPOR_BITS}]")
        arr = payload_int64(payload, m + m * k)
        reports, ones = arr[:m], arr[m:].reshape(m, k)
        if (ones > reports[:, None]).any():
            raise CorruptAccumulatorError("ones", "a bit count above its cohort's reports", "ones <= reports")
        return cls(reports, ones)
