"""The submission queue and its writer thread, shared by the SQLite store and the PostgreSQL store.

Both stores take batches the same way: a submission is checked, queued, and taken by one writer thread
that commits everything queued into one transaction (group commit); its caller is answered only after
COMMIT returned. What differs is the transaction itself (:meth:`GroupCommitQueue._commit_group`:
``ldp_aggregator.store.writer`` for SQLite, ``ldp_aggregator.store_pg.writer`` for PostgreSQL), so the
queue, the writer loop, the pacing of commits (:class:`~ldp_aggregator.store.answers.CommitPacer`), the
hand-over of asyncio callers (:class:`~ldp_aggregator.store.answers.LoopSubmissions`) and the counters live
here once.

Besides submissions, the queue carries *commands* (:meth:`GroupCommitQueue._run_on_writer`): other writes
(create or close a campaign, purge raw reports) that must run on the writer thread, alone and in queue
order, after everything submitted before them.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from ldp_aggregator.store.answers import CommitPacer, LoopSubmissions, answer_waiters
from ldp_aggregator.store.records import BatchDelta, StoreStats, SubmitOutcome, check_id
from ldp_client.errors import InvalidReportError, StoreUnavailableError

__all__ = ["GroupCommitQueue", "Submission"]

# The store's modules log under the package's name, as the single module did.
_log = logging.getLogger("ldp_aggregator.store")

_T = TypeVar("_T")


class Submission:
    """One queued batch: what it adds, and the future its caller is answered through after COMMIT."""

    __slots__ = ("batch_id", "campaign_id", "delta", "future", "n_reports", "raw_payload", "round", "waiter")

    def __init__(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None,
        round_: int | None = None,
    ) -> None:
        self.campaign_id = campaign_id
        self.round = round_  # adaptive discovery: the round the batch answers (checked in the commit)
        self.batch_id = batch_id
        self.n_reports = n_reports
        self.delta = delta
        self.raw_payload = raw_payload
        self.future: Future[SubmitOutcome] = Future()
        self.waiter: asyncio.Future[SubmitOutcome] | None = None  # set by submit_async


class _Command:
    """A non-batch write run alone, in queue order, by the writer thread."""

    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.future: Future[Any] = Future()


class GroupCommitQueue(abc.ABC):
    """The queue, the writer thread and the counters; the base of both stores' writers.

    Args:
        where: The store as messages name it (a quoted file path, or ``PostgreSQL <URL>``).
        backlog: What queued submissions wait for, in the "queue full" message ("the disk").
        group_commit_max: Most submissions committed in one transaction.
        max_pending: Most submissions waiting for the writer (beyond: fail fast, retryable).
        read_only: Accept no writes at all (the writer is then never started).
        commit_window_s: While callers are concurrent, commits start at most this often
            (:class:`~ldp_aggregator.store.answers.CommitPacer`; 0: commit as soon as anything waits).
    """

    def __init__(
        self,
        *,
        where: str,
        backlog: str,
        group_commit_max: int,
        max_pending: int,
        read_only: bool,
        commit_window_s: float,
    ) -> None:
        self._where = where
        self._backlog = backlog
        self._group_max = group_commit_max
        self._max_pending = max_pending
        self._read_only = read_only

        # Counters, and whatever committed state a subclass publishes after COMMIT, under this lock.
        self._state_lock = threading.Lock()
        self._commits = 0
        self._failed_commits = 0
        self._batches_accepted = 0
        self._batches_duplicate = 0
        self._reports_accepted = 0
        self._last_commit_failed = False  # for health checks: is the store refusing writes right now?

        # Writer queue. The condition guards _pending/_accepting/_stopping.
        self._cv = threading.Condition()
        self._pending: deque[Submission | _Command] = deque()
        self._accepting = not read_only
        self._stopping = read_only
        self._writer: threading.Thread | None = None
        self._loop_submissions: LoopSubmissions[Submission] = LoopSubmissions(self._enqueue)
        self._pacer = CommitPacer(commit_window_s)

    # ------------------------------------------------------------------ submissions

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
        """Queue one batch; the future resolves only after the transaction holding it has committed.

        Args:
            campaign_id: Target campaign.
            batch_id: Client-chosen id; a batch id already stored for this campaign (by any replica) is a
                no-op (``SubmitOutcome(duplicate=True, accepted=0)``), so retries are safe.
            n_reports: Reports in the batch; must equal ``delta.n``.
            delta: What the batch adds (built by the caller from the validated batch): its accumulator, or
                an increment the campaign's accumulator accepts in ``+`` (:class:`BatchDelta`).
            raw_payload: Serialized batch to retain when retention is on (ignored otherwise).
            round_: Adaptive discovery campaigns (issue 16): the round every report of the batch answers;
                the commit refuses it with RoundNotOpenError unless it is the campaign's round then
                (``campaign_round``), in the transaction that would store it. None: no round check.

        Returns:
            A future of SubmitOutcome. It fails with CampaignNotFoundError, CampaignClosedError (new batch
            for a closed campaign), or StoreUnavailableError (commit failed, queue full, store closed);
            none of these change stored state. Cancelling the future before the writer takes it drops
            the batch.

        Raises:
            InvalidParameterError: Malformed ids.
            InvalidReportError: ``n_reports`` is negative or differs from ``delta.n``.
        """
        sub = self._submission(campaign_id, batch_id, n_reports, delta, raw_payload, round_)
        self._enqueue((sub,))
        return sub.future

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
        """:meth:`submit` for asyncio code (grpc.aio servicers): returns once the batch is committed.

        The submissions of one event-loop iteration reach the writer together and are answered together
        after their COMMIT (:mod:`ldp_aggregator.store.answers`): a loop's many concurrent single reports
        cost one writer wake-up and one loop wake-up per group, not per report.
        """
        sub = self._submission(campaign_id, batch_id, n_reports, delta, raw_payload, round_)
        return await self._loop_submissions.wait(sub)

    def stats(self) -> StoreStats:
        """Counters since open (this process only)."""
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

    @staticmethod
    def _submission(
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None,
        round_: int | None = None,
    ) -> Submission:
        """A checked submission (raises for malformed ids and counts; see :meth:`submit`)."""
        check_id("campaign_id", campaign_id)
        check_id("batch_id", batch_id)
        if isinstance(n_reports, bool) or not isinstance(n_reports, int) or n_reports < 0:
            raise InvalidReportError("n_reports", n_reports, "an integer >= 0")
        if delta.n != n_reports:
            raise InvalidReportError("n_reports", n_reports, f"the batch accumulator's n={delta.n}")
        if raw_payload is not None and not isinstance(raw_payload, bytes):
            raw_payload = bytes(raw_payload)
        if round_ is not None and (isinstance(round_, bool) or not isinstance(round_, int) or round_ < 0):
            raise InvalidReportError("round", round_, "an integer >= 0 or None")
        return Submission(campaign_id, batch_id, n_reports, delta, raw_payload, round_)

    def _enqueue(self, subs: Sequence[Submission]) -> None:
        """Queue submissions for the writer with one wake-up, or fail them at once (closed, queue full)."""
        with self._cv:
            for sub in subs:
                if not self._accepting:
                    sub.future.set_exception(StoreUnavailableError(self._refusal()))
                elif len(self._pending) >= self._max_pending:
                    sub.future.set_exception(
                        StoreUnavailableError(
                            f"store {self._where} has {len(self._pending)} submissions waiting for"
                            f" {self._backlog} (max_pending={self._max_pending}); retry later"
                        )
                    )
                else:
                    self._pending.append(sub)
            self._cv.notify()

    def _refusal(self) -> str:
        if self._read_only:
            return f"store {self._where} was opened read-only and accepts no writes"
        return f"store {self._where} is closed"

    def _run_on_writer(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn()`` on the writer thread, after everything queued before it; its result or exception."""
        cmd = _Command(fn)
        with self._cv:
            if not self._accepting:
                raise StoreUnavailableError(self._refusal())
            self._pending.append(cmd)
            self._cv.notify()
        result: _T = cmd.future.result()
        return result

    # ------------------------------------------------------------------ writer thread

    @abc.abstractmethod
    def _commit_group(self, group: list[Submission]) -> None:
        """Commit ``group`` in one transaction, then settle every future of it (result or exception).

        Runs on the writer thread. A failure must leave the store as it was and fail the group's futures
        with :class:`~ldp_client.errors.StoreUnavailableError` (retryable).
        """

    def _start_writer(self, name: str) -> None:
        """Start the writer thread (once the store is ready for it)."""
        self._writer = threading.Thread(target=self._writer_main, name=name, daemon=True)
        self._writer.start()

    def _stop_writer(self) -> None:
        """Refuse new work, let the writer commit everything already queued, and wait for it to exit."""
        if self._writer is not None and threading.current_thread() is self._writer:
            # Future callbacks run on the writer thread; it cannot wait for itself to drain.
            raise RuntimeError(
                f"{type(self).__name__}.close() must not be called from a submission's done-callback"
            )
        with self._cv:
            self._accepting = False
            self._stopping = True
            self._cv.notify_all()
        if self._writer is not None:
            self._writer.join()

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
            group: list[Submission] = []
            with self._cv:
                head = self._pending[0]
                if isinstance(head, _Command):
                    command = head
                    self._pending.popleft()
                else:
                    # Group commit: everything queued while the previous commit was in flight, up to a
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

    @staticmethod
    def _run_command(cmd: _Command) -> None:
        if not cmd.future.set_running_or_notify_cancel():
            return
        try:
            result = cmd.fn()
        except BaseException as exc:
            cmd.future.set_exception(exc)
        else:
            cmd.future.set_result(result)
