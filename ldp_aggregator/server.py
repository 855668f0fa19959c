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
* the read-only web view on a port of its own when ``web_port`` is set (:mod:`ldp_aggregator.web`): in
  this event loop, with the same TLS and the same :class:`Authenticator`;
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
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_aggregator.auth import Authenticator
from ldp_aggregator.guard import Guard
from ldp_aggregator.logs import log_event
from ldp_aggregator.metrics import Metrics
from ldp_aggregator.ratelimit import RateLimiter
from ldp_aggregator.server_config import (
    DEFAULT_DB,
    DEFAULT_LISTEN,
    DEFAULT_MAX_MESSAGE_BYTES,
    ServerConfig,
    is_loopback,
)
from ldp_aggregator.service import Aggregator, open_store
from ldp_aggregator.servicers import AnalystServicer, CollectorServicer
from ldp_aggregator.store import CampaignStore
from ldp_aggregator.transport import (
    REFLECTION_V1_SERVICE,
    AddressInUseError,
    _check_address_free,
    _connection_cap,
    _enable_reflection,
    _grpc_options,
    _server_credentials,
    raise_open_file_limit,
)
from ldp_aggregator.web import WebView, web_ssl_context
from ldp_client._proto.ldp.v1 import collector_pb2, collector_pb2_grpc
from ldp_client.errors import InvalidParameterError, LdpError

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_MESSAGE_BYTES",
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

_COLLECTOR = collector_pb2.DESCRIPTOR.services_by_name["Collector"].full_name
_ANALYST = analyst_pb2.DESCRIPTOR.services_by_name["Analyst"].full_name
_HEALTH_POLL_S = 0.5
# The asyncio health servicer (grpcio-health-checking >= 1.50); the type stubs only know the sync one.
_AioHealthServicer: Any = health.aio.HealthServicer  # type: ignore[attr-defined]


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
    web: WebView | None = None
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
    web: WebView | None = None
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
        limiter = RateLimiter(config.limits)  # shared with the web view: one budget of failed tokens
        guard = Guard(
            authenticator,
            limiter,
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
        web = await _start_web(config, aggregator, authenticator, limiter)
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
            web=web,
        )
    except BaseException:
        if web is not None:
            await web.stop()
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


async def _start_web(
    config: ServerConfig, aggregator: Aggregator, authenticator: Authenticator, limiter: RateLimiter
) -> WebView | None:
    """The web view on ``web_host:web_port`` (None when off); the listen rule of the gRPC port holds."""
    if config.web_port is None:
        return None
    if not authenticator.required and not is_loopback(config.web_host):
        raise InvalidParameterError(
            "web_host",
            config.web_host,
            "a loopback address (127.0.0.1, ::1 or localhost) while the database holds no access token:"
            " create tokens first (`ldp-aggregator token create --role ROLE --db PATH`)",
        )
    context = None
    if config.tls_cert is not None and config.tls_key is not None:
        ca = None if config.tls_client_ca is None else str(config.tls_client_ca)
        context = web_ssl_context(str(config.tls_cert), str(config.tls_key), ca)
    web = WebView(
        aggregator=aggregator,
        authenticator=authenticator,
        limiter=limiter,
        ssl_context=context,
        host=config.web_host,
    )
    await web.start(config.web_port)
    return web


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
        web=None if running.web is None else running.web.url,
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
    if running.web is not None:
        await running.web.stop()
    for task in running.tasks:
        task.cancel()
    for task in running.tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await running.server.stop(grace_s)
    await asyncio.to_thread(running.aggregator.store.close)
    running.metrics.stop()


async def serve(
    config: ServerConfig,
    *,
    on_ready: Callable[[int], None] | None = None,
    on_web: Callable[[str], None] | None = None,
) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully (raises the open-file limit first).

    ``on_ready`` gets the gRPC port once it serves; ``on_web`` then the web view's URL, if it is on.
    """
    raise_open_file_limit()
    running = await _start(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if on_ready is not None:
        on_ready(running.port)
    if on_web is not None and running.web is not None:
        on_web(running.web.url)
    await stop.wait()
    log_event(log, "shutting_down", note="draining in-flight requests and committing")
    await _shutdown(running, config.grace_s)
    log_event(log, "stopped", note="clean shutdown")


def run_server(
    config: ServerConfig,
    *,
    on_ready: Callable[[int], None] | None = None,
    on_web: Callable[[str], None] | None = None,
) -> None:
    """Run :func:`serve` to completion on uvloop when it is installed, else on the standard asyncio loop.

    uvloop (a dependency of the ``aggregator`` extra) cuts the event loop's own per-call overhead: on this
    project's 2-core benchmark it raised single-report calls from ~1,350/s to ~1,550-1,950/s
    (``bench/RESULTS.md``). Behaviour is the same on either loop.
    """
    try:
        import uvloop
    except ImportError:  # e.g. Windows, or installed without the extra
        asyncio.run(serve(config, on_ready=on_ready, on_web=on_web))
    else:
        uvloop.run(serve(config, on_ready=on_ready, on_web=on_web))


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
    def web_url(self) -> str | None:
        """The web view's address (``http(s)://HOST:PORT/``), if it is on."""
        return None if self._running is None or self._running.web is None else self._running.web.url

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
