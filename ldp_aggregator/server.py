"""Wiring: a grpc.aio server around the servicers, with graceful shutdown.

``serve`` is what ``ldp-aggregator serve`` runs: it stops accepting on SIGINT/SIGTERM, lets in-flight
RPCs finish (each waits for its commit), then drains and closes the store. :class:`BackgroundServer`
runs the same server on a thread of the calling process (tests, the demo, the simulator).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from ldp_aggregator.service import Aggregator, AnalystServicer, CollectorServicer, open_store
from ldp_client._proto.ldp.v1 import services_pb2_grpc
from ldp_client.errors import InvalidParameterError

__all__ = ["DEFAULT_DB", "DEFAULT_LISTEN", "BackgroundServer", "ServerConfig", "serve"]

log = logging.getLogger("ldp_aggregator")

DEFAULT_DB = Path("ldp-data") / "ldp.sqlite3"
DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """How to run the aggregator.

    Attributes:
        db: SQLite database file (created with its directory).
        listen: ``HOST:PORT``; port 0 picks a free port.
        retain_raw: Keep every batch's raw reports next to the accumulators.
        max_message_bytes: Larger requests are refused with RESOURCE_EXHAUSTED.
        grace_s: On shutdown, how long in-flight RPCs may take to finish.
    """

    db: Path = DEFAULT_DB
    listen: str = DEFAULT_LISTEN
    retain_raw: bool = True
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    grace_s: float = 10.0

    def __post_init__(self) -> None:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise InvalidParameterError("listen", self.listen, "HOST:PORT with a port in [0, 65535]")
        if not 1024 <= self.max_message_bytes <= 1 << 30:
            raise InvalidParameterError("max_message_bytes", self.max_message_bytes, "1 KiB to 1 GiB")


async def _start(config: ServerConfig) -> tuple[grpc.aio.Server, Aggregator, int]:
    store = open_store(str(config.db), retain_raw=config.retain_raw)
    aggregator = Aggregator(store)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ]
    )
    services_pb2_grpc.add_CollectorServicer_to_server(CollectorServicer(aggregator), server)
    services_pb2_grpc.add_AnalystServicer_to_server(AnalystServicer(aggregator), server)
    try:
        port = server.add_insecure_port(config.listen)
    except RuntimeError as exc:
        store.close()
        raise InvalidParameterError(
            "listen", config.listen, f"an address this host can bind ({exc})"
        ) from None
    await server.start()
    return server, aggregator, port


async def _shutdown(server: grpc.aio.Server, aggregator: Aggregator, grace_s: float) -> None:
    # Stop accepting new RPCs, let the in-flight ones finish (they wait for their commit), then drain
    # whatever is still queued in the store and close it.
    await server.stop(grace_s)
    await asyncio.to_thread(aggregator.store.close)


async def serve(config: ServerConfig, *, on_ready: Callable[[int], None] | None = None) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully."""
    server, aggregator, port = await _start(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host = config.listen.rpartition(":")[0]
    log.info("listening on %s:%d, database %s", host, port, config.db)
    if on_ready is not None:
        on_ready(port)
    await stop.wait()
    log.info("shutting down: draining in-flight requests and committing")
    await _shutdown(server, aggregator, config.grace_s)
    log.info("stopped cleanly")


class BackgroundServer:
    """The aggregator on its own event-loop thread in this process; ``with`` starts and stops it."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.port = 0
        self.aggregator: Aggregator | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ldp-aggregator", daemon=True)
        self._server: grpc.aio.Server | None = None

    @property
    def target(self) -> str:
        return f"{self.config.listen.rpartition(':')[0]}:{self.port}"

    def start(self) -> BackgroundServer:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(_start(self.config), self._loop)
        self._server, self.aggregator, self.port = fut.result(timeout=30)
        return self

    def stop(self) -> None:
        if self._server is not None and self.aggregator is not None:
            fut = asyncio.run_coroutine_threadsafe(
                _shutdown(self._server, self.aggregator, self.config.grace_s), self._loop
            )
            fut.result(timeout=self.config.grace_s + 60)
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
