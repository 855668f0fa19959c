"""The PostgreSQL store's group commit into accumulator shard rows (the queue is store.queue's).

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

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ldp_aggregator.store.queue import GroupCommitQueue, Submission
from ldp_aggregator.store.records import (
    Accumulator,
    CampaignRecord,
    SubmitOutcome,
    campaign_round,
)
from ldp_aggregator.store_pg.conninfo import connect, describe_error
from ldp_aggregator.store_pg.pool import discard
from ldp_client.errors import (
    CampaignClosedError,
    CampaignNotFoundError,
    InvalidParameterError,
    RoundNotOpenError,
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


@dataclass(frozen=True, slots=True)
class _Shard:
    """A shard row as this replica last committed it: its id, version and decoded accumulator."""

    shard: int
    version: int
    acc: Accumulator


@dataclass(slots=True)
class _GroupResult:
    outcomes: list[tuple[Submission, SubmitOutcome | BaseException]]
    shards: dict[str, _Shard]
    accepted: int = 0
    duplicates: int = 0
    reports: int = 0


class ShardWriter(GroupCommitQueue):
    """Group commit into shard rows (the queue and the writer thread are the base's); the base of the
    PostgresStore.

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
        super().__init__(
            where=where,
            backlog="the database",
            group_commit_max=group_commit_max,
            max_pending=max_pending,
            read_only=read_only,
            commit_window_s=commit_window_s,
        )
        self._url = url
        self._retain_raw = retain_raw
        self._decode = decode_accumulator
        self._zero = zero_accumulator
        self._clock = clock

        # Campaign records read from the database (by the writer too), with when they were read; under
        # _state_lock, like the counters.
        self._campaigns: dict[str, tuple[CampaignRecord, float]] = {}
        # Written only by the writer thread: the shard it last committed per campaign.
        self._shards: dict[str, _Shard] = {}
        self._wconn: psycopg.Connection | None = None

    def _stop_writer(self) -> None:
        """Refuse new work, let the writer commit what is queued, wait for it, drop its connection."""
        super()._stop_writer()
        discard(self._wconn)
        self._wconn = None

    def _remember(self, record: CampaignRecord) -> CampaignRecord:
        with self._state_lock:
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

    def _commit_group(self, group: list[Submission]) -> None:
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
            with self._state_lock:
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
        with self._state_lock:
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

    def _write_group(self, conn: psycopg.Connection, subs: list[Submission]) -> _GroupResult:
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
            # Issue 16: keys whose round is not the campaign's now (read under FOR SHARE: a NextRound's
            # UPDATE waits for this commit), refused unless stored before, as for a closed campaign.
            wrong_round: dict[tuple[str, str], BaseException] = {}
            for i, s in enumerate(subs):
                key = (s.campaign_id, s.batch_id)
                found = records.get(s.campaign_id)
                if found is None:
                    verdict[i] = CampaignNotFoundError(s.campaign_id)
                elif key in first:
                    continue  # decided with the first copy, below
                else:
                    first[key] = i
                    current = campaign_round(found)
                    if not found.closed and s.round is not None and s.round != current:
                        wrong_round[key] = RoundNotOpenError(s.campaign_id, s.round, current)
                    (closed_keys if found.closed or key in wrong_round else open_keys).append(key)
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
                elif key in stored_before or not (records[key[0]].closed or key in wrong_round):
                    verdict[i] = SubmitOutcome(duplicate=True, accepted=0)
                elif key in wrong_round:
                    verdict[i] = wrong_round[key]
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
        new: list[Submission],
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
