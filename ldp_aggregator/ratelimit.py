"""Per-token rate limits and request size limits (all answered RESOURCE_EXHAUSTED).

Each caller (its token id; every unauthenticated caller shares one key) has two token buckets: requests
per second (every ``ldp.v1`` RPC) and reports per second (a batch costs its ``count``). A bucket of rate
r holds at most ``r * burst_s`` units and refills continuously; a request takes its cost or is refused
whole, before anything is decoded or committed, so a refused batch is never partly stored.

A refused request says why in its message. A rate refusal also carries the trailing metadata
``ldp-retry-after-ms`` (when the bucket will hold enough), which tells a client that the request is fine
and only early: :class:`ldp_client.reporter.Reporter` then retries the same batch id after that delay
instead of splitting the batch (what it does for a message that is too large).

Failed authentication is limited per client address (an IPv6 client by its /64 network), since such a
caller has no token id: each address may fail ``failed_auth_per_s`` times per second (bursts of
``failed_auth_burst``); beyond that its calls without a valid token get RESOURCE_EXHAUSTED with the
retry-after metadata instead of UNAUTHENTICATED. A valid token is never refused because of its address
(devices behind one NAT share an address). The addresses are kept in memory only, for the most recent
:data:`MAX_TRACKED_ADDRESSES` of them; they are never stored or logged.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ldp_client.errors import InvalidParameterError, LdpError

__all__ = [
    "DEFAULT_MAX_ACCUMULATOR_BYTES",
    "MAX_TRACKED_ADDRESSES",
    "RETRY_AFTER_METADATA",
    "AuthFailuresLimitedError",
    "Limits",
    "RateLimitedError",
    "RateLimiter",
    "RequestTooLargeError",
    "ResourceLimitError",
    "TokenBucket",
    "peer_address",
]

#: Trailing metadata key of a rate refusal: milliseconds until the request would be admitted.
RETRY_AFTER_METADATA: Final = "ldp-retry-after-ms"
#: Default largest accumulator of one campaign (128 MiB): RAPPOR k=128 with all 65,536 cohorts, k=4096
#: with up to 4,095 cohorts, GRR over 16 million values. Every commit rewrites a touched campaign's
#: accumulator, so this also bounds the bytes written per commit.
DEFAULT_MAX_ACCUMULATOR_BYTES: Final = 128 * 1024 * 1024
# SQLite refuses blobs over 10^9 bytes (its default SQLITE_MAX_LENGTH); keep well below it.
_MAX_ACCUMULATOR_BYTES_CEILING: Final = 768 * 1024 * 1024
#: Most client addresses whose failed authentications are tracked at once (least recently seen dropped).
MAX_TRACKED_ADDRESSES: Final = 10_000


class ResourceLimitError(LdpError):
    """A request exceeds a configured limit (gRPC RESOURCE_EXHAUSTED)."""

    retry_after_s: float | None = None


class RateLimitedError(ResourceLimitError):
    """The caller's rate limit is used up for now; the same request can be retried after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTooLargeError(ResourceLimitError):
    """The request can never be admitted as it is (too many reports or candidates): split it."""


class AuthFailuresLimitedError(RateLimitedError):
    """Too many calls without a valid token came from this client address; retry after ``retry_after_s``."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Limits of one server (every caller gets its own buckets of these sizes).

    Attributes:
        requests_per_s: RPCs per second per token (0: unlimited).
        reports_per_s: Reports per second per token (0: unlimited).
        burst_s: Bucket capacity in seconds of its rate (how far a caller may run ahead).
        max_batch_reports: Most reports in one batch (``ReportBatch.count``).
        max_candidates: Most candidate strings in one request (estimates, decoding, a new campaign).
        max_accumulator_bytes: Largest accumulator a new campaign may need; a larger campaign is refused
            (INVALID_ARGUMENT) before anything is allocated.
        failed_auth_per_s: Calls without a valid token per second per client address (0: unlimited).
        failed_auth_burst: How many such calls an address may make at once before the rate applies.
    """

    requests_per_s: float = 0.0
    reports_per_s: float = 0.0
    burst_s: float = 1.0
    max_batch_reports: int = 1_000_000
    max_candidates: int = 10_000
    max_accumulator_bytes: int = DEFAULT_MAX_ACCUMULATOR_BYTES
    failed_auth_per_s: float = 1.0
    failed_auth_burst: int = 20

    def __post_init__(self) -> None:
        for name in ("requests_per_s", "reports_per_s", "failed_auth_per_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InvalidParameterError(name, value, "a finite number >= 0 (0 = unlimited)")
            if value < 0:
                raise InvalidParameterError(name, value, "a finite number >= 0 (0 = unlimited)")
        b = self.burst_s
        if isinstance(b, bool) or not isinstance(b, int | float) or not (math.isfinite(b) and b > 0):
            raise InvalidParameterError("burst_s", b, "a finite number of seconds > 0")
        for name in ("max_batch_reports", "max_candidates", "failed_auth_burst"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(name, value, "an integer >= 1")
        a = self.max_accumulator_bytes
        if isinstance(a, bool) or not isinstance(a, int) or not 4096 <= a <= _MAX_ACCUMULATOR_BYTES_CEILING:
            raise InvalidParameterError(
                "max_accumulator_bytes", a, f"a number of bytes in [4096, {_MAX_ACCUMULATOR_BYTES_CEILING}]"
            )


def peer_address(peer: str) -> str:
    """The client address of a gRPC peer string, without the port; an IPv6 address as its /64 network.

    ``ipv4:203.0.113.7:52114`` -> ``203.0.113.7``; ``ipv6:[2001:db8::1]:52114`` -> ``2001:db8::/64`` (one
    client usually holds a whole /64); anything else (``unix:...``) is kept as it is.
    """
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer
    host = rest.rpartition(":")[0].removeprefix("[").removesuffix("]")
    if kind == "ipv6":
        try:
            return str(ipaddress.ip_network(f"{host.partition('%')[0]}/64", strict=False))
        except ValueError:
            return host
    return host


class TokenBucket:
    """A token bucket: ``rate`` units per second, at most ``capacity`` stored; starts full."""

    __slots__ = ("capacity", "level", "rate", "updated")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.level = capacity
        self.updated = now

    def take(self, cost: float, now: float) -> float:
        """Take ``cost`` units if there are: returns 0.0, else the seconds until there are (inf: never)."""
        if cost > self.capacity:
            return math.inf
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now
        if self.level >= cost:
            self.level -= cost
            return 0.0
        return (cost - self.level) / self.rate


class RateLimiter:
    """The buckets of every caller, and the size checks. Used from one event loop (not thread-safe).

    Memory is one pair of buckets per token id that has called (tokens are few and operator-made).
    """

    def __init__(self, limits: Limits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._requests: dict[str, TokenBucket] = {}
        self._reports: dict[str, TokenBucket] = {}
        self._auth_failures: OrderedDict[str, TokenBucket] = OrderedDict()

    def note_failed_auth(self, peer: str) -> None:
        """Count a call without a valid token from ``peer`` (gRPC's ``context.peer()``).

        Raises:
            AuthFailuresLimitedError: The address is over ``failed_auth_per_s``; it says when to retry.
        """
        lim = self.limits
        rate = lim.failed_auth_per_s
        if rate <= 0:
            return
        key = peer_address(peer)
        now = self._clock()
        bucket = self._auth_failures.get(key)
        if bucket is None:
            bucket = TokenBucket(rate, float(lim.failed_auth_burst), now)
            self._auth_failures[key] = bucket
            if len(self._auth_failures) > MAX_TRACKED_ADDRESSES:
                self._auth_failures.popitem(last=False)
        else:
            self._auth_failures.move_to_end(key)
        wait = bucket.take(1.0, now)
        if wait > 0:
            raise AuthFailuresLimitedError(
                "too many calls without a valid access token from this address (at most"
                f" {rate:g}/s, bursts of {lim.failed_auth_burst}); retry in {wait:.3f} s with a valid token",
                wait,
            )

    def _bucket(self, table: dict[str, TokenBucket], key: str, rate: float) -> TokenBucket:
        bucket = table.get(key)
        if bucket is None:
            bucket = TokenBucket(rate, rate * self.limits.burst_s, self._clock())
            table[key] = bucket
        return bucket

    def admit_request(self, key: str) -> None:
        """Count one RPC of ``key``. Raises RateLimitedError when over ``requests_per_s``."""
        rate = self.limits.requests_per_s
        if rate <= 0:
            return
        wait = self._bucket(self._requests, key, rate).take(1.0, self._clock())
        if wait > 0:
            raise RateLimitedError(
                f"rate limit: at most {rate:g} requests/s per token (burst {rate * self.limits.burst_s:g});"
                f" retry in {wait:.3f} s",
                wait,
            )

    def check_batch(self, n_reports: int) -> None:
        """Raises RequestTooLargeError if a batch of ``n_reports`` can never be admitted."""
        lim = self.limits
        if n_reports > lim.max_batch_reports:
            raise RequestTooLargeError(
                f"batch of {n_reports} reports exceeds max_batch_reports={lim.max_batch_reports}: split it"
                " into smaller batches (new batch ids)"
            )
        burst = lim.reports_per_s * lim.burst_s
        if lim.reports_per_s > 0 and n_reports > burst:
            raise RequestTooLargeError(
                f"batch of {n_reports} reports exceeds the rate limit's burst of {burst:g} reports"
                f" ({lim.reports_per_s:g} reports/s x {lim.burst_s:g} s): split it into smaller batches"
            )

    def check_candidates(self, n_candidates: int) -> None:
        """Raises RequestTooLargeError above ``max_candidates``."""
        if n_candidates > self.limits.max_candidates:
            raise RequestTooLargeError(
                f"{n_candidates} candidates exceed max_candidates={self.limits.max_candidates}"
            )

    def admit_reports(self, key: str, n_reports: int) -> None:
        """Size-check a batch, then take ``n_reports`` from ``key``'s report bucket (all or nothing).

        Raises:
            RequestTooLargeError: The batch can never be admitted (see :meth:`check_batch`).
            RateLimitedError: Over ``reports_per_s`` for now.
        """
        self.check_batch(n_reports)
        rate = self.limits.reports_per_s
        if rate <= 0 or n_reports <= 0:
            return
        wait = self._bucket(self._reports, key, rate).take(float(n_reports), self._clock())
        if wait > 0:
            raise RateLimitedError(
                f"rate limit: at most {rate:g} reports/s per token; this batch of {n_reports} fits in"
                f" {wait:.3f} s: retry it then (same batch id)",
                wait,
            )
