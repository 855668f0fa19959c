"""Submissions from asyncio code: handed to the writer per event-loop iteration, answered per committed group.

A gRPC replica serves many devices' single reports at once, each on its own task of one event loop. Handing
each submission to the writer thread on its own (a lock, a wake-up of the writer) and answering each on
its own after COMMIT (``asyncio.wrap_future``: one ``call_soon_threadsafe``, so one write to the loop's
wake-up descriptor and one loop wake-up per report) made the cross-thread traffic, and the GIL hand-overs
it causes, grow with the number of reports instead of the number of commits. Here:

* :meth:`LoopSubmissions.wait` gathers what the tasks of one loop submit during one iteration of the loop
  and hands it to the writer's queue together, at the end of that iteration (one lock, one wake-up);
* :func:`answer_waiters`, called by the writer thread once a group is decided (committed, or failed and
  rolled back), wakes each loop once with every answer of the group for it.

* :class:`CommitPacer` spaces the writer's commits while concurrent callers keep it busy, so that a
  group holds many reports instead of two or three (see the class).

The writer's rule is unchanged: a submission's future, and so its caller's answer, is set only after the
transaction holding it has committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Final, Generic, Protocol, TypeVar

from ldp_aggregator.store.records import SubmitOutcome

__all__ = ["DEFAULT_COMMIT_WINDOW_S", "CommitPacer", "LoopSubmissions", "Waiting", "answer_waiters"]

#: Default of :class:`CommitPacer`'s window: at most this much added latency, only under concurrency.
DEFAULT_COMMIT_WINDOW_S: Final = 0.002


class Waiting(Protocol):
    """A queued submission: its writer-side future, and the asyncio future its caller awaits (if any)."""

    future: Future[SubmitOutcome]
    waiter: asyncio.Future[SubmitOutcome] | None


_W = TypeVar("_W", bound=Waiting)


class LoopSubmissions(Generic[_W]):
    """Gathers the submissions of one event-loop iteration, per loop, and enqueues them together.

    Args:
        enqueue: The writer's queueing step for several submissions at once (one lock, one wake-up). It
            either queues each one or fails its ``future`` at once (store closed, queue full).
    """

    def __init__(self, enqueue: Callable[[Sequence[_W]], None]) -> None:
        self._enqueue = enqueue
        self._lock = threading.Lock()  # several loops (threads) may submit to one store
        self._gathering: dict[asyncio.AbstractEventLoop, list[_W]] = {}

    async def wait(self, sub: _W) -> SubmitOutcome:
        """Queue ``sub`` with the rest of this loop iteration's submissions; return its committed outcome.

        Cancelling the caller cancels the submission if the writer has not taken it yet (it is then
        dropped); once taken, it is committed or failed as a whole group and only the answer is lost.
        """
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[SubmitOutcome] = loop.create_future()
        sub.waiter = waiter
        with self._lock:
            gathered = self._gathering.get(loop)
            if gathered is None:
                gathered = self._gathering[loop] = []
                loop.call_soon(self._flush, loop)
            gathered.append(sub)
        try:
            return await waiter
        except asyncio.CancelledError:
            sub.future.cancel()
            raise

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            gathered = self._gathering.pop(loop, [])
        if not gathered:
            return
        try:
            self._enqueue(gathered)
        except BaseException as exc:  # pragma: no cover - defensive: never leave a caller waiting
            for sub in gathered:
                if not sub.future.done():
                    sub.future.set_exception(exc)
        _settle([sub for sub in gathered if sub.future.done()])  # refused at once: answer now


class CommitPacer:
    """Spaces group commits while concurrent callers keep the writer busy, so that groups grow.

    With a fast fsync the writer commits as soon as anything is queued. Under many concurrent single
    reports (each caller waiting for its answer before sending the next) a group then holds two or three,
    and the work paid per commit (rewriting each touched accumulator, the fsync, the transaction's
    statements, waking the callers) is paid per two or three reports: measured over gRPC, 2.7 reports per
    commit and half of the server's CPU in the writer. So when the previous group held more than one
    submission (callers are concurrent) and began less than ``window_s`` ago, the writer first waits, and
    takes everything that arrived meanwhile, until as many submissions are queued as the previous group
    held (its callers have all come back: waiting longer would only leave the disk idle; without this, 4
    callers answered every 2 ms made at most 2,000 reports/s where 5,000 were possible) or the window is
    over. Callers whose arrivals are spread out therefore get groups about the size of the previous one,
    not all of them at once (16 callers pausing 0-15 ms: about 20 commits for 128 reports instead of 8 with
    a full wait, 41-49 without pacing). A lone caller sending one batch after another (groups of one) is
    never delayed, and no caller waits more than ``window_s`` extra.

    Used by the writer thread only.
    """

    def __init__(
        self,
        window_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._window_s = window_s
        self._clock = clock
        self._sleep = sleep
        self._last_start = float("-inf")
        self._last_size = 0

    def wait_before_group(
        self, queued: Callable[[], int] = lambda: 0, wait: Callable[[float], object] | None = None
    ) -> None:
        """Wait, if the previous group showed concurrent callers, until ``queued()`` (the submissions now
        waiting) reaches the previous group's size or the rest of the window has passed.

        Args:
            queued: How many submissions are queued (read under the lock ``wait`` releases).
            wait: Blocks for at most the given seconds, returning early when a submission is queued (the
                writer's ``Condition.wait``, called with its lock held); default: sleep.
        """
        if self._window_s <= 0 or self._last_size < 2:
            return
        deadline = self._last_start + self._window_s
        block = wait if wait is not None else self._sleep
        while queued() < self._last_size:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return
            block(remaining)

    def group_started(self, size: int) -> None:
        """Note that a group of ``size`` submissions is being committed now."""
        self._last_start = self._clock()
        self._last_size = size


def answer_waiters(subs: Iterable[Waiting]) -> None:
    """Pass the decided outcomes of ``subs`` to their asyncio callers: one loop wake-up per loop.

    Called by the writer thread after a group's transaction committed or failed (never before COMMIT
    returned). Submissions made without an asyncio caller (``submit``) are skipped: their futures are
    the answer.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[Waiting]] = {}
    for sub in subs:
        waiter = sub.waiter
        if waiter is not None and sub.future.done():
            by_loop.setdefault(waiter.get_loop(), []).append(sub)
    for loop, decided in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop was closed: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, decided)


def _settle(decided: list[Waiting]) -> None:
    """On the caller's loop: copy each writer-side outcome to the caller's asyncio future."""
    for sub in decided:
        waiter = sub.waiter
        if waiter is None or waiter.done():
            continue
        future = sub.future
        if future.cancelled():
            waiter.cancel()
            continue
        exc = future.exception()
        if exc is None:
            waiter.set_result(future.result())
        else:
            waiter.set_exception(exc)
