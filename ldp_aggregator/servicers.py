"""The aggregator's thin gRPC servicers: ``ldp.v1.Collector`` (devices) and ``ldp.v1.Analyst`` (operators
and analysts) translate messages for :class:`~ldp_aggregator.service.Aggregator`, which does the work, and map
its errors to status codes in one place (:func:`status_for`, which ``ldp_aggregator.guard`` and the web view
use too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from ldp_aggregator import marginals, ranges
from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, decode_pb2, estimates_pb2
from ldp_aggregator.association import ReportsUnavailableError
from ldp_aggregator.auth import PermissionDeniedError, UnauthenticatedError
from ldp_aggregator.discovery_rounds import (
    RoundWithoutReportsError,
)
from ldp_aggregator.ratelimit import ResourceLimitError
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2, collector_pb2_grpc, reports_pb2

if TYPE_CHECKING:
    pass

from ldp_aggregator.service import Aggregator
from ldp_client.errors import (
    BudgetExceededError,
    CampaignClosedError,
    CampaignExistsError,
    CampaignNotFoundError,
    DomainError,
    InvalidParameterError,
    InvalidReportError,
    LdpError,
    RoundNotOpenError,
    StoreUnavailableError,
)

__all__ = [
    "MAX_STATUS_MESSAGE_CHARS",
    "AnalystServicer",
    "CollectorServicer",
    "status_for",
    "status_message",
]

log = logging.getLogger("ldp_aggregator")

_T = TypeVar("_T")

# One table from error type to gRPC status; order matters only for subclasses listed before parents.
_STATUS_BY_ERROR: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (CampaignNotFoundError, grpc.StatusCode.NOT_FOUND),
    (CampaignExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (CampaignClosedError, grpc.StatusCode.FAILED_PRECONDITION),
    (RoundNotOpenError, grpc.StatusCode.FAILED_PRECONDITION),  # issue 16: a closed (or later) round
    (RoundWithoutReportsError, grpc.StatusCode.FAILED_PRECONDITION),  # issue 16: nothing to publish
    (BudgetExceededError, grpc.StatusCode.FAILED_PRECONDITION),
    (StoreUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (ResourceLimitError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ReportsUnavailableError, grpc.StatusCode.FAILED_PRECONDITION),  # issue 5: association needs raw reports
    (InvalidParameterError, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidReportError, grpc.StatusCode.INVALID_ARGUMENT),
    (DomainError, grpc.StatusCode.INVALID_ARGUMENT),
)


def _status_for(exc: BaseException) -> grpc.StatusCode:
    for err_type, code in _STATUS_BY_ERROR:
        if isinstance(exc, err_type):
            return code
    if isinstance(exc, LdpError | ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.INTERNAL


#: The status code of an error (the table above); also used by ``ldp_aggregator.guard`` for the checks it
#: makes before a servicer runs, so every error maps to its code in one place.
status_for = _status_for

#: Longest status message sent to a client. Error messages cut every value they echo (see
#: :func:`ldp_client.errors.shown`); this is the backstop for anything else: gRPC carries the message in a
#: header, and a client refuses headers over 8 KiB by default (and would report RESOURCE_EXHAUSTED).
MAX_STATUS_MESSAGE_CHARS = 2048


def status_message(exc: BaseException) -> str:
    """The message a client gets for ``exc``: its text, cut to :data:`MAX_STATUS_MESSAGE_CHARS`."""
    text = str(exc)
    if len(text) > MAX_STATUS_MESSAGE_CHARS:
        text = f"{text[: MAX_STATUS_MESSAGE_CHARS - 40]}... (message cut from {len(text)} chars)"
    return text


async def _call(context: grpc.aio.ServicerContext[Any, Any], work: Awaitable[_T]) -> _T:
    """Run a handler's work, turning project errors into their status and anything else into INTERNAL."""
    try:
        return await work
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        code = _status_for(exc)
        if code is grpc.StatusCode.INTERNAL:
            log.exception("unexpected error in RPC")
            await context.abort(code, "internal error (logged on the server)")
        await context.abort(code, status_message(exc))
        raise  # unreachable: abort raises


class CollectorServicer(collector_pb2_grpc.CollectorServicer):
    """``ldp.v1.Collector``: what devices call."""

    def __init__(self, aggregator: Aggregator) -> None:
        self._agg = aggregator

    async def GetCampaign(  # noqa: N802 (gRPC method name)
        self, request: collector_pb2.GetCampaignRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> campaign_pb2.Campaign:
        async def work() -> campaign_pb2.Campaign:
            return self._agg.get_campaign(request.campaign_id)

        return await _call(context, work())

    async def Submit(  # noqa: N802
        self, request: reports_pb2.ReportBatch, context: grpc.aio.ServicerContext[Any, Any]
    ) -> reports_pb2.SubmitResponse:
        async def work() -> reports_pb2.SubmitResponse:
            out = await self._agg.submit_batch(request)
            return reports_pb2.SubmitResponse(
                batch_id=request.batch_id, duplicate=out.duplicate, accepted=out.accepted
            )

        return await _call(context, work())

    async def SubmitStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[reports_pb2.ReportBatch],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> reports_pb2.SubmitStreamResponse:
        async def work() -> reports_pb2.SubmitStreamResponse:
            # Batches are validated and committed one after another; a bad batch ends the stream with
            # its error, and every batch before it stays committed (the client resends the rest by id).
            batches = accepted = duplicates = 0
            async for batch in request_iterator:
                out = await self._agg.submit_batch(batch)
                batches += 1
                accepted += out.accepted
                duplicates += int(out.duplicate)
            return reports_pb2.SubmitStreamResponse(batches=batches, accepted=accepted, duplicates=duplicates)

        return await _call(context, work())

    async def SubmitReport(  # noqa: N802
        self, request: reports_pb2.Report, context: grpc.aio.ServicerContext[Any, Any]
    ) -> reports_pb2.SubmitResponse:
        async def work() -> reports_pb2.SubmitResponse:
            out = await self._agg.submit_report(request)
            return reports_pb2.SubmitResponse(
                batch_id=request.report_id, duplicate=out.duplicate, accepted=out.accepted
            )

        return await _call(context, work())


class AnalystServicer(analyst_pb2_grpc.AnalystServicer):
    """``ldp.v1.Analyst``: what operators and analysts call."""

    def __init__(self, aggregator: Aggregator) -> None:
        self._agg = aggregator

    async def CreateCampaign(  # noqa: N802
        self, request: analyst_pb2.CreateCampaignRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> campaign_pb2.Campaign:
        async def work() -> campaign_pb2.Campaign:
            # Allocating the accumulator and waiting for the commit take time: in a worker thread, so the
            # event loop keeps serving every other call meanwhile.
            return await asyncio.to_thread(self._agg.create_campaign, request.campaign)

        return await _call(context, work())

    async def GetCampaign(  # noqa: N802
        self, request: collector_pb2.GetCampaignRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> campaign_pb2.Campaign:
        async def work() -> campaign_pb2.Campaign:
            return self._agg.get_campaign(request.campaign_id)

        return await _call(context, work())

    async def ListCampaigns(  # noqa: N802
        self, request: analyst_pb2.ListCampaignsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> analyst_pb2.ListCampaignsResponse:
        async def work() -> analyst_pb2.ListCampaignsResponse:
            return analyst_pb2.ListCampaignsResponse(campaigns=self._agg.list_campaigns())

        return await _call(context, work())

    async def GetEstimate(  # noqa: N802
        self, request: estimates_pb2.EstimateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> estimates_pb2.EstimateResponse:
        async def work() -> estimates_pb2.EstimateResponse:
            confidence = request.confidence or 0.95
            # Estimation can take a while (candidate regression): keep the event loop free for ingest.
            response = await asyncio.to_thread(
                self._agg.estimate_message,
                request.campaign_id,
                candidates=tuple(request.candidates),
                confidence=confidence,
                population_size=request.population_size or None,
            )
            if request.ranges or request.quantiles:  # issue 18: range mechanisms
                answers = await asyncio.to_thread(
                    self._agg.estimate_ranges,
                    request.campaign_id,
                    [(r.lo, r.hi) for r in request.ranges],
                    tuple(request.quantiles),
                    confidence,
                )
                ranges.add_to_proto(response, *answers)
            if request.marginals:  # issue 18: marginal mechanisms
                tables = await asyncio.to_thread(
                    self._agg.estimate_marginals,
                    request.campaign_id,
                    [tuple(q.attributes) for q in request.marginals],
                    confidence,
                    [q.non_negative for q in request.marginals],
                )
                marginals.add_to_proto(response, tables)
            return response

        return await _call(context, work())

    async def CloseCampaign(  # noqa: N802
        self, request: analyst_pb2.CloseCampaignRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> campaign_pb2.Campaign:
        async def work() -> campaign_pb2.Campaign:
            # Waits for the store's writer (a durable commit): off the event loop.
            return await asyncio.to_thread(self._agg.close_campaign, request.campaign_id)

        return await _call(context, work())

    async def NextRound(  # noqa: N802
        self, request: analyst_pb2.NextRoundRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> campaign_pb2.Campaign:
        async def work() -> campaign_pb2.Campaign:
            # Reads the round's reports and commits durably: off the event loop.
            return await asyncio.to_thread(self._agg.next_round, request.campaign_id, request.round)

        return await _call(context, work())

    async def ExportCampaign(  # noqa: N802
        self, request: analyst_pb2.ExportCampaignRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> analyst_pb2.ExportCampaignResponse:
        async def work() -> analyst_pb2.ExportCampaignResponse:
            return await asyncio.to_thread(
                self._agg.export_campaign,
                request.campaign_id,
                candidates=tuple(request.candidates),
                confidence=request.confidence or 0.95,
            )

        return await _call(context, work())

    async def DecodeRappor(  # noqa: N802
        self, request: decode_pb2.DecodeRapporRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> decode_pb2.DecodeRapporResponse:
        """``Analyst.DecodeRappor`` (issue 5): see :mod:`ldp_aggregator.rappor_decode`."""
        from ldp_aggregator.rappor_decode import correction_from_proto

        async def work() -> decode_pb2.DecodeRapporResponse:
            # Decoding runs a regression over up to 10^5 candidates: off the event loop.
            return await asyncio.to_thread(
                self._agg.decode_message,
                request.campaign_id,
                candidates=tuple(request.candidates),
                confidence=request.confidence or 0.95,
                alpha=request.alpha or 0.05,
                correction=correction_from_proto(request.correction),
                selection_z=request.selection_z or None,
            )

        return await _call(context, work())

    async def EstimateAssociation(  # noqa: N802
        self, request: decode_pb2.AssociationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> decode_pb2.AssociationResponse:
        """``Analyst.EstimateAssociation`` (issue 5): see :mod:`ldp_aggregator.association`."""

        async def work() -> decode_pb2.AssociationResponse:
            # EM over every retained report: off the event loop.
            return await asyncio.to_thread(
                self._agg.association_message,
                request.campaign_id,
                first_candidates=tuple(request.first_candidates),
                second_candidates=tuple(request.second_candidates),
                confidence=request.confidence or 0.95,
                max_values=request.max_values or None,
                max_iterations=request.max_iterations or None,
                tolerance=request.tolerance or None,
            )

        return await _call(context, work())
