"""The reporter's fixed-size journal rows and the ``ReportBatch`` they become, in pure Python (no numpy).

The device path (:mod:`ldp_client.reporter`) must not need numpy, so the transposition from rows (one per
report, as journaled) to columns (one ``bytes`` field per column, as sent) is done here with byte slicing,
and the reverse for splitting a batch the server found too large.

Row layout per mechanism (little-endian; bit rows in little bit order, as on the wire):

==========================  ====================================================================
mechanism                   one journal row
==========================  ====================================================================
rr                          1 byte, 0 or 1
grr, hr                     u32 index
rappor                      u32 cohort, then ceil(k/8) bytes of bits
basic-, boolean-rappor      ceil(k/8) bytes of bits (boolean: 1 byte, 0 or 1)
oue, sue, ss                ceil(d/8) bytes of bits
olh, blh                    u64 a, u64 b, u32 bucket
laplace, piecewise, hybrid  u32 code
duchi, sr                   u32 code, 0 or 1 (packed 8 per byte in the batch, as rr answers)
multidim                    k pairs (u32 attribute, u32 code)
paired                      the first side's row, then the second side's
set-valued                  the inner oracle's row
==========================  ====================================================================

A row is described as a list of fields (:class:`ldp_client.codecs.RowField`), each a slice of the row that
goes to one column of the batch (a column may take several fields per row: multidim's k attributes). Each
mechanism's spec (:mod:`ldp_client.registry`) describes, packs and unpacks its own rows
(``spec.row_fields``, ``spec.row_packer``, ``spec.row_unpacker``); the table above is the layouts they
give. :func:`batch_from_rows` checks only the shape (whole rows, at least one); :func:`check_rows` checks
every value by decoding each row back into an encoder output and validating it with
:func:`ldp_client.wire.report_to_proto` (the same rules as the server), which the reporter does for
journals recovered from disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ldp_client import registry, wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.codecs import RowField
from ldp_client.errors import InvalidReportError
from ldp_client.params import MechanismParams

__all__ = [
    "batch_from_rows",
    "check_rows",
    "row_bytes",
    "row_packer",
    "rows_from_batch",
]

# bytes 0/1 <-> ASCII '0'/'1', to pack and unpack bits with int() and format() instead of a loop.
_TO_ASCII = bytes.maketrans(b"\x00\x01", b"01")
_FROM_ASCII = bytes.maketrans(b"01", b"\x00\x01")


def _layout(params: MechanismParams) -> list[RowField]:
    """The fields of one row, in row order."""
    return list(registry.spec_for(params).row_fields(params))


def row_bytes(params: MechanismParams) -> int:
    """Bytes of one report in the journal, and an upper bound on what it adds to a ``ReportBatch``."""
    return sum(f.width for f in _layout(params))


def row_packer(params: MechanismParams) -> Callable[[Any], bytes]:
    """The journal row of one per-report encoder output (layout in the module docstring)."""
    return registry.spec_for(params).row_packer(params)


def _count(params: MechanismParams, rows: bytes) -> int:
    size = row_bytes(params)
    if not rows or len(rows) % size:
        raise InvalidReportError("len(journal rows)", len(rows), f"a positive multiple of {size} bytes")
    return len(rows) // size


def _pack_bits(flags: bytes) -> bytes:
    """Bytes of 0/1 (one per report) packed 8 per byte in little bit order: bit j of the result is flag j."""
    if flags.translate(None, b"\x00\x01"):
        raise InvalidReportError("journal bit", max(flags), "0 or 1")
    n = len(flags)
    return int(flags[::-1].translate(_TO_ASCII), 2).to_bytes((n + 7) // 8, "little")


def _unpack_bits(packed: bytes, n: int) -> bytes:
    """Inverse of :func:`_pack_bits`: n bytes of 0/1."""
    value = int.from_bytes(packed, "little")
    return format(value, f"0{n}b")[-n:][::-1].encode("ascii").translate(_FROM_ASCII)


def _set(msg: Any, path: tuple[str, ...], data: bytes) -> None:
    for name in path[:-1]:
        msg = getattr(msg, name)
    setattr(msg, path[-1], data)


def _get(msg: Any, path: tuple[str, ...]) -> bytes:
    for name in path:
        msg = getattr(msg, name)
    return bytes(msg)


def batch_from_rows(
    *, campaign_id: str, batch_id: str, params: MechanismParams, rows: bytes
) -> reports_pb2.ReportBatch:
    """The ``ReportBatch`` of concatenated journal rows (a loop over rows and fields, no numpy).

    Raises:
        InvalidReportError: ``rows`` is not a positive whole number of rows (a bit field other than 0/1
            is found as well); values are not range-checked here (see :func:`check_rows`).
    """
    n = _count(params, rows)
    layout = _layout(params)
    msg = reports_pb2.ReportBatch(campaign_id=campaign_id, batch_id=batch_id, count=n)
    if len(layout) == 1 and not layout[0].packed:  # the row is the column (grr, hr, codes, bit rows)
        _set(msg, layout[0].path, bytes(rows))
        return msg
    view = memoryview(rows)
    columns: dict[tuple[str, ...], list[bytes | memoryview]] = {f.path: [] for f in layout}
    pos = 0
    for _ in range(n):
        for f in layout:
            columns[f.path].append(view[pos : pos + 1] if f.packed else view[pos : pos + f.width])
            pos += f.width
    for f in layout:
        parts = columns.pop(f.path, None)
        if parts is None:  # a column with several fields per row (multidim) is set once
            continue
        data = b"".join(parts)
        _set(msg, f.path, _pack_bits(data) if f.packed else data)
    return msg


def rows_from_batch(params: MechanismParams, msg: reports_pb2.ReportBatch) -> bytes:
    """The journal rows of a batch built by :func:`batch_from_rows` (its exact inverse).

    Raises:
        InvalidReportError: a column whose length does not match ``msg.count``.
    """
    n = msg.count
    layout = _layout(params)
    per_row: dict[tuple[str, ...], int] = {}
    for f in layout:
        per_row[f.path] = per_row.get(f.path, 0) + f.width
    columns: dict[tuple[str, ...], bytes] = {}
    for f in layout:
        if f.path in columns:
            continue
        data = _get(msg, f.path)
        if f.packed:
            if len(data) != (n + 7) // 8:
                raise InvalidReportError(f"len({'.'.join(f.path)})", len(data), f"{(n + 7) // 8} bytes")
            flags = _unpack_bits(data, n)
            # Widen each flag to the row field (1 byte for rr, a little-endian u32 code for duchi/sr).
            pad = bytes(f.width - 1)
            data = b"".join(bytes((flag,)) + pad for flag in flags) if pad else flags
        elif len(data) != n * per_row[f.path]:
            raise InvalidReportError(f"len({'.'.join(f.path)})", len(data), f"{n * per_row[f.path]} bytes")
        columns[f.path] = data
    if len(layout) == 1:
        return columns[layout[0].path]
    cursors = dict.fromkeys(columns, 0)
    out: list[bytes] = []
    for _ in range(n):
        for f in layout:
            cur = cursors[f.path]
            out.append(columns[f.path][cur : cur + f.width])
            cursors[f.path] = cur + f.width
    return b"".join(out)


def _row_unpacker(params: MechanismParams) -> Callable[[bytes], Any]:
    """Inverse of :func:`row_packer`: the encoder output a journal row stands for (to validate it)."""
    return registry.spec_for(params).row_unpacker(params)


def check_rows(params: MechanismParams, campaign_id: str, rows: bytes) -> None:
    """Validate every journal row with the server's rules for one report (pure Python, a loop per row).

    Raises:
        InvalidReportError: not whole rows, or the first row whose value does not fit ``params`` (the
            message names ``journal row i``).
    """
    n = _count(params, rows)
    size = row_bytes(params)
    unpack = _row_unpacker(params)
    for i in range(n):
        value = unpack(rows[i * size : (i + 1) * size])
        try:
            wire.report_to_proto(campaign_id=campaign_id, report_id="journal", params=params, report=value)
        except InvalidReportError as exc:
            # "report.cohort" -> "journal row 3.cohort": the field as the row's, named by its position.
            suffix = exc.field.removeprefix("report")
            raise InvalidReportError(f"journal row {i}{suffix}", exc.value, exc.allowed) from exc
