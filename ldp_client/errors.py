"""The project's exception tree.

Every error the library raises on purpose derives from :class:`LdpError`. Validation errors also derive
from :class:`ValueError` and lookup errors from :class:`LookupError`, so callers that already catch the
built-in families keep working. Messages name the field, the offending value and what is allowed.
"""

from __future__ import annotations

__all__ = [
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
    "StateFileError",
    "StoreUnavailableError",
]


class LdpError(Exception):
    """Root of every error raised by ldp_client, ldp_aggregator and simulations."""


class InvalidParameterError(LdpError, ValueError):
    """A mechanism or configuration parameter is outside its allowed range."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={value!r} is invalid: allowed {allowed}")


class DomainError(LdpError, ValueError):
    """A value to encode is not in the mechanism's declared domain (never silently remapped)."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={value!r} is not in the domain: allowed {allowed}")


class InvalidReportError(LdpError, ValueError):
    """A report or batch does not match its campaign (wrong length, cohort, value, count)."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={value!r} is invalid: allowed {allowed}")


class CampaignNotFoundError(LdpError, LookupError):
    """No campaign with the given id exists."""

    def __init__(self, campaign_id: str) -> None:
        self.campaign_id = campaign_id
        super().__init__(f"campaign_id={campaign_id!r} does not exist")


class CampaignExistsError(LdpError):
    """A campaign with the given id already exists."""

    def __init__(self, campaign_id: str) -> None:
        self.campaign_id = campaign_id
        super().__init__(f"campaign_id={campaign_id!r} already exists")


class CampaignClosedError(LdpError):
    """The campaign no longer accepts reports."""

    def __init__(self, campaign_id: str) -> None:
        self.campaign_id = campaign_id
        super().__init__(f"campaign_id={campaign_id!r} is closed and accepts no more reports")


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
    """A campaign asks for more privacy loss than the app allows."""


class StateFileError(LdpError):
    """The client's local state file (secret, outbox) is unreadable or has unsafe permissions."""


class PrivacyQuantizationWarning(UserWarning):
    """A requested probability or epsilon cannot be met exactly; the effective value is reported."""
