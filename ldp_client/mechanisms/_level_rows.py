"""Reports of a level and a local-hashing answer: (u16 level, u64 seed a, u64 seed b, u32 bucket).

Four mechanisms send this report: prefix extension (``pem``: the level is the device's group),
hierarchical intervals (``hio``: its level in the tree), CALM (``calm``: its marginal's group) and SVIM
(``svim``: its stage's group; the seed is 0 under GRR). What they share is its shape, in one place: the seed
checks, the 22-byte journal row, the journal's fields of the batch columns, the batch columns' wire form
(:func:`columns_to_proto`, :func:`columns_from_proto`), their types and shapes
(:func:`level_column_arrays`), the numpy columns a list of reports becomes, and the spec's codec methods
built on them (:class:`LevelRowsCodec`). What a level or a bucket may be is each mechanism's own (its
``report_value`` and ``check_level_values``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ldp_client.codecs import U32_LE, U64_LE, RowField, as_array, as_int, check_count, check_length
from ldp_client.errors import InvalidReportError

if TYPE_CHECKING:
    import numpy as np

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.spec import WireNames

__all__ = [
    "LevelRowsCodec",
    "check_seed",
    "columns_from_proto",
    "columns_to_proto",
    "level_column_arrays",
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


def level_column_arrays(
    columns: object, field: str, levels_field: str
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Batch columns as a caller gives them: a (levels, a, b, buckets) tuple of 1-d numpy arrays of one
    length, integer levels and buckets and uint64 seeds; else InvalidReportError naming the column. Their
    values are the mechanism's to check."""
    import numpy as np

    if not isinstance(columns, tuple) or len(columns) != 4:
        raise InvalidReportError(
            field, type(columns).__name__, f"a ({levels_field}, a, b, buckets) tuple of arrays"
        )
    levels = as_array(f"{field}.{levels_field}", columns[0], f"integer {levels_field}", 1)
    a = as_array(f"{field}.a", columns[1], "uint64 seed words", 1)
    b = as_array(f"{field}.b", columns[2], "uint64 seed words", 1)
    y = as_array(f"{field}.buckets", columns[3], "integer buckets", 1)
    n = levels.shape[0]
    for name, arr in (("a", a), ("b", b)):
        if arr.dtype != np.uint64 or arr.shape[0] != n:
            raise InvalidReportError(f"{field}.{name}", f"{arr.dtype}{arr.shape}", f"uint64 of shape ({n},)")
    for name, arr in ((levels_field, levels), ("buckets", y)):
        if not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_ or arr.shape[0] != n:
            raise InvalidReportError(
                f"{field}.{name}", f"{arr.dtype}{arr.shape}", f"integers of shape ({n},)"
            )
    return levels, a, b, y


class LevelRowsCodec:
    """The codec methods of a :class:`~ldp_client.spec.MechanismSpec` whose report is a level row (put it
    before the spec's base class): the batch columns to and from ``ReportBatch.<wire.batch>``, a report
    into ``Report.<wire.report>``, a list of reports into columns, and the journal row. The spec gives
    the name of its levels column (``level_field``), its report type (a NamedTuple of level, a, b, bucket
    under its own names), and two checks: :meth:`report_value` (one report, as the device's encoder made
    it) and :meth:`check_level_values` (the columns' values, vectorised)."""

    level_field: ClassVar[str]
    report_type: ClassVar[Callable[..., Any]]
    wire: ClassVar[WireNames]

    def report_value(self, field: str, report: object, params: Any) -> tuple[int, int, int, int]:
        """(level, a, b, bucket) of one report, checked; InvalidReportError naming ``field``."""
        raise NotImplementedError

    def check_level_values(self, columns: Sequence[Any], params: Any, field: str) -> None:
        """Every report's level, seed and bucket possible under ``params`` (InvalidReportError naming the
        column ``field``.<name> and the first bad value)."""
        raise NotImplementedError

    def checked_columns(
        self, columns: object, params: Any, field: str
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Columns a caller gives (an encoder's batch), their types, shapes and values checked."""
        checked = level_column_arrays(columns, field, self.level_field)
        self.check_level_values(checked, params, field)
        return checked

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: Any, columns: Any) -> None:
        field = self.wire.batch
        columns_to_proto(msg, field, self.level_field, self.checked_columns(columns, params, field))

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: Any, n: int) -> Any:
        columns = columns_from_proto(msg, self.wire.batch, self.level_field, n)
        self.check_level_values(columns, params, self.wire.batch)
        return columns

    def report_to_proto(self, msg: reports_pb2.Report, params: Any, output: Any) -> None:
        target = getattr(msg, self.wire.report)
        names = self.report_type._fields  # type: ignore[attr-defined]
        for name, value in zip(names, self.report_value("report", output, params), strict=True):
            setattr(target, name, value)

    def report_from_proto(self, msg: reports_pb2.Report, params: Any) -> Any:
        member = self.wire.report
        return level_columns([self.report_value(member, getattr(msg, member), params)])

    def batch_from_reports(self, params: Any, reports: Sequence[Any]) -> Any:
        return level_columns([self.report_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)])

    def row_fields(self, params: Any) -> tuple[RowField, ...]:
        return level_row_fields(self.wire.batch, self.level_field)

    def row_packer(self, params: Any) -> Callable[[Any], bytes]:
        return _pack_row

    def row_unpacker(self, params: Any) -> Callable[[bytes], Any]:
        report_type = self.report_type
        return lambda row: report_type(*unpack_level_row(row))


def _pack_row(report: Any) -> bytes:
    return pack_level_row(*report)
