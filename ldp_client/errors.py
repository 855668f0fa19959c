"""The project's exception tree.

Every error the library raises on purpose derives from :class:`LdpError`. Validation errors also derive
from :class:`ValueError` and lookup errors from :class:`LookupError`, so callers that already catch the
built-in families keep working. Messages name the field, the offending value and what is allowed.

Every value an error message echoes goes through :func:`shown`, which cuts it to about
:data:`MAX_SHOWN_CHARS` characters: a client-supplied id of a megabyte must not come back as a megabyte
of error message (which a gRPC client with default limits would not even receive).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "MAX_SHOWN_CHARS",
    "AccessDeniedError",
    "BudgetExceededError",
    "CampaignClosedError",
    "CampaignExistsError",
    "CampaignMismatchError",
    "CampaignNotFoundError",
    "DomainError",
    "InvalidParameterError",
    "InvalidReportError",
    "LdpError",
    "PrivacyQuantizationWarning",
    "RoundNotOpenError",
    "StateFileError",
    "StoreUnavailableError",
    "shown",
]

#: About how many characters of an echoed value an error message shows.
MAX_SHOWN_CHARS: Final = 256
"""Long enough for any valid id (128 code points) and a typical file path; short enough for any message."""


def shown(value: object) -> str:
    """``repr(value)`` for an error message, at most about :data:`MAX_SHOWN_CHARS` characters.

    A longer value is cut and followed by ``... (N chars)`` (or items, or bytes), N being its full length,
    so the message still says what was sent without repeating it whole.
    """
    if isinstance(value, str | bytes | bytearray) and len(value) > MAX_SHOWN_CHARS:
        unit = "chars" if isinstance(value, str) else "bytes"
        return f"{value[:MAX_SHOWN_CHARS]!r}... ({len(value)} {unit})"
    if isinstance(value, list | tuple) and len(value) > 8:
        head = repr(value[:8])
        return f"{head[:MAX_SHOWN_CHARS]}... ({len(value)} items)"
    text = repr(value)
    if len(text) > MAX_SHOWN_CHARS + 16:
        return f"{text[:MAX_SHOWN_CHARS]}... ({len(text)} chars)"
    return text


class LdpError(Exception):
    """Root of every error raised by ldp_client, ldp_aggregator and simulations."""


class InvalidParameterError(LdpError, ValueError):
    """A mechanism or configuration parameter is outside its allowed range."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={shown(value)} is invalid: allowed {allowed}")


class DomainError(LdpError, ValueError):
    """A value to encode is not in the mechanism's declared domain (never silently remapped)."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={shown(value)} is not in the domain: allowed {allowed}")


class InvalidReportError(LdpError, ValueError):
    """A report or batch does not match its campaign (wrong length, cohort, value, count)."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={shown(value)} is invalid: allowed {allowed}")


class CampaignNotFoundError(LdpError, LookupError):
    """No campaign with the given id exists."""

    def __init__(self, campaign_id: str) -> None:
        self.campaign_id = campaign_id
        super().__init__(f"campaign_id={shown(campaign_id)} does not exist")


class CampaignExistsError(LdpError):
    """A campaign with the given id already exists."""

    def __init__(self, campaign_id: str) -> None:
        self.campaign_id = campaign_id
        super().__init__(f"campaign_id={shown(campaign_id)} already exists")


class CampaignClosedError(LdpError):
    """The campaign no longer accepts reports."""

    def __init__(self, campaign_id: str) -> None:
        self.campaign_id = campaign_id
        super().__init__(f"campaign_id={shown(campaign_id)} is closed and accepts no more reports")


class RoundNotOpenError(LdpError):
    """Issue 16, adaptive discovery: a report (or a device) for a round the campaign is not collecting now.

    A closed round's reports are refused and counted nowhere; a later round's wait until it opens.
    """

    def __init__(self, campaign_id: str, round_: int, current: int, levels: int | None = None) -> None:
        self.campaign_id = campaign_id
        self.round = round_
        self.current = current
        if levels is not None and current >= levels:
            now = f"every one of its {levels} rounds is closed"
        elif levels is not None:
            now = f"it collects round {current} of rounds 0..{levels - 1} now"
        else:
            now = f"it collects round {current} now"
        state = "is closed" if round_ < current else "is not open yet"
        super().__init__(
            f"round {round_} of campaign_id={shown(campaign_id)} {state} ({now}): a report for it is"
            " refused and counted nowhere"
        )


class CampaignMismatchError(LdpError):
    """A campaign's parameters on the server differ from those a device pinned (or cached) for it."""


class AccessDeniedError(LdpError):
    """The server refused the caller's credentials (gRPC ``UNAUTHENTICATED`` or ``PERMISSION_DENIED``).

    Permanent for the caller: retrying with the same token cannot succeed, so the reporter stops.
    """

    def __init__(self, call: str, code: str, details: str) -> None:
        self.call = call
        self.code = code
        self.details = details
        if code == "UNAUTHENTICATED":
            fix = "pass a valid token (metadata=[('authorization', 'Bearer <token>')])"
        else:
            fix = "use a token with a role that may do this (a reporter token for Reporter)"
        super().__init__(f"{call} was refused with {code} ({details[:200]}): {fix}")


class StoreUnavailableError(LdpError):
    """Storage cannot commit right now (disk full, read-only, closed); the request can be retried."""


class BudgetExceededError(LdpError):
    """A campaign, or one more report, asks for more privacy loss than the app allows.

    Raised with a message only when a campaign's per-report cost is over ``max_epsilon`` (or
    ``max_epsilon_inf``); the device ledger's refusals also name the cap and the amounts:

    Attributes:
        cap: the cap crossed (``"lifetime_epsilon"``, ``"window_delta"``, ``"campaign_epsilon"``, ...), or
            None for a campaign refused outright.
        limit: the cap's value (None with ``cap``).
        spent: what the scope had spent before this report (None with ``cap``).
        requested: what this report would add (None with ``cap``).
    """

    def __init__(
        self,
        message: str,
        *,
        cap: str | None = None,
        limit: float | None = None,
        spent: float | None = None,
        requested: float | None = None,
    ) -> None:
        self.cap = cap
        self.limit = limit
        self.spent = spent
        self.requested = requested
        super().__init__(message)


class StateFileError(LdpError):
    """The client's local state file (secret, outbox) is unreadable or has unsafe permissions."""


class PrivacyQuantizationWarning(UserWarning):
    """A requested probability or epsilon cannot be met exactly; the effective value is reported."""
