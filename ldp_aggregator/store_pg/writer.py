"""The PostgreSQL store's writer: the submission queue, group commit and the accumulator shard rows.

:class:`ShardWriter` is the base of :class:`~ldp_aggregator.store_pg.core.PostgresStore` (as
:class:`~ldp_aggregator.store.writer.GroupCommitWriter` is of the SQLite store). Per replica:

* **Group commit.** One writer thread drains every pending submission (up to ``group_commit_max``) into
  one transaction: lock the campaigns' rows ``FOR SHARE`` (closing takes the row exclusively, so a close
  and a submit never interleave), insert the batch ids with ``ON CONFLICT DO NOTHING RETURNING`` (what
  comes back is new; the rest were stored before, by this replica or another), add the new batches to one
  accumulator shard row per campaign, append the raw payloads, COMMIT. Only then are the callers
  answered. A batch retried on another replica after a failure (or after this replica died) is therefore
  counted exactly once: either its first transaction committed and the retry finds its id, or it did not
  and the retry stores it.
* **Shards.** A campaign's accumulator is the sum of its shard rows. A writer takes one row per campaign
  ``FOR UPDATE SKIP LOCKED``, preferring the one it used last (whose decoded accumulator it keeps in
  memory, checked by the row's ``version``); a row another replica holds is skipped, and when all are
  held a new row is added. Replicas never wait for one another's accumulator row, and the number of rows
  stays at the number of writers that ever ran at once.
* **Raw order.** Raw rows are appended under :data:`RAW_ORDER_LOCK_SQL`, so their ``seq`` (the position
  ``iter_raw_batches`` returns) follows commit order across replicas.
* **Asyncio callers** (gRPC handlers) hand over their submissions per event-loop iteration and are
  answered per group (:mod:`ldp_aggregator.store.answers`).
* **Outages.** Any failure (PostgreSQL down or restarting, a dropped connection) fails the group's
  submissions with :class:`~ldp_client.errors.StoreUnavailableError` ("retry later"; gRPC
  ``UNAVAILABLE``) and changes nothing acknowledged; the broken connection is dropped and the next
  group reconnects, so a replica recovers without a restart. A COMMIT whose answer was lost may have
  committed: its callers were not answered, and their retry is a duplicate.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ldp_aggregator.store.answers import CommitPacer, LoopSubmissions, answer_waiters
from ldp_aggregator.store.records import (
    Accumulator,
    BatchDelta,
    CampaignRecord,
    StoreStats,
    SubmitOutcome,
    check_id,
)
from ldp_aggregator.store_pg.conninfo import connect, describe_error
from ldp_aggregator.store_pg.pool import discard
from ldp_client.errors import (
    CampaignClosedError,
    CampaignNotFoundError,
    InvalidParameterError,
    InvalidReportError,
    StoreUnavailableError,
    shown,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["CAMPAIGN_COLUMNS", "RAW_ORDER_LOCK_SQL", "ShardWriter", "record_from_row"]

_log = logging.getLogger("ldp_aggregator.store")

#: The ``ldp_campaigns`` columns :func:`record_from_row` reads, in its order.
CAMPAIGN_COLUMNS: Final = "id, mechanism, params, description, created_unix_ms, closed"

#: Taken by a transaction right before it appends raw rows, held until its COMMIT: the ``seq`` values of
#: raw rows are then handed out in commit order, across replicas, which lets a reader resume after the
#: last position it saw (iter_raw_batches). Only the append-and-commit tail of transactions that retain
#: raw reports is serialised; accumulator shards and batch ids are not. One lock per schema.
RAW_ORDER_LOCK_SQL: Final = (
    "SELECT pg_advisory_xact_lock(hashtextextended('ldp-aggregator raw order:' || current_schema(), 0))"
)


def record_from_row(row: tuple[Any, ...]) -> CampaignRecord:
    """A campaign record from a row of :data:`CAMPAIGN_COLUMNS`."""
    cid, mechanism, params, description, created, closed = row
    return CampaignRecord(
        campaign_id=cid,
        mechanism=mechanism,
        params_blob=bytes(params),
        description=description,
        created_unix_ms=int(created),
        closed=bool(closed),
    )


class _Submission:
    __slots__ = ("batch_id", "campaign_id", "delta", "future", "n_reports", "raw_payload", "waiter")

    def __init__(
        self, campaign_id: str, batch_id: str, n_reports: int, delta: BatchDelta, raw: bytes | None
    ) -> None:
        self.campaign_id = campaign_id
        self.batch_id = batch_id
        self.n_reports = n_reports
        self.delta = delta
        self.raw_payload = raw
        self.future: Future[SubmitOutcome] = Future()
        self.waiter: asyncio.Future[SubmitOutcome] | None = None  # set by submit_async


@dataclass(frozen=True, slots=True)
class _Shard:
    """A shard row as this replica last committed it: its id, version and decoded accumulator."""

    shard: int
    version: int
    acc: Accumulator


@dataclass(slots=True)
class _GroupResult:
    outcomes: list[tuple[_Submission, SubmitOutcome | BaseException]]
    shards: dict[str, _Shard]
    accepted: int = 0
    duplicates: int = 0
    reports: int = 0


class ShardWriter:
    """The queue, the writer thread and group commit into shard rows; the base of the PostgresStore.

    Args:
        url: The connection URL (the writer keeps its own connection).
        where: ``PostgreSQL <URL without password>``, for messages.
        retain_raw, decode_accumulator, zero_accumulator, group_commit_max, max_pending, read_only,
        clock, commit_window_s: See :class:`~ldp_aggregator.store_pg.core.PostgresStore`.
    """

    def __init__(
        self,
        url: str,
        where: str,
        *,
        retain_raw: bool,
        decode_accumulator: Callable[[CampaignRecord, bytes], Accumulator],
        zero_accumulator: Callable[[CampaignRecord], Accumulator],
        group_commit_max: int,
        max_pending: int,
        read_only: bool,
        clock: Callable[[], int],
        commit_window_s: float,
    ) -> None:
        self._url = url
        self._where = where
        self._retain_raw = retain_raw
        self._decode = decode_accumulator
        self._zero = zero_accumulator
        self._group_max = group_commit_max
        self._max_pending = max_pending
        self._read_only = read_only
        self._clock = clock

        # Campaign records read from the database (by the writer too), with when they were read.
        self._cache_lock = threading.Lock()
        self._campaigns: dict[str, tuple[CampaignRecord, float]] = {}
        # Written only by the writer thread: the shard it last committed per campaign.
        self._shards: dict[str, _Shard] = {}
        self._commits = self._failed_commits = 0
        self._batches_accepted = self._batches_duplicate = self._reports_accepted = 0
        self._last_commit_failed = False

        self._cv = threading.Condition()
        self._pending: deque[_Submission] = deque()
        self._accepting = not read_only
        self._stopping = read_only
        self._wconn: psycopg.Connection | None = None
        self._writer: threading.Thread | None = None
        self._loop_submissions: LoopSubmissions[_Submission] = LoopSubmissions(self._enqueue)
        self._pacer = CommitPacer(commit_window_s)

    def _start_writer(self, name: str) -> None:
        """Start the writer thread (once the schema is there)."""
        self._writer = threading.Thread(target=self._writer_main, name=name, daemon=True)
        self._writer.start()

    def _stop_writer(self) -> None:
        """Refuse new work, let the writer commit what is queued, wait for it, drop its connection."""
        if self._writer is not None and threading.current_thread() is self._writer:
            raise RuntimeError("PostgresStore.close() must not be called from a submission's done-callback")
        with self._cv:
            self._accepting = False
            self._stopping = True
            self._cv.notify_all()
        if self._writer is not None:
            self._writer.join()
        discard(self._wconn)
        self._wconn = None

    def _remember(self, record: CampaignRecord) -> CampaignRecord:
        with self._cache_lock:
            self._campaigns[record.campaign_id] = (record, time.monotonic())
        return record

    def _decode_shard(self, record: CampaignRecord, shard: int, blob: bytes, n_reports: int) -> Accumulator:
        try:
            acc = self._zero(record) if len(blob) == 0 else self._decode(record, blob)
        except Exception as exc:
            raise StoreUnavailableError(
                f"cannot decode shard {shard} of the accumulator of campaign {shown(record.campaign_id)}"
                f" in {self._where}: {exc}"
            ) from exc
        if acc.n != n_reports:
            raise StoreUnavailableError(
                f"shard {shard} of campaign {shown(record.campaign_id)} decodes to n={acc.n} but its row"
                f" says n_reports={n_reports}"
            )
        return acc

    # ------------------------------------------------------------------ submissions

    def submit(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None = None,
    ) -> Future[SubmitOutcome]:
        """Queue one batch; the future resolves only after the transaction holding it has committed.

        Same contract as :meth:`ldp_aggregator.store.Store.submit`: the future fails with
        CampaignNotFoundError, CampaignClosedError (a new batch for a closed campaign) or
        StoreUnavailableError (the commit failed, the queue is full, the store is closed), none of which
        changes stored state; a batch id already stored, by any replica, answers ``duplicate``.

        Raises:
            InvalidParameterError: Malformed ids.
            InvalidReportError: ``n_reports`` is negative or differs from ``delta.n``.
        """
        sub = self._submission(campaign_id, batch_id, n_reports, delta, raw_payload)
        self._enqueue((sub,))
        return sub.future

    @staticmethod
    def _submission(
        campaign_id: str, batch_id: str, n_reports: int, delta: BatchDelta, raw_payload: bytes | None
    ) -> _Submission:
        """A checked submission (raises for malformed ids and counts; see :meth:`submit`)."""
        check_id("campaign_id", campaign_id)
        check_id("batch_id", batch_id)
        if isinstance(n_reports, bool) or not isinstance(n_reports, int) or n_reports < 0:
            raise InvalidReportError("n_reports", n_reports, "an integer >= 0")
        if delta.n != n_reports:
            raise InvalidReportError("n_reports", n_reports, f"the batch accumulator's n={delta.n}")
        if raw_payload is not None and not isinstance(raw_payload, bytes):
            raw_payload = bytes(raw_payload)
        return _Submission(campaign_id, batch_id, n_reports, delta, raw_payload)

    def _enqueue(self, subs: Sequence[_Submission]) -> None:
        """Queue submissions for the writer with one wake-up, or fail them at once (closed, queue full)."""
        with self._cv:
            for sub in subs:
                if not self._accepting:
                    refusal = "was opened read-only and accepts no writes" if self._read_only else "is closed"
                    sub.future.set_exception(StoreUnavailableError(f"store {self._where} {refusal}"))
                elif len(self._pending) >= self._max_pending:
                    sub.future.set_exception(
                        StoreUnavailableError(
                            f"store {self._where} has {len(self._pending)} submissions waiting for the"
                            f" database (max_pending={self._max_pending}); retry later"
                        )
                    )
                else:
                    self._pending.append(sub)
            self._cv.notify()

    async def submit_async(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None = None,
    ) -> SubmitOutcome:
        """:meth:`submit` for asyncio code: returns once the batch is committed.

        As in the SQLite store, the submissions of one event-loop iteration reach the writer together and
        are answered together after their COMMIT (:mod:`ldp_aggregator.store.answers`).
        """
        sub = self._submission(campaign_id, batch_id, n_reports, delta, raw_payload)
        return await self._loop_submissions.wait(sub)

    def stats(self) -> StoreStats:
        """Counters of this replica since open."""
        with self._cv:
            pending = len(self._pending)
        with self._cache_lock:
            return StoreStats(
                commits=self._commits,
                failed_commits=self._failed_commits,
                batches_accepted=self._batches_accepted,
                batches_duplicate=self._batches_duplicate,
                reports_accepted=self._reports_accepted,
                pending=pending,
                last_commit_failed=self._last_commit_failed,
            )

    # ------------------------------------------------------------------ writer thread

    def _writer_main(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._stopping:
                    self._cv.wait()
                if not self._pending:
                    return  # stopping and drained
            with self._cv:  # only the writer takes from the queue: while it waits, the queue only grows
                self._pacer.wait_before_group(lambda: len(self._pending), self._cv.wait)
            with self._cv:
                group: list[_Submission] = []
                while self._pending and len(group) < self._group_max:
                    group.append(self._pending.popleft())
            self._pacer.group_started(len(group))
            try:
                self._commit_group(group)
            except Exception as exc:  # pragma: no cover - defensive: the writer must never die
                _log.exception("unexpected error in the store writer")
                for s in group:
                    if not s.future.done():
                        s.future.set_exception(StoreUnavailableError(f"internal store error: {exc!r}"))
            answer_waiters(group)  # after COMMIT (or the rollback): one wake-up per waiting event loop

    def _commit_group(self, group: list[_Submission]) -> None:
        import psycopg

        subs = [s for s in group if s.future.set_running_or_notify_cancel()]
        if not subs:
            return
        try:
            if self._wconn is None or self._wconn.closed or self._wconn.broken:
                discard(self._wconn)
                self._wconn = None
                self._wconn = connect(self._url)
            result = self._write_group(self._wconn, subs)
        except (psycopg.Error, StoreUnavailableError, InvalidParameterError) as exc:
            conn = self._wconn
            if isinstance(exc, psycopg.Error) and (
                conn is None or conn.broken or conn.closed or isinstance(exc, psycopg.OperationalError)
            ):
                discard(conn)
                self._wconn = None
            with self._cache_lock:
                self._failed_commits += 1
                self._last_commit_failed = True
            reason = str(exc)
            if isinstance(exc, psycopg.Error):
                reason = f"{describe_error(exc)} ({type(exc).__name__})"
            _log.warning("store commit of %d batch(es) failed: %s", len(subs), reason)
            for s in subs:
                err = StoreUnavailableError(
                    f"could not commit batch {shown(s.batch_id)} of campaign {shown(s.campaign_id)} to"
                    f" {self._where}: {reason}; nothing was stored, retry later"
                )
                err.__cause__ = exc
                s.future.set_exception(err)
            return

        # Committed and durable: remember the shards, count, then acknowledge.
        self._shards.update(result.shards)
        with self._cache_lock:
            self._commits += 1
            self._last_commit_failed = False
            self._batches_accepted += result.accepted
            self._batches_duplicate += result.duplicates
            self._reports_accepted += result.reports
        for s, outcome in result.outcomes:
            if isinstance(outcome, SubmitOutcome):
                s.future.set_result(outcome)
            else:
                s.future.set_exception(outcome)

    def _write_group(self, conn: psycopg.Connection, subs: list[_Submission]) -> _GroupResult:
        """One transaction for the group (see the module docstring); returns what to publish after COMMIT."""
        result = _GroupResult(outcomes=[], shards={})
        verdict: dict[int, SubmitOutcome | BaseException] = {}
        now = self._clock()
        with conn.transaction():
            campaign_ids = sorted({s.campaign_id for s in subs})
            # FOR SHARE: a concurrent close (UPDATE) waits for this commit, and this waits for a close.
            records = {
                r.campaign_id: r
                for r in map(
                    record_from_row,
                    conn.execute(
                        f"SELECT {CAMPAIGN_COLUMNS} FROM ldp_campaigns WHERE id = ANY(%s)"
                        " ORDER BY id FOR SHARE",
                        (campaign_ids,),
                    ).fetchall(),
                )
            }
            for record in records.values():
                self._remember(record)
            first: dict[tuple[str, str], int] = {}  # the first submission of each key in the group
            closed_keys: list[tuple[str, str]] = []
            open_keys: list[tuple[str, str]] = []
            for i, s in enumerate(subs):
                key = (s.campaign_id, s.batch_id)
                found = records.get(s.campaign_id)
                if found is None:
                    verdict[i] = CampaignNotFoundError(s.campaign_id)
                elif key in first:
                    continue  # decided with the first copy, below
                else:
                    first[key] = i
                    (closed_keys if found.closed else open_keys).append(key)
            stored_before: set[tuple[str, str]] = set()
            if closed_keys:
                stored_before = self._existing(conn, closed_keys)
            inserted: set[tuple[str, str]] = set()
            if open_keys:
                open_keys.sort()  # one lock order for every replica: concurrent retries cannot deadlock
                received = [now] * len(open_keys)
                counts = [subs[first[k]].n_reports for k in open_keys]
                inserted = {
                    (str(c), str(b))
                    for c, b in conn.execute(
                        "INSERT INTO ldp_batches (campaign_id, batch_id, n_reports, received_unix_ms)"
                        " SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[])"
                        " ON CONFLICT DO NOTHING RETURNING campaign_id, batch_id",
                        ([k[0] for k in open_keys], [k[1] for k in open_keys], counts, received),
                    ).fetchall()
                }
            new_by_campaign: dict[str, list[int]] = {}
            for key, i in first.items():
                if key in inserted:
                    new_by_campaign.setdefault(key[0], []).append(i)
                elif key in stored_before or not records[key[0]].closed:
                    verdict[i] = SubmitOutcome(duplicate=True, accepted=0)
                else:
                    verdict[i] = CampaignClosedError(key[0])
            raw_rows: list[tuple[str, str, int, bytes]] = []
            for cid, indexes in sorted(new_by_campaign.items()):
                added = self._add_to_shard(conn, records[cid], [subs[i] for i in indexes], verdict, indexes)
                for i in indexes:
                    if isinstance(verdict.get(i), SubmitOutcome):
                        s = subs[i]
                        result.accepted += 1
                        result.reports += s.n_reports
                        if self._retain_raw and s.raw_payload is not None:
                            raw_rows.append((cid, s.batch_id, now, s.raw_payload))
                if added is not None:
                    result.shards[cid] = added
            if raw_rows:
                conn.execute(RAW_ORDER_LOCK_SQL)  # seq order = commit order (iter_raw_batches)
                with (
                    conn.cursor() as cur,
                    cur.copy(
                        "COPY ldp_raw_reports (campaign_id, batch_id, received_unix_ms, payload)"
                        " FROM STDIN (FORMAT BINARY)"
                    ) as copy,
                ):
                    copy.set_types(["text", "text", "int8", "bytea"])
                    for raw in raw_rows:
                        copy.write_row(raw)
        # COMMIT returned (leaving the block without an error): the group is durable.
        for i, s in enumerate(subs):
            key = (s.campaign_id, s.batch_id)
            outcome = verdict.get(i)
            if outcome is None:  # a later copy of a key in this group: as the first copy fared
                earlier = verdict.get(first[key]) if key in first else None
                outcome = (
                    SubmitOutcome(duplicate=True, accepted=0)
                    if isinstance(earlier, SubmitOutcome) or earlier is None
                    else earlier
                )
            if isinstance(outcome, SubmitOutcome) and outcome.duplicate:
                result.duplicates += 1
            result.outcomes.append((s, outcome))
        return result

    def _existing(self, conn: psycopg.Connection, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        rows = conn.execute(
            "SELECT b.campaign_id, b.batch_id FROM ldp_batches AS b"
            " JOIN unnest(%s::text[], %s::text[]) AS k (campaign_id, batch_id)"
            " ON b.campaign_id = k.campaign_id AND b.batch_id = k.batch_id",
            ([k[0] for k in keys], [k[1] for k in keys]),
        ).fetchall()
        return {(str(c), str(b)) for c, b in rows}

    def _add_to_shard(
        self,
        conn: psycopg.Connection,
        record: CampaignRecord,
        new: list[_Submission],
        verdict: dict[int, SubmitOutcome | BaseException],
        indexes: list[int],
    ) -> _Shard | None:
        """Add the campaign's new batches to one shard row this transaction locks; returns its new state.

        A delta that does not fit its campaign (a bug elsewhere) fails alone: its batch id row is removed
        again in this transaction, so the batch is neither counted nor remembered.
        """
        cid = record.campaign_id
        mine = self._shards.get(cid)
        row = conn.execute(
            "SELECT shard, version, n_reports FROM ldp_accumulator_shards WHERE campaign_id = %s"
            " ORDER BY shard = %s DESC LIMIT 1 FOR UPDATE SKIP LOCKED",
            (cid, -1 if mine is None else mine.shard),
        ).fetchone()
        if row is None:
            shard, version, base = None, 0, self._zero(record)
        else:
            shard, version = int(row[0]), int(row[1])
            if mine is not None and mine.shard == shard and mine.version == version:
                base = mine.acc
            else:
                blob = conn.execute(
                    "SELECT data FROM ldp_accumulator_shards WHERE campaign_id = %s AND shard = %s",
                    (cid, shard),
                ).fetchone()
                base = self._decode_shard(record, shard, bytes(blob[0]) if blob else b"", int(row[2]))
        working: Accumulator | None = None
        failed: list[str] = []
        n_added = 0
        for s, i in zip(new, indexes, strict=True):
            try:
                # The first addition makes a new object (``base`` may be the committed, shared state);
                # later ones add in place when the type supports it.
                if working is None:
                    working = base + s.delta
                else:
                    working += s.delta
            except Exception as exc:
                verdict[i] = exc
                failed.append(s.batch_id)
                continue
            verdict[i] = SubmitOutcome(duplicate=False, accepted=s.n_reports)
            n_added += 1
        if failed:
            conn.execute(
                "DELETE FROM ldp_batches WHERE campaign_id = %s AND batch_id = ANY(%s)", (cid, failed)
            )
        if working is None:
            return None
        data = working.to_bytes()
        if shard is None:
            shard = secrets.randbits(62)
            conn.execute(
                "INSERT INTO ldp_accumulator_shards (campaign_id, shard, data, n_reports, n_batches, version)"
                " VALUES (%s, %s, %s, %s, %s, 1)",
                (cid, shard, data, working.n, n_added),
            )
        else:
            conn.execute(
                "UPDATE ldp_accumulator_shards SET data = %s, n_reports = %s,"
                " n_batches = n_batches + %s, version = version + 1"
                " WHERE campaign_id = %s AND shard = %s",
                (data, working.n, n_added, cid, shard),
            )
        return _Shard(shard=shard, version=version + 1, acc=working)
