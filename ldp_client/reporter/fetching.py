"""Fetching and checking the campaign (package docstring: "Campaign check (the rule)" and
"Permanent errors stop the reporter"): ``GetCampaign`` until one succeeds, the server's campaign checked
against the app's budget and against pinned or cached parameters, then encoding starts.
"""

from __future__ import annotations

import time
from typing import Any

import grpc

from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2
from ldp_client.errors import (
    AccessDeniedError,
    BudgetExceededError,
    CampaignClosedError,
    CampaignMismatchError,
    CampaignNotFoundError,
    DomainError,
    InvalidParameterError,
    RoundNotOpenError,
    StateFileError,
)
from ldp_client.params import MechanismParams
from ldp_client.reporter.base import logger
from ldp_client.reporter.campaign import encoder_for
from ldp_client.reporter.journaling import JournalingReporter
from ldp_client.reporter.outbox import params_fingerprint
from ldp_client.reporter.retry import AUTH, FETCH_RETRY, backoff, status_of
from ldp_client.reporter.stats import ReporterError


class CampaignFetching(JournalingReporter):
    """The reporter's campaign layer: fetch, check, start encoding."""

    def _pump_fetch(self) -> None:
        """Settle a finished GetCampaign, or start one when its time has come (until one succeeds)."""
        if self._verified:
            return
        fut = self._fetch
        if fut is not None:
            if not fut.done():
                return
            self._fetch = None
            exc = fut.exception()
            if exc is None:
                self._accept_campaign(fut.result())
                return
            self._fetch_failed(*status_of(exc))
            return
        if time.monotonic() < self._next_fetch_at:
            return
        request = collector_pb2.GetCampaignRequest(campaign_id=self.campaign_id)
        fut = self._stub.GetCampaign.future(request, timeout=self._rpc_timeout, metadata=self._metadata)
        self._fetch = fut
        fut.add_done_callback(self._wake)

    def _fetch_failed(self, code: grpc.StatusCode, details: str) -> None:
        with self._cond:
            self._last_error = f"GetCampaign: {code.name}: {details}"
        if code in AUTH:
            self._fail(
                AccessDeniedError(f"GetCampaign({self.campaign_id!r})", code.name, details), keep_encoded=True
            )
        if code == grpc.StatusCode.NOT_FOUND:
            self._fail(CampaignNotFoundError(self.campaign_id))
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            self._fail(
                InvalidParameterError(
                    "campaign_id", self.campaign_id, f"an id the server accepts ({details})"
                )
            )
        if code not in FETCH_RETRY:
            self._fail(
                ReporterError(
                    f"GetCampaign({self.campaign_id!r}) failed with {code.name} ({details[:200]}), which "
                    "retrying cannot fix; the reporter stopped"
                ),
                keep_encoded=True,
            )
        delay = backoff(self._fetch_attempt, self._initial_delay, self._max_delay)
        self._fetch_attempt += 1
        self._next_fetch_at = time.monotonic() + delay
        logger.warning(
            "ldp reporter %r: GetCampaign failed (%s: %s); retrying in %.2f s",
            self.campaign_id,
            code.name,
            details,
            delay,
        )

    def _accept_campaign(self, msg: campaign_pb2.Campaign) -> None:
        """Check the server's campaign (package docstring) and start sending (and encoding, if not yet)."""
        try:
            info = wire.campaign_from_proto(msg)
        except InvalidParameterError as bad:
            self._fail(bad)
        if info.campaign_id != self.campaign_id:
            self._fail(InvalidParameterError("campaign.id", info.campaign_id, f"{self.campaign_id!r}"))
        if info.closed:
            self._fail(CampaignClosedError(self.campaign_id))
        refusal = self._budget.refusal(info.params)
        if refusal is not None:
            self._fail(refusal)
        fingerprint = params_fingerprint(info.params)
        self._outbox.write_cache(msg)
        if self._params is not None and self._fp != fingerprint:
            # The pinned or cached parameters are not the campaign's: what they encoded must not be sent.
            mismatch = CampaignMismatchError(
                f"campaign_id={self.campaign_id!r}: the server's parameters ({info.params!r}) differ "
                f"from the {self._source} ones ({self._params!r}); the reports encoded with them were "
                "moved to rejected/. Pin the campaign's current definition (the cache now holds it)"
            )
            with self._cond:
                self._mark_stopped_locked(mismatch)
                items = self._encoded
                self._encoded = []
            if items:
                self._append(items)
            self._seal()
            self._quarantine(fingerprint)
            self._fail(mismatch)
        self._quarantine(fingerprint)
        self.campaign = info
        if self._encode is None:
            self._start_encoding(info.params, info)
        with self._cond:
            self._verified = True
            self._source = self._source or "server"
            if self._state == "starting":
                self._state = "running"
            self._wakeup = True
            self._cond.notify_all()

    def _quarantine(self, fingerprint: str) -> None:
        """Reject queued batches encoded with parameters other than ``fingerprint`` (old files: kept)."""
        for batch in [b for b in self._queue if b.fingerprint is not None and b.fingerprint != fingerprint]:
            self._queue.remove(batch)
            self._reject_batch(
                batch, "encoded with parameters that differ from the campaign's on the server", mismatch=True
            )

    def _start_encoding(self, params: MechanismParams, info: wire.CampaignInfo | None = None) -> None:
        try:
            encode = self._charging(
                params, encoder_for(params, campaign_id=self.campaign_id, secret=self._load_secret, info=info)
            )
        except (StateFileError, InvalidParameterError, RoundNotOpenError) as exc:
            # RoundNotOpenError (issue 16): this device answers another round than the one collecting;
            # nothing was encoded or charged, and the app learns which round it waits for.
            self._fail(exc)
        self._init_encoding(params)
        # Encode the values that waited for the campaign, outside the lock; app threads keep queueing raw
        # values until the queue is found empty, and from then on encode themselves.
        while True:
            with self._cond:
                raw = list(self._raw)
                self._raw.clear()
                if not raw:
                    self._encode = encode
                    return
            out: list[Any] = []
            bad = 0
            over: list[BudgetExceededError] = []
            kinds: set[str] = set()
            for value in raw:
                try:
                    out.append(encode(value))
                except BudgetExceededError as exc:
                    over.append(exc)  # the device's budget policy refused it: nothing was encoded
                except (DomainError, TypeError, ValueError) as exc:
                    bad += 1
                    kinds.add(f"{type(value).__name__} ({type(exc).__name__})")
            with self._cond:
                self._encoded.extend(out)
                self._c.encoded += len(out)
                self._c.dropped_invalid += bad
                self._c.dropped_budget += len(over)
                self._finished += bad + len(over)
                self._wakeup = True
                self._cond.notify_all()
            if over:
                first = over[0]
                why = f"values reported before the campaign was known, refused by the budget policy: {first}"
                self._discard("budget", len(over), why)
            # Never log the values themselves: they are the user's true, private values.
            self._discard(
                "invalid",
                bad,
                "values reported before the campaign was known that are not in its domain: "
                + ", ".join(sorted(kinds)),
            )
