"""Fixtures: a real aggregator on 127.0.0.1 (ephemeral port) over SQLite in a temp dir; PostgreSQL."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ldp_aggregator._proto.ldp.v1 import analyst_pb2_grpc
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import open_store
from ldp_aggregator.store import CampaignRecord, CampaignStore
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from ldp_client.params import GRRParams
from tests.ldp_aggregator.pg_cluster import (
    EXTERNAL_DSN_VAR,
    PgCluster,
    bindir,
    new_schema_url,
    unavailable_reason,
)


@pytest.fixture(autouse=True)
def _no_leaked_log_handler() -> Iterator[None]:
    """Undo ``configure_logging`` after a test that ran ``serve`` in process (through typer's CliRunner).

    It puts a handler on the root logger that writes to that run's stderr, a stream closed once the run
    is over; left there, every later in-process server's log line becomes a "Logging error" traceback
    in whatever a later test captures (seen in tests/simulations/test_access.py).
    """
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler and handler not in before:  # configure_logging's
            root.removeHandler(handler)
    root.setLevel(level)


class Running:
    def __init__(self, server: BackgroundServer) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(server.target)
        self.analyst = analyst_pb2_grpc.AnalystStub(self.channel)
        self.collector = collector_pb2_grpc.CollectorStub(self.channel)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    config = ServerConfig(db=tmp_path / "ldp.sqlite3", listen="127.0.0.1:0", max_message_bytes=1 << 20)
    with BackgroundServer(config) as server:
        r = Running(server)
        yield r
        r.channel.close()


# ---------------------------------------------------------------------------------------------- PostgreSQL


def _pg_unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail under CI, whose machines must have PostgreSQL."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a PostgreSQL server for the whole session: ``LDP_TEST_POSTGRES_DSN``, or a throwaway
    cluster started here (see tests/ldp_aggregator/pg_cluster.py)."""
    reason = unavailable_reason()
    if reason is not None:
        _pg_unavailable(reason)
    external = os.environ.get(EXTERNAL_DSN_VAR)
    if external:
        yield external
        return
    with PgCluster.running() as cluster:
        yield cluster.url


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A URL whose tables are this test's own (a fresh schema in the session's server)."""
    return new_schema_url(pg_server)


@pytest.fixture
def pg_cluster() -> Iterator[PgCluster]:
    """A PostgreSQL cluster of this test's own, which it may stop and restart."""
    reason = unavailable_reason()
    if reason is None and os.environ.get(EXTERNAL_DSN_VAR) and bindir() is None:
        reason = f"this test restarts PostgreSQL, which {EXTERNAL_DSN_VAR} does not allow"
    if reason is not None:
        _pg_unavailable(reason)
    with PgCluster.running() as cluster:
        yield cluster


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CampaignStore]:
    """Each store in turn (SQLite in a temp dir, PostgreSQL in a fresh schema), holding campaign ``c``
    (GRR, d=8, epsilon=1)."""
    params = GRRParams.from_epsilon(8, 1.0)
    location = (
        str(tmp_path / "ldp.sqlite3") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    )
    store = open_store(location)
    msg = wire.campaign_to_proto(campaign_id="c", params=params)
    store.create_campaign(
        CampaignRecord(
            campaign_id="c",
            mechanism=params.name,
            params_blob=msg.SerializeToString(),
            created_unix_ms=1,
        )
    )
    try:
        yield store
    finally:
        store.close()
