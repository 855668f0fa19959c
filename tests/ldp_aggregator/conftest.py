"""Fixtures: a real aggregator on 127.0.0.1 (ephemeral port) over SQLite in a temp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_client._proto.ldp.v1 import services_pb2_grpc


class Running:
    def __init__(self, server: BackgroundServer) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(server.target)
        self.analyst = services_pb2_grpc.AnalystStub(self.channel)
        self.collector = services_pb2_grpc.CollectorStub(self.channel)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    config = ServerConfig(db=tmp_path / "ldp.sqlite3", listen="127.0.0.1:0", max_message_bytes=1 << 20)
    with BackgroundServer(config) as server:
        r = Running(server)
        yield r
        r.channel.close()
