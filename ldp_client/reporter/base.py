"""The reporter's shared state, and what every part of it does with it: stop, count a loss, settle a batch.

:class:`ReporterState` holds the state the app threads and the background thread share (guarded by one
condition's lock) and the state only the background thread touches. The parts of the reporter are
layers over it, each in its own module: the journal and recovery of the outbox
(:mod:`~ldp_client.reporter.journaling`), fetching and checking the campaign
(:mod:`~ldp_client.reporter.fetching`), sending batches under the retry rules
(:mod:`~ldp_client.reporter.sending`), and the public :class:`~ldp_client.reporter.Reporter` with its
thread loop (:mod:`~ldp_client.reporter.core`).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NoReturn

import grpc

from ldp_client import _journal_rows, registry, wire
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2_grpc, reports_pb2
from ldp_client.errors import LdpError
from ldp_client.params import MechanismParams
from ldp_client.reporter.campaign import Budget
from ldp_client.reporter.ledger import (
    ChargePlan,
    DeviceLedger,
    memo_key,
    memo_scope,
    pause_after_spend_for_tests,
    report_cost,
)
from ldp_client.reporter.outbox import Batch, Outbox, Segment, params_fingerprint
from ldp_client.reporter.settings import BATCH_OVERHEAD_BYTES, ReporterSettings
from ldp_client.reporter.stats import Counters, Discard, DiscardReason, State
from ldp_client.secret import ClientSecret

# The reporter's logger: one name for the whole package, as apps configure it.
logger = logging.getLogger("ldp_client.reporter")


class StopThreadError(Exception):
    """Internal: leave the background loop (the reason, if any, is in ``Reporter._error``)."""


class ReporterState:
    """A reporter's state and the helpers every layer of it uses (the layers: module docstring).

    Args:
        campaign_id: the campaign (checked by the caller).
        settings: the checked arguments.
        state_dir: the directory of the outbox and the default client secret.
        secret: the client secret, or None to load or create ``state_dir / "secret"`` when needed.
        on_discard: the app's loss callback, or None.
    """

    _stub: collector_pb2_grpc.CollectorStub  # set by the Reporter once its channel is open

    def __init__(
        self,
        campaign_id: str,
        settings: ReporterSettings,
        *,
        state_dir: Path,
        secret: ClientSecret | None,
        on_discard: Callable[[Discard], None] | None,
    ) -> None:
        self._budget = Budget(campaign_id, settings.max_epsilon, settings.max_epsilon_inf)
        self._policy = settings.budget
        self._ledger: DeviceLedger | None = None  # acquired by the Reporter after the outbox lock
        self._bulk_plan: ChargePlan | None = None  # charged per journaled group (see _charging)
        self._batch_size = settings.batch_size
        self._max_age = settings.max_batch_age_s
        self._initial_delay = settings.initial_retry_delay_s
        self._max_delay = settings.max_retry_delay_s
        self._rpc_timeout = settings.rpc_timeout_s
        self._max_pending = settings.max_pending
        self._max_batch_bytes = settings.max_batch_bytes
        self._metadata = settings.metadata
        self.campaign_id = campaign_id
        self._state_dir = state_dir
        self._secret = secret
        self._on_discard = on_discard
        self._outbox = Outbox(state_dir, campaign_id)
        self._dir = self._outbox.directory
        self._rejected_dir = self._outbox.rejected_dir

        # Shared state, guarded by _cond's lock.
        self._cond = threading.Condition(threading.Lock())
        self._raw: deque[Any] = deque()
        self._encoded: list[Any] = []
        self._encode: Callable[[Any], Any] | None = None
        self._error: LdpError | None = None
        self._keep_encoded = False  # on a stop: journal the encoded reports instead of dropping them
        self._last_error: str | None = None
        self._closed = False
        self._stop_req = False
        self._close_deadline: float | None = None
        self._close_result: bool | None = None
        self._wakeup = False
        self._accepted = 0  # values accepted by report() in this run
        self._finished = 0  # of those, how many reached a terminal state (acknowledged, rejected, invalid)
        self._flush_gen = 0  # incremented by each flush(): the thread seals the open segment once per call
        self._recovery_done = False
        self._recovered_pending = 0  # recovered batches not yet acknowledged or rejected
        self._thread_done = False
        self._state: State = "starting"
        self._source: Literal["pinned", "cached", "server"] | None = None
        self._c = Counters()
        self._warned_overflow = False
        self._warned_invalid = False

        # Owned by the background thread (set here before it starts when the parameters are pinned).
        self._params: MechanismParams | None = None
        self._fp = ""  # fingerprint of self._params
        self._pack: Callable[[Any], bytes] = bytes  # replaced by _journal_rows.row_packer(params)
        self._cap = self._batch_size
        self._segment: Segment | None = None
        self._queue: deque[Batch] = deque()
        self._inflight: tuple[Batch, grpc.Future[reports_pb2.SubmitResponse], threading.Event] | None = None
        self._next_attempt_at = 0.0
        self._failures = 0  # consecutive failed attempts, for the backoff
        self._verified = False  # GetCampaign confirmed the campaign: sending may start
        self._fetch: grpc.Future[campaign_pb2.Campaign] | None = None
        self._next_fetch_at = 0.0
        self._fetch_attempt = 0
        # Flush generation the main loop has acted on; not advanced while raw values wait for the
        # campaign, so a flush() made then still seals them once they are encoded.
        self._flush_gen_seen = 0

        self.campaign: wire.CampaignInfo | None = None
        """The campaign once confirmed by the server (None before, or if refused)."""

    def _load_secret(self) -> ClientSecret:
        if self._secret is None:
            self._secret = ClientSecret.load_or_create(self._state_dir / "secret")
        return self._secret

    def _init_encoding(self, params: MechanismParams) -> None:
        self._params = params
        self._fp = params_fingerprint(params)
        self._pack = _journal_rows.row_packer(params)
        per_batch = (self._max_batch_bytes - BATCH_OVERHEAD_BYTES) // _journal_rows.row_bytes(params)
        self._cap = max(1, min(self._batch_size, per_batch))

    def _charging(self, params: MechanismParams, encode: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``encode`` preceded by the device ledger's charge (module :mod:`~ldp_client.reporter.ledger`):
        the cost is reserved, or BudgetExceededError raised, before the value is encoded."""
        ledger = self._ledger
        if ledger is None:  # pragma: no cover - the Reporter acquires it before any encoder exists
            raise RuntimeError("the device ledger is not open")
        cid = self.campaign_id
        cost = report_cost(params)
        plan = ledger.plan(cid, cost, self._policy)
        if not plan.memoized and not plan.checks:
            # Fresh noise and no cap to check: nothing can be refused, so the charge is made where it must
            # be durable anyway, by the background thread for each group it journals (_persist_spend),
            # and report() pays nothing for it. Timed when drained: no earlier than the reports.
            self._bulk_plan = plan
            return encode
        if not plan.memoized:
            charge, cancel = ledger.charge_fresh, ledger.cancel

            def fresh(value: Any) -> Any:
                token = charge(plan)
                try:
                    return encode(value)
                except BaseException:
                    cancel(plan, token)  # the value was not encoded: no report, no cost
                    raise

            return fresh

        spec = registry.spec_for(params)
        secret = self._load_secret()
        scope = memo_scope(secret, cid, cost.fingerprint)
        # A memo key once per identity (bounded), as the encoder memoizes its PRR.
        keyed = functools.lru_cache(maxsize=4096)(lambda identity: memo_key(scope, identity))
        charge_memo = ledger.charge_memo

        def memoized(value: Any) -> Any:
            identity = spec.memo_identity(params, value)  # DomainError before anything is charged
            charge_memo(plan, None if identity is None else keyed(identity))
            return encode(value)

        return memoized

    def _persist_spend(self, count: int) -> None:
        """Make the charges of the ``count`` reports about to be journaled durable first (the ledger's
        rule); those of an uncapped fresh mechanism are made here (see :meth:`_charging`)."""
        ledger = self._ledger
        if ledger is None:  # pragma: no cover - the ledger is released only after the thread ends
            raise RuntimeError("the device ledger is not open")
        if self._bulk_plan is not None:
            ledger.charge_bulk(self._bulk_plan, count)
        ledger.persist()
        pause_after_spend_for_tests()

    def _notify_discard(self, event: Discard) -> None:
        """Pass a loss to the app's callback (never while holding the lock; its errors are logged)."""
        callback = self._on_discard
        if callback is None:
            return
        try:
            callback(event)
        except Exception:
            logger.exception("ldp reporter %r: the on_discard callback raised", self.campaign_id)

    def _discard(self, reason: DiscardReason, count: int, detail: str) -> None:
        """Log and pass on a loss that the counters already hold (not for overflow: see report())."""
        if count <= 0:
            return
        logger.warning("ldp reporter %r: lost %d (%s): %s", self.campaign_id, count, reason, detail)
        self._notify_discard(Discard(reason=reason, count=count, detail=detail))

    def _fail(self, exc: LdpError, *, keep_encoded: bool = False) -> NoReturn:
        """Stop the reporter: every later report() raises ``exc``; raw values in memory are lost, and
        encoded ones too unless ``keep_encoded`` (they are then journaled and sealed on the way out)."""
        with self._cond:
            self._mark_stopped_locked(exc)
            self._keep_encoded = keep_encoded
            n = len(self._raw) + (0 if keep_encoded else len(self._encoded))
            self._raw.clear()
            if not keep_encoded:
                self._encoded = []
            self._c.discarded += n
            self._cond.notify_all()
        logger.error("ldp reporter %r stopped: %s", self.campaign_id, exc)
        self._discard("stopped", n, f"in memory when the reporter stopped ({exc})")
        raise StopThreadError

    def _mark_stopped_locked(self, exc: LdpError) -> None:
        """Record the stop (the first error wins) so that no flush() counts as settled from now on."""
        if self._error is None:
            self._error = exc
        self._last_error = str(self._error)
        self._state = "stopped"
        self._cond.notify_all()

    def _wake(self, _fut: object = None) -> None:
        with self._cond:
            self._wakeup = True
            self._cond.notify_all()

    def _reject_batch(self, batch: Batch, reason: str, *, mismatch: bool = False) -> None:
        """Move a queued batch to rejected/ and count its reports as lost (never sent again)."""
        self._outbox.reject_file(batch.path, reason)
        with self._cond:
            self._c.rejected_reports += batch.count
            if mismatch:
                self._c.mismatched_reports += batch.count
        self._finish(batch, rejected=True)
        self._discard(
            "mismatch" if mismatch else "rejected", batch.count, f"batch {batch.batch_id}: {reason}"
        )

    def _finish(
        self, batch: Batch, *, rejected: bool = False, resp: reports_pb2.SubmitResponse | None = None
    ) -> None:
        with self._cond:
            c = self._c
            c.queued_batches -= 1
            c.queued_reports -= batch.count
            if rejected:
                c.rejected_batches += 1
            if resp is not None:
                c.sent_batches += 1
                c.sent_reports += resp.accepted
                c.duplicate_batches += int(resp.duplicate)
            self._finished += batch.fresh
            if batch.fresh == 0:
                self._recovered_pending -= 1
            self._cond.notify_all()
