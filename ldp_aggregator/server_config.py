"""The aggregator server's configuration: :class:`ServerConfig` (checked when made) and its defaults."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from pathlib import Path

from ldp_aggregator.ratelimit import Limits
from ldp_client.errors import InvalidParameterError

__all__ = ["DEFAULT_DB", "DEFAULT_LISTEN", "DEFAULT_MAX_MESSAGE_BYTES", "ServerConfig", "is_loopback"]

DEFAULT_DB = Path("ldp-data") / "ldp.sqlite3"
DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def is_loopback(host: str) -> bool:
    """Whether ``host`` (of a HOST:PORT listen address) is a loopback address: 127.0.0.0/8, ::1, localhost."""
    h = host.strip().removeprefix("[").removesuffix("]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        return False


def _positive(name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise InvalidParameterError(name, value, "a finite number > 0")


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """How to run the aggregator.

    Attributes:
        db: SQLite database file (created with its directory); not used when ``store`` is set.
        store: PostgreSQL URL (``postgresql://USER@HOST[:PORT]/DATABASE``) of a database several
            replicas share (tables created or migrated at start), or None for the SQLite file ``db``.
        listen: ``HOST:PORT``; port 0 picks a free port. A non-loopback host needs an access token in the
            database.
        retain_raw: Keep every batch's raw reports next to the accumulators.
        max_message_bytes: Larger requests are refused with RESOURCE_EXHAUSTED.
        grace_s: On shutdown, how long in-flight RPCs may take to finish.
        tls_cert: PEM certificate chain of the server (with ``tls_key``: TLS).
        tls_key: PEM private key of ``tls_cert``.
        tls_client_ca: PEM CA certificates; when set, clients must present a certificate signed by one of
            them (mutual TLS). Needs ``tls_cert``.
        metrics_port: Prometheus metrics on ``127.0.0.1:metrics_port`` (0: a free port; None: off).
        web_port: The read-only web view (:mod:`ldp_aggregator.web`) on ``web_host:web_port`` (0: a free
            port; None: off), with this configuration's TLS and the same access tokens.
        web_host: The web view's address (default loopback; anything else needs an access token in the
            database, as ``listen`` does).
        raw_retention_days: Raw reports older than this are deleted by a periodic purge (None: kept).
        purge_interval_s: How often the retention purge runs.
        token_refresh_s: How often valid tokens are re-read from the database (revocations take effect
            within this time).
        limits: Per-token rate limits and size limits.
        max_connections: Most client connections at once; at start it is lowered to the open-file limit
            minus a reserve if that is smaller. Further connections are closed at once.
        max_concurrent_streams: Most calls in flight on one connection (HTTP/2 streams).
        max_concurrent_rpcs: Most calls in flight in all; more are refused with RESOURCE_EXHAUSTED.
        handshake_timeout_s: A connection that has not completed its TLS / HTTP/2 handshake by then is
            closed (silent sockets cannot hold connection slots for long).
        idle_timeout_s: A connection without any call for this long is closed (clients reconnect).
        keepalive_s: Interval of keepalive pings on connections with calls in flight; a peer that does not
            answer within 20 s is dropped.
    """

    db: Path = DEFAULT_DB
    store: str | None = None
    listen: str = DEFAULT_LISTEN
    retain_raw: bool = True
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    grace_s: float = 10.0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    metrics_port: int | None = None
    web_port: int | None = None
    web_host: str = "127.0.0.1"
    raw_retention_days: float | None = None
    purge_interval_s: float = 3600.0
    token_refresh_s: float = 1.0
    limits: Limits = field(default_factory=Limits)
    max_connections: int = 1000
    max_concurrent_streams: int = 100
    max_concurrent_rpcs: int = 10_000
    handshake_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    keepalive_s: float = 60.0

    def __post_init__(self) -> None:
        if self.store is not None:
            from ldp_aggregator.store_pg import check_url

            check_url(self.store)
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise InvalidParameterError("listen", self.listen, "HOST:PORT with a port in [0, 65535]")
        if not 1024 <= self.max_message_bytes <= 1 << 30:
            raise InvalidParameterError("max_message_bytes", self.max_message_bytes, "1 KiB to 1 GiB")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidParameterError(
                "tls_cert" if self.tls_cert is None else "tls_key",
                None,
                "both tls_cert and tls_key (a certificate and its private key), or neither",
            )
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise InvalidParameterError(
                "tls_client_ca",
                str(self.tls_client_ca),
                "only with tls_cert and tls_key (mutual TLS needs TLS)",
            )
        mp = self.metrics_port
        if mp is not None and (isinstance(mp, bool) or not isinstance(mp, int) or not 0 <= mp <= 65535):
            raise InvalidParameterError("metrics_port", mp, "a port in [0, 65535] (0: any free port) or None")
        wp = self.web_port
        if wp is not None and (isinstance(wp, bool) or not isinstance(wp, int) or not 0 <= wp <= 65535):
            raise InvalidParameterError("web_port", wp, "a port in [0, 65535] (0: any free port) or None")
        wh = self.web_host
        if (
            not isinstance(wh, str)
            or not wh
            or any(c.isspace() for c in wh)
            or (":" in wh and not _is_ipv6(wh))
        ):
            raise InvalidParameterError("web_host", wh, "a host name or IP address (IPv6 with or without [])")
        if self.raw_retention_days is not None:
            _positive("raw_retention_days", self.raw_retention_days)
        _positive("grace_s", self.grace_s)
        _positive("purge_interval_s", self.purge_interval_s)
        _positive("token_refresh_s", self.token_refresh_s)
        for name in ("handshake_timeout_s", "idle_timeout_s", "keepalive_s"):
            _positive(name, getattr(self, name))
        for name in ("max_connections", "max_concurrent_streams", "max_concurrent_rpcs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 30:
                raise InvalidParameterError(name, value, "an integer >= 1")
        if not isinstance(self.limits, Limits):
            raise InvalidParameterError("limits", self.limits, "a Limits")

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def store_location(self) -> str:
        """What :func:`~ldp_aggregator.service.open_store` opens: the PostgreSQL URL, else the file."""
        return self.store if self.store is not None else str(self.db)
