"""Sending sealed batches (package docstring: "Status codes of ``Submit``"): one
``Submit`` in flight at a time, each answer settled under the retry rules of
:mod:`~ldp_client.reporter.retry` (retry with the same id, split a batch too large, reject, or stop).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time

import grpc
from google.protobuf.message import DecodeError

from ldp_client import _journal_rows
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.errors import AccessDeniedError, CampaignClosedError, CampaignNotFoundError, LdpError
from ldp_client.reporter.base import logger
from ldp_client.reporter.journaling import JournalingReporter
from ldp_client.reporter.outbox import Batch, fsync_dir, new_batch_id
from ldp_client.reporter.retry import (
    AMBIGUOUS,
    AUTH,
    MAX_LIMITED_ATTEMPTS,
    PERMANENT,
    RETRY,
    backoff,
    retry_after_s,
    status_of,
)


class BatchSending(JournalingReporter):
    """The reporter's send layer: Submit, settle, retry, split."""

    def _pump(self) -> None:
        """Settle a finished Submit, and start the next one when its time has come."""
        while True:
            if self._inflight is not None:
                batch, fut, done = self._inflight
                if not done.is_set():
                    return
                self._inflight = None
                self._settle(batch, fut)
            if not self._verified or not self._queue or time.monotonic() < self._next_attempt_at:
                return
            batch = self._queue[0]
            try:
                msg = reports_pb2.ReportBatch.FromString(batch.path.read_bytes())
            except (OSError, DecodeError) as exc:
                self._queue.popleft()
                self._reject_batch(batch, f"unreadable sealed batch ({exc!r})")
                continue
            done = threading.Event()
            fut = self._stub.Submit.future(msg, timeout=self._rpc_timeout, metadata=self._metadata)
            self._inflight = (batch, fut, done)

            def on_done(_f: object, done: threading.Event = done) -> None:
                done.set()
                self._wake()

            fut.add_done_callback(on_done)

    def _settle(self, batch: Batch, fut: grpc.Future[reports_pb2.SubmitResponse]) -> None:
        exc = fut.exception()
        if exc is None:
            resp = fut.result()
            self._queue.popleft()
            with contextlib.suppress(FileNotFoundError):
                batch.path.unlink()
            self._failures = 0
            self._next_attempt_at = 0.0
            self._finish(batch, resp=resp)
            return
        code, details = status_of(exc)
        text = f"Submit {batch.batch_id}: {code.name}: {details}"
        with self._cond:
            self._last_error = text
        if code in AUTH:
            # The credentials are wrong, not the batch: it stays in the outbox for a reporter that has
            # valid ones, and retrying with these cannot succeed.
            self._fail(
                AccessDeniedError(f"Submit to {self.campaign_id!r}", code.name, details), keep_encoded=True
            )
        if code in PERMANENT:
            stop: LdpError | None = None
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                stop = CampaignClosedError(self.campaign_id)
            elif code == grpc.StatusCode.NOT_FOUND:
                stop = CampaignNotFoundError(self.campaign_id)
            if stop is not None:
                with self._cond:  # before the batch counts as settled, so no flush() reports success
                    self._mark_stopped_locked(stop)
            self._queue.popleft()
            self._reject_batch(batch, f"{code.name}: {details}")
            if stop is not None:
                self._fail(stop)
            return
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            retry_after = retry_after_s(exc)
            if retry_after is not None:
                # Rate limited: the server refused the whole batch before storing anything. Not a failure
                # of the batch or the network, so neither the backoff nor the attempt limit grows.
                delay = retry_after * (1.0 + secrets.randbits(32) / 2.0**33)
                self._next_attempt_at = time.monotonic() + delay
                with self._cond:
                    self._c.retries += 1
                logger.info("ldp reporter %r: %s; retrying in %.2f s", self.campaign_id, text, delay)
                return
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not batch.ambiguous and batch.count > 1:
            self._split(batch)
            return
        if code in AMBIGUOUS:
            batch.ambiguous = True
        if code not in RETRY:
            batch.limited_failures += 1
            if batch.limited_failures >= MAX_LIMITED_ATTEMPTS:
                self._queue.popleft()
                self._reject_batch(batch, f"{code.name} {batch.limited_failures} times: {details}")
                return
        delay = backoff(self._failures, self._initial_delay, self._max_delay)
        self._failures += 1
        self._next_attempt_at = time.monotonic() + delay
        with self._cond:
            self._c.retries += 1
        logger.warning("ldp reporter %r: %s; retrying in %.2f s", self.campaign_id, text, delay)

    def _split(self, batch: Batch) -> None:
        """Replace a too-large batch, never committed, by two halves with new ids (durably, then delete)."""
        params = self._params
        if params is None:  # pragma: no cover - sending starts after the campaign is known
            return
        msg = reports_pb2.ReportBatch.FromString(batch.path.read_bytes())
        rows = _journal_rows.rows_from_batch(params, msg)
        size = _journal_rows.row_bytes(params)
        half = batch.count // 2
        parts: list[Batch] = []
        for lo, hi in ((0, half), (half, batch.count)):
            part = _journal_rows.batch_from_rows(
                campaign_id=self.campaign_id,
                batch_id=new_batch_id(),
                params=params,
                rows=rows[lo * size : hi * size],
            )
            fresh = (hi - lo) if batch.fresh else 0
            parts.append(self._outbox.write_batch(part, fresh=fresh, ambiguous=False, fingerprint=self._fp))
        self._queue.popleft()
        batch.path.unlink()
        fsync_dir(self._dir)
        self._queue.extendleft(reversed(parts))
        logger.warning(
            "ldp reporter %r: batch %s too large for the server; split into %s and %s",
            self.campaign_id,
            batch.batch_id,
            parts[0].batch_id,
            parts[1].batch_id,
        )
        with self._cond:
            self._c.queued_batches += 1
            if batch.fresh == 0:
                # Both halves are "recovered": the flush accounting counts them separately.
                self._recovered_pending += 1
