"""The reporter's counters, its losses and the errors it raises (package docstring: "Losses").

A loss is counted under one :data:`DiscardReason`; :meth:`Counters.losses` is the one place that turns the
counters into the per-reason totals that ``stats().lost_reports``, :class:`ReportsLostError` and
:meth:`~ldp_client.reporter.Reporter.close` report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from ldp_client.errors import LdpError

State = Literal["starting", "running", "stopped", "closed"]
DiscardReason = Literal["invalid", "overflow", "stopped", "rejected", "mismatch", "budget"]
_REASONS: Final[tuple[DiscardReason, ...]] = (
    "invalid",
    "overflow",
    "stopped",
    "rejected",
    "mismatch",
    "budget",
)


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
    """One loss, as passed to the ``on_discard`` callback (see the package docstring, "Losses").

    Attributes:
        reason: ``invalid``, ``overflow``, ``stopped``, ``rejected``, ``mismatch`` or ``budget`` (a value
            reported before the campaign was known whose report the device's budget policy refused).
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
        dropped_budget: values reported before the campaign was known whose report the budget policy
            refused once the campaign arrived (a value reported after it raises BudgetExceededError).
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
        lost_reports: everything lost in this run: ``dropped_invalid + dropped_overflow +
            dropped_budget + discarded + rejected_reports``.
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
    dropped_budget: int
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


@dataclass(slots=True)
class Counters:
    """The reporter's running counters (guarded by its lock); :class:`ReporterStats` is their snapshot."""

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
    dropped_budget: int = 0
    recovered_batches: int = 0
    recovered_reports: int = 0
    segment_reports: int = 0
    queued_reports: int = 0
    queued_batches: int = 0

    def losses(self) -> dict[DiscardReason, int]:
        """Everything lost in this run, per reason (the caller holds the reporter's lock)."""
        return {
            "invalid": self.dropped_invalid,
            "overflow": self.dropped_overflow,
            "stopped": self.discarded,
            "rejected": self.rejected_reports - self.mismatched_reports,
            "mismatch": self.mismatched_reports,
            "budget": self.dropped_budget,
        }
