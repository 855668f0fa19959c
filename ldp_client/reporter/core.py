"""The public :class:`Reporter`: its constructor, the app-side calls and the background thread's loop.

The reference (where parameters come from, the campaign check, losses, batching, the outbox and the
retry rules) is the package docstring, :mod:`ldp_client.reporter`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from ldp_client.errors import InvalidParameterError, LdpError, StateFileError
from ldp_client.reporter.base import StopThreadError, logger
from ldp_client.reporter.campaign import encoder_for, is_rounds, load_cached, load_pinned
from ldp_client.reporter.fetching import CampaignFetching
from ldp_client.reporter.ledger import DeviceLedger
from ldp_client.reporter.outbox import CAMPAIGN_CACHE
from ldp_client.reporter.policy import BudgetPolicy, PrivacySpend
from ldp_client.reporter.sending import BatchSending
from ldp_client.reporter.settings import DEFAULT_MAX_BATCH_BYTES, check_settings
from ldp_client.reporter.stats import (
    Discard,
    ReporterClosedError,
    ReporterError,
    ReporterStats,
    ReportsLostError,
)
from ldp_client.secret import ClientSecret


class Reporter(CampaignFetching, BatchSending):
    """Sends a campaign's randomized reports from an app, durably and without blocking it.

    See the package docstring (:mod:`ldp_client.reporter`) for where the parameters come from, the
    campaign check, the losses, the outbox and the retry rules; ``docs/client.md`` for a guide.

    Args:
        target: the collector's address (``host:port``), used unless ``channel`` is given.
        campaign_id: the campaign to report to.
        max_epsilon: the largest per-report epsilon the app accepts (finite, > 0).
        state_dir: directory for the outbox (and the default client secret file ``state_dir/secret``).
        campaign: pinned parameters: a :class:`~ldp_client.wire.CampaignInfo`, or the path of a campaign
            file (:func:`ldp_client.campaign_file.load_campaign`: protobuf, JSON or TOML). Values are then
            encoded at once; the server's campaign must match it (else CampaignMismatchError).
        use_cached_campaign: without ``campaign``, encode at once with the campaign cached by the last
            successful ``GetCampaign`` (``<outbox>/campaign.pb``), if any.
        on_discard: called with a :class:`Discard` for every loss; without it :meth:`close` raises
            :class:`ReportsLostError` when anything was lost.
        max_epsilon_inf: if set, the largest longitudinal epsilon (eps_inf) the app accepts; mechanisms
            without such a bound (rr, grr) are then refused.
        secret: the client secret for RAPPOR campaigns; default ``ClientSecret.load_or_create(state_dir /
            "secret")``, loaded only when the campaign is a RAPPOR variant (an rr/grr app never creates it).
        batch_size: reports per batch (1 to 1,000,000).
        max_batch_age_s: a batch is sealed when its oldest report is this old.
        initial_retry_delay_s: first retry delay; doubles per consecutive failure.
        max_retry_delay_s: cap on the retry delay (also gRPC's reconnect backoff cap).
        rpc_timeout_s: deadline of each RPC.
        max_pending: bound on values waiting in memory (before the campaign is known, or before the
            background thread journals them); beyond it new values are dropped and counted.
        max_batch_bytes: upper bound on a batch message's size; batches are sealed smaller if needed.
        channel_credentials: TLS credentials for the channel (None: plaintext); ignored with ``channel``.
        metadata: ``(key, value)`` pairs sent with every call, e.g. an ``authorization`` token.
        channel: a ready gRPC channel (tests, custom options). It is not closed by :meth:`close`.
        budget: the caps on the device's total spend (:class:`~ldp_client.reporter.policy.BudgetPolicy`:
            lifetime, rolling window, this campaign), checked against the device ledger
            ``state_dir/ledger/`` before each value is encoded; default: no cap (the spend is still
            recorded, :meth:`privacy_spend`). Its ``composition`` chooses how the charges add up:
            ``"basic"`` (default), ``"advanced"`` or ``"numerical"`` (the tight accountant, privacy loss
            distributions; ``docs/client.md``).

    Raises:
        InvalidParameterError: an argument out of range, or an unreadable or invalid ``campaign`` file.
        BudgetExceededError: the pinned ``campaign`` asks more epsilon than ``max_epsilon`` (or
            ``max_epsilon_inf``) allows.
        StateFileError: the outbox cannot be created, another reporter holds it, the device ledger cannot
            be opened or another process holds it, or the client secret of a pinned RAPPOR campaign
            cannot be read or created.
    """

    def __init__(
        self,
        target: str,
        campaign_id: str,
        *,
        max_epsilon: float,
        state_dir: str | os.PathLike[str],
        campaign: wire.CampaignInfo | str | os.PathLike[str] | None = None,
        use_cached_campaign: bool = True,
        on_discard: Callable[[Discard], None] | None = None,
        max_epsilon_inf: float | None = None,
        secret: ClientSecret | None = None,
        batch_size: int = 1000,
        max_batch_age_s: float = 5.0,
        initial_retry_delay_s: float = 0.2,
        max_retry_delay_s: float = 30.0,
        rpc_timeout_s: float = 10.0,
        max_pending: int = 100_000,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        channel_credentials: grpc.ChannelCredentials | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        channel: grpc.Channel | None = None,
        budget: BudgetPolicy | None = None,
    ) -> None:
        settings = check_settings(
            target=target,
            campaign_id=campaign_id,
            max_epsilon=max_epsilon,
            use_cached_campaign=use_cached_campaign,
            on_discard=on_discard,
            max_epsilon_inf=max_epsilon_inf,
            secret=secret,
            batch_size=batch_size,
            max_batch_age_s=max_batch_age_s,
            initial_retry_delay_s=initial_retry_delay_s,
            max_retry_delay_s=max_retry_delay_s,
            rpc_timeout_s=rpc_timeout_s,
            max_pending=max_pending,
            max_batch_bytes=max_batch_bytes,
            channel_credentials=channel_credentials,
            metadata=metadata,
            channel=channel,
            budget=budget,
        )
        super().__init__(
            campaign_id, settings, state_dir=Path(state_dir), secret=secret, on_discard=on_discard
        )

        pinned = load_pinned(campaign, self._budget) if campaign is not None else None

        self._lock_fd = self._outbox.lock()

        try:
            wanted = self._policy.composer()  # BudgetPolicy.composition: basic, advanced or numerical
            self._ledger = DeviceLedger.acquire(self._state_dir, compose=wanted)
            if self._ledger.compose is not wanted:
                raise InvalidParameterError(
                    "budget.composition",
                    self._policy.composition,
                    "the composition of the device ledger another reporter of this process opened on this "
                    "state_dir (one ledger per device: every reporter on it must choose the same)",
                )
            cache = self._dir / CAMPAIGN_CACHE
            start = pinned or (load_cached(cache, self._budget) if use_cached_campaign else None)
            if start is not None and not is_rounds(start.params):  # rounds: the server's round decides
                self._init_encoding(start.params)
                encode = encoder_for(start.params, campaign_id=campaign_id, secret=self._load_secret)
                self._encode = self._charging(start.params, encode)
                self._source = "pinned" if pinned is not None else "cached"
        except BaseException:
            self._release_ledger()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            raise

        if channel is None:
            options = [
                ("grpc.max_reconnect_backoff_ms", max(100, int(self._max_delay * 1000))),
                ("grpc.initial_reconnect_backoff_ms", max(100, int(self._initial_delay * 1000))),
            ]
            if channel_credentials is not None:
                channel = grpc.secure_channel(target, channel_credentials, options=options)
            else:
                channel = grpc.insecure_channel(target, options=options)
            self._owns_channel = True
        else:
            self._owns_channel = False
        self._channel = channel
        self._stub = collector_pb2_grpc.CollectorStub(channel)

        self._thread = threading.Thread(
            target=self._run, name=f"ldp-reporter-{self._outbox.digest[:8]}", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------------------------------ public

    @property
    def outbox_dir(self) -> Path:
        """This campaign's outbox directory."""
        return self._dir

    def report(self, value: Any) -> None:
        """Queue one value; returns at once (no network, no disk I/O).

        The value is encoded here with the campaign's per-report encoder (OS CSPRNG) once the parameters
        are known (pinned, cached or fetched); before that it waits in memory (see the package docstring).
        Its cost is charged to the device ledger first (:meth:`privacy_spend`).

        Raises:
            DomainError: the parameters are known and ``value`` is not in the campaign's domain.
            BudgetExceededError: the campaign was refused (its epsilon exceeds the app's maximum), or this
                report would cross a cap of ``budget`` (``err.cap`` names it; nothing was encoded, and
                the reporter keeps running: a later report may fit, e.g. once the window has rolled).
            CampaignClosedError, CampaignNotFoundError, CampaignMismatchError, AccessDeniedError: the
                reporter stopped (closed, unknown or contradicted campaign, refused credentials).
            InvalidParameterError: the campaign's mechanism or parameters are unsupported.
            StateFileError: the outbox or the client secret could not be written or read.
            ReporterClosedError: :meth:`close` was called.
        """
        # _encode is set once (never unset); reading it without the lock is safe, and the state is checked
        # under the lock before the report is queued, so the common path takes the lock once.
        encode = self._encode
        if encode is None:
            with self._cond:
                self._check_open_locked()
                encode = self._encode
                if encode is None:
                    if len(self._raw) < self._max_pending:
                        self._raw.append(value)
                        self._accepted += 1
                        self._c.reported += 1
                        return
                    first = self._overflow_locked()
                self._emit_overflow(first)
                return
        report = encode(value)  # DomainError propagates to the caller, synchronously
        with self._cond:
            self._check_open_locked()
            if len(self._encoded) < self._max_pending:
                self._encoded.append(report)
                self._accepted += 1
                self._c.reported += 1
                self._c.encoded += 1
                if len(self._encoded) == 1:
                    # One wake-up per drain cycle, not per report: the thread takes the whole list at once.
                    self._wakeup = True
                    self._cond.notify_all()
                return
            first = self._overflow_locked()
        self._emit_overflow(first)

    def privacy_spend(self) -> PrivacySpend:
        """What this device has spent (every campaign on this ``state_dir``), from the device ledger:
        lifetime, the policy's rolling window, and per campaign (counts of fresh reports, memoized values
        and their reports). Charges reserved by :meth:`report` count at once (before they are durable)."""
        ledger = self._ledger
        if ledger is None:
            raise ReporterClosedError(f"the reporter for campaign_id={self.campaign_id!r} is closed")
        return ledger.snapshot(self._policy)

    def flush(self, timeout: float | None = None) -> bool:
        """Seal the current batch and wait until everything reported before this call is settled.

        Args:
            timeout: seconds to wait at most (None: no limit).

        Returns:
            True if every value reported before the call (and every batch recovered from an earlier run)
            was acknowledged by the server or permanently rejected (see ``stats().rejected_batches``);
            False on timeout, or at once if the reporter has stopped or closed with reports unsent (they
            stay in the outbox, except values never encoded).
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._cond:
            target = self._accepted
            self._flush_gen += 1
            self._wakeup = True
            self._cond.notify_all()
            return self._wait_settled_locked(target, deadline)

    def close(self, timeout: float | None = 5.0) -> bool:
        """Flush for at most ``timeout`` seconds, then stop the thread and close the channel.

        Whatever is still unsent stays in the outbox (sealed, durable) for the next reporter. Idempotent:
        a second call returns the first call's result and raises nothing.

        Returns:
            The result of the flush: True if everything was settled (see :meth:`flush`).

        Raises:
            ReportsLostError: values or reports were lost in this run and no ``on_discard`` callback was
                given (its ``__cause__`` is the error that stopped the reporter, if any).
            LdpError: otherwise, the error that stopped the reporter, if one did (AccessDeniedError,
                CampaignClosedError, BudgetExceededError, ...).
        """
        with self._cond:
            if self._closed:
                while self._close_result is None:
                    self._cond.wait()
                return self._close_result
            self._closed = True
            self._stop_req = True
            self._close_deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
            target = self._accepted
            self._wakeup = True
            self._cond.notify_all()
        self._thread.join()
        self._release_ledger()
        if self._owns_channel:
            self._channel.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        with self._cond:
            result = self._settled_locked(target)
            self._close_result = result
            self._state = "closed"
            counts = self._c.losses()
            error = self._error
            self._cond.notify_all()
        if self._on_discard is None and any(counts.values()):
            raise ReportsLostError(self.campaign_id, counts, error) from error
        if error is not None:
            raise error.with_traceback(None)
        return result

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except LdpError as err:  # do not hide the exception already leaving the block
            logger.error("ldp reporter %r: %s", self.campaign_id, err)

    def stats(self) -> ReporterStats:
        """A consistent snapshot of the counters."""
        with self._cond:
            c = self._c
            pending = len(self._raw) + len(self._encoded) + c.segment_reports + c.queued_reports
            return ReporterStats(
                state=self._state,
                reported=c.reported,
                encoded=c.encoded,
                dropped_invalid=c.dropped_invalid,
                dropped_overflow=c.dropped_overflow,
                dropped_budget=c.dropped_budget,
                discarded=c.discarded,
                journaled=c.journaled,
                sealed_batches=c.sealed_batches,
                sent_batches=c.sent_batches,
                sent_reports=c.sent_reports,
                duplicate_batches=c.duplicate_batches,
                retries=c.retries,
                rejected_batches=c.rejected_batches,
                rejected_reports=c.rejected_reports,
                lost_reports=sum(self._c.losses().values()),
                recovered_batches=c.recovered_batches,
                recovered_reports=c.recovered_reports,
                pending_reports=pending,
                pending_batches=c.queued_batches,
                parameters_from=self._source,
                last_error=self._last_error,
            )

    def _release_ledger(self) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            try:
                ledger.release()
            except OSError:
                logger.exception("ldp reporter %r: cannot persist the privacy ledger", self.campaign_id)

    def _check_open_locked(self) -> None:
        if self._closed:
            raise ReporterClosedError(f"the reporter for campaign_id={self.campaign_id!r} is closed")
        if self._error is not None:
            # A fresh traceback each time, so repeated raises do not grow one exception's traceback.
            raise self._error.with_traceback(None)

    def _overflow_locked(self) -> bool:
        """Count one value dropped for ``max_pending``; True the first time (the warning is logged once)."""
        self._c.dropped_overflow += 1
        first = not self._warned_overflow
        self._warned_overflow = True
        return first

    def _emit_overflow(self, first: bool) -> None:
        if first:
            logger.warning(
                "ldp reporter %r: %d values are already waiting (max_pending); dropping new values "
                "(counted in stats().dropped_overflow)",
                self.campaign_id,
                self._max_pending,
            )
        self._notify_discard(
            Discard(reason="overflow", count=1, detail=f"{self._max_pending} values were already waiting")
        )

    def _settled_locked(self, target: int) -> bool:
        return (
            self._error is None
            and self._recovery_done
            and self._recovered_pending == 0
            and self._finished >= target
        )

    def _wait_settled_locked(self, target: int, deadline: float | None) -> bool:
        while not self._settled_locked(target):
            if self._error is not None or self._thread_done:
                return False
            if deadline is None:
                self._cond.wait()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    # ------------------------------------------------------------------------------ background thread

    def _run(self) -> None:
        try:
            self._recover()
            self._main_loop()
        except StopThreadError:
            pass
        except OSError as exc:
            logger.exception("ldp reporter %r: outbox I/O failed; the reporter stops", self.campaign_id)
            err = StateFileError(
                f"outbox {str(self._dir)!r} I/O failed ({exc}): allowed a writable directory"
            )
            with contextlib.suppress(StopThreadError):
                self._fail(err)
        except Exception as exc:
            logger.exception("ldp reporter %r: internal error; the reporter stops", self.campaign_id)
            with contextlib.suppress(StopThreadError):
                self._fail(ReporterError(f"internal error in the reporter thread: {exc!r}"))
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._inflight is not None:
            self._inflight[1].cancel()
            self._inflight = None
        if self._fetch is not None:
            self._fetch.cancel()
            self._fetch = None
        if self._keep_encoded and self._params is not None:
            # Stopped for a reason that is not the reports' fault (refused credentials): keep them.
            try:
                self._final_drain()
            except OSError:
                logger.exception("ldp reporter %r: cannot journal the last reports", self.campaign_id)
        if self._segment is not None:
            with contextlib.suppress(OSError):
                os.close(self._segment.fd)
        with self._cond:
            discarded = len(self._raw) + len(self._encoded)
            self._raw.clear()
            self._encoded = []
            self._c.discarded += discarded
            self._recovery_done = True
            self._thread_done = True
            if self._state != "stopped":
                self._state = "closed"
            self._cond.notify_all()
        self._discard(
            "stopped",
            discarded,
            "values reported before they could be encoded or journaled (raw values are never written to "
            "disk; pin the campaign's parameters to encode them at once)",
        )

    def _abort_due_locked(self) -> bool:
        return (
            self._stop_req and self._close_deadline is not None and time.monotonic() >= self._close_deadline
        )

    # ------------------------------------------------------------------------- journal, seal and send

    def _main_loop(self) -> None:
        while True:
            with self._cond:
                while not self._wakeup:
                    timeout = self._wait_timeout()
                    if timeout is not None and timeout <= 0:
                        break
                    self._cond.wait(timeout)
                self._wakeup = False
            self._pump_fetch()
            with self._cond:
                items = self._encoded
                self._encoded = []
                stopping = self._stop_req
                flush_gen = self._flush_gen
                raw_waiting = bool(self._raw)
            # A flush (or close) seals the open segment once; reports arriving after it wait for their
            # batch to fill or age as usual, so a long flush does not turn every report into a batch.
            flush_wanted = stopping or flush_gen != self._flush_gen_seen
            if not raw_waiting:
                self._flush_gen_seen = flush_gen
            if items:
                self._append(items)
            seg = self._segment
            if seg is not None and (flush_wanted or time.monotonic() - seg.started >= self._max_age):
                self._seal()
            self._pump()
            if stopping:
                with self._cond:
                    idle = not self._encoded and not self._raw and self._segment is None and not self._queue
                    due = self._abort_due_locked()
                if idle or due:
                    self._final_drain()
                    return

    def _wait_timeout(self) -> float | None:
        """Seconds until the next timed event (segment age, retry, fetch, close deadline); None: none."""
        now = time.monotonic()
        candidates: list[float] = []
        if self._segment is not None:
            candidates.append(self._segment.started + self._max_age - now)
        if self._queue and self._inflight is None and self._verified:
            candidates.append(self._next_attempt_at - now)
        if not self._verified and self._fetch is None:
            candidates.append(self._next_fetch_at - now)
        if self._stop_req and self._close_deadline is not None:
            candidates.append(self._close_deadline - now)
        return min(candidates) if candidates else None
