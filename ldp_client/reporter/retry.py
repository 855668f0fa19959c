"""Which gRPC answers the reporter retries, and how long it waits (package docstring:
"Status codes of ``Submit``" and "Permanent errors stop the reporter").

The status classes are what the send and fetch loops branch on; :func:`backoff` is the equal-jitter
exponential delay (``secrets``: never an immediate retry, no synchronised herds), and
:func:`retry_after_s` reads a rate limit's ``ldp-retry-after-ms`` trailing metadata.
"""

from __future__ import annotations

import math
import secrets
from typing import Final

import grpc

# INTERNAL/UNKNOWN may be a poison batch: retry a few times, then reject rather than retry forever.
MAX_LIMITED_ATTEMPTS: Final = 5
# Trailing metadata of a rate-limit refusal (ldp_aggregator.ratelimit): milliseconds until admitted.
RETRY_AFTER_KEY: Final = "ldp-retry-after-ms"

RETRY: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)
AUTH: Final = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
PERMANENT: Final = frozenset(
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
FETCH_RETRY: Final = RETRY | {
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}
# After one of these the batch may have been committed although the client saw no answer.
AMBIGUOUS: Final = frozenset(
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


def backoff(attempt: int, initial: float, cap: float) -> float:
    """The delay before retry number ``attempt``: ``min(cap, initial * 2**attempt) * (1 + u) / 2``."""
    base = min(cap, initial * 2.0 ** min(attempt, 60))
    return base * (1.0 + secrets.randbits(32) / 2.0**32) / 2.0


def retry_after_s(exc: BaseException | None) -> float | None:
    """Seconds from the ``ldp-retry-after-ms`` trailing metadata of a rate refusal (None if absent)."""
    trailing = getattr(exc, "trailing_metadata", None)
    if not callable(trailing):
        return None
    try:
        items = trailing() or ()
        values = [v for k, v in items if k == RETRY_AFTER_KEY]
        ms = float(values[0]) if values else None
    except (TypeError, ValueError):
        return None
    if ms is None or not math.isfinite(ms) or ms < 0:
        return None
    return min(ms, 3_600_000.0) / 1000.0


def status_of(exc: BaseException | None) -> tuple[grpc.StatusCode, str]:
    """(code, details) of a failed call; anything that is not an RpcError counts as UNKNOWN."""
    if isinstance(exc, grpc.RpcError):
        return exc.code(), str(exc.details() or "")
    return grpc.StatusCode.UNKNOWN, repr(exc)
