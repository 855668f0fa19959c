"""The writer thread: group commit of submitted batches, and every other write in queue order.

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
which only the writer thread changes, after COMMIT; :class:`~ldp_aggregator.store.Store` builds on it.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from ldp_aggregator.store.answers import CommitPacer, LoopSubmissions, answer_waiters
from ldp_aggregator.store.files import StoreFiles
from ldp_aggregator.store.records import (
    Accumulator,
    BatchDelta,
    CampaignRecord,
    StoreStats,
    SubmitOutcome,
    check_id,
)
from ldp_aggregator.store.schema import IN_LIST_CHUNK
from ldp_client.errors import (
    CampaignClosedError,
    CampaignNotFoundError,
    InvalidReportError,
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


class _Submission:
    __slots__ = ("batch_id", "campaign_id", "delta", "future", "n_reports", "raw_payload", "waiter")

    def __init__(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None,
    ) -> None:
        self.campaign_id = campaign_id
        self.batch_id = batch_id
        self.n_reports = n_reports
        self.delta = delta
        self.raw_payload = raw_payload
        self.future: Future[SubmitOutcome] = Future()
        self.waiter: asyncio.Future[SubmitOutcome] | None = None  # set by submit_async


class _Command:
    """A non-batch write (create/close campaign, purge) run alone, in queue order, by the writer."""

    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        self.fn = fn
        self.future: Future[Any] = Future()


class GroupCommitWriter(StoreFiles):
    """The queue, the writer thread and the committed in-memory mirror; the base of the Store.

    The thread itself is started by :class:`~ldp_aggregator.store.Store` once the schema and the mirror
    are loaded (:meth:`_start_writer`); a read-only store never starts it and refuses every write.

    Args:
        path, busy_timeout_s, page_size: See :class:`~ldp_aggregator.store.files.StoreFiles`.
        retain_raw: Keep each batch's raw payload in ``raw_reports`` (in the batch's transaction).
        group_commit_max: Most submissions committed in one transaction.
        commit_window_s: While callers are concurrent, commits start at most this often
            (:class:`~ldp_aggregator.store.answers.CommitPacer`; 0: commit as soon as anything waits).
        max_pending: Most submissions waiting for the writer (beyond: fail fast, retryable).
        read_only: Accept no writes at all.
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
        super().__init__(path, busy_timeout_s=busy_timeout_s, page_size=page_size)
        self._retain_raw = retain_raw
        self._group_max = group_commit_max
        self._max_pending = max_pending
        self._read_only = read_only
        self._clock = clock

        # Committed in-memory mirror of the database; written only by the writer thread after COMMIT.
        self._state_lock = threading.Lock()
        self._campaigns: dict[str, CampaignRecord] = {}
        self._acc: dict[str, Accumulator] = {}
        self._n_batches: dict[str, int] = {}
        self._commits = 0
        self._failed_commits = 0
        self._batches_accepted = 0
        self._batches_duplicate = 0
        self._reports_accepted = 0
        self._last_commit_failed = False  # for health checks: is the disk refusing writes right now?

        # Writer queue. The condition guards _pending/_accepting/_stopping.
        self._cv = threading.Condition()
        self._pending: deque[_Submission | _Command] = deque()
        self._accepting = not read_only
        self._stopping = read_only
        self._writer: threading.Thread | None = None
        self._loop_submissions: LoopSubmissions[_Submission] = LoopSubmissions(self._enqueue)
        self._pacer = CommitPacer(commit_window_s)

    def submit(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None = None,
    ) -> Future[SubmitOutcome]:
        """Queue one batch; the future resolves only after the transaction holding it has committed.

        Args:
            campaign_id: Target campaign.
            batch_id: Client-chosen id; a batch id already stored for this campaign is a no-op
                (``SubmitOutcome(duplicate=True, accepted=0)``), so retries are safe.
            n_reports: Reports in the batch; must equal ``delta.n``.
            delta: What the batch adds (built by the caller from the validated batch): its accumulator, or
                an increment the campaign's accumulator accepts in ``+`` (:class:`BatchDelta`).
            raw_payload: Serialized batch to retain when retention is on (ignored otherwise).

        Returns:
            A future of SubmitOutcome. It fails with CampaignNotFoundError, CampaignClosedError (new batch
            for a closed campaign), or StoreUnavailableError (commit failed, queue full, store closed);
            none of these change stored state. Cancelling the future before the writer takes it drops
            the batch.

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
                    sub.future.set_exception(StoreUnavailableError(self._refusal()))
                elif len(self._pending) >= self._max_pending:
                    sub.future.set_exception(
                        StoreUnavailableError(
                            f"store {str(self._path)!r} has {len(self._pending)} submissions waiting for the"
                            f" disk (max_pending={self._max_pending}); retry later"
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
        """:meth:`submit` for asyncio code (grpc.aio servicers): returns once the batch is committed.

        The submissions of one event-loop iteration reach the writer together and are answered together
        after their COMMIT (:mod:`ldp_aggregator.store.answers`): a loop's many concurrent single reports
        cost one writer wake-up and one loop wake-up per group, not per report.
        """
        sub = self._submission(campaign_id, batch_id, n_reports, delta, raw_payload)
        return await self._loop_submissions.wait(sub)

    def stats(self) -> StoreStats:
        """Counters since open."""
        with self._cv:
            pending = len(self._pending)
        with self._state_lock:
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

    def _start_writer(self, name: str) -> None:
        """Start the writer thread (once the schema and the mirror are loaded)."""
        self._writer = threading.Thread(target=self._writer_main, name=name, daemon=True)
        self._writer.start()

    def _stop_writer(self) -> None:
        """Refuse new work, let the writer commit everything already queued, and wait for it to exit."""
        if self._writer is not None and threading.current_thread() is self._writer:
            # Future callbacks run on the writer thread; it cannot wait for itself to drain.
            raise RuntimeError("Store.close() must not be called from a submission's done-callback")
        with self._cv:
            self._accepting = False
            self._stopping = True
            self._cv.notify_all()
        if self._writer is not None:
            self._writer.join()

    def _run_in_writer(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn(writer_connection)`` on the writer thread, after everything queued before it."""
        cmd = _Command(fn)
        with self._cv:
            if not self._accepting:
                raise StoreUnavailableError(self._refusal())
            self._pending.append(cmd)
            self._cv.notify()
        result: _T = cmd.future.result()
        return result

    def _refusal(self) -> str:
        if self._read_only:
            return f"store {str(self._path)!r} was opened read-only and accepts no writes"
        return f"store {str(self._path)!r} is closed"

    def _writer_main(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._stopping:
                    self._cv.wait()
                if not self._pending:
                    return  # stopping and drained
                paced = not isinstance(self._pending[0], _Command)
            if paced:
                with self._cv:  # only the writer takes from the queue: while it waits, the queue only grows
                    self._pacer.wait_before_group(lambda: len(self._pending), self._cv.wait)
            command: _Command | None = None
            group: list[_Submission] = []
            with self._cv:
                head = self._pending[0]
                if isinstance(head, _Command):
                    command = head
                    self._pending.popleft()
                else:
                    # Group commit: everything queued while the previous commit was fsyncing, up to a
                    # command (which must run after the submissions queued before it, and before later ones).
                    while self._pending and len(group) < self._group_max:
                        item = self._pending[0]
                        if isinstance(item, _Command):
                            break
                        self._pending.popleft()
                        group.append(item)
            if group:
                self._pacer.group_started(len(group))
            try:
                if command is not None:
                    self._run_command(command)
                else:
                    self._commit_group(group)
            except Exception as exc:  # pragma: no cover - defensive: the writer must never die
                _log.exception("unexpected error in the store writer")
                for s in group:
                    if not s.future.done():
                        s.future.set_exception(StoreUnavailableError(f"internal store error: {exc!r}"))
            answer_waiters(group)  # after COMMIT (or the rollback): one wake-up per waiting event loop

    def _run_command(self, cmd: _Command) -> None:
        if not cmd.future.set_running_or_notify_cancel():
            return
        try:
            result = cmd.fn(self._writer_connection())
        except BaseException as exc:
            cmd.future.set_exception(exc)
        else:
            cmd.future.set_result(result)

    def _existing_batch_ids(self, conn: sqlite3.Connection, subs: list[_Submission]) -> set[tuple[str, str]]:
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

    def _commit_group(self, group: list[_Submission]) -> None:
        # Drop submissions cancelled while queued; mark the rest running (no longer cancellable).
        live = [s for s in group if s.future.set_running_or_notify_cancel()]
        subs: list[_Submission] = []
        for s in live:
            if s.campaign_id in self._campaigns:
                subs.append(s)
            else:
                s.future.set_exception(CampaignNotFoundError(s.campaign_id))
        if not subs:
            return

        outcomes: list[tuple[_Submission, SubmitOutcome | BaseException]] = []
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
