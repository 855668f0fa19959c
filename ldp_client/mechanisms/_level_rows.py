"""Reports of a level and a local-hashing answer: (u16 level, u64 seed a, u64 seed b, u32 bucket).

Two mechanisms send this report: prefix extension (``pem``: the level is the device's group) and
hierarchical intervals (``hio``: its level in the tree). What they share is its shape, in one place: the
seed checks, the 22-byte journal row, the journal's fields of the batch columns and the numpy columns a
list of reports becomes. What a level or a bucket may be is each mechanism's own (its ``_report_value``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ldp_client.codecs import RowField, as_int
from ldp_client.errors import InvalidReportError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "check_seed",
    "level_columns",
    "level_row_fields",
    "pack_level_row",
    "unpack_level_row",
]

_SEED: Final = "an integer in [0, 2**64)"


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
