"""Wire conversions of paired campaigns, reports and batches (issue 5: association).

Called by :mod:`ldp_client.wire` for :class:`~ldp_client.params.PairedParams`. A paired message holds
one message per side (``PairedSide``, ``PairedSideReport``, ``PairedSideColumns`` in the protos) whose
members and layouts are exactly those of a single campaign of the side's mechanism, so each side is
converted by the single-mechanism code of :mod:`ldp_client.wire` (on a temporary message holding that
member) and errors name the side: ``paired.first.rappor.k``, ``paired.second.len(rr_answers)``, ...

Batch columns of a paired campaign: ``(first columns, second columns)``, each in the format of its side's
mechanism, with the same number of rows (row j of both is one device).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.params import PAIRED_SIDE_TYPES, PairedParams

if TYPE_CHECKING:
    from ldp_client.params import PairedSide

__all__ = [
    "PairedColumns",
    "batch_from_proto",
    "batch_from_reports",
    "batch_to_proto",
    "params_from_proto",
    "params_to_proto",
    "report_from_proto",
    "report_to_proto",
]

PairedColumns: TypeAlias = tuple[Any, Any]
"""(first side's columns, second side's columns)."""

_SIDES = ("first", "second")


def _prefixed(exc: InvalidParameterError | InvalidReportError, side: str) -> InvalidReportError:
    return InvalidReportError(f"paired.{side}.{exc.field}", exc.value, exc.allowed)


def _copy_member(dst: Any, src: Any, member: str) -> None:
    value = getattr(src, member)
    if hasattr(value, "CopyFrom"):
        getattr(dst, member).CopyFrom(value)
    else:
        setattr(dst, member, value)


def params_to_proto(params: PairedParams) -> tuple[str, campaign_pb2.PairedParams]:
    """``("paired", PairedParams message)`` with each side as its mechanism's oneof member."""
    from ldp_client import wire

    msg = campaign_pb2.PairedParams()
    for side, side_params in zip(_SIDES, params.sides, strict=True):
        member, side_msg = wire.params_to_proto(side_params)
        getattr(getattr(msg, side), member).CopyFrom(side_msg)
    return "paired", msg


def params_from_proto(campaign: campaign_pb2.Campaign) -> PairedParams:
    """The PairedParams of a campaign whose mechanism is ``paired``; errors name ``first.``/``second.``."""
    from ldp_client import wire

    sides: list[PairedSide] = []
    for side in _SIDES:
        side_msg = getattr(campaign.paired, side)
        member = side_msg.WhichOneof("mechanism")
        if member is None:
            raise InvalidParameterError(
                f"{side}.mechanism", None, "one of rr, grr, rappor, basic_rappor, boolean_rappor"
            )
        tmp = campaign_pb2.Campaign()
        _copy_member(tmp, side_msg, member)
        try:
            side_params = wire.params_from_proto(tmp)
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"{side}.{exc.field}", exc.value, exc.allowed) from exc
        if not isinstance(side_params, PAIRED_SIDE_TYPES):  # unreachable: the oneof has only these members
            raise InvalidParameterError(f"{side}.mechanism", member, "rr, grr or a RAPPOR variant")
        sides.append(side_params)  # type: ignore[arg-type]
    return PairedParams(first=sides[0], second=sides[1])


def batch_from_proto(msg: reports_pb2.ReportBatch, params: PairedParams, n: int) -> PairedColumns:
    """Each side's columns from a paired batch whose header (ids, count, payload kind) is checked."""
    from ldp_client import wire

    out: list[Any] = []
    for side, side_params in zip(_SIDES, params.sides, strict=True):
        cols = getattr(msg.paired, side)
        expected = wire._BATCH_FIELD[side_params.name]
        which = cols.WhichOneof("payload")
        if which != expected:
            raise InvalidReportError(
                f"paired.{side}.payload", which, f"{expected!r} for a {side_params.name} side"
            )
        tmp = reports_pb2.ReportBatch(campaign_id=msg.campaign_id, batch_id=msg.batch_id, count=n)
        _copy_member(tmp, cols, which)
        try:
            out.append(wire.batch_from_proto(tmp, side_params))
        except (InvalidParameterError, InvalidReportError) as exc:
            raise _prefixed(exc, side) from exc
    return out[0], out[1]


def batch_to_proto(msg: reports_pb2.ReportBatch, params: PairedParams, columns: object) -> None:
    """Fill a paired batch (``msg`` has its ids) from ``(first columns, second columns)``."""
    from ldp_client import wire

    if not isinstance(columns, tuple) or len(columns) != 2:
        raise InvalidReportError("paired", type(columns).__name__, "a (first columns, second columns) pair")
    count: int | None = None
    for side, side_params, cols in zip(_SIDES, params.sides, columns, strict=True):
        try:
            tmp = wire.batch_to_proto(
                campaign_id=msg.campaign_id, batch_id=msg.batch_id, params=side_params, columns=cols
            )
        except (InvalidParameterError, InvalidReportError) as exc:
            raise _prefixed(exc, side) from exc
        if count is not None and tmp.count != count:
            raise InvalidReportError(
                "paired.second.count", tmp.count, f"{count} rows, as many as the first side (one per device)"
            )
        count = tmp.count
        which = tmp.WhichOneof("payload")
        if which is None:  # unreachable: batch_to_proto always sets the payload
            raise InvalidReportError(f"paired.{side}", None, "a payload")
        _copy_member(getattr(msg.paired, side), tmp, which)
    msg.count = count or 0


def _pair(report: object) -> tuple[Any, Any]:
    first = getattr(report, "first", None)
    second = getattr(report, "second", None)
    if first is not None and second is not None:
        return first, second
    if isinstance(report, Sequence) and not isinstance(report, str | bytes) and len(report) == 2:
        return report[0], report[1]
    raise InvalidReportError("report", report, "a PairedReport(first, second) or a (first, second) pair")


def report_to_proto(msg: reports_pb2.Report, params: PairedParams, report: object) -> None:
    """Fill a paired single report (``msg`` has its ids) from a PairedReport."""
    from ldp_client import wire

    for side, side_params, value in zip(_SIDES, params.sides, _pair(report), strict=True):
        try:
            tmp = wire.report_to_proto(
                campaign_id=msg.campaign_id, report_id=msg.report_id, params=side_params, report=value
            )
        except (InvalidParameterError, InvalidReportError) as exc:
            raise _prefixed(exc, side) from exc
        which = tmp.WhichOneof("value")
        if which is None:  # unreachable
            raise InvalidReportError(f"paired.{side}", None, "a value")
        _copy_member(getattr(msg.paired, side), tmp, which)


def report_from_proto(msg: reports_pb2.Report, params: PairedParams) -> PairedColumns:
    """Each side's batch-of-one columns from a paired single report (ids already checked)."""
    from ldp_client import wire

    out: list[Any] = []
    for side, side_params in zip(_SIDES, params.sides, strict=True):
        value = getattr(msg.paired, side)
        expected = wire._REPORT_FIELD[side_params.name]
        which = value.WhichOneof("value")
        if which != expected:
            raise InvalidReportError(
                f"paired.{side}.value", which, f"{expected!r} for a {side_params.name} side"
            )
        tmp = reports_pb2.Report(campaign_id=msg.campaign_id, report_id=msg.report_id)
        _copy_member(tmp, value, which)
        try:
            out.append(wire.report_from_proto(tmp, side_params))
        except (InvalidParameterError, InvalidReportError) as exc:
            raise _prefixed(exc, side) from exc
    return out[0], out[1]


def batch_from_reports(params: PairedParams, reports: Sequence[object]) -> PairedColumns:
    """Columns of each side from per-report PairedReports (on the device)."""
    from ldp_client import wire

    pairs = [_pair(r) for r in reports]
    out: list[Any] = []
    for i, (side, side_params) in enumerate(zip(_SIDES, params.sides, strict=True)):
        try:
            out.append(wire.batch_from_reports(side_params, [p[i] for p in pairs]))
        except (InvalidParameterError, InvalidReportError) as exc:
            raise _prefixed(exc, side) from exc
    return out[0], out[1]
