"""Token authentication with roles: who may call which RPC.

Tokens
    A token is ``"ldp_" + base64url(32 bytes from the OS CSPRNG)`` (256 bits of entropy), shown once by
    ``ldp-aggregator token create`` and never stored: the database keeps its SHA-256 with a public id, a
    role, a name and the creation and revocation times (:class:`~ldp_aggregator.store.TokenRecord`).
    Clients send it with every call as the metadata ``authorization: Bearer <token>``. The server hashes
    what it receives, looks the digest up among the valid tokens and confirms the match with
    :func:`hmac.compare_digest`; a plain hash of 256 random bits leaks nothing through timing, and there is
    no per-token secret comparison whose time could depend on the token.

Roles (least privilege; see :data:`METHOD_ROLES`)
    ``reporter``  devices: ``Collector.*`` (fetch a campaign, submit reports). Nothing else. A reporter
                  token may be limited to some campaigns (``token create --role reporter --campaign ID``,
                  repeatable): a call about any other campaign is PERMISSION_DENIED.
    ``analyst``   read: list and get campaigns, estimates, decoding (``Analyst.Decode*``), export.
    ``admin``     everything an analyst may do, plus create and close campaigns.

    An ``ldp.v1`` RPC missing from the table needs ``admin`` (fail closed: a new RPC is never open by
    accident), except ``Analyst.Decode*`` and ``Analyst.Estimate*``, which analysts may call. The
    standard health and reflection services need no token (load balancers and tooling call them; they
    reveal the service names and whether the server is up, nothing stored).

When is authentication on
    Once a token has ever been added to the database, every ``ldp.v1`` call needs one, for good: the
    database records it (:meth:`ldp_aggregator.store.Store.auth_required`), so revoking every token, even
    across a restart, never switches authentication off again (fail closed; everyone is then refused). A
    database that never had a token runs with authentication off, and the server then refuses to listen
    on anything but loopback and says so in its log. Tokens created while it runs switch authentication
    on (at the next refresh, within ``token_refresh_s``).

Status codes: a missing, malformed, unknown or revoked token is UNAUTHENTICATED (the message never says
which, nor echoes the token); a valid token of the wrong role is PERMISSION_DENIED.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from ldp_aggregator.store import TokenRecord
from ldp_client.errors import InvalidParameterError, LdpError, shown
from ldp_client.wire import MAX_ID_LENGTH

__all__ = [
    "METHOD_ROLES",
    "PUBLIC_SERVICES",
    "TOKEN_PREFIX",
    "Authenticator",
    "PermissionDeniedError",
    "Principal",
    "Role",
    "UnauthenticatedError",
    "new_token",
    "required_roles",
    "token_digest",
]


class Role(StrEnum):
    """What a token may do (module docstring)."""

    REPORTER = "reporter"
    ANALYST = "analyst"
    ADMIN = "admin"


class UnauthenticatedError(LdpError):
    """No valid token came with the call (gRPC UNAUTHENTICATED)."""


class PermissionDeniedError(LdpError):
    """The token is valid but its role may not call this RPC (gRPC PERMISSION_DENIED)."""


TOKEN_PREFIX: Final = "ldp_"
_TOKEN_BYTES: Final = 32
# "Bearer " + prefix + 43 base64url characters; anything much longer is not one of our tokens.
_MAX_HEADER_CHARS: Final = 512

_COLLECT: Final = frozenset({Role.REPORTER})
_READ: Final = frozenset({Role.ANALYST, Role.ADMIN})
_MANAGE: Final = frozenset({Role.ADMIN})

#: Roles allowed to call each ``ldp.v1`` RPC (full gRPC method names). Unlisted ``ldp.v1`` RPCs: admin only.
METHOD_ROLES: Final[Mapping[str, frozenset[Role]]] = {
    "/ldp.v1.Collector/GetCampaign": _COLLECT,
    "/ldp.v1.Collector/Submit": _COLLECT,
    "/ldp.v1.Collector/SubmitStream": _COLLECT,
    "/ldp.v1.Collector/SubmitReport": _COLLECT,
    "/ldp.v1.Analyst/GetCampaign": _READ,
    "/ldp.v1.Analyst/ListCampaigns": _READ,
    "/ldp.v1.Analyst/GetEstimate": _READ,
    "/ldp.v1.Analyst/ExportCampaign": _READ,
    "/ldp.v1.Analyst/CreateCampaign": _MANAGE,
    "/ldp.v1.Analyst/CloseCampaign": _MANAGE,
    "/ldp.v1.Analyst/NextRound": _MANAGE,
}

#: Analyst RPCs named ``Decode*`` or ``Estimate*`` (decoding and estimates: reads by nature, granted to
#: analysts by the rules above) need analyst or admin without being listed one by one.
_READ_PREFIXES: Final = ("/ldp.v1.Analyst/Decode", "/ldp.v1.Analyst/Estimate")

#: Services callable without a token: standard gRPC health checking and server reflection.
PUBLIC_SERVICES: Final = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)
_PROTECTED_PACKAGE: Final = "ldp."


def required_roles(method: str) -> frozenset[Role] | None:
    """Roles that may call ``method`` (``/package.Service/Method``); None if it needs no token.

    ``ldp.*`` RPCs not in :data:`METHOD_ROLES` need admin, except ``Analyst.Decode*`` and
    ``Analyst.Estimate*`` (analyst). Other services are public only if listed in :data:`PUBLIC_SERVICES`;
    anything else (not served by this server) also needs admin.
    """
    roles = METHOD_ROLES.get(method)
    if roles is not None:
        return roles
    if method.startswith(_READ_PREFIXES):
        return _READ
    service = method.lstrip("/").partition("/")[0]
    if service in PUBLIC_SERVICES and not service.startswith(_PROTECTED_PACKAGE):
        return None
    return _MANAGE


def new_token() -> str:
    """A fresh token: the prefix and 32 bytes from the OS CSPRNG, base64url without padding."""
    raw = secrets.token_bytes(_TOKEN_BYTES)
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def token_digest(token: str) -> bytes:
    """SHA-256 of the token's UTF-8 bytes: what the database stores."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token_record(
    role: Role | str,
    *,
    name: str = "",
    campaigns: Iterable[str] | None = None,
    now_unix_ms: int | None = None,
) -> tuple[str, TokenRecord]:
    """A new token and the record to store for it (the token itself is returned once, never stored).

    Args:
        role: What the token may call.
        name: Free text for operators.
        campaigns: Reporter tokens only: the campaign ids the token may report to (None: any campaign).
    """
    try:
        r = Role(role)
    except ValueError:
        raise InvalidParameterError("role", role, f"one of {', '.join(x.value for x in Role)}") from None
    scope: tuple[str, ...] | None = None
    if campaigns is not None:
        scope = tuple(campaigns)
        if r is not Role.REPORTER:
            raise InvalidParameterError(
                "campaigns", list(scope), f"none for role {r.value!r} (only reporter tokens are scoped)"
            )
        for cid in scope:  # the rule of campaign ids, so that a scope can name only possible campaigns
            if not isinstance(cid, str) or not 1 <= len(cid) <= MAX_ID_LENGTH:
                raise InvalidParameterError(
                    "campaigns", cid, f"campaign ids of 1 to {MAX_ID_LENGTH} Unicode code points"
                )
    token = new_token()
    record = TokenRecord(
        token_id="tok_" + secrets.token_hex(6),
        role=r.value,
        name=name,
        sha256=token_digest(token),
        created_unix_ms=time.time_ns() // 1_000_000 if now_unix_ms is None else now_unix_ms,
        campaigns=scope,
    )
    return token, record


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """The caller a valid token identifies (never stored with reports).

    ``campaigns``: the campaign ids a scoped token is limited to, or None for every campaign.
    """

    token_id: str
    role: Role
    name: str
    campaigns: frozenset[str] | None = None

    def check_campaign(self, campaign_id: str) -> None:
        """Raises PermissionDeniedError if this token is limited to other campaigns."""
        if self.campaigns is not None and campaign_id not in self.campaigns:
            raise PermissionDeniedError(
                f"token {self.token_id!r} is limited to {len(self.campaigns)} campaign(s) and"
                f" {shown(campaign_id)} is not one of them"
            )


def _bearer(metadata: Iterable[tuple[str, Any]] | None) -> str:
    """The token of the ``authorization: Bearer`` metadata, or UnauthenticatedError."""
    values = [v for k, v in (metadata or ()) if k == "authorization"]
    if len(values) != 1:
        raise UnauthenticatedError(
            "this server needs an access token: send the metadata 'authorization: Bearer <token>'"
            + (" once (it came more than once)" if values else "")
        )
    value = values[0]
    if not isinstance(value, str) or len(value) > _MAX_HEADER_CHARS:
        raise UnauthenticatedError("malformed 'authorization' metadata: expected 'Bearer <token>'")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthenticatedError("malformed 'authorization' metadata: expected 'Bearer <token>'")
    return token.strip()


class Authenticator:
    """Checks the token and role of each call against the valid tokens it was last given.

    Args:
        tokens: The stored token records (valid and revoked). Any record, even a revoked one, switches
            authentication on: a token was created, so the database needs tokens from then on.
        required: Force authentication on even with no token (every call then fails); the server passes
            the database's persisted ``auth_required``.
    """

    def __init__(self, tokens: Iterable[TokenRecord] = (), *, required: bool = False) -> None:
        self._by_digest: dict[bytes, TokenRecord] = {}
        self._required = required
        self.load(tokens)

    @property
    def required(self) -> bool:
        """Whether calls need a token (module docstring, "When is authentication on")."""
        return self._required

    @property
    def active_tokens(self) -> int:
        """Number of valid (not revoked) tokens."""
        return len(self._by_digest)

    def load(self, tokens: Iterable[TokenRecord]) -> bool:
        """Replace the known tokens; returns True if authentication was just switched on."""
        records = list(tokens)
        self._by_digest = {t.sha256: t for t in records if not t.revoked}
        if records and not self._required:
            self._required = True
            return True
        return False

    def authenticate(self, metadata: Iterable[tuple[str, Any]] | None) -> Principal | None:
        """The caller, or None when authentication is off.

        Raises:
            UnauthenticatedError: Authentication is on and the call has no valid token.
        """
        if not self._required:
            return None
        token = _bearer(metadata)
        digest = token_digest(token)
        record = self._by_digest.get(digest)
        if record is None or not hmac.compare_digest(record.sha256, digest):
            raise UnauthenticatedError("invalid or revoked access token")
        scope = None if record.campaigns is None else frozenset(record.campaigns)
        return Principal(token_id=record.token_id, role=Role(record.role), name=record.name, campaigns=scope)

    def check(self, method: str, metadata: Iterable[tuple[str, Any]] | None) -> Principal | None:
        """Authenticate and authorize one call; returns the caller (None: public RPC or auth off).

        Raises:
            UnauthenticatedError: No valid token (authentication on, RPC not public).
            PermissionDeniedError: The token's role may not call ``method``.
        """
        roles = required_roles(method)
        if roles is None:
            return None
        principal = self.authenticate(metadata)
        if principal is not None and principal.role not in roles:
            allowed = " or ".join(sorted(r.value for r in roles))
            raise PermissionDeniedError(
                f"token {principal.token_id!r} has role {principal.role.value!r}; {method} needs {allowed}"
            )
        return principal
