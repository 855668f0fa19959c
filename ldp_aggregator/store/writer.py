"""The SQLite store's group commit: one transaction per group of submitted batches, and the mirror.

Durability model (see DESIGN.md, "Storage and durability"):

* SQLite in WAL mode with ``synchronous=FULL``: a transaction is on stable storage when COMMIT returns.
* One writer thread owns the only writing connection and implements **group commit**: it drains every
  pending submission (up to ``group_commit_max``) into one transaction that inserts the new batch ids,
  appends raw reports when retention is on, and rewrites each touched campaign's accumulator once. Only
  after COMMIT returns are the in-memory accumulators swapped and the callers' futures resolved, so an
  acknowledged batch is never lost, even on ``kill -9``; a retried batch id is a no-op, so a batch is
  never counted twice. Many concurrent batches share one fsync, which is what makes hundreds of durable
  batches per second possible.
* If a transaction fails (disk full, I/O error, read-only file), it is rolled back, the in-memory state
  is left as it was, and every submission of the group fails with
  :class:`~ldp_client.errors.StoreUnavailableError` (retryable). The writer keeps running, so later
  submissions succeed once the disk recovers.

:class:`GroupCommitWriter` holds the committed in-memory mirror (campaigns, accumulators, batch counts),
which only the writer thread changes, after COMMIT; :class:`~ldp_aggregator.store.Store` builds on it. The
queue and the writer thread (shared with the PostgreSQL store) are in :mod:`ldp_aggregator.store.queue`.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ldp_aggregator.store.files import StoreFiles
from ldp_aggregator.store.queue import GroupCommitQueue, Submission
from ldp_aggregator.store.records import Accumulator, CampaignRecord, SubmitOutcome, campaign_round
from ldp_aggregator.store.schema import IN_LIST_CHUNK
from ldp_client.errors import (
    CampaignClosedError,
    CampaignNotFoundError,
    RoundNotOpenError,
    StoreUnavailableError,
    shown,
)

__all__ = ["GroupCommitWriter"]

# The store's modules log under the package's name, as the single module did.
_log = logging.getLogger("ldp_aggregator.store")

_T = TypeVar("_T")


def _insert_rows(conn: sqlite3.Connection, into: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """``INSERT INTO {into} VALUES (...), (...), ...``: one statement per IN_LIST_CHUNK rows.

    Not ``executemany``: the sqlite3 module releases the GIL around every statement step, so a row at a
    time hands the GIL to the event loop thread (and back) once per row, a futex round trip each while
    that thread is busy; a group of single reports then costs more in hand-overs than in inserts.
    """
    if not rows:
        return
    width = len(rows[0])
    marks = "(" + ", ".join("?" * width) + ")"
    for start in range(0, len(rows), IN_LIST_CHUNK):
        chunk = rows[start : start + IN_LIST_CHUNK]
        conn.execute(
            f"INSERT INTO {into} VALUES {', '.join([marks] * len(chunk))}",
            [value for row in chunk for value in row],
        )


class GroupCommitWriter(StoreFiles, GroupCommitQueue):
    """The committed in-memory mirror and the SQLite transaction of a group; the base of the Store.

    The queue and the writer thread are :class:`~ldp_aggregator.store.queue.GroupCommitQueue`'s; the
    thread itself is started by :class:`~ldp_aggregator.store.Store` once the schema and the mirror are
    loaded (:meth:`_start_writer`); a read-only store never starts it and refuses every write.

    Args:
        path, busy_timeout_s, page_size: See :class:`~ldp_aggregator.store.files.StoreFiles`.
        retain_raw: Keep each batch's raw payload in ``raw_reports`` (in the batch's transaction).
        group_commit_max, max_pending, read_only, commit_window_s: See
            :class:`~ldp_aggregator.store.queue.GroupCommitQueue`.
        clock: Milliseconds since the Unix epoch, for ``received_unix_ms``.
    """

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_s: float,
        page_size: int,
        retain_raw: bool,
        group_commit_max: int,
        max_pending: int,
        read_only: bool,
        clock: Callable[[], int],
        commit_window_s: float,
    ) -> None:
        StoreFiles.__init__(self, path, busy_timeout_s=busy_timeout_s, page_size=page_size)
        GroupCommitQueue.__init__(
            self,
            where=repr(str(path)),
            backlog="the disk",
            group_commit_max=group_commit_max,
            max_pending=max_pending,
            read_only=read_only,
            commit_window_s=commit_window_s,
        )
        self._retain_raw = retain_raw
        self._clock = clock

        # Committed in-memory mirror of the database; written only by the writer thread after COMMIT,
        # under _state_lock.
        self._campaigns: dict[str, CampaignRecord] = {}
        self._acc: dict[str, Accumulator] = {}
        self._n_batches: dict[str, int] = {}

    def _run_in_writer(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn(writer_connection)`` on the writer thread, after everything queued before it."""
        return self._run_on_writer(lambda: fn(self._writer_connection()))

    def _existing_batch_ids(self, conn: sqlite3.Connection, subs: list[Submission]) -> set[tuple[str, str]]:
        """(campaign, batch) pairs of ``subs`` already committed: one query per campaign and 500 ids."""
        by_campaign: dict[str, list[str]] = {}
        for s in subs:
            by_campaign.setdefault(s.campaign_id, []).append(s.batch_id)
        found: set[tuple[str, str]] = set()
        for cid, bids in by_campaign.items():
            for start in range(0, len(bids), IN_LIST_CHUNK):
                chunk = bids[start : start + IN_LIST_CHUNK]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(
                    f"SELECT batch_id FROM batches WHERE campaign_id = ? AND batch_id IN ({marks})",
                    (cid, *chunk),
                )
                found.update((cid, bid) for (bid,) in cur)
        return found

    def _commit_group(self, group: list[Submission]) -> None:
        # Drop submissions cancelled while queued; mark the rest running (no longer cancellable).
        live = [s for s in group if s.future.set_running_or_notify_cancel()]
        subs: list[Submission] = []
        for s in live:
            if s.campaign_id in self._campaigns:
                subs.append(s)
            else:
                s.future.set_exception(CampaignNotFoundError(s.campaign_id))
        if not subs:
            return

        outcomes: list[tuple[Submission, SubmitOutcome | BaseException]] = []
        working: dict[str, Accumulator] = {}  # next state per touched campaign; committed state untouched
        n_batches: dict[str, int] = {}
        batch_rows: list[tuple[str, str, int, int]] = []
        raw_rows: list[tuple[str, str, bytes]] = []
        accepted = duplicates = reports = 0
        try:
            conn = self._writer_connection()
            conn.execute("BEGIN IMMEDIATE")
            existing = self._existing_batch_ids(conn, subs)
            seen: set[tuple[str, str]] = set()
            now = self._clock()
            for s in subs:
                key = (s.campaign_id, s.batch_id)
                if key in existing or key in seen:
                    outcomes.append((s, SubmitOutcome(duplicate=True, accepted=0)))
                    duplicates += 1
                    continue
                cid = s.campaign_id
                if self._campaigns[cid].closed:
                    outcomes.append((s, CampaignClosedError(cid)))
                    continue
                if s.round is not None and s.round != (open_round := campaign_round(self._campaigns[cid])):
                    # Issue 16: a report of a round closed (or not yet open) is counted nowhere.
                    outcomes.append((s, RoundNotOpenError(cid, s.round, open_round)))
                    continue
                try:
                    # The first batch of a group makes a new object (committed state stays untouched
                    # until COMMIT); later ones add into it in place, when the type supports it.
                    current = working.get(cid)
                    if current is None:
                        new_acc = self._acc[cid] + s.delta
                    else:
                        current += s.delta
                        new_acc = current
                except Exception as exc:  # a delta that does not fit its campaign fails alone
                    outcomes.append((s, exc))
                    continue
                working[cid] = new_acc
                n_batches[cid] = n_batches.get(cid, self._n_batches[cid]) + 1
                seen.add(key)
                batch_rows.append((cid, s.batch_id, s.n_reports, now))
                if self._retain_raw and s.raw_payload is not None:
                    raw_rows.append((cid, s.batch_id, s.raw_payload))
                outcomes.append((s, SubmitOutcome(duplicate=False, accepted=s.n_reports)))
                accepted += 1
                reports += s.n_reports
            _insert_rows(conn, "batches (campaign_id, batch_id, n_reports, received_unix_ms)", batch_rows)
            # position: AUTOINCREMENT (schema.RAW_SCHEMA), so in commit order and never reused.
            _insert_rows(conn, "raw_reports (campaign_id, batch_id, payload)", raw_rows)
            if working:
                # One accumulator write per touched campaign per group, whatever the group size.
                conn.executemany(
                    "UPDATE accumulators SET data = ?, n_reports = ?, n_batches = ? WHERE campaign_id = ?",
                    [(acc.to_bytes(), acc.n, n_batches[cid], cid) for cid, acc in working.items()],
                )
            conn.execute("COMMIT")
        except Exception as exc:
            if self._wconn is not None:
                self._rollback(self._wconn)
            with self._state_lock:
                self._failed_commits += 1
                self._last_commit_failed = True
            reason = f"{exc} ({type(exc).__name__})"
            _log.warning("store commit of %d batch(es) failed: %s", len(subs), reason)
            for s in subs:
                err = StoreUnavailableError(
                    f"could not commit batch {shown(s.batch_id)} of campaign {shown(s.campaign_id)} to"
                    f" {str(self._path)!r}: {reason}; nothing was stored, retry later"
                )
                err.__cause__ = exc
                s.future.set_exception(err)
            return

        # Committed and durable: publish the new state, then acknowledge.
        with self._state_lock:
            self._acc.update(working)
            self._n_batches.update(n_batches)
            self._commits += 1
            self._last_commit_failed = False
            self._batches_accepted += accepted
            self._batches_duplicate += duplicates
            self._reports_accepted += reports
        for s, outcome in outcomes:
            if isinstance(outcome, SubmitOutcome):
                s.future.set_result(outcome)
            else:
                s.future.set_exception(outcome)
