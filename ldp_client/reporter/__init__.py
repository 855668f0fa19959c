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
    that exits without :meth:`Reporter.close` loses nothing journaled (see the outbox below). This package
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

The device ledger (budget policies; ``docs/client.md``, "The privacy ledger")
    Beyond the campaign check, every report is charged to the device's ledger
    (:mod:`~ldp_client.reporter.ledger`, ``<state_dir>/ledger/spend.log``, shared by every reporter of the
    process on that ``state_dir``) before it is encoded: a fresh report (epsilon_inf = +inf) costs its
    (epsilon, delta); a memoized report (RAPPOR) of a value new to this campaign and parameters costs
    (epsilon_inf, delta), a repeat nothing (memo keys are keyed hashes under a key derived from the
    client secret, never values); totals add up (basic composition,
    :func:`~ldp_client.reporter.policy.compose_basic`). With
    ``budget=BudgetPolicy(...)`` a report that would take the device's lifetime total, its total over
    the rolling window, or this campaign's total above a cap raises
    :class:`~ldp_client.errors.BudgetExceededError` (``cap``, ``limit``, ``spent``, ``requested``) on
    the app thread, nothing encoded; the reporter keeps running. A value that waited for the campaign and
    is refused then is a loss (``"budget"``). The charges are appended to the ledger and ``fsync``-ed by
    the background thread BEFORE their reports are journaled, so a crash can over-count but never
    under-count what may be sent (a fresh mechanism with no cap set is charged by that thread alone,
    per group it journals: nothing can be refused, and ``report()`` stays as cheap as before).
    :meth:`Reporter.privacy_spend` is the snapshot.

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

The modules, bottom up (each imports only those above it):

* :mod:`~ldp_client.reporter.stats`: the counters, :class:`ReporterStats`, :class:`Discard` and the
  reporter's errors (loss accounting).
* :mod:`~ldp_client.reporter.settings`: the constructor's arguments, checked.
* :mod:`~ldp_client.reporter.retry`: which status codes are retried, the backoff and the retry-after delay.
* :mod:`~ldp_client.reporter.outbox`: file names, journal records, durable writes, one campaign's
  :class:`~ldp_client.reporter.outbox.Outbox` directory.
* :mod:`~ldp_client.reporter.campaign`: pinned and cached campaigns, the budget check,
  :func:`encoder_for`.
* :mod:`~ldp_client.reporter.policy`: :class:`BudgetPolicy`, a report's cost, the composition rule and
  the :class:`PrivacySpend` snapshot; :mod:`~ldp_client.reporter.ledger`: the durable device ledger.
* :mod:`~ldp_client.reporter.base`: the shared state, stopping, losses and settled batches.
* :mod:`~ldp_client.reporter.journaling`, :mod:`~ldp_client.reporter.fetching`,
  :mod:`~ldp_client.reporter.sending`: the background thread's work on the outbox, the campaign and
  ``Submit``, as layers over that state.
* :mod:`~ldp_client.reporter.core`: :class:`Reporter` itself (constructor, app-side calls, thread loop).

Import the public names from this package (``from ldp_client.reporter import Reporter``).
"""

from __future__ import annotations

# The journal's building blocks keep their former private names here (tests and tools build journals
# with them); they are not part of __all__.
from ldp_client._journal_rows import row_bytes as _row_bytes  # noqa: F401
from ldp_client._journal_rows import row_packer as _row_packer  # noqa: F401
from ldp_client.reporter.campaign import encoder_for
from ldp_client.reporter.core import Reporter
from ldp_client.reporter.outbox import parse_batch_name as _parse_batch_name  # noqa: F401
from ldp_client.reporter.outbox import parse_segment_header as _parse_segment_header  # noqa: F401
from ldp_client.reporter.outbox import read_records as _read_records  # noqa: F401
from ldp_client.reporter.outbox import record as _record  # noqa: F401
from ldp_client.reporter.outbox import segment_header as _segment_header  # noqa: F401
from ldp_client.reporter.policy import BudgetPolicy, CampaignSpend, PrivacySpend, Spend
from ldp_client.reporter.stats import (
    Discard,
    DiscardReason,
    ReporterClosedError,
    ReporterError,
    ReporterStats,
    ReportsLostError,
)

__all__ = [
    "BudgetPolicy",
    "CampaignSpend",
    "Discard",
    "DiscardReason",
    "PrivacySpend",
    "Reporter",
    "ReporterClosedError",
    "ReporterError",
    "ReporterStats",
    "ReportsLostError",
    "Spend",
    "encoder_for",
]
