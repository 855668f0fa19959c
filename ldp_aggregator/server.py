"""Wiring: a grpc.aio server around the servicers, with security, operations and graceful shutdown.

``serve`` is what ``ldp-aggregator serve`` runs; :class:`BackgroundServer` runs the same server on a
thread of the calling process (tests, the demo, the simulator). One server is:

* the ``ldp.v1`` Collector and Analyst servicers behind :class:`~ldp_aggregator.guard.Guard` (tokens and
  roles, per-token rate limits, size limits, message parsing);
* TLS when a certificate and key are configured, mutual TLS when a client CA is too;
* standard gRPC health checking (``grpc.health.v1.Health``: ``""``, ``ldp.v1.Collector`` and
  ``ldp.v1.Analyst``; the Collector turns NOT_SERVING while the store cannot commit and back when it can,
  and everything turns NOT_SERVING at shutdown) and server reflection under both
  ``grpc.reflection.v1alpha`` and ``grpc.reflection.v1``, all without a token;
* connection limits: the port is bound exclusively (no ``SO_REUSEPORT``: a second server on the same
  port fails to start instead of sharing it), at most ``max_connections`` connections (kept below the
  open-file limit, whose soft value ``serve`` raises to the hard one), ``max_concurrent_streams`` calls
  per connection, ``max_concurrent_rpcs`` calls in all; a connection that has not finished its handshake
  within ``handshake_timeout_s`` or has made no call for ``idle_timeout_s`` is closed, and keepalive pings
  detect dead peers during calls;
* Prometheus metrics on a separate HTTP port bound to 127.0.0.1 (:mod:`ldp_aggregator.metrics`);
* background tasks: token refresh (revocations take effect within ``token_refresh_s``; an unknown token
  triggers an immediate re-read, so a new token works at once) and the raw-report retention purge.

Authentication is on once the database has ever held a token (:mod:`ldp_aggregator.auth`). Before that
the server refuses any non-loopback listen address and logs that authentication is off.

Shutdown (SIGINT/SIGTERM): health turns NOT_SERVING, new RPCs are refused, in-flight RPCs finish (each waits
for its commit) within ``grace_s``, then the store drains and closes. Nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import math
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_aggregator.auth import Authenticator
from ldp_aggregator.guard import Guard
from ldp_aggregator.logs import log_event
from ldp_aggregator.metrics import Metrics
from ldp_aggregator.ratelimit import Limits, RateLimiter
from ldp_aggregator.service import Aggregator, AnalystServicer, CollectorServicer, open_store
from ldp_aggregator.store import CampaignStore
from ldp_client._proto.ldp.v1 import collector_pb2, collector_pb2_grpc
from ldp_client.errors import InvalidParameterError, LdpError

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_LISTEN",
    "REFLECTION_V1_SERVICE",
    "AddressInUseError",
    "BackgroundServer",
    "ServerConfig",
    "is_loopback",
    "raise_open_file_limit",
    "run_server",
    "serve",
]

log = logging.getLogger("ldp_aggregator")

DEFAULT_DB = Path("ldp-data") / "ldp.sqlite3"
DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_COLLECTOR = collector_pb2.DESCRIPTOR.services_by_name["Collector"].full_name
_ANALYST = analyst_pb2.DESCRIPTOR.services_by_name["Analyst"].full_name
_HEALTH_POLL_S = 0.5
# The asyncio health servicer (grpcio-health-checking >= 1.50); the type stubs only know the sync one.
_AioHealthServicer: Any = health.aio.HealthServicer  # type: ignore[attr-defined]
_AioReflectionServicer: Any = reflection.aio.ReflectionServicer  # type: ignore[attr-defined]
#: The stable reflection service; grpcio-reflection only serves v1alpha, whose messages are identical.
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"
# File descriptors kept free for the store (each SQLite connection holds the database, WAL and
# shared-memory files), the metrics port, logs and gRPC's own; the rest may be client connections.
_FD_RESERVE = 128
_MIN_CONNECTIONS = 16


class AddressInUseError(LdpError):
    """The listen address is taken (another process, perhaps another aggregator, listens on it)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (of a HOST:PORT listen address) is a loopback address: 127.0.0.0/8, ::1, localhost."""
    h = host.strip().removeprefix("[").removesuffix("]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
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


def _read_pem(field_name: str, path: Path) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidParameterError(field_name, str(path), f"a readable PEM file ({exc.strerror})") from None
    if b"-----BEGIN " not in data:
        raise InvalidParameterError(field_name, str(path), "a PEM file (no '-----BEGIN' line found)")
    return data


def _check_address_free(listen: str) -> None:
    """Fail with one clear line if ``listen`` cannot be bound: in use, not of this host, unresolvable.

    gRPC binds with ``SO_REUSEPORT`` by default, which let a second server share the port with the first
    (calls then alternated between two databases). The server turns that off; this probe runs first, for
    every address the host resolves to, so that a taken address is reported plainly, before the store is
    opened, and also when only one of several addresses (``localhost``: 127.0.0.1 and ::1) is taken. An
    address of a family this host lacks (::1 without IPv6) is skipped, as gRPC skips it, unless none is left.
    """
    host, _, port_text = listen.rpartition(":")
    port = int(port_text)
    if port == 0:
        return  # any free port
    name = host.removeprefix("[").removesuffix("]")
    try:
        infos = socket.getaddrinfo(name or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidParameterError(
            "listen", listen, f"a HOST:PORT whose host resolves ({exc.strerror})"
        ) from None
    unusable: list[OSError] = []
    for family, kind, proto, _, address in infos:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError as exc:  # e.g. no IPv6 in this kernel
            unusable.append(exc)
            continue
        with probe:
            try:
                # As gRPC does: SO_REUSEADDR binds over connections in TIME_WAIT, never over a listener.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # "::" is dual-stack in gRPC: probe the IPv4 side too
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(name not in ("", "::")))
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise AddressInUseError(
                        f"listen={listen}: address already in use (another process, perhaps another"
                        " ldp-aggregator, listens on it): stop it or choose another --listen port"
                    ) from None
                if exc.errno == errno.EACCES:
                    raise InvalidParameterError(
                        "listen", listen, "a port this user may bind (ports below 1024 need privileges)"
                    ) from None
                unusable.append(exc)
    if unusable and len(unusable) == len(infos):
        first = unusable[0]
        if first.errno == errno.EADDRNOTAVAIL:
            raise InvalidParameterError(
                "listen", listen, "an address of this host (this one is not assigned to it)"
            )
        raise InvalidParameterError("listen", listen, f"an address this host can bind ({first.strerror})")


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit; returns (soft, hard) as they are now.

    Every client connection is a file descriptor: with a low soft limit (1024 or less is common) a flood
    of idle sockets would exhaust it and stop the server from accepting anyone (observed: 300 silent
    sockets under a 256-descriptor limit froze new clients for a minute).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return (-1, -1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Some systems refuse "infinity" as the soft value: ask for 2^20 then.
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # keep the soft limit; max_connections is lowered to fit it
    return soft, hard


def _connection_cap(config: ServerConfig) -> int:
    """``max_connections``, lowered to fit the open-file limit (minus a reserve) when that is smaller."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return config.max_connections
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return config.max_connections
    return max(_MIN_CONNECTIONS, min(config.max_connections, soft - _FD_RESERVE))


def _grpc_options(config: ServerConfig, max_connections: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.so_reuseport", 0),  # exclusive port: a second server fails to bind instead of sharing it
        ("grpc.max_receive_message_length", config.max_message_bytes),
        # Answers can carry a whole accumulator (ExportCampaign): room for the largest one allowed.
        ("grpc.max_send_message_length", 64 * 1024 * 1024 + config.limits.max_accumulator_bytes),
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        ("grpc.server_handshake_timeout_ms", int(config.handshake_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(config.idle_timeout_s * 1000)),
        ("grpc.keepalive_time_ms", int(config.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", 20_000),
    ]


def _register_reflection_v1_descriptor() -> None:
    """Put ``grpc/reflection/v1/reflection.proto`` in the default pool (v1alpha's, renamed), once.

    Then a v1 client can also describe the reflection service itself, as it can every other service.
    """
    pool = descriptor_pool.Default()
    name = "grpc/reflection/v1/reflection.proto"
    try:
        pool.FindFileByName(name)
        return
    except KeyError:
        pass
    file_proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file_proto)
    old, new = "grpc.reflection.v1alpha", "grpc.reflection.v1"
    file_proto.name, file_proto.package = name, new
    file_proto.options.Clear()
    for message in file_proto.message_type:
        for f in message.field:
            if f.HasField("type_name"):  # (assigning "" would mark a scalar field as typed)
                f.type_name = f.type_name.replace(f".{old}.", f".{new}.")
    for service in file_proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(f".{old}.", f".{new}.")
            method.output_type = method.output_type.replace(f".{old}.", f".{new}.")
    try:
        pool.Add(file_proto)
    except (TypeError, ValueError) as exc:  # e.g. another build of it is there: v1 calls still work
        log.warning("could not describe %s under reflection v1: %s", name, exc)


def _enable_reflection(server: grpc.aio.Server, service_names: tuple[str, ...]) -> None:
    """Server reflection under ``grpc.reflection.v1alpha`` and ``grpc.reflection.v1`` (one servicer).

    The two versions' messages are the same on the wire (v1 only renamed the package), so v1 is served by
    the v1alpha servicer through a generic handler with the v1alpha message classes.
    """
    _register_reflection_v1_descriptor()
    names = (*service_names, reflection.SERVICE_NAME, REFLECTION_V1_SERVICE)
    servicer = _AioReflectionServicer(names)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for service in (reflection.SERVICE_NAME, REFLECTION_V1_SERVICE):
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )


def _check_tls_files(cert: Path, key: Path, client_ca: Path | None) -> None:
    """Load the files as OpenSSL will, so that a key that does not match its certificate (or an unusable
    file) is named here: gRPC would only report that the address could not be bound (issue 13)."""
    import ssl

    def no_password() -> str:
        raise InvalidParameterError(
            "tls_key", str(key), "an unencrypted PEM private key (gRPC takes no passphrase)"
        )

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(cert), str(key), password=no_password)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            raise InvalidParameterError(
                "tls_key",
                str(key),
                f"the private key of the certificate in tls_cert={str(cert)!r} (this key does not match it)",
            ) from None
        raise InvalidParameterError(
            "tls_cert/tls_key", f"{cert}, {key}", f"a PEM certificate chain and its PEM private key ({exc})"
        ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(client_ca))
        except ssl.SSLError as exc:
            raise InvalidParameterError(
                "tls_client_ca", str(client_ca), f"PEM CA certificates ({exc})"
            ) from None


def _server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    if config.tls_cert is None or config.tls_key is None:
        return None
    cert = _read_pem("tls_cert", config.tls_cert)
    key = _read_pem("tls_key", config.tls_key)
    ca = _read_pem("tls_client_ca", config.tls_client_ca) if config.tls_client_ca is not None else None
    _check_tls_files(config.tls_cert, config.tls_key, config.tls_client_ca)
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


@dataclass(kw_only=True, eq=False)
class _Running:
    """One started server and what it owns."""

    server: grpc.aio.Server
    aggregator: Aggregator
    port: int
    authenticator: Authenticator
    metrics: Metrics
    health: Any  # grpc_health's asyncio HealthServicer
    max_connections: int
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


async def _reload_tokens(store: CampaignStore, auth: Authenticator) -> None:
    """Re-read the stored tokens into ``auth`` (periodically, and at once for an unknown token).

    Raises:
        LdpError: the database cannot be read now (the last known tokens stay in force).
    """
    tokens = await asyncio.to_thread(store.list_tokens)
    before = auth.active_tokens
    if auth.load(tokens):
        log_event(log, "auth_enabled", level=logging.WARNING, tokens=auth.active_tokens,
                  note="a token was created: every ldp.v1 call now needs one")  # fmt: skip
    elif auth.active_tokens != before:
        log_event(log, "tokens_reloaded", tokens=auth.active_tokens)
        if auth.active_tokens == 0:
            _log_no_valid_tokens()


async def _refresh_tokens(store: CampaignStore, auth: Authenticator, every_s: float) -> None:
    warned = False
    while True:
        await asyncio.sleep(every_s)
        try:
            await _reload_tokens(store, auth)
        except LdpError as exc:
            if not warned:  # keep the last known tokens; say so once per outage
                log_event(log, "token_refresh_failed", level=logging.WARNING, error=str(exc))
                warned = True
            continue
        warned = False


async def _purge_loop(store: CampaignStore, metrics: Metrics, days: float, every_s: float) -> None:
    while True:
        cutoff = int((time.time() - days * 86400.0) * 1000)
        try:
            deleted = await asyncio.to_thread(store.purge_raw, cutoff)
        except LdpError as exc:
            log_event(log, "raw_purge_failed", level=logging.WARNING, error=str(exc))
        else:
            metrics.raw_purged.inc(deleted)
            log_event(log, "raw_purged", rows=deleted, older_than_days=days)
        await asyncio.sleep(every_s)


async def _watch_store(store: CampaignStore, servicer: Any) -> None:
    """Collector health follows the store: NOT_SERVING while its last commit failed, else SERVING."""
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    state = serving
    while True:
        await asyncio.sleep(_HEALTH_POLL_S)
        new_state = not_serving if store.stats().last_commit_failed else serving
        if new_state != state:
            state = new_state
            for name in ("", _COLLECTOR):
                await servicer.set(name, state)
            log_event(log, "health_changed", level=logging.WARNING, service=_COLLECTOR,
                      status=health_pb2.HealthCheckResponse.ServingStatus.Name(state))  # fmt: skip


async def _start(config: ServerConfig) -> _Running:
    # Before the store: a taken address must not create or lock a database.
    _check_address_free(config.listen)
    store = open_store(config.store_location, retain_raw=config.retain_raw)
    metrics = Metrics()
    try:
        authenticator = Authenticator(
            await asyncio.to_thread(store.list_tokens),
            required=await asyncio.to_thread(store.auth_required),
        )
        if not authenticator.required and not is_loopback(config.host):
            raise InvalidParameterError(
                "listen",
                config.listen,
                "a loopback address (127.0.0.1, [::1] or localhost) while the database holds no access"
                " token: create tokens first (`ldp-aggregator token create --role ROLE --db PATH`, or"
                " `--store URL`)",
            )
        credentials = _server_credentials(config)
        metrics.bind_store(store)
        metrics.auth_required.set_function(lambda: float(authenticator.required))
        aggregator = Aggregator(
            store, metrics=metrics, max_accumulator_bytes=config.limits.max_accumulator_bytes
        )
        guard = Guard(
            authenticator,
            RateLimiter(config.limits),
            metrics,
            reload_tokens=lambda: _reload_tokens(store, authenticator),
        )
        max_connections = _connection_cap(config)
        server = grpc.aio.server(
            interceptors=[guard],
            options=_grpc_options(config, max_connections),
            maximum_concurrent_rpcs=config.max_concurrent_rpcs,
        )
        collector_pb2_grpc.add_CollectorServicer_to_server(CollectorServicer(aggregator), server)
        analyst_pb2_grpc.add_AnalystServicer_to_server(AnalystServicer(aggregator), server)
        health_servicer = _AioHealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        _enable_reflection(server, (_COLLECTOR, _ANALYST, health.SERVICE_NAME))
        requested_port = int(config.listen.rpartition(":")[2])
        try:
            if credentials is not None:
                port = server.add_secure_port(config.listen, credentials)
            else:
                port = server.add_insecure_port(config.listen)
        except RuntimeError:
            # The probe found the address free, so gRPC refused for another reason.
            raise InvalidParameterError(
                "listen",
                config.listen,
                "an address gRPC can listen on (the address is free, so with TLS check that tls_key is"
                " the private key of tls_cert)"
                if credentials is not None
                else "an address gRPC can listen on (it was free a moment ago: retry)",
            ) from None
        if port == 0 or requested_port not in (0, port):
            raise AddressInUseError(f"listen={config.listen}: gRPC could not bind it (bound port {port})")
        # Metrics before the gRPC server starts: a busy metrics port then stops nothing already running.
        if config.metrics_port is not None:
            try:
                metrics.serve(config.metrics_port)
            except OSError as exc:
                raise InvalidParameterError(
                    "metrics_port",
                    config.metrics_port,
                    f"a free TCP port on 127.0.0.1 ({exc.strerror or exc})",
                ) from None
        for name in ("", _COLLECTOR, _ANALYST):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        await server.start()
        running = _Running(
            server=server,
            aggregator=aggregator,
            port=port,
            authenticator=authenticator,
            metrics=metrics,
            health=health_servicer,
            max_connections=max_connections,
        )
    except BaseException:
        metrics.stop()
        await asyncio.to_thread(store.close)
        raise
    running.tasks = [
        asyncio.create_task(_refresh_tokens(store, authenticator, config.token_refresh_s)),
        asyncio.create_task(_watch_store(store, health_servicer)),
    ]
    if config.raw_retention_days is not None and config.retain_raw:
        running.tasks.append(
            asyncio.create_task(
                _purge_loop(store, metrics, config.raw_retention_days, config.purge_interval_s)
            )
        )
    _log_started(config, running)
    return running


def _log_started(config: ServerConfig, running: _Running) -> None:
    tls = "mutual" if config.tls_client_ca is not None else ("on" if config.tls_cert is not None else "off")
    where: dict[str, str] = (
        {"store": running.aggregator.store.location} if config.store else {"db": str(config.db)}
    )
    log_event(
        log,
        "server_started",
        listen=f"{config.host}:{running.port}",
        **where,  # type: ignore[arg-type]  # fields are free-form; mypy reads the keyword-only level
        tls=tls,
        auth="on" if running.authenticator.required else "off",
        tokens=running.authenticator.active_tokens,
        metrics_port=running.metrics.port,
        retain_raw=config.retain_raw,
        raw_retention_days=config.raw_retention_days,
        max_connections=running.max_connections,
        max_accumulator_bytes=config.limits.max_accumulator_bytes,
    )
    if not running.authenticator.required:
        log_event(
            log,
            "auth_disabled",
            level=logging.WARNING,
            note="no access token in the database: authentication is OFF, listening on loopback only;"
            " create tokens with `ldp-aggregator token create` to serve other hosts",
        )
    else:
        if running.authenticator.active_tokens == 0:
            _log_no_valid_tokens()
        if config.tls_cert is None and not is_loopback(config.host):
            log_event(
                log,
                "tls_disabled",
                level=logging.WARNING,
                note="tokens travel in clear text over the network: configure tls_cert and tls_key",
            )


def _log_no_valid_tokens() -> None:
    log_event(
        log,
        "no_valid_tokens",
        level=logging.WARNING,
        note="authentication stays on (a token was created once) but every token is revoked: all ldp.v1"
        " calls are refused until `ldp-aggregator token create` makes a new one",
    )


async def _shutdown(running: _Running, grace_s: float) -> None:
    # Tell load balancers first, stop the background tasks, stop accepting new RPCs and let the in-flight
    # ones finish (they wait for their commit), then drain whatever is still queued in the store and close.
    await running.health.enter_graceful_shutdown()
    for task in running.tasks:
        task.cancel()
    for task in running.tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await running.server.stop(grace_s)
    await asyncio.to_thread(running.aggregator.store.close)
    running.metrics.stop()


async def serve(config: ServerConfig, *, on_ready: Callable[[int], None] | None = None) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully (raises the open-file limit first)."""
    raise_open_file_limit()
    running = await _start(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if on_ready is not None:
        on_ready(running.port)
    await stop.wait()
    log_event(log, "shutting_down", note="draining in-flight requests and committing")
    await _shutdown(running, config.grace_s)
    log_event(log, "stopped", note="clean shutdown")


def run_server(config: ServerConfig, *, on_ready: Callable[[int], None] | None = None) -> None:
    """Run :func:`serve` to completion on uvloop when it is installed, else on the standard asyncio loop.

    uvloop (a dependency of the ``aggregator`` extra) cuts the event loop's own per-call overhead: on this
    project's 2-core benchmark it raised single-report calls from ~1,350/s to ~1,550-1,950/s
    (``bench/RESULTS.md``). Behaviour is the same on either loop.
    """
    try:
        import uvloop
    except ImportError:  # e.g. Windows, or installed without the extra
        asyncio.run(serve(config, on_ready=on_ready))
    else:
        uvloop.run(serve(config, on_ready=on_ready))


class BackgroundServer:
    """The aggregator on its own event-loop thread in this process; ``with`` starts and stops it."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.port = 0
        self.aggregator: Aggregator | None = None
        self.metrics: Metrics | None = None
        self.authenticator: Authenticator | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ldp-aggregator", daemon=True)
        self._running: _Running | None = None

    @property
    def target(self) -> str:
        return f"{self.config.host}:{self.port}"

    @property
    def metrics_port(self) -> int | None:
        """The port serving /metrics on 127.0.0.1, if any."""
        return None if self.metrics is None else self.metrics.port

    def start(self) -> BackgroundServer:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(_start(self.config), self._loop)
        try:
            running = fut.result(timeout=30)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
            raise
        self._running = running
        self.aggregator, self.port = running.aggregator, running.port
        self.metrics, self.authenticator = running.metrics, running.authenticator
        return self

    def stop(self) -> None:
        if self._running is not None:
            fut = asyncio.run_coroutine_threadsafe(_shutdown(self._running, self.config.grace_s), self._loop)
            fut.result(timeout=self.config.grace_s + 60)
            self._running = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
