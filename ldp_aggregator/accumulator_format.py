"""The checksummed byte form of the two accumulators defined in :mod:`ldp_aggregator.count_accumulator`
and :mod:`ldp_aggregator.bit_accumulator`, and the input checks they share.

Serialized form (``to_bytes``), little-endian throughout::

    magic  b"LDPA"        4 bytes
    version               u8   (currently 1)
    kind                  u8   (1 = CountAccumulator, 2 = BitCountAccumulator)
    ndim                  u16  (1 for counts: (size,), 2 for bit counts: (m, k))
    shape                 ndim x u64
    payload               int64: counts, or cohort_reports (m) followed by ones (m*k, row-major)
    crc32                 u32 of everything before it (zlib.crc32)

:func:`unframe` checks every field of the frame and the checksum and raises
:class:`~ldp_aggregator.accumulator_errors.CorruptAccumulatorError` naming what is wrong.
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from ldp_aggregator.accumulator_errors import CorruptAccumulatorError
from ldp_client.errors import InvalidReportError

if TYPE_CHECKING:
    from numpy.typing import NDArray

MAGIC = b"LDPA"
FORMAT_VERSION = 1
KIND_COUNTS = 1
KIND_BIT_COUNTS = 2
HEADER = struct.Struct("<4sBBH")
CRC = struct.Struct("<I")
I64 = np.dtype("<i8")


def as_int64_vector(name: str, values: Any, length: int | None = None) -> NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidReportError(name, str(arr.dtype), "an integer array")
    if arr.ndim != 1 or (length is not None and arr.shape[0] != length):
        want = f"({length},)" if length is not None else "(n,)"
        raise InvalidReportError(name, arr.shape, f"a 1-D array of shape {want}")
    if arr.size and int(arr.min()) < 0:
        raise InvalidReportError(name, int(arr.min()), "non-negative counts")
    return np.array(arr, dtype=np.int64, copy=True)


def check_size(name: str, value: object, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= int(value) <= hi:
        raise InvalidReportError(name, value, f"an integer in [1, {hi}]")
    return int(value)


def frame(kind: int, shape: tuple[int, ...], payload: bytes) -> bytes:
    head = HEADER.pack(MAGIC, FORMAT_VERSION, kind, len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
    body = head + payload
    return body + CRC.pack(zlib.crc32(body))


def unframe(data: bytes | bytearray | memoryview) -> tuple[int, tuple[int, ...], memoryview]:
    """Check magic, version, checksum and lengths; return (kind, shape, payload view)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CorruptAccumulatorError("data", type(data).__name__, "bytes")
    buf = memoryview(data).cast("B")
    if len(buf) < HEADER.size + CRC.size:
        raise CorruptAccumulatorError("length", len(buf), f"at least {HEADER.size + CRC.size} bytes")
    magic, version, kind, ndim = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptAccumulatorError("magic", bytes(magic), f"{MAGIC!r}")
    if version != FORMAT_VERSION:
        raise CorruptAccumulatorError("version", version, f"{FORMAT_VERSION} (this build reads only that)")
    (crc,) = CRC.unpack_from(buf, len(buf) - CRC.size)
    if zlib.crc32(buf[: len(buf) - CRC.size]) != crc:
        raise CorruptAccumulatorError("crc32", crc, "the checksum of the preceding bytes (data corrupted)")
    expected_ndim = {KIND_COUNTS: 1, KIND_BIT_COUNTS: 2}.get(kind)
    if expected_ndim is None:
        raise CorruptAccumulatorError("kind", kind, f"{KIND_COUNTS} (counts) or {KIND_BIT_COUNTS} (bits)")
    if ndim != expected_ndim:
        raise CorruptAccumulatorError("ndim", ndim, f"{expected_ndim} for kind {kind}")
    shape_end = HEADER.size + 8 * ndim
    if len(buf) < shape_end + CRC.size:
        raise CorruptAccumulatorError("length", len(buf), f"at least {shape_end + CRC.size} bytes")
    shape = struct.unpack_from(f"<{ndim}Q", buf, HEADER.size)
    return kind, tuple(int(s) for s in shape), buf[shape_end : len(buf) - CRC.size]


def payload_int64(payload: memoryview, count: int) -> NDArray[np.int64]:
    if len(payload) != 8 * count:
        raise CorruptAccumulatorError("payload length", len(payload), f"{8 * count} bytes ({count} int64)")
    arr = np.frombuffer(payload, dtype=I64).astype(np.int64)
    if arr.size and int(arr.min()) < 0:
        raise CorruptAccumulatorError("counts", int(arr.min()), "non-negative counts")
    return arr
