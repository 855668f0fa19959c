"""The store interface the service, the server and the command line use, whatever the database.

Two implementations satisfy :class:`CampaignStore`: :class:`ldp_aggregator.store.Store` (SQLite, embedded,
one process owns the file: the default) and :class:`ldp_aggregator.store_pg.PostgresStore` (PostgreSQL:
several aggregator replicas share one database). Both keep the same promises:

* a batch is acknowledged (its future resolves) only after the transaction holding its batch id, its raw
  payload (when retained) and its accumulator increment has committed;
* a batch id (report ids share the namespace) is stored once per campaign: a retry of a stored id, on any
  replica, answers ``duplicate`` and adds nothing;
* a closed campaign refuses new batches; a retry of a batch stored before the close still answers
  ``duplicate``;
* retained raw batches are read back in commit order, with positions that never change or repeat
  (:meth:`CampaignStore.iter_raw_batches`);
* a failed commit changes nothing and fails its submissions with
  :class:`~ldp_client.errors.StoreUnavailableError` (retryable: gRPC ``UNAVAILABLE``).

The accumulators the reads return are shared objects: callers treat them as read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Final, Protocol, Self

from ldp_aggregator.store.records import (
    Accumulator,
    BatchDelta,
    CampaignRecord,
    StoreStats,
    SubmitOutcome,
    TokenRecord,
)

__all__ = ["POSTGRES_SCHEMES", "CampaignStore", "RoundStep", "is_postgres_url"]

#: ``step(record, raw_payloads) -> (params_blob, closed)``: what :meth:`CampaignStore.advance_round` stores.
RoundStep = Callable[[CampaignRecord, Iterator[bytes]], tuple[bytes, bool]]

#: URL schemes of a PostgreSQL connection string (libpq accepts both).
POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")


def is_postgres_url(text: str) -> bool:
    """Whether ``text`` is a PostgreSQL URL (``postgresql://...`` or ``postgres://...``)."""
    return text.lower().startswith(POSTGRES_SCHEMES)


class CampaignStore(Protocol):
    """Campaigns, batch ids, raw reports, accumulators and access tokens: what the aggregator needs stored.

    See the module docstring for the guarantees every implementation gives.
    """

    @property
    def retain_raw(self) -> bool:
        """Whether raw payloads are kept."""
        ...

    @property
    def location(self) -> str:
        """Where the data lives, for messages and logs (a file path, or a URL without its password)."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...

    def close(self) -> None:
        """Stop accepting work, commit what was already submitted, release connections (idempotent)."""
        ...

    def create_campaign(self, record: CampaignRecord) -> None:
        """Store a new campaign, durably. Raises CampaignExistsError, StoreUnavailableError."""
        ...

    def get_campaign(self, campaign_id: str) -> CampaignRecord:
        """The campaign's record. Raises CampaignNotFoundError."""
        ...

    def list_campaigns(self) -> list[CampaignRecord]:
        """Every campaign, oldest first (ties by id)."""
        ...

    def close_campaign(self, campaign_id: str) -> None:
        """Close a campaign durably (idempotent). Raises CampaignNotFoundError, StoreUnavailableError."""
        ...

    def advance_round(self, campaign_id: str, round_: int, step: RoundStep) -> CampaignRecord:
        """Close round ``round_`` of an adaptive discovery campaign and publish the next (issue 16).

        In one exclusive section against every commit of the campaign (on every replica): check that the
        campaign is open and collecting ``round_`` (else RoundNotOpenError or CampaignClosedError), call
        ``step(record, raw_payloads)`` with the campaign's retained raw payloads, then store the
        ``(params_blob, closed)`` it returns. A batch for ``round_`` commits before the section or is
        refused after it; if ``step`` raises, nothing changes. Returns the new record.
        """
        ...

    def accumulator(self, campaign_id: str) -> Accumulator:
        """The campaign's committed accumulator (read-only). Raises CampaignNotFoundError."""
        ...

    def snapshot(self, campaign_id: str) -> tuple[CampaignRecord, Accumulator, int]:
        """Record, committed accumulator and batch count, consistent with each other."""
        ...

    def batch_count(self, campaign_id: str) -> int:
        """Distinct committed batches of the campaign. Raises CampaignNotFoundError."""
        ...

    def has_batch(self, campaign_id: str, batch_id: str) -> bool:
        """Whether this batch id is committed for the campaign. Raises CampaignNotFoundError."""
        ...

    def raw_payloads(self, campaign_id: str) -> Iterator[bytes]:
        """Committed raw payloads of the campaign, lazily. Raises CampaignNotFoundError at call time."""
        ...

    def iter_raw_batches(self, campaign_id: str, after_position: int = 0) -> Iterator[tuple[int, bytes]]:
        """The campaign's retained raw batches after ``after_position``, in ingest order: (position, payload).

        Positions are integers >= 1, increasing in the order the batches were committed (across replicas
        too) and never reused, also after :meth:`purge_raw`: a reader that saw position P resumes with
        ``after_position=P`` and gets exactly the raw batches committed since (less any purged). Lazily,
        in short read transactions. Raises CampaignNotFoundError at call time, InvalidParameterError for
        an ``after_position`` that is not an integer >= 0.
        """
        ...

    def purge_raw(self, older_than_unix_ms: int) -> int:
        """Delete raw payloads of batches received before the time; returns the rows deleted."""
        ...

    def submit(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None = None,
        *,
        round_: int | None = None,
    ) -> Future[SubmitOutcome]:
        """Queue one batch for group commit; the future resolves only after its transaction committed.

        ``round_`` (adaptive discovery, issue 16): refused with RoundNotOpenError unless it is the
        campaign's round when the transaction runs (:func:`campaign_round`)."""
        ...

    async def submit_async(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None = None,
        *,
        round_: int | None = None,
    ) -> SubmitOutcome:
        """:meth:`submit` for asyncio code: returns once the batch is committed."""
        ...

    def stats(self) -> StoreStats:
        """Counters since open (this process only)."""
        ...

    def list_tokens(self) -> list[TokenRecord]:
        """Every access token row, read from the database now (changes by other processes are seen)."""
        ...

    def auth_required(self) -> bool:
        """Whether a token was ever added: then every call needs one, for good."""
        ...
