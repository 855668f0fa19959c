"""The on-device reporter: check a campaign's privacy cost, encode, batch, send, never lose a report silently.

Usage::

    with Reporter("collector.example:443", "app-usage-2025", max_epsilon=2.0, state_dir=app_state_dir,
                  campaign="app-usage-2025.campaign.json",     # optional: pin the parameters
                  channel_credentials=grpc.ssl_channel_credentials(),
                  metadata=[("authorization", f"Bearer {token}")]) as reporter:
        reporter.report("settings-page")        # returns at once; no network, no fsync
        ...
        reporter.flush(timeout=10.0)            # optional: wait until everything is acknowledged
    # close() (here: leaving the block) raises if values were lost or the reporter stopped: see below

``docs/client.md`` is the guide; this docstring is the reference.

Threading model
    One background daemon thread does every network call (synchronous gRPC API, used through futures so
    the thread never blocks on a call and can keep journaling and sealing while a call is in flight) and
    every disk write. :meth:`Reporter.report` only validates and encodes the value with the mechanism's
    per-report encoder (OS CSPRNG) and appends the encoded report to an in-memory list under a short lock;
    it never performs network I/O, disk I/O or ``fsync``, and is safe to call from many threads. An app
    that exits without :meth:`Reporter.close` loses nothing journaled (see the outbox below). This module
    imports grpc and protobuf but not numpy: rows become batch columns by byte slicing
    (:mod:`ldp_client._journal_rows`).

Which parameters encode the values
    A value is encoded with the campaign's parameters, which come from, in this order:

    1. ``campaign=``: a :class:`~ldp_client.wire.CampaignInfo`, or a file the app ships (protobuf, JSON
       or TOML, :func:`ldp_client.campaign_file.load_campaign`): the app *pins* them;
    2. the cache ``<outbox>/campaign.pb``: the campaign of the last successful ``GetCampaign`` on this
       device (``use_cached_campaign=True``, the default);
    3. otherwise the first successful ``GetCampaign``.

    With (1) or (2) every value is encoded at once and journaled encoded, even if the server is never
    reached in this run. With (3), values reported before the campaign is known wait in a bounded
    in-memory queue only (``max_pending``): a raw value is never written to disk and never logged; they
    are encoded when the campaign arrives, and lost if the reporter stops or closes first (counted and
    raised, see "Losses" below). Pinned or cached parameters are checked against ``max_epsilon`` before
    anything is encoded (a pinned campaign over budget raises in the constructor; a cached one is
    ignored). Nothing is sent before ``GetCampaign`` has confirmed the campaign: if the server's
    parameters differ from the pinned or cached ones, the reports encoded with them are moved to
    ``rejected/`` (counted as lost, reason ``"mismatch"``), the cache is replaced by the server's
    campaign and the reporter stops with :class:`~ldp_client.errors.CampaignMismatchError`. Every sealed
    batch records a fingerprint of the parameters it was encoded with (in its file name), so a batch is
    never sent to a campaign whose parameters differ.

Campaign check (the rule)
    The reporter recomputes epsilon from the campaign's parameters with the same code the encoders use
    (:mod:`ldp_client.params`; the server-filled ``Campaign.epsilon`` is ignored) and refuses the
    campaign -- :class:`~ldp_client.errors.BudgetExceededError`, nothing is encoded or sent, values
    already queued are lost, and every later :meth:`Reporter.report` raises it -- when

    * ``params.epsilon > max_epsilon``. ``params.epsilon`` is the privacy loss of ONE report: for rr
      (Warner) and grr (Kairouz et al., ICML 2016) the epsilon of the channel, for the RAPPOR variants
      eps_1 (Erlingsson et al., CCS 2014, §4: one report of PRR + IRR). rr and grr draw fresh noise per
      report, so n reports of one value cost n * epsilon by sequential composition; bounding the cost of
      each report is what the app can enforce here, and the app controls how many it sends.
    * ``max_epsilon_inf`` is set and ``wire.epsilon_inf(params) > max_epsilon_inf``. epsilon_inf is the
      longitudinal bound: RAPPOR memoizes the permanent randomized response per (client secret, campaign,
      value), so any number of reports of one unchanging value reveal at most eps_inf = 2 h ln((1 - f/2) /
      (f/2)) (CCS 2014, Theorem 1). It is a bound per distinct value, not over the user's whole history
      of changing values. rr and grr have no such bound (+inf), so setting ``max_epsilon_inf`` refuses
      them: use it when the app must cap what repeated reporting can ever reveal.

Permanent errors stop the reporter
    ``GetCampaign`` or ``Submit`` answering ``UNAUTHENTICATED`` or ``PERMISSION_DENIED`` stops it with
    :class:`~ldp_client.errors.AccessDeniedError` (retrying with the same token cannot succeed; reports
    already encoded are journaled and sealed, and a later reporter with a valid token sends them);
    ``NOT_FOUND`` with :class:`~ldp_client.errors.CampaignNotFoundError`; ``FAILED_PRECONDITION`` or a
    closed campaign with :class:`~ldp_client.errors.CampaignClosedError`; ``INVALID_ARGUMENT`` or
    ``UNIMPLEMENTED`` from ``GetCampaign`` and a mechanism this client does not implement with
    :class:`~ldp_client.errors.InvalidParameterError`. Only ``UNAVAILABLE``, ``DEADLINE_EXCEEDED``,
    ``ABORTED``, ``CANCELLED``, ``RESOURCE_EXHAUSTED``, ``INTERNAL`` and ``UNKNOWN`` from ``GetCampaign``
    are retried (with the backoff below). Once stopped, every :meth:`Reporter.report` raises the error,
    ``stats().state`` is ``"stopped"`` and ``stats().last_error`` says why; :meth:`Reporter.close` raises
    it too (see "Losses").

Losses (every one is loud)
    A value or report is *lost* when it will never be counted: a value reported before the campaign was
    known that is not in its domain (``"invalid"``), a value dropped because ``max_pending`` values were
    waiting (``"overflow"``), values in memory when the reporter stopped or closed before they could be
    encoded or journaled (``"stopped"``), a batch the server refused for good (``"rejected"``: kept in
    ``rejected/`` with the reason) and reports encoded with pinned or cached parameters that the server
    contradicts (``"mismatch"``). Each loss is logged as a warning (naming the value's type, never the
    value), counted (``stats().lost_reports`` and the per-reason counters), and reported to the app:

    * with ``on_discard=callback``, the callback is called with a :class:`Discard` (reason, count, text)
      for each loss, from the thread that found it (the app thread for an overflow, otherwise the
      reporter's thread); it must return quickly and not call the reporter;
    * without a callback, :meth:`Reporter.close` raises :class:`ReportsLostError` (the counts per reason)
      once everything else is released.

    Separately, if the reporter stopped because of an error (above), :meth:`Reporter.close` raises that
    error (after a :class:`ReportsLostError` would have been raised, which then carries it as
    ``__cause__``). Leaving a ``with`` block that is already propagating an exception only logs these.

Batching
    Encoded reports accumulate in the current *segment*. A segment is sealed into a batch when it holds
    ``batch_size`` reports (fewer if the batch would exceed ``max_batch_bytes``; gRPC's default limit is
    4 MiB), when its oldest report is ``max_batch_age_s`` old, or on :meth:`Reporter.flush` /
    :meth:`Reporter.close`. The batch id is drawn when the segment opens: a uuid4 from ``os.urandom``.

Durable outbox (``<state_dir>/outbox/<sha256(campaign_id)[:32]>/``)
    ``journal``
        The open segment: length-prefixed, checksummed records appended (one ``write`` of one record per
        group of reports the background thread drains, no ``fsync``; the thread drains within
        milliseconds of ``report()``). The bytes are in the OS page cache once ``write`` returns, so they
        survive the app being killed (not a power loss: that is what sealed batches are for). Record:
        ``u32 length | u32 crc32(payload) | payload``, little-endian; payload ``0x01 | u8 len | batch id |
        Campaign`` (the first record: the segment's batch id and the parameters the reports were encoded
        with) or ``0x02 | rows`` (a group of fixed-size report rows, :mod:`ldp_client._journal_rows`: rr
        1 byte 0/1; grr u32 index; rappor u32 cohort + ceil(k/8) bytes; ...; bit order as on the wire).
        Reading stops at the first short or corrupt record, so a torn tail is ignored. A report is safe
        from an app kill once journaled (``stats().journaled``); until then, normally a few milliseconds,
        it is only in memory. Only randomized reports are ever written: the outbox holds no true value.
    ``<time_ns>-<batch id>.<params fingerprint>.batch``
        A sealed batch: the serialized ``ReportBatch``, written to a temporary file, ``fsync``-ed, renamed
        into place and the directory ``fsync``-ed BEFORE it is sent; only then is the journal removed.
        Deleted after the server acknowledges it (new or duplicate). The fingerprint is the first 16 hex
        digits of the SHA-256 of the parameters' serialized message (files of earlier versions have
        none and are sent as they are).
    ``campaign.pb``
        The campaign of the last successful ``GetCampaign`` (a serialized ``Campaign``): the cached
        parameters of the next start. Campaign parameters are public; nothing about the user is in it.
    ``rejected/``
        Batches the server refused permanently (or encoded with contradicted parameters), each with a
        ``.error`` note (code and message).
    ``lock``
        An exclusive ``flock`` (POSIX): two reporters never share an outbox.

    On start, sealed batches and the journal left by an earlier run are recovered (the journal's rows
    are checked with the server's rules first) and sent first, with their original batch ids; the
    server counts a batch id at most once, so a batch that was sent just before a crash is acknowledged
    as a duplicate, never counted twice. A journal whose batch id already has a sealed file (a crash
    between sealing and removing the journal) is dropped; a journal that reappears after a power loss
    although its batch was sent is sealed with the same id and acknowledged as a duplicate. Recovered
    batches are sent only after the campaign passes the check above.

Status codes of ``Submit`` (``docs/wire-protocol.md``)
    =====================================  ==================================================================
    ``UNAVAILABLE``, ``DEADLINE_EXCEEDED``,  retried with the SAME batch id, exponential backoff with jitter,
    ``ABORTED``, ``CANCELLED``               without limit (the batch stays in the outbox across restarts)
    ``UNAUTHENTICATED``,                     the credentials are wrong, not the batch: the reporter stops
    ``PERMISSION_DENIED``                    (AccessDeniedError); the batch stays in the outbox
    ``RESOURCE_EXHAUSTED``                   message too large: split into two halves with NEW ids if no
                                             earlier attempt could have been committed; otherwise retried
                                             with the same id, at most 5 attempts, then rejected. With the
                                             trailing metadata ``ldp-retry-after-ms`` (a rate limit): the
                                             batch is fine, only early; retried with the same id after that
                                             delay (plus up to 50% jitter), without limit
    ``INTERNAL``, ``UNKNOWN``, others        retried at most 5 attempts (a poison batch), then rejected
    ``INVALID_ARGUMENT``, ``OUT_OF_RANGE``,  permanent: moved to ``rejected/``, never retried
    ``UNIMPLEMENTED``, ``ALREADY_EXISTS``
    ``NOT_FOUND``, ``FAILED_PRECONDITION``   permanent, and the campaign is gone or closed: the reporter
                                             stops (other outbox files stay where they are)
    =====================================  ==================================================================

    Backoff: attempt a waits ``min(max_retry_delay_s, initial_retry_delay_s * 2**a) * (1 + u) / 2`` with u
    uniform in [0, 1) from ``secrets`` (equal jitter: never an immediate retry, no synchronized herds).

Authentication and TLS: pass ``channel_credentials`` (for example ``grpc.ssl_channel_credentials()``)
and ``metadata`` (for example ``[("authorization", "Bearer ...")]``, sent with every call), or inject a
ready ``channel``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import secrets
import struct
import sys
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, NoReturn

import grpc
from google.protobuf.message import DecodeError

from ldp_client import _journal_rows, registry, wire
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2, collector_pb2_grpc, reports_pb2
from ldp_client.campaign_file import load_campaign
from ldp_client.errors import (
    AccessDeniedError,
    BudgetExceededError,
    CampaignClosedError,
    CampaignMismatchError,
    CampaignNotFoundError,
    DomainError,
    InvalidParameterError,
    InvalidReportError,
    LdpError,
    StateFileError,
)
from ldp_client.params import MechanismParams
from ldp_client.secret import ClientSecret

if sys.platform != "win32":
    import fcntl

__all__ = [
    "Discard",
    "DiscardReason",
    "Reporter",
    "ReporterClosedError",
    "ReporterError",
    "ReporterStats",
    "ReportsLostError",
    "encoder_for",
]

logger = logging.getLogger(__name__)

_JOURNAL: Final = "journal"
_LOCK: Final = "lock"
_REJECTED: Final = "rejected"
_CAMPAIGN_CACHE: Final = "campaign.pb"
_BATCH_SUFFIX: Final = ".batch"
_TMP_PREFIX: Final = ".tmp-"
_RECORD_HEADER: Final = struct.Struct("<II")  # payload length, crc32(payload)
_KIND_SEGMENT: Final = 0x01
_KIND_REPORTS: Final = 0x02
_REPORTS_PREFIX: Final = bytes([_KIND_REPORTS])
# INTERNAL/UNKNOWN may be a poison batch: retry a few times, then reject rather than retry forever.
_MAX_LIMITED_ATTEMPTS: Final = 5
_DEFAULT_MAX_BATCH_BYTES: Final = 4_000_000  # below gRPC's default 4 MiB receive limit, with room for framing
_BATCH_OVERHEAD_BYTES: Final = 1024  # ids, count and protobuf tags of a ReportBatch, generously
# Trailing metadata of a rate-limit refusal (ldp_aggregator.ratelimit): milliseconds until admitted.
_RETRY_AFTER_KEY: Final = "ldp-retry-after-ms"

_RETRY: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)
_AUTH: Final = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
_PERMANENT: Final = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
    }
)
# GetCampaign answers worth retrying: the server is down, busy or rate limiting, or failed internally.
_FETCH_RETRY: Final = _RETRY | {
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}
# After one of these the batch may have been committed although the client saw no answer.
_AMBIGUOUS: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DATA_LOSS,
    }
)

State = Literal["starting", "running", "stopped", "closed"]
DiscardReason = Literal["invalid", "overflow", "stopped", "rejected", "mismatch"]
_REASONS: Final[tuple[DiscardReason, ...]] = ("invalid", "overflow", "stopped", "rejected", "mismatch")


class ReporterError(LdpError):
    """The reporter stopped because of an unexpected internal error (see the log)."""


class ReporterClosedError(ReporterError):
    """:meth:`Reporter.report` was called after :meth:`Reporter.close`."""


class ReportsLostError(ReporterError):
    """Raised by :meth:`Reporter.close` when values or reports were lost in this run and the app gave no
    ``on_discard`` callback. ``counts`` maps each :data:`DiscardReason` to the number lost."""

    def __init__(self, campaign_id: str, counts: dict[DiscardReason, int], stop: LdpError | None) -> None:
        self.campaign_id = campaign_id
        self.counts = dict(counts)
        total = sum(counts.values())
        parts = ", ".join(f"{n} {reason}" for reason, n in counts.items() if n)
        why = f"; the reporter stopped: {stop}" if stop is not None else ""
        super().__init__(
            f"the reporter for campaign_id={campaign_id!r} lost {total} values or reports ({parts}); "
            f"see stats() and docs/client.md (pin the campaign's parameters, or pass on_discard=){why}"
        )


@dataclass(frozen=True, slots=True)
class Discard:
    """One loss, as passed to the ``on_discard`` callback (see the module docstring, "Losses").

    Attributes:
        reason: ``invalid``, ``overflow``, ``stopped``, ``rejected`` or ``mismatch``.
        count: values or reports lost.
        detail: a human-readable line (never a reported value).
    """

    reason: DiscardReason
    count: int
    detail: str


@dataclass(frozen=True, kw_only=True)
class ReporterStats:
    """A snapshot of a reporter's counters (this run only, except ``recovered_*``).

    Attributes:
        state: ``starting`` (the campaign not yet confirmed by the server; with pinned or cached
            parameters values are already encoded and journaled), ``running``, ``stopped`` (refused,
            closed, unknown or mismatched campaign, refused credentials, or an internal error: see
            ``last_error``) or ``closed``.
        reported: values accepted by :meth:`Reporter.report`.
        encoded: values encoded (on the app thread, or later for values reported before the campaign).
        dropped_invalid: values reported before the campaign was known that are not in its domain.
        dropped_overflow: values dropped because ``max_pending`` values were already waiting.
        discarded: values or encoded reports dropped from memory because the reporter stopped or closed
            before they could be encoded or journaled (never written anywhere).
        journaled: encoded reports written to the outbox journal.
        sealed_batches: batches sealed in this run.
        sent_batches: batches acknowledged by the server (new or duplicate).
        sent_reports: reports the server newly counted (sum of ``SubmitResponse.accepted``).
        duplicate_batches: acknowledgements with ``duplicate = true`` (nothing counted twice).
        retries: failed send attempts that were retried.
        rejected_batches: batches moved to ``rejected/`` (refused by the server, or encoded with
            parameters the server contradicts).
        rejected_reports: reports in those batches.
        lost_reports: everything lost in this run: ``dropped_invalid + dropped_overflow + discarded +
            rejected_reports``.
        recovered_batches: batches found in the outbox at start (sealed files and the journal).
        recovered_reports: reports in those batches.
        pending_reports: reports not yet acknowledged or rejected (raw, encoded, journaled or sealed).
        pending_batches: sealed batches waiting to be sent (including one in flight).
        parameters_from: where the encoding parameters came from: ``pinned``, ``cached``, ``server``,
            or None while unknown.
        last_error: the error that stopped the reporter, or the last send error, as text.
    """

    state: State
    reported: int
    encoded: int
    dropped_invalid: int
    dropped_overflow: int
    discarded: int
    journaled: int
    sealed_batches: int
    sent_batches: int
    sent_reports: int
    duplicate_batches: int
    retries: int
    rejected_batches: int
    rejected_reports: int
    lost_reports: int
    recovered_batches: int
    recovered_reports: int
    pending_reports: int
    pending_batches: int
    parameters_from: Literal["pinned", "cached", "server"] | None
    last_error: str | None


class _StopThreadError(Exception):
    """Internal: leave the background loop (the reason, if any, is in ``Reporter._error``)."""


@dataclass(slots=True)
class _Counters:
    reported: int = 0
    encoded: int = 0
    dropped_invalid: int = 0
    dropped_overflow: int = 0
    discarded: int = 0
    journaled: int = 0
    sealed_batches: int = 0
    sent_batches: int = 0
    sent_reports: int = 0
    duplicate_batches: int = 0
    retries: int = 0
    rejected_batches: int = 0
    rejected_reports: int = 0
    mismatched_reports: int = 0
    recovered_batches: int = 0
    recovered_reports: int = 0
    segment_reports: int = 0
    queued_reports: int = 0
    queued_batches: int = 0


@dataclass(slots=True)
class _Batch:
    path: Path
    batch_id: str
    count: int
    fresh: int  # reports of this run, for flush accounting (0 for recovered batches)
    ambiguous: bool  # may already be committed: recovered, or an attempt ended without a definite answer
    fingerprint: (
        str | None
    )  # of the parameters its reports were encoded with (None: a file of an old version)
    limited_failures: int = 0


@dataclass(slots=True)
class _Segment:
    batch_id: str
    chunks: list[bytes]  # journal rows, as written
    count: int
    started: float  # time.monotonic() of its first report
    fd: int


def _check_positive(field: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidParameterError(field, value, "a finite number > 0")
    return float(value)


def _check_optional_positive(field: str, value: object) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidParameterError(field, value, "a finite number > 0, or None")
    return float(value)


def _check_int(field: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidParameterError(field, value, f"an integer in [{lo}, {hi}]")
    return value


def _new_batch_id() -> str:
    # uuid4 from the OS CSPRNG explicitly (uuid.uuid4 also uses os.urandom; this makes it visible).
    return uuid.UUID(bytes=os.urandom(16), version=4).hex


def _fingerprint(params: MechanismParams) -> str:
    """16 hex digits identifying ``params`` (the oneof member and its deterministic serialization)."""
    field, message = wire.params_to_proto(params)
    data = field.encode("ascii") + b"\x00" + message.SerializeToString(deterministic=True)
    return hashlib.sha256(data).hexdigest()[:16]


def _batch_name(batch_id: str, fingerprint: str) -> str:
    return f"{time.time_ns():020d}-{batch_id}.{fingerprint}{_BATCH_SUFFIX}"


def _parse_batch_name(name: str) -> tuple[str, str | None]:
    """(batch id, parameters fingerprint or None) of a sealed batch's file name (module docstring)."""
    stem = name[21 : -len(_BATCH_SUFFIX)]
    batch_id, dot, fingerprint = stem.partition(".")
    return batch_id, (fingerprint if dot else None)


def _fsync_dir(d: Path) -> None:
    # Durability of a rename or new entry; unsupported on some platforms (Windows), hence best effort.
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_durable(directory: Path, name: str, data: bytes) -> Path:
    """Write ``directory/name`` atomically and durably: temp file, fsync, rename, fsync the directory."""
    final = directory / name
    tmp = directory / f"{_TMP_PREFIX}{name}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    _fsync_dir(directory)
    return final


def _record(payload: bytes) -> bytes:
    return _RECORD_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _read_records(data: bytes) -> tuple[list[bytes], int]:
    """Complete, checksummed records of a journal, and the number of trailing bytes ignored (torn tail)."""
    records: list[bytes] = []
    pos = 0
    size = len(data)
    while pos + _RECORD_HEADER.size <= size:
        length, crc = _RECORD_HEADER.unpack_from(data, pos)
        start = pos + _RECORD_HEADER.size
        end = start + length
        if length == 0 or end > size:
            break
        payload = data[start:end]
        if zlib.crc32(payload) != crc:
            break
        records.append(payload)
        pos = end
    return records, size - pos


# Journal rows (kept under these names: tests and tools build journals with them).
_row_bytes = _journal_rows.row_bytes
_row_packer = _journal_rows.row_packer


def _segment_header(campaign_id: str, batch_id: str, params: MechanismParams) -> bytes:
    bid = batch_id.encode("ascii")
    campaign = wire.campaign_to_proto(campaign_id=campaign_id, params=params).SerializeToString()
    return bytes([_KIND_SEGMENT, len(bid)]) + bid + campaign


def _parse_segment_header(payload: bytes) -> tuple[str, wire.CampaignInfo]:
    """(batch id, campaign) of a journal's first record; InvalidReportError/InvalidParameterError if bad."""
    if len(payload) < 2 or payload[0] != _KIND_SEGMENT or len(payload) < 2 + payload[1]:
        raise InvalidReportError("journal header", payload[:2].hex(), "a segment header record")
    n = payload[1]
    try:
        batch_id = payload[2 : 2 + n].decode("ascii")
        msg = campaign_pb2.Campaign.FromString(payload[2 + n :])
    except (UnicodeDecodeError, DecodeError) as exc:
        raise InvalidReportError("journal header", f"<{len(payload)} bytes>", "a segment header") from exc
    if not 1 <= len(batch_id) <= wire.MAX_ID_LENGTH:
        raise InvalidReportError("journal batch id", batch_id, f"1 to {wire.MAX_ID_LENGTH} characters")
    return batch_id, wire.campaign_from_proto(msg)


def _backoff(attempt: int, initial: float, cap: float) -> float:
    base = min(cap, initial * 2.0 ** min(attempt, 60))
    return base * (1.0 + secrets.randbits(32) / 2.0**32) / 2.0


def _retry_after_s(exc: BaseException | None) -> float | None:
    """Seconds from the ``ldp-retry-after-ms`` trailing metadata of a rate refusal (None if absent)."""
    trailing = getattr(exc, "trailing_metadata", None)
    if not callable(trailing):
        return None
    try:
        items = trailing() or ()
        values = [v for k, v in items if k == _RETRY_AFTER_KEY]
        ms = float(values[0]) if values else None
    except (TypeError, ValueError):
        return None
    if ms is None or not math.isfinite(ms) or ms < 0:
        return None
    return min(ms, 3_600_000.0) / 1000.0


def _status(exc: BaseException | None) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, grpc.RpcError):
        return exc.code(), str(exc.details() or "")
    return grpc.StatusCode.UNKNOWN, repr(exc)


def encoder_for(
    params: MechanismParams,
    *,
    campaign_id: str,
    secret: ClientSecret | Callable[[], ClientSecret] | None = None,
) -> Callable[[Any], Any]:
    """The per-report ``encode`` (OS CSPRNG, no numpy) of a campaign's parameters.

    Args:
        params: the campaign's parameters.
        campaign_id: the campaign (RAPPOR variants derive the permanent response from it).
        secret: the client secret of the RAPPOR variants, or a function returning it (called only for
            them, so an rr/grr app never creates a secret file).

    Raises:
        InvalidParameterError: a RAPPOR variant without a secret, or parameters of no known mechanism.
    """
    spec = registry.find(params)
    if spec is None:
        raise InvalidParameterError("campaign mechanism", type(params).__name__, "a mechanism of ldp_client")
    if secret is None and spec.needs_secret(params):
        raise InvalidParameterError("secret", None, f"a ClientSecret (the {params.name} mechanism needs one)")
    return spec.encoder(params, campaign_id=campaign_id, secret=secret)


class Reporter:
    """Sends a campaign's randomized reports from an app, durably and without blocking it.

    See the module docstring for where the parameters come from, the campaign check, the losses, the
    outbox and the retry rules; ``docs/client.md`` for a guide.

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

    Raises:
        InvalidParameterError: an argument out of range, or an unreadable or invalid ``campaign`` file.
        BudgetExceededError: the pinned ``campaign`` asks more epsilon than ``max_epsilon`` (or
            ``max_epsilon_inf``) allows.
        StateFileError: the outbox cannot be created, another reporter holds it, or the client secret of
            a pinned RAPPOR campaign cannot be read or created.
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
        max_batch_bytes: int = _DEFAULT_MAX_BATCH_BYTES,
        channel_credentials: grpc.ChannelCredentials | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        channel: grpc.Channel | None = None,
    ) -> None:
        if not isinstance(campaign_id, str) or not 1 <= len(campaign_id) <= wire.MAX_ID_LENGTH:
            raise InvalidParameterError(
                "campaign_id", campaign_id, f"a string of 1 to {wire.MAX_ID_LENGTH} characters"
            )
        if channel is None and (not isinstance(target, str) or not target):
            raise InvalidParameterError("target", target, "a non-empty 'host:port' string")
        self._max_epsilon = _check_positive("max_epsilon", max_epsilon)
        self._max_epsilon_inf = _check_optional_positive("max_epsilon_inf", max_epsilon_inf)
        if secret is not None and not isinstance(secret, ClientSecret):
            raise InvalidParameterError("secret", type(secret).__name__, "a ClientSecret or None")
        if not isinstance(use_cached_campaign, bool):
            raise InvalidParameterError("use_cached_campaign", use_cached_campaign, "True or False")
        if on_discard is not None and not callable(on_discard):
            raise InvalidParameterError("on_discard", type(on_discard).__name__, "a callable or None")
        self._batch_size = _check_int("batch_size", batch_size, 1, 1_000_000)
        self._max_age = _check_positive("max_batch_age_s", max_batch_age_s)
        self._initial_delay = _check_positive("initial_retry_delay_s", initial_retry_delay_s)
        self._max_delay = _check_positive("max_retry_delay_s", max_retry_delay_s)
        if self._initial_delay > self._max_delay:
            raise InvalidParameterError(
                "initial_retry_delay_s",
                initial_retry_delay_s,
                f"at most max_retry_delay_s={max_retry_delay_s}",
            )
        self._rpc_timeout = _check_positive("rpc_timeout_s", rpc_timeout_s)
        self._max_pending = _check_int("max_pending", max_pending, 1, 1 << 40)
        self._max_batch_bytes = _check_int("max_batch_bytes", max_batch_bytes, 4096, 1 << 31)
        if channel_credentials is not None and not isinstance(channel_credentials, grpc.ChannelCredentials):
            raise InvalidParameterError(
                "channel_credentials", type(channel_credentials).__name__, "a grpc.ChannelCredentials or None"
            )
        md = tuple(metadata)
        for i, pair in enumerate(md):
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                raise InvalidParameterError(f"metadata[{i}]", pair, "a (key, value) tuple of strings")
            if pair[0] != pair[0].lower():
                raise InvalidParameterError(f"metadata[{i}]", pair[0], "a lower-case key (gRPC requires it)")
        self._metadata = md
        self.campaign_id = campaign_id
        self._state_dir = Path(state_dir)
        self._secret = secret
        self._on_discard = on_discard

        pinned = self._load_pinned(campaign) if campaign is not None else None

        digest = hashlib.sha256(campaign_id.encode("utf-8")).hexdigest()[:32]
        self._dir = self._state_dir / "outbox" / digest
        self._rejected_dir = self._dir / _REJECTED
        self._lock_fd = self._open_outbox()

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
        self._c = _Counters()
        self._warned_overflow = False
        self._warned_invalid = False

        # Owned by the background thread (set here before it starts when the parameters are pinned).
        self._params: MechanismParams | None = None
        self._fp = ""  # fingerprint of self._params
        self._pack: Callable[[Any], bytes] = bytes  # replaced by _row_packer(params)
        self._cap = self._batch_size
        self._segment: _Segment | None = None
        self._queue: deque[_Batch] = deque()
        self._inflight: tuple[_Batch, grpc.Future[reports_pb2.SubmitResponse], threading.Event] | None = None
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

        try:
            start = pinned or (self._load_cached() if use_cached_campaign else None)
            if start is not None:
                self._init_encoding(start.params)
                self._encode = encoder_for(start.params, campaign_id=campaign_id, secret=self._load_secret)
                self._source = "pinned" if pinned is not None else "cached"
        except BaseException:
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

        self._thread = threading.Thread(target=self._run, name=f"ldp-reporter-{digest[:8]}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------ public

    @property
    def outbox_dir(self) -> Path:
        """This campaign's outbox directory."""
        return self._dir

    def report(self, value: Any) -> None:
        """Queue one value; returns at once (no network, no disk I/O).

        The value is encoded here with the campaign's per-report encoder (OS CSPRNG) once the parameters
        are known (pinned, cached or fetched); before that it waits in memory (see the module docstring).

        Raises:
            DomainError: the parameters are known and ``value`` is not in the campaign's domain.
            BudgetExceededError: the campaign was refused (its epsilon exceeds the app's maximum).
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
        if self._owns_channel:
            self._channel.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        with self._cond:
            result = self._settled_locked(target)
            self._close_result = result
            self._state = "closed"
            counts = self._loss_counts_locked()
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
                discarded=c.discarded,
                journaled=c.journaled,
                sealed_batches=c.sealed_batches,
                sent_batches=c.sent_batches,
                sent_reports=c.sent_reports,
                duplicate_batches=c.duplicate_batches,
                retries=c.retries,
                rejected_batches=c.rejected_batches,
                rejected_reports=c.rejected_reports,
                lost_reports=sum(self._loss_counts_locked().values()),
                recovered_batches=c.recovered_batches,
                recovered_reports=c.recovered_reports,
                pending_reports=pending,
                pending_batches=c.queued_batches,
                parameters_from=self._source,
                last_error=self._last_error,
            )

    # ------------------------------------------------------------------------------ app-side helpers

    def _load_pinned(self, campaign: object) -> wire.CampaignInfo:
        if isinstance(campaign, wire.CampaignInfo):
            info = campaign
        elif isinstance(campaign, str | os.PathLike):
            info = load_campaign(campaign, campaign_id=self.campaign_id)
        else:
            raise InvalidParameterError(
                "campaign", type(campaign).__name__, "a CampaignInfo, the path of a campaign file, or None"
            )
        if info.campaign_id != self.campaign_id:
            raise InvalidParameterError(
                "campaign",
                info.campaign_id,
                f"the campaign {self.campaign_id!r} (the reporter's campaign_id)",
            )
        refusal = self._budget_refusal(info.params)
        if refusal is not None:
            raise refusal
        return info

    def _load_cached(self) -> wire.CampaignInfo | None:
        """The cached campaign, if present, readable, open and within budget (otherwise None, logged)."""
        path = self._dir / _CAMPAIGN_CACHE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("ldp reporter %r: cannot read the cached campaign (%s)", self.campaign_id, exc)
            return None
        try:
            info = wire.campaign_from_proto(campaign_pb2.Campaign.FromString(data))
        except (DecodeError, InvalidParameterError) as exc:
            logger.warning(
                "ldp reporter %r: ignored an unreadable cached campaign (%s)", self.campaign_id, exc
            )
            return None
        if info.campaign_id != self.campaign_id or info.closed or self._budget_refusal(info.params):
            return None  # the server's answer decides, as without a cache
        return info

    def _budget_refusal(self, params: MechanismParams) -> BudgetExceededError | None:
        eps = params.epsilon
        if not eps <= self._max_epsilon:
            return BudgetExceededError(
                f"campaign_id={self.campaign_id!r} asks epsilon={eps!r} per report ({params.name}): "
                f"allowed at most max_epsilon={self._max_epsilon!r}; the reporter refuses it"
            )
        eps_inf = wire.epsilon_inf(params)
        if self._max_epsilon_inf is not None and not eps_inf <= self._max_epsilon_inf:
            return BudgetExceededError(
                f"campaign_id={self.campaign_id!r} has longitudinal epsilon_inf={eps_inf!r} "
                f"({params.name}; +inf means no bound over repeated reports): allowed at most "
                f"max_epsilon_inf={self._max_epsilon_inf!r}; the reporter refuses it"
            )
        return None

    def _load_secret(self) -> ClientSecret:
        if self._secret is None:
            self._secret = ClientSecret.load_or_create(self._state_dir / "secret")
        return self._secret

    def _init_encoding(self, params: MechanismParams) -> None:
        self._params = params
        self._fp = _fingerprint(params)
        self._pack = _row_packer(params)
        per_batch = (self._max_batch_bytes - _BATCH_OVERHEAD_BYTES) // _row_bytes(params)
        self._cap = max(1, min(self._batch_size, per_batch))

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

    def _loss_counts_locked(self) -> dict[DiscardReason, int]:
        c = self._c
        return {
            "invalid": c.dropped_invalid,
            "overflow": c.dropped_overflow,
            "stopped": c.discarded,
            "rejected": c.rejected_reports - c.mismatched_reports,
            "mismatch": c.mismatched_reports,
        }

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

    # ---------------------------------------------------------------------------------- outbox files

    def _open_outbox(self) -> int | None:
        try:
            for d in (self._state_dir, self._state_dir / "outbox", self._dir, self._rejected_dir):
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StateFileError(
                f"outbox directory {str(self._dir)!r} cannot be created ({exc}): allowed a writable directory"
            ) from exc
        if sys.platform == "win32":  # pragma: no cover - no flock; one reporter per outbox is up to the app
            return None
        try:
            fd = os.open(self._dir / _LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise StateFileError(f"outbox lock {str(self._dir / _LOCK)!r} cannot be opened ({exc})") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StateFileError(
                f"outbox {str(self._dir)!r} is in use by another Reporter for campaign_id="
                f"{self.campaign_id!r}: allowed one reporter per campaign and state_dir"
            ) from exc
        return fd

    def _reject_file(self, path: Path, reason: str, *, name: str | None = None) -> None:
        """Move a batch (or journal) file to rejected/ with a note; never retried again."""
        name = name or path.name
        try:
            os.replace(path, self._rejected_dir / name)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
            note = os.open(self._rejected_dir / (name + ".error"), flags, 0o600)
            try:
                _write_all(note, (reason + "\n").encode("utf-8"))
            finally:
                os.close(note)
            _fsync_dir(self._dir)
            _fsync_dir(self._rejected_dir)
        except OSError:
            logger.exception("ldp reporter %r: cannot move %s to rejected/", self.campaign_id, path.name)
        logger.error("ldp reporter %r: %s rejected: %s", self.campaign_id, name, reason)

    def _reject_batch(self, batch: _Batch, reason: str, *, mismatch: bool = False) -> None:
        """Move a queued batch to rejected/ and count its reports as lost (never sent again)."""
        self._reject_file(batch.path, reason)
        with self._cond:
            self._c.rejected_reports += batch.count
            if mismatch:
                self._c.mismatched_reports += batch.count
        self._finish(batch, rejected=True)
        self._discard(
            "mismatch" if mismatch else "rejected", batch.count, f"batch {batch.batch_id}: {reason}"
        )

    def _seal_rows(
        self, batch_id: str, params: MechanismParams, rows: bytes, *, fresh: bool, fingerprint: str
    ) -> _Batch:
        msg = _journal_rows.batch_from_rows(
            campaign_id=self.campaign_id, batch_id=batch_id, params=params, rows=rows
        )
        return self._write_batch(
            msg, fresh=msg.count if fresh else 0, ambiguous=not fresh, fingerprint=fingerprint
        )

    def _write_batch(
        self, msg: reports_pb2.ReportBatch, *, fresh: int, ambiguous: bool, fingerprint: str
    ) -> _Batch:
        path = _write_durable(self._dir, _batch_name(msg.batch_id, fingerprint), msg.SerializeToString())
        return _Batch(
            path=path,
            batch_id=msg.batch_id,
            count=msg.count,
            fresh=fresh,
            ambiguous=ambiguous,
            fingerprint=fingerprint,
        )

    def _write_cache(self, msg: campaign_pb2.Campaign) -> None:
        """Keep the server's campaign for the next start (an optimisation: failures are only logged)."""
        data = msg.SerializeToString()
        path = self._dir / _CAMPAIGN_CACHE
        try:
            if path.exists() and path.read_bytes() == data:
                return
            _write_durable(self._dir, _CAMPAIGN_CACHE, data)
        except OSError as exc:
            logger.warning("ldp reporter %r: cannot cache the campaign (%s)", self.campaign_id, exc)

    def _recover(self) -> None:
        """Queue the sealed batches and the journal an earlier run left, oldest first, with their ids."""
        for tmp in self._dir.glob(_TMP_PREFIX + "*"):
            # An interrupted seal: its reports are still in the journal, which is removed only after.
            with contextlib.suppress(OSError):
                tmp.unlink()
        batches: list[_Batch] = []
        known_ids = {_parse_batch_name(p.name)[0] for p in self._dir.glob("*" + _BATCH_SUFFIX)}
        known_ids |= {_parse_batch_name(p.name)[0] for p in self._rejected_dir.glob("*" + _BATCH_SUFFIX)}
        journal = self._dir / _JOURNAL
        if journal.exists():
            recovered = self._recover_journal(journal, known_ids)
            if recovered is not None:
                batches.append(recovered)
        lost = 0
        for path in sorted(self._dir.glob("*" + _BATCH_SUFFIX)):
            if any(b.path == path for b in batches):
                continue
            try:
                msg = reports_pb2.ReportBatch.FromString(path.read_bytes())
            except (OSError, DecodeError) as exc:
                self._reject_file(path, f"unreadable sealed batch ({exc!r})")
                lost += 1  # its size is unknown: at least one report
                continue
            if msg.campaign_id != self.campaign_id or msg.count < 1 or not msg.batch_id:
                self._reject_file(path, f"sealed batch of campaign_id={msg.campaign_id!r}, count={msg.count}")
                lost += max(1, msg.count)
                continue
            fingerprint = _parse_batch_name(path.name)[1]
            batches.append(
                _Batch(
                    path=path,
                    batch_id=msg.batch_id,
                    count=msg.count,
                    fresh=0,
                    ambiguous=True,
                    fingerprint=fingerprint,
                )
            )
        batches.sort(key=lambda b: b.path.name)
        self._queue.extend(batches)
        with self._cond:
            n = sum(b.count for b in batches)
            self._c.recovered_batches += len(batches)
            self._c.recovered_reports += n
            self._c.queued_batches += len(batches)
            self._c.queued_reports += n
            self._c.rejected_reports += lost
            self._recovered_pending = len(batches)
            self._recovery_done = True
            self._cond.notify_all()
        self._discard("rejected", lost, "unreadable batch files left by an earlier run (moved to rejected/)")
        if batches:
            logger.info(
                "ldp reporter %r: recovered %d batches (%d reports) from the outbox",
                self.campaign_id,
                len(batches),
                n,
            )

    def _recover_journal(self, journal: Path, known_ids: set[str]) -> _Batch | None:
        data = journal.read_bytes()
        records, torn = _read_records(data)
        if torn:
            logger.warning(
                "ldp reporter %r: ignored a torn or corrupt journal tail of %d bytes", self.campaign_id, torn
            )
        if not records:
            journal.unlink()
            return None
        try:
            batch_id, info = _parse_segment_header(records[0])
            if info.campaign_id != self.campaign_id:
                raise InvalidReportError("journal campaign_id", info.campaign_id, repr(self.campaign_id))
            for r in records[1:]:
                if r[:1] != bytes([_KIND_REPORTS]):
                    raise InvalidReportError("journal record kind", r[:1].hex(), f"{_KIND_REPORTS:#04x}")
            rows = b"".join(r[1:] for r in records[1:])
            if rows:
                # Every row against the server's rules before anything is decided (no numpy).
                _journal_rows.check_rows(info.params, self.campaign_id, rows)
        except (InvalidReportError, InvalidParameterError) as exc:
            self._reject_file(journal, f"unreadable journal ({exc})", name=f"journal-{time.time_ns()}")
            with self._cond:
                self._c.rejected_reports += max(1, len(records) - 1)
            self._discard("rejected", max(1, len(records) - 1), f"an unreadable journal ({exc})")
            return None
        if batch_id in known_ids or not rows:
            # Sealed before the crash (the journal is removed only after its batch file is durable).
            journal.unlink()
            return None
        batch = self._seal_rows(
            batch_id, info.params, rows, fresh=False, fingerprint=_fingerprint(info.params)
        )
        journal.unlink()
        _fsync_dir(self._dir)
        return batch

    # ------------------------------------------------------------------------------ background thread

    def _run(self) -> None:
        try:
            self._recover()
            self._main_loop()
        except _StopThreadError:
            pass
        except OSError as exc:
            logger.exception("ldp reporter %r: outbox I/O failed; the reporter stops", self.campaign_id)
            err = StateFileError(
                f"outbox {str(self._dir)!r} I/O failed ({exc}): allowed a writable directory"
            )
            with contextlib.suppress(_StopThreadError):
                self._fail(err)
        except Exception as exc:
            logger.exception("ldp reporter %r: internal error; the reporter stops", self.campaign_id)
            with contextlib.suppress(_StopThreadError):
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
        raise _StopThreadError

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

    def _abort_due_locked(self) -> bool:
        return (
            self._stop_req and self._close_deadline is not None and time.monotonic() >= self._close_deadline
        )

    # ------------------------------------------------------------------------- campaign fetch and check

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
            self._fetch_failed(*_status(exc))
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
        if code in _AUTH:
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
        if code not in _FETCH_RETRY:
            self._fail(
                ReporterError(
                    f"GetCampaign({self.campaign_id!r}) failed with {code.name} ({details[:200]}), which "
                    "retrying cannot fix; the reporter stopped"
                ),
                keep_encoded=True,
            )
        delay = _backoff(self._fetch_attempt, self._initial_delay, self._max_delay)
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
        """Check the server's campaign (module docstring) and start sending (and encoding, if not yet)."""
        try:
            info = wire.campaign_from_proto(msg)
        except InvalidParameterError as bad:
            self._fail(bad)
        if info.campaign_id != self.campaign_id:
            self._fail(InvalidParameterError("campaign.id", info.campaign_id, f"{self.campaign_id!r}"))
        if info.closed:
            self._fail(CampaignClosedError(self.campaign_id))
        refusal = self._budget_refusal(info.params)
        if refusal is not None:
            self._fail(refusal)
        fingerprint = _fingerprint(info.params)
        self._write_cache(msg)
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
            self._start_encoding(info.params)
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

    def _start_encoding(self, params: MechanismParams) -> None:
        try:
            encode = encoder_for(params, campaign_id=self.campaign_id, secret=self._load_secret)
        except (StateFileError, InvalidParameterError) as exc:
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
            kinds: set[str] = set()
            for value in raw:
                try:
                    out.append(encode(value))
                except (DomainError, TypeError, ValueError) as exc:
                    bad += 1
                    kinds.add(f"{type(value).__name__} ({type(exc).__name__})")
            with self._cond:
                self._encoded.extend(out)
                self._c.encoded += len(out)
                self._c.dropped_invalid += bad
                self._finished += bad
                self._wakeup = True
                self._cond.notify_all()
            # Never log the values themselves: they are the user's true, private values.
            self._discard(
                "invalid",
                bad,
                "values reported before the campaign was known that are not in its domain: "
                + ", ".join(sorted(kinds)),
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

    def _final_drain(self) -> None:
        """On close: journal and seal what is left so that it is durable for the next reporter."""
        with self._cond:
            items = self._encoded
            self._encoded = []
        if items:
            self._append(items)
        if self._segment is not None:
            self._seal()

    def _append(self, items: list[Any]) -> None:
        """Journal encoded reports into the open segment, sealing it each time it is full."""
        params = self._params
        if params is None:  # pragma: no cover - items exist only once the parameters are known
            return
        pack = self._pack
        pos = 0
        while pos < len(items):
            seg = self._segment
            if seg is None:
                seg = self._open_segment(params)
            take = min(len(items) - pos, self._cap - seg.count)
            # One record per group: its checksum covers the group, so a torn write loses only that group,
            # which was being written when the process died.
            rows = b"".join([pack(r) for r in items[pos : pos + take]])
            _write_all(seg.fd, _record(_REPORTS_PREFIX + rows))
            seg.chunks.append(rows)
            seg.count += take
            pos += take
            with self._cond:
                self._c.journaled += take
                self._c.segment_reports += take
            if seg.count >= self._cap:
                self._seal()

    def _open_segment(self, params: MechanismParams) -> _Segment:
        batch_id = _new_batch_id()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self._dir / _JOURNAL, flags, 0o600)
        _write_all(fd, _record(_segment_header(self.campaign_id, batch_id, params)))
        self._segment = _Segment(batch_id=batch_id, chunks=[], count=0, started=time.monotonic(), fd=fd)
        return self._segment

    def _seal(self) -> None:
        seg = self._segment
        if seg is None or self._params is None:
            return
        batch = self._seal_rows(
            seg.batch_id, self._params, b"".join(seg.chunks), fresh=True, fingerprint=self._fp
        )
        # Only now that the batch file is durable may the journal go (see the module docstring).
        os.close(seg.fd)
        self._segment = None
        os.unlink(self._dir / _JOURNAL)
        self._queue.append(batch)
        with self._cond:
            self._c.sealed_batches += 1
            self._c.segment_reports -= batch.count
            self._c.queued_batches += 1
            self._c.queued_reports += batch.count

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

    def _finish(
        self, batch: _Batch, *, rejected: bool = False, resp: reports_pb2.SubmitResponse | None = None
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

    def _settle(self, batch: _Batch, fut: grpc.Future[reports_pb2.SubmitResponse]) -> None:
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
        code, details = _status(exc)
        text = f"Submit {batch.batch_id}: {code.name}: {details}"
        with self._cond:
            self._last_error = text
        if code in _AUTH:
            # The credentials are wrong, not the batch: it stays in the outbox for a reporter that has
            # valid ones, and retrying with these cannot succeed.
            self._fail(
                AccessDeniedError(f"Submit to {self.campaign_id!r}", code.name, details), keep_encoded=True
            )
        if code in _PERMANENT:
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
            retry_after = _retry_after_s(exc)
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
        if code in _AMBIGUOUS:
            batch.ambiguous = True
        if code not in _RETRY:
            batch.limited_failures += 1
            if batch.limited_failures >= _MAX_LIMITED_ATTEMPTS:
                self._queue.popleft()
                self._reject_batch(batch, f"{code.name} {batch.limited_failures} times: {details}")
                return
        delay = _backoff(self._failures, self._initial_delay, self._max_delay)
        self._failures += 1
        self._next_attempt_at = time.monotonic() + delay
        with self._cond:
            self._c.retries += 1
        logger.warning("ldp reporter %r: %s; retrying in %.2f s", self.campaign_id, text, delay)

    def _split(self, batch: _Batch) -> None:
        """Replace a too-large batch, never committed, by two halves with new ids (durably, then delete)."""
        params = self._params
        if params is None:  # pragma: no cover - sending starts after the campaign is known
            return
        msg = reports_pb2.ReportBatch.FromString(batch.path.read_bytes())
        rows = _journal_rows.rows_from_batch(params, msg)
        size = _row_bytes(params)
        half = batch.count // 2
        parts: list[_Batch] = []
        for lo, hi in ((0, half), (half, batch.count)):
            part = _journal_rows.batch_from_rows(
                campaign_id=self.campaign_id,
                batch_id=_new_batch_id(),
                params=params,
                rows=rows[lo * size : hi * size],
            )
            fresh = (hi - lo) if batch.fresh else 0
            parts.append(self._write_batch(part, fresh=fresh, ambiguous=False, fingerprint=self._fp))
        self._queue.popleft()
        batch.path.unlink()
        _fsync_dir(self._dir)
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
