"""The aggregator's application core.

:class:`Aggregator` does the work (validate, decode a batch straight into numpy, sum it into a delta
accumulator, hand it to the store's group commit, answer only after the commit); the gRPC servicers in
:mod:`ldp_aggregator.servicers` only translate messages and map errors to status codes, in one place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ldp_aggregator import itemsets, key_values, marginals, ranges
from ldp_aggregator._proto.ldp.v1 import analyst_pb2, decode_pb2, estimates_pb2
from ldp_aggregator.accumulators import (
    Accumulator,
    accumulator_for,
    accumulator_from_bytes,
    accumulator_nbytes,
    batch_delta,
)
from ldp_aggregator.analysis import CampaignEstimate, estimate_campaign, estimate_to_proto
from ldp_aggregator.discovery_rounds import (
    batch_round,
    is_adaptive,
    next_round_blob,
    rounds_note,
)
from ldp_aggregator.logs import log_event
from ldp_aggregator.ratelimit import DEFAULT_MAX_ACCUMULATOR_BYTES
from ldp_aggregator.store import (
    BatchDelta,
    CampaignRecord,
    CampaignStore,
    Store,
    SubmitOutcome,
    is_postgres_url,
)
from ldp_client import registry, wire
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2

if TYPE_CHECKING:
    from ldp_aggregator.metrics import Metrics

from ldp_client.errors import (
    InvalidParameterError,
    InvalidReportError,
    shown,
)
from ldp_client.params import RapporParams
from ldp_client.spec import Kind

__all__ = [
    "Aggregator",
    "decode_accumulator",
    "estimate_note",
    "info_from_record",
    "open_store",
    "zero_accumulator",
]

log = logging.getLogger("ldp_aggregator")


def info_from_record(record: CampaignRecord) -> wire.CampaignInfo:
    """The campaign a stored record describes (the record's blob is its ``Campaign`` message)."""
    msg = campaign_pb2.Campaign.FromString(record.params_blob)
    info = wire.campaign_from_proto(msg)
    return wire.CampaignInfo(
        campaign_id=info.campaign_id,
        params=info.params,
        description=info.description,
        candidates=info.candidates,
        created_unix_ms=record.created_unix_ms,
        closed=record.closed,
        shuffler=info.shuffler,
        discovery_round=info.discovery_round,
        discovery_rounds=info.discovery_rounds,
    )


def decode_accumulator(record: CampaignRecord, blob: bytes) -> Accumulator:
    """Store callback: a campaign's accumulator from its stored bytes."""
    del record  # the blob is self-describing (kind and shape in its header)
    return accumulator_from_bytes(blob)


def zero_accumulator(record: CampaignRecord) -> Accumulator:
    """Store callback: the empty accumulator of a new campaign."""
    return accumulator_for(info_from_record(record).params)


def open_store(location: str, *, retain_raw: bool = True, read_only: bool = False) -> CampaignStore:
    """The aggregator's store at ``location``: a PostgreSQL URL (``postgresql://...``, shared by replicas)
    or an SQLite file path (created with its directory if missing, unless read-only).

    ``read_only`` opens a store that can be read while servers write to the same database.
    """
    if is_postgres_url(location):
        from ldp_aggregator.store_pg import PostgresStore

        return PostgresStore.open(
            location,
            retain_raw=retain_raw,
            read_only=read_only,
            decode_accumulator=decode_accumulator,
            zero_accumulator=zero_accumulator,
        )
    return Store.open(
        location,
        retain_raw=retain_raw,
        read_only=read_only,
        decode_accumulator=decode_accumulator,
        zero_accumulator=zero_accumulator,
    )


def _describe_size(params: Any) -> str:
    """The parameters that decide an accumulator's size, for the size-limit message."""
    if isinstance(params, RapporParams):
        return f"k={params.k}, h={params.h}, m={params.m}"
    for name in ("domain", "order", "d"):
        value = getattr(params, name, None)
        if value is not None:
            return f"{name}={getattr(value, 'size', value)}"
    return "these parameters"


#: Why ``items`` is empty in an estimate of a string RAPPOR campaign without candidate strings.
RAPPOR_NEEDS_CANDIDATES = (
    "string RAPPOR reports are hashed: per-string estimates (items) need candidate strings, from the"
    " campaign (Campaign.candidates) or the request (EstimateRequest.candidates). Without them only the"
    " per-cohort bit estimates (rappor_bits) are returned; to find which candidates are present (with"
    " detection at a chosen false-discovery level), call Analyst.DecodeRappor with candidates."
)


#: Why ``items`` is empty in an estimate of a campaign whose mechanism hashes strings of any kind
#: (``spec.estimates_candidates``) without candidate strings.
NEEDS_CANDIDATES = (
    "its reports hash strings of any kind: per-string estimates (items) need candidate strings, from the"
    " campaign (Campaign.candidates) or the request (EstimateRequest.candidates)"
)


def estimate_note(info: wire.CampaignInfo, candidates: Sequence[str]) -> str:
    """``EstimateResponse.note``: why ``items`` is empty when the mechanism would estimate items, or what
    they are in an adaptive discovery campaign whose rounds are not all closed; else ""."""
    if is_adaptive(info.params):
        return rounds_note(info)
    spec = registry.spec_for(info.params)
    if not spec.item_table(info.params):  # issue 18: a marginal campaign without the full attribute set
        return (
            f"campaign {shown(info.campaign_id)} chose no marginal of every attribute: it has no item "
            "table; ask for marginals (EstimateRequest.marginals, estimate --marginal A,B)"
        )
    if not spec.estimates_candidates or candidates or info.candidates:
        return ""
    why = RAPPOR_NEEDS_CANDIDATES if spec.kind is Kind.RAPPOR else NEEDS_CANDIDATES
    return f"campaign {shown(info.campaign_id)} has no candidate strings: {why}"


@dataclass(frozen=True, slots=True)
class _Campaign:
    info: wire.CampaignInfo
    record: CampaignRecord


class Aggregator:
    """Campaigns, ingestion and estimates over a store; independent of gRPC.

    Args:
        store: Where campaigns, batches and accumulators live: any :class:`CampaignStore` (SQLite or
            PostgreSQL; the aggregator does not care which).
        clock: Seconds since the Unix epoch (creation times).
        metrics: Where to count commits (None: not counted).
        max_accumulator_bytes: Largest accumulator a new campaign may need (memory, and the blob every
            commit rewrites); larger campaigns are refused before anything is allocated.
    """

    def __init__(
        self,
        store: CampaignStore,
        *,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        max_accumulator_bytes: int = DEFAULT_MAX_ACCUMULATOR_BYTES,
    ) -> None:
        self.store = store
        self._clock = clock
        self._cache: dict[str, _Campaign] = {}
        self.metrics = metrics
        self.max_accumulator_bytes = max_accumulator_bytes

    def _campaign(self, campaign_id: str) -> _Campaign:
        record = self.store.get_campaign(campaign_id)  # raises CampaignNotFoundError
        cached = self._cache.get(campaign_id)
        if cached is None or cached.record != record:
            cached = _Campaign(info_from_record(record), record)
            self._cache[campaign_id] = cached
        return cached

    def create_campaign(self, msg: campaign_pb2.Campaign) -> campaign_pb2.Campaign:
        """Validate and store a new campaign; returns it as stored (epsilons and creation time filled).

        Blocks until the creation is committed, and allocates the campaign's (zero) accumulator: call it
        off the event loop (the servicer runs it in a worker thread).

        Raises:
            InvalidParameterError: Bad parameters, a RAPPOR f of 0 without the message's
                ``allow_f_zero`` opt-in, a discovery mechanism on a server that keeps no raw reports, or an
                accumulator over ``max_accumulator_bytes`` (checked before anything is allocated or stored).
        """
        info = wire.campaign_from_proto(msg)
        # Issue 13: an unset RAPPOR f reads as 0 (epsilon_inf = inf); a new campaign needs the explicit
        # opt-in. Only here: stored campaigns with f = 0 still load (info_from_record never checks it).
        wire.check_f_zero_opt_in(msg)
        if registry.spec_for(info.params).kind is Kind.DISCOVERY and not self.store.retain_raw:
            # Issue 16: a discovery is computed from the raw reports; without them it could never answer.
            raise InvalidParameterError(
                "mechanism",
                info.params.name,
                "a server that retains raw reports (serve without --no-retain-raw): discovery reads them",
            )
        size = accumulator_nbytes(info.params)
        if size > self.max_accumulator_bytes:
            raise InvalidParameterError(
                "campaign",
                f"{info.params.name} with {_describe_size(info.params)}",
                f"parameters whose accumulator fits the server's limit: this one needs {size:,} bytes"
                f" ({size / 2**20:,.1f} MiB), the limit is max_accumulator_bytes="
                f"{self.max_accumulator_bytes:,} ({self.max_accumulator_bytes / 2**20:,.1f} MiB)",
            )
        created = int(self._clock() * 1000)
        stored = wire.campaign_to_proto(
            campaign_id=info.campaign_id,
            params=info.params,
            description=info.description,
            candidates=info.candidates,
            created_unix_ms=created,
            shuffler=info.shuffler,
        )
        self.store.create_campaign(
            CampaignRecord(
                campaign_id=info.campaign_id,
                mechanism=info.params.name,
                params_blob=stored.SerializeToString(),
                description=info.description,
                created_unix_ms=created,
            )
        )
        log_event(log, "campaign_created", campaign=info.campaign_id, mechanism=info.params.name)
        return stored

    def close_campaign(self, campaign_id: str) -> campaign_pb2.Campaign:
        """Close a campaign durably (idempotent); returns it as stored, closed. Blocks until committed."""
        self.store.close_campaign(campaign_id)
        log_event(log, "campaign_closed", campaign=campaign_id)
        return self.get_campaign(campaign_id)

    def next_round(self, campaign_id: str, round_: int) -> campaign_pb2.Campaign:
        """Close round ``round_`` of an adaptive discovery campaign, publish what it kept as the next
        round's candidates (the last round closes the campaign); returns the campaign as stored. Blocks
        while the round's reports are read and its discovery step runs (``discovery_rounds``).

        Raises:
            CampaignNotFoundError, CampaignClosedError: no such campaign, or closed.
            InvalidParameterError: not an adaptive discovery campaign.
            RoundNotOpenError: ``round_`` is not the round collecting (nothing changed).
            RoundWithoutReportsError: the round has no reports (nothing changed).
        """
        info = self._campaign(campaign_id).info
        if not is_adaptive(info.params):
            raise InvalidParameterError(
                "campaign_id",
                campaign_id,
                f"an adaptive discovery campaign (this one is {info.params.name} in one round)",
            )
        record = self.store.advance_round(
            campaign_id,
            round_,
            lambda rec, payloads: next_round_blob(info_from_record(rec), round_, payloads),
        )
        new = info_from_record(record)
        log_event(log, "discovery_round_closed", campaign=campaign_id, round=round_, closed=record.closed)
        return self.campaign_message(new)

    def export_campaign(
        self, campaign_id: str, *, candidates: Sequence[str] = (), confidence: float = 0.95
    ) -> analyst_pb2.ExportCampaignResponse:
        """The committed accumulator, its counts and the estimate made from it, from one snapshot."""
        record, acc, n_batches = self.store.snapshot(campaign_id)
        info = info_from_record(record)
        est = estimate_campaign(
            info,
            cast(Accumulator, acc),
            candidates=candidates,
            confidence=confidence,
            reports=lambda: self.store.raw_payloads(campaign_id),  # read only by discovery (issue 16)
        )
        estimate = estimate_to_proto(est)
        estimate.note = estimate_note(info, candidates)
        return analyst_pb2.ExportCampaignResponse(
            campaign=self.campaign_message(info),
            accumulator=acc.to_bytes(),
            n_reports=acc.n,
            n_batches=n_batches,
            estimate=estimate,
            exported_unix_ms=int(self._clock() * 1000),
        )

    async def _commit(
        self,
        campaign_id: str,
        batch_id: str,
        n: int,
        delta: BatchDelta,
        payload: bytes | None,
        round_: int | None = None,
    ) -> SubmitOutcome:
        """Hand a validated batch to the store's group commit; returns once committed (and counts it)."""
        start = time.perf_counter()
        outcome = await self.store.submit_async(campaign_id, batch_id, n, delta, payload, round_=round_)
        if self.metrics is not None:
            self.metrics.observe_commit(
                n_reports=outcome.accepted, duplicate=outcome.duplicate, seconds=time.perf_counter() - start
            )
        return outcome

    def get_campaign(self, campaign_id: str) -> campaign_pb2.Campaign:
        return self.campaign_message(self._campaign(campaign_id).info)

    @staticmethod
    def campaign_message(info: wire.CampaignInfo) -> campaign_pb2.Campaign:
        return wire.campaign_to_proto(
            campaign_id=info.campaign_id,
            params=info.params,
            description=info.description,
            candidates=info.candidates,
            created_unix_ms=info.created_unix_ms,
            closed=info.closed,
            shuffler=info.shuffler,
            discovery_round=info.discovery_round,
            discovery_rounds=info.discovery_rounds,
        )

    def list_campaigns(self) -> list[campaign_pb2.Campaign]:
        return [self.campaign_message(info_from_record(r)) for r in self.store.list_campaigns()]

    def _prepare(
        self, campaign_id: str, decode: Callable[[wire.CampaignInfo], Any]
    ) -> tuple[BatchDelta, int, int | None]:
        campaign = self._campaign(campaign_id)
        # A closed campaign is refused by the store, after its duplicate check: a retry of a batch stored
        # before the close still answers "duplicate" (the client learns it was counted), anything new gets
        # CampaignClosedError (FAILED_PRECONDITION).
        columns = decode(campaign.info)
        round_ = None
        if is_adaptive(campaign.info.params) and not campaign.info.closed:
            # Issue 16: the round the batch answers (its reports checked against that round's oracle); the
            # store refuses it in the commit unless that round is collecting then, after its duplicate check.
            round_ = batch_round(campaign.info, columns)
        delta = batch_delta(campaign.info.params, columns)
        return delta, delta.n, round_

    async def submit_batch(self, msg: reports_pb2.ReportBatch, raw: bytes | None = None) -> SubmitOutcome:
        """Validate, decode and durably add one batch; returns after its transaction committed."""
        delta, n, round_ = self._prepare(
            msg.campaign_id,
            lambda info: wire.batch_from_proto(msg, info.params, campaign_id=info.campaign_id),
        )
        payload = None
        if self.store.retain_raw:
            payload = raw if raw is not None else msg.SerializeToString()
        return await self._commit(msg.campaign_id, msg.batch_id, n, delta, payload, round_)

    async def submit_report(self, msg: reports_pb2.Report) -> SubmitOutcome:
        """One device report, idempotent by its ``report_id`` (stored as a batch of one)."""
        if not msg.report_id:
            raise InvalidReportError("report_id", msg.report_id, "a non-empty client-chosen id")
        delta, n, round_ = self._prepare(
            msg.campaign_id,
            lambda info: wire.report_from_proto(msg, info.params, campaign_id=info.campaign_id),
        )
        payload = msg.SerializeToString() if self.store.retain_raw else None
        # Report ids and batch ids share one namespace per campaign (the wire contract): a report is
        # stored under its own id, like a batch of one.
        return await self._commit(msg.campaign_id, msg.report_id, n, delta, payload, round_)

    def decode_rappor(
        self,
        campaign_id: str,
        *,
        candidates: Sequence[str] = (),
        confidence: float = 0.95,
        alpha: float = 0.05,
        correction: str = "bonferroni",
        selection_z: float | None = None,
    ) -> Any:
        """Decode a RAPPOR campaign (issue 5): :func:`ldp_aggregator.rappor_decode.decode_campaign`."""
        from ldp_aggregator.rappor_decode import decode_campaign

        record, acc, _ = self.store.snapshot(campaign_id)
        return decode_campaign(
            info_from_record(record),
            cast(Accumulator, acc),
            candidates=candidates,
            confidence=confidence,
            alpha=alpha,
            correction=correction,  # type: ignore[arg-type]  # validated by decode_campaign
            selection_z=selection_z,
        )

    def estimate_association(
        self,
        campaign_id: str,
        *,
        first_candidates: Sequence[str] = (),
        second_candidates: Sequence[str] = (),
        confidence: float = 0.95,
        max_values: int | None = None,
        max_iterations: int | None = None,
        tolerance: float | None = None,
    ) -> Any:
        """Joint distribution of a paired campaign (issue 5): see ``association.associate_campaign``."""
        from ldp_aggregator import association

        record, acc, _ = self.store.snapshot(campaign_id)
        return association.associate_campaign(
            info_from_record(record),
            acc,
            lambda: self.store.raw_payloads(campaign_id),
            first_candidates=first_candidates,
            second_candidates=second_candidates,
            confidence=confidence,
            max_values=max_values or association.DEFAULT_MAX_VALUES,
            max_iterations=max_iterations or association.DEFAULT_MAX_ITERATIONS,
            tolerance=tolerance or association.DEFAULT_TOLERANCE,
        )

    def estimate_ranges(
        self,
        campaign_id: str,
        ranges_: Sequence[tuple[int, int]],
        quantiles: Sequence[float] = (),
        confidence: float = 0.95,
    ) -> tuple[tuple[ranges.RangeAnswer, ...], tuple[ranges.QuantileAnswer, ...]]:
        """Ranges and quantiles of a range campaign (issue 18; :func:`ranges.campaign_ranges`)."""
        campaign = self._campaign(campaign_id)
        acc = self.store.accumulator(campaign_id)
        return ranges.campaign_ranges(campaign.info.params, acc, ranges_, quantiles, confidence)

    def estimate_key_values(
        self, campaign_id: str, confidence: float = 0.95
    ) -> key_values.KeyValueEstimates | None:
        """Each key's frequency and mean of a key-value campaign (issue 18), None for another mechanism."""
        campaign = self._campaign(campaign_id)
        return key_values.campaign_key_values(
            campaign.info.params, self.store.accumulator(campaign_id), confidence
        )

    def estimate_marginals(
        self,
        campaign_id: str,
        queries: Sequence[Sequence[str]],
        confidence: float = 0.95,
        non_negative: Sequence[bool] = (),
    ) -> tuple[marginals.MarginalAnswer, ...]:
        """Marginals of a marginal campaign (issue 18; :func:`marginals.campaign_marginals`)."""
        campaign = self._campaign(campaign_id)
        acc = self.store.accumulator(campaign_id)
        return marginals.campaign_marginals(
            campaign.info.params, acc, queries, confidence, non_negative=non_negative
        )

    def estimate_note(self, campaign_id: str, candidates: Sequence[str]) -> str:
        """Why an estimate's ``items`` is empty although the mechanism estimates items ("" if not)."""
        return estimate_note(self._campaign(campaign_id).info, candidates)

    def estimate(
        self,
        campaign_id: str,
        *,
        candidates: Sequence[str] = (),
        confidence: float = 0.95,
        population_size: int | None = None,
    ) -> CampaignEstimate:
        campaign = self._campaign(campaign_id)
        return estimate_campaign(
            campaign.info,
            # The store holds exactly what decode_accumulator / zero_accumulator made.
            cast(Accumulator, self.store.accumulator(campaign_id)),
            candidates=candidates,
            confidence=confidence,
            population_size=population_size,  # numeric mechanisms (issue 6); None = n_reports
            reports=lambda: self.store.raw_payloads(campaign_id),  # read only by discovery (issue 16)
        )

    # The Analyst service's answers as messages: what its servicer sends and what the web view
    # (ldp_aggregator.web) shows, made by these three methods only, so both always carry the same numbers.

    def estimate_message(self, campaign_id: str, **options: Any) -> estimates_pb2.EstimateResponse:
        """``Analyst.GetEstimate``'s answer: :meth:`estimate` (same options) with its ``note``, for a
        key-value campaign its keys' frequencies and means, for an SVIM stage its ranking and sizes."""
        est = self.estimate(campaign_id, **options)
        response = estimate_to_proto(est)
        response.note = self.estimate_note(campaign_id, options.get("candidates", ()))
        self.add_itemsets(response, campaign_id, est)
        kv = self.estimate_key_values(campaign_id, options.get("confidence", 0.95))
        if kv is not None:  # issue 18: key-value mechanisms, each key's frequency and mean
            key_values.key_values_to_proto(response, kv)
        return response

    def add_itemsets(self, response: estimates_pb2.EstimateResponse, campaign_id: str, est: Any) -> None:
        """Issue 18: an SVIM stage's sizes, correction and ranking (``EstimateResponse.itemsets``)."""
        params = self._campaign(campaign_id).info.params
        if itemsets.is_svim(params) and est.frequencies is not None:
            acc = self.store.accumulator(campaign_id)
            itemsets.add_to_proto(response, itemsets.mine(cast(Any, params), acc, est.frequencies))

    def decode_message(self, campaign_id: str, **options: Any) -> decode_pb2.DecodeRapporResponse:
        """``Analyst.DecodeRappor``'s answer: :meth:`decode_rappor` (same options) as its message."""
        from ldp_aggregator.rappor_decode import decode_to_proto

        return decode_to_proto(self.decode_rappor(campaign_id, **options), campaign_id)

    def association_message(self, campaign_id: str, **options: Any) -> decode_pb2.AssociationResponse:
        """``Analyst.EstimateAssociation``'s answer: :meth:`estimate_association` as its message."""
        from ldp_aggregator.association import association_to_proto

        return association_to_proto(self.estimate_association(campaign_id, **options), campaign_id)
