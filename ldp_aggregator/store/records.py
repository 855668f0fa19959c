"""What the store keeps and returns: campaign and token records, outcomes, counters, and its two errors.

Also the two small protocols the store needs from the caller's aggregates (:class:`Accumulator`,
:class:`BatchDelta`): the store knows no mechanism, only mergeable sums with a byte form.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Final, Protocol, Self

from google.protobuf.message import DecodeError

from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError, LdpError, StoreUnavailableError

# The store's modules log under the package's name.
_log = logging.getLogger("ldp_aggregator.store")

__all__ = [
    "MAX_ID_LENGTH",
    "Accumulator",
    "BatchDelta",
    "CampaignRecord",
    "StoreLockedError",
    "StoreSchemaError",
    "StoreStats",
    "SubmitOutcome",
    "TokenRecord",
    "campaign_round",
    "check_id",
    "now_unix_ms",
]

#: Longest campaign id or batch id (characters) the store accepts.
MAX_ID_LENGTH: Final = 256


class StoreSchemaError(LdpError):
    """The database file was written by a different (newer or unknown) schema and is not opened.

    Not retryable: upgrade the software, or point the store at another file.
    """


class StoreLockedError(StoreUnavailableError):
    """Another :class:`Store` (usually a running server) holds the database's lock file."""


class Accumulator(Protocol):
    """What the store needs from a campaign's aggregate: a mergeable, serializable sum.

    ``a + b`` must return a NEW object and leave both operands unchanged: the writer builds the next
    state as ``committed + delta`` and only swaps it in after COMMIT, so a failed transaction leaves the
    committed object untouched.
    """

    def __add__(self, other: Any) -> Self: ...  # another accumulator of its kind, or a BatchDelta it accepts

    def to_bytes(self) -> bytes: ...

    @property
    def n(self) -> int:
        """Number of reports summed into this accumulator."""
        ...


class BatchDelta(Protocol):
    """What one batch adds to its campaign's accumulator (the writer computes ``committed + delta``).

    An accumulator of the campaign's kind, or a lighter increment that kind accepts in ``+`` (e.g.
    :class:`ldp_aggregator.accumulators.BitRows` for a single RAPPOR report).
    """

    @property
    def n(self) -> int:
        """Number of reports in the batch."""
        ...


def campaign_round(record: CampaignRecord) -> int:
    """The round an adaptive discovery campaign collects now (``Campaign.discovery_round`` of the stored
    message, issue 16); 0 for every other campaign. Parsed once per stored blob."""
    return _round_of_blob(record.params_blob)


@functools.lru_cache(maxsize=1024)
def _round_of_blob(blob: bytes) -> int:
    try:
        return int(campaign_pb2.Campaign.FromString(blob).discovery_round)
    except DecodeError:  # not a Campaign message (stores are opaque to their blob): no round
        return 0


@dataclass(frozen=True, kw_only=True, slots=True)
class CampaignRecord:
    """One campaign as stored: an id, the mechanism name and its serialized parameters.

    Attributes:
        campaign_id: Unique id, 1..MAX_ID_LENGTH characters.
        mechanism: Mechanism name (e.g. ``"rr"``, ``"grr"``, ``"rappor"``); opaque to the store.
        params_blob: Serialized parameters (the wire ``Campaign`` protobuf); opaque to the store.
        description: Free text for operators.
        created_unix_ms: Creation time, milliseconds since the Unix epoch.
        closed: A closed campaign accepts no new batches (retries of stored batches still answer
            "duplicate").
    """

    campaign_id: str
    mechanism: str
    params_blob: bytes
    description: str = ""
    created_unix_ms: int
    closed: bool = False

    def __post_init__(self) -> None:
        check_id("campaign_id", self.campaign_id)
        if not isinstance(self.mechanism, str) or not 1 <= len(self.mechanism) <= MAX_ID_LENGTH:
            raise InvalidParameterError("mechanism", self.mechanism, f"a string of 1..{MAX_ID_LENGTH} chars")
        if isinstance(self.params_blob, bytearray | memoryview):
            object.__setattr__(self, "params_blob", bytes(self.params_blob))
        if not isinstance(self.params_blob, bytes):
            raise InvalidParameterError("params_blob", self.params_blob, "bytes")
        if not isinstance(self.description, str):
            raise InvalidParameterError("description", self.description, "a string")
        if (
            isinstance(self.created_unix_ms, bool)
            or not isinstance(self.created_unix_ms, int)
            or self.created_unix_ms < 0
        ):
            raise InvalidParameterError("created_unix_ms", self.created_unix_ms, "an integer >= 0")
        if not isinstance(self.closed, bool):
            raise InvalidParameterError("closed", self.closed, "a bool")


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenRecord:
    """One access token as stored: never the token, only its SHA-256.

    Attributes:
        token_id: Public id (shown by ``token list``, used to revoke), 1..MAX_ID_LENGTH characters.
        role: Role name; opaque to the store (``ldp_aggregator.auth`` gives it meaning).
        name: Free text for operators (who or what uses the token).
        sha256: SHA-256 digest of the token string (32 bytes).
        created_unix_ms: Creation time, milliseconds since the Unix epoch.
        revoked_unix_ms: Revocation time, or None while the token is valid.
        campaigns: The campaign ids the token is limited to (distinct, sorted), or None for every campaign.
    """

    token_id: str
    role: str
    name: str = ""
    sha256: bytes
    created_unix_ms: int
    revoked_unix_ms: int | None = None
    campaigns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_id("token_id", self.token_id)
        check_id("role", self.role)
        if not isinstance(self.name, str) or len(self.name) > MAX_ID_LENGTH:
            raise InvalidParameterError("name", self.name, f"a string of at most {MAX_ID_LENGTH} characters")
        if isinstance(self.sha256, bytearray | memoryview):
            object.__setattr__(self, "sha256", bytes(self.sha256))
        if not isinstance(self.sha256, bytes) or len(self.sha256) != 32:
            raise InvalidParameterError("sha256", self.sha256, "32 bytes (a SHA-256 digest)")
        for field, value in (
            ("created_unix_ms", self.created_unix_ms),
            ("revoked_unix_ms", self.revoked_unix_ms),
        ):
            if value is None and field == "revoked_unix_ms":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidParameterError(field, value, "an integer >= 0")
        if self.campaigns is not None:
            if isinstance(self.campaigns, str) or not isinstance(self.campaigns, tuple | list | frozenset):
                raise InvalidParameterError("campaigns", self.campaigns, "a sequence of campaign ids or None")
            if not self.campaigns:
                raise InvalidParameterError("campaigns", (), "one campaign id or more (None: every campaign)")
            for cid in self.campaigns:
                check_id("campaigns", cid)
            object.__setattr__(self, "campaigns", tuple(sorted(set(self.campaigns))))

    @property
    def revoked(self) -> bool:
        """Whether the token has been revoked."""
        return self.revoked_unix_ms is not None


def token_from_row(
    token_id: str,
    role: str,
    name: str,
    digest: bytes,
    created_unix_ms: int,
    revoked_unix_ms: int | None,
    campaigns_column: str | None,
) -> TokenRecord:
    """A token record from its stored columns, the same for both stores.

    ``campaigns_column`` is the scope as stored: NULL (every campaign) or a JSON list of campaign ids. One
    that cannot be read limits the token to no campaign at all (fail closed, with a warning), never to every
    campaign.
    """
    scope: tuple[str, ...] | None = None
    if campaigns_column is not None:
        try:
            ids = json.loads(campaigns_column)
        except ValueError:
            ids = None
        if isinstance(ids, list) and ids and all(isinstance(c, str) and c for c in ids):
            scope = tuple(ids)
        else:
            _log.warning(
                "token %s has an unreadable campaign scope; it is refused for every campaign", token_id
            )
            scope = ()
    record = TokenRecord(
        token_id=token_id,
        role=role,
        name=name,
        sha256=bytes(digest),
        created_unix_ms=int(created_unix_ms),
        revoked_unix_ms=None if revoked_unix_ms is None else int(revoked_unix_ms),
        campaigns=scope or None,
    )
    if scope == ():  # unreadable: an empty scope, which no campaign passes (the constructor refuses one)
        object.__setattr__(record, "campaigns", ())
    return record


@dataclass(frozen=True, kw_only=True, slots=True)
class SubmitOutcome:
    """Result of a committed submission.

    Attributes:
        duplicate: The batch id was already stored (a retry); nothing was added.
        accepted: Reports added to the campaign by this call (0 for a duplicate).
    """

    duplicate: bool
    accepted: int


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreStats:
    """Counters since the store was opened (for metrics and benchmarks)."""

    commits: int
    failed_commits: int
    batches_accepted: int
    batches_duplicate: int
    reports_accepted: int
    pending: int
    last_commit_failed: bool = False


def check_id(field: str, value: object) -> None:
    """Raise InvalidParameterError unless ``value`` is an id of 1..MAX_ID_LENGTH characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LENGTH:
        raise InvalidParameterError(field, value, f"a string of 1..{MAX_ID_LENGTH} characters")


def now_unix_ms() -> int:
    """Milliseconds since the Unix epoch (the store's timestamps)."""
    return time.time_ns() // 1_000_000
