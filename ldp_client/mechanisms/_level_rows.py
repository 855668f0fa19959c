"""Reports of a level and a local-hashing answer: (u16 level, u64 seed a, u64 seed b, u32 bucket).

Four mechanisms send this report: prefix extension (``pem``: the level is the device's group),
hierarchical intervals (``hio``: its level in the tree), CALM (``calm``: its marginal's group) and SVIM
(``svim``: its stage's group; the seed is 0 under GRR). What they share is its shape, in one place: the seed
checks, the 22-byte journal row, the journal's fields of the batch columns, the batch columns' wire form
(:func:`columns_to_proto`, :func:`columns_from_proto`) and the numpy columns a list of reports becomes.
What a level or a bucket may be is each mechanism's own (its ``_report_value`` and value checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ldp_client.codecs import U32_LE, U64_LE, RowField, as_int, check_count, check_length
from ldp_client.errors import InvalidReportError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "check_seed",
    "columns_from_proto",
    "columns_to_proto",
    "level_columns",
    "level_row_fields",
    "pack_level_row",
    "unpack_level_row",
]

_SEED: Final = "an integer in [0, 2**64)"
_U16_LE: Final = "<u2"


def check_seed(field: str, a: object, b: object) -> tuple[int, int]:
    """The local-hashing seed (a, b) as integers in [0, 2**64); else InvalidReportError naming the field."""
    out = []
    for name, value in (("a", a), ("b", b)):
        v = as_int(f"{field}.{name}", value, _SEED)
        if not 0 <= v < 1 << 64:
            raise InvalidReportError(f"{field}.{name}", v, _SEED)
        out.append(v)
    return out[0], out[1]


def pack_level_row(level: int, a: int, b: int, bucket: int) -> bytes:
    """The 22-byte journal row of one report: u16 level, u64 a, u64 b, u32 bucket, little-endian."""
    return (
        level.to_bytes(2, "little")
        + a.to_bytes(8, "little")
        + b.to_bytes(8, "little")
        + bucket.to_bytes(4, "little")
    )


def unpack_level_row(row: bytes) -> tuple[int, int, int, int]:
    """(level, a, b, bucket) of a journal row."""
    return (
        int.from_bytes(row[:2], "little"),
        int.from_bytes(row[2:10], "little"),
        int.from_bytes(row[10:18], "little"),
        int.from_bytes(row[18:], "little"),
    )


def level_row_fields(batch_member: str, levels_field: str) -> tuple[RowField, ...]:
    """The batch columns a journal row is made of (``ReportBatch.<batch_member>``; levels named as there)."""
    return (
        RowField((batch_member, levels_field), 2),
        RowField((batch_member, "a"), 8),
        RowField((batch_member, "b"), 8),
        RowField((batch_member, "buckets"), 4),
    )


def level_columns(
    rows: Sequence[tuple[int, int, int, int]],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The numpy columns (uint16 levels, uint64 a, uint64 b, uint32 buckets) of checked reports."""
    import numpy as np

    return (
        np.array([r[0] for r in rows], dtype=np.uint16),
        np.array([r[1] for r in rows], dtype=np.uint64),
        np.array([r[2] for r in rows], dtype=np.uint64),
        np.array([r[3] for r in rows], dtype=np.uint32),
    )


def columns_to_proto(msg: Any, member: str, levels_field: str, columns: Sequence[Any]) -> None:
    """Checked columns (levels, a, b, buckets) into ``ReportBatch.<member>`` and its ``count``: n
    little-endian uint16 levels (named ``levels_field`` there), uint64 a, uint64 b and uint32 buckets."""
    levels, a, b, y = columns
    n = levels.shape[0]
    check_count("count", n)
    msg.count = n
    cols = getattr(msg, member)
    setattr(cols, levels_field, levels.astype(_U16_LE).tobytes())
    cols.a = a.astype(U64_LE).tobytes()
    cols.b = b.astype(U64_LE).tobytes()
    cols.buckets = y.astype(U32_LE).tobytes()


def columns_from_proto(
    msg: Any, member: str, levels_field: str, n: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The columns (uint16 levels, uint64 a, uint64 b, uint32 buckets) of ``ReportBatch.<member>`` holding
    ``n`` reports, each byte string's length checked (InvalidReportError naming it); their values are the
    mechanism's to check."""
    import numpy as np

    cols = getattr(msg, member)
    levels_bytes = getattr(cols, levels_field)
    how = f"count for count={n} little-endian"
    check_length(f"{member}.{levels_field}", levels_bytes, 2 * n, f"2 * {how} uint16")
    check_length(f"{member}.a", cols.a, 8 * n, f"8 * {how} uint64")
    check_length(f"{member}.b", cols.b, 8 * n, f"8 * {how} uint64")
    check_length(f"{member}.buckets", cols.buckets, 4 * n, f"4 * {how} uint32")
    return (
        np.frombuffer(levels_bytes, dtype=_U16_LE).astype(np.uint16, copy=False),
        np.frombuffer(cols.a, dtype=U64_LE).astype(np.uint64, copy=False),
        np.frombuffer(cols.b, dtype=U64_LE).astype(np.uint64, copy=False),
        np.frombuffer(cols.buckets, dtype=U32_LE).astype(np.uint32, copy=False),
    )
