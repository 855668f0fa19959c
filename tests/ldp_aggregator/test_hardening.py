"""The service under an operator's and an attacker's first hour (issue 13): one owner per port, campaign
sizes checked before anything is allocated and created off the event loop, short error messages, one id
namespace, authentication that survives revoking every token, limits on failed authentication and on
connections, reflection v1, estimates that say why they are empty, and the unit of id lengths."""

from __future__ import annotations

import io
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, estimates_pb2
from ldp_aggregator.auth import Role, new_token_record
from ldp_aggregator.logs import JsonFormatter
from ldp_aggregator.ratelimit import RETRY_AFTER_METADATA, Limits
from ldp_aggregator.server import (
    REFLECTION_V1_SERVICE,
    AddressInUseError,
    BackgroundServer,
    ServerConfig,
)
from ldp_aggregator.servicers import MAX_STATUS_MESSAGE_CHARS, status_message
from ldp_aggregator.store import add_token, revoke_token
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2, collector_pb2_grpc, reports_pb2
from ldp_client.errors import MAX_SHOWN_CHARS, CampaignNotFoundError, InvalidReportError, shown
from ldp_client.params import GRRParams, RapporParams

PARAMS = GRRParams.from_epsilon(4, 1.0)
ROOT = Path(__file__).resolve().parents[2]


class Client:
    def __init__(self, server: BackgroundServer) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(server.target)
        self.analyst = analyst_pb2_grpc.AnalystStub(self.channel)
        self.collector = collector_pb2_grpc.CollectorStub(self.channel)

    def create(self, campaign_id: str, params: Any = PARAMS, **kw: Any) -> campaign_pb2.Campaign:
        msg = wire.campaign_to_proto(campaign_id=campaign_id, params=params, **kw)
        return self.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), timeout=30)

    def n_reports(self, campaign_id: str) -> int:
        req = estimates_pb2.EstimateRequest(campaign_id=campaign_id)
        return int(self.analyst.GetEstimate(req, timeout=30).n_reports)


def _batch(batch_id: str, n: int = 5, campaign_id: str = "c") -> reports_pb2.ReportBatch:
    return wire.batch_to_proto(
        campaign_id=campaign_id, batch_id=batch_id, params=PARAMS, columns=np.arange(n) % 4
    )


def _report(report_id: str, campaign_id: str = "c") -> reports_pb2.Report:
    return wire.report_to_proto(campaign_id=campaign_id, report_id=report_id, params=PARAMS, report=1)


def _error(fn: Any, request: Any, **kw: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn(request, timeout=30, **kw)
    return info.value


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    config = ServerConfig(db=tmp_path / "db.sqlite3", listen="127.0.0.1:0")
    with BackgroundServer(config) as server:
        c = Client(server)
        yield c
        c.channel.close()


# ---------------------------------------------------------------------------------------------- item 1


def _serve(db: Path, listen: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(db), "--listen", listen],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_server_on_the_same_port_fails_with_one_line(tmp_path: Path) -> None:
    first = _serve(tmp_path / "one" / "db.sqlite3", "127.0.0.1:0")
    try:
        assert first.stdout is not None
        port = int(first.stdout.readline().split()[-1])  # "ready on port N"
        for host in ("127.0.0.1", "localhost"):  # localhost: 127.0.0.1 is taken even if ::1 is free
            second = _serve(tmp_path / "two" / "db.sqlite3", f"{host}:{port}")
            try:
                out, err = second.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                second.kill()
                out, err = second.communicate()
                pytest.fail(f"a second server started on port {port} beside the first: {out!r}")
            assert second.returncode != 0
            lines = err.strip().splitlines()
            assert len(lines) == 1 and "address already in use" in lines[0] and str(port) in lines[0], err
            assert "ready" not in out
            assert not (tmp_path / "two").exists()  # refused before any database was created
        # In-process too, with the type a caller can catch.
        with pytest.raises(AddressInUseError, match="already in use"):
            BackgroundServer(ServerConfig(db=tmp_path / "three.sqlite3", listen=f"127.0.0.1:{port}")).start()
    finally:
        first.terminate()
        first.communicate(timeout=60)


# ---------------------------------------------------------------------------------------------- item 3


def test_the_largest_rappor_campaign_is_refused_before_any_allocation(client: Client) -> None:
    store = client.server.aggregator.store  # type: ignore[union-attr]
    zero_calls: list[str] = []
    real_zero = store._zero
    store._zero = lambda record: zero_calls.append(record.campaign_id) or real_zero(record)  # type: ignore[method-assign]
    biggest = RapporParams(k=4096, h=16, m=65536)  # the largest the proto allows: 2 GiB of counters
    err = _error(
        client.analyst.CreateCampaign,
        analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id="big", params=biggest)),
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.details() or ""
    assert "needs 2,148,008,000 bytes (2,048.5 MiB)" in details, details
    assert "max_accumulator_bytes=134,217,728" in details and "k=4096, h=16, m=65536" in details
    assert zero_calls == []  # nothing was allocated for it
    # The server still serves, and nothing was stored.
    assert list(client.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=10).campaigns) == []
    client.create("ok", RapporParams(k=128, h=2, m=64))
    assert zero_calls == ["ok"]


def test_the_accumulator_limit_is_configurable(tmp_path: Path) -> None:
    config = ServerConfig(
        db=tmp_path / "db.sqlite3", listen="127.0.0.1:0", limits=Limits(max_accumulator_bytes=65536)
    )
    with BackgroundServer(config) as server:
        c = Client(server)
        c.create("small", RapporParams(k=128, h=2, m=32))  # 33 KB
        err = _error(
            c.analyst.CreateCampaign,
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id="wide", params=RapporParams(k=128, h=2, m=128))
            ),
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "max_accumulator_bytes=65,536" in (err.details() or "")
        c.channel.close()


def test_creating_a_campaign_does_not_hold_up_other_calls(client: Client) -> None:
    """Event ordering, no clock: while a creation is stuck allocating its accumulator (held on an event),
    other calls (a read, and a batch that needs the store's writer) complete. On the event loop, or in
    the store's writer, the creation would block them until released."""
    client.create("c")
    store = client.server.aggregator.store  # type: ignore[union-attr]
    entered, release = threading.Event(), threading.Event()
    real_zero = store._zero

    def slow_zero(record: Any) -> Any:
        if record.campaign_id == "slow":
            entered.set()
            release.wait(60)
        return real_zero(record)

    store._zero = slow_zero  # type: ignore[method-assign]
    msg = wire.campaign_to_proto(campaign_id="slow", params=RapporParams(k=128, h=2, m=64))
    creating = client.analyst.CreateCampaign.future(
        analyst_pb2.CreateCampaignRequest(campaign=msg), timeout=120
    )
    try:
        assert entered.wait(30), "the creation never reached the allocation"
        # Both complete while the creation is still held.
        names = [
            c.id
            for c in client.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=15).campaigns
        ]
        assert names == ["c"]
        assert client.collector.Submit(_batch("during"), timeout=15).accepted == 5
        assert not creating.done()
    finally:
        release.set()
    assert creating.result().id == "slow"
    assert client.n_reports("c") == 5


# ---------------------------------------------------------------------------------------------- item 4


def test_error_messages_cut_long_client_values(client: Client) -> None:
    client.create("c")
    huge = "x" * 1_000_000
    calls = [
        (client.analyst.GetCampaign, collector_pb2.GetCampaignRequest(campaign_id=huge), "NOT_FOUND"),
        (client.collector.Submit, reports_pb2.ReportBatch(campaign_id="c", batch_id=huge, count=1,
                                                         grr_indices=b"\1\0\0\0"), "INVALID_ARGUMENT"),
        (client.collector.SubmitReport, reports_pb2.Report(campaign_id="c", report_id=huge, grr_index=1),
         "INVALID_ARGUMENT"),
        (client.analyst.CreateCampaign, analyst_pb2.CreateCampaignRequest(
            campaign=wire.campaign_to_proto(campaign_id="ok", params=PARAMS)), None),
    ]  # fmt: skip
    calls[3][1].campaign.id = huge
    for fn, request, code in calls:
        err = _error(fn, request)
        details = err.details() or ""
        # Never RESOURCE_EXHAUSTED (what a default client reports for a message too large to receive).
        assert err.code().name == (code or "INVALID_ARGUMENT"), (err.code(), details[:200])
        assert len(details) < 700 and "... (1000000 chars)" in details, details[:400]
    # The helper, and the backstop for any other long message.
    assert shown("abc") == "'abc'"
    assert shown("y" * 1000) == repr("y" * MAX_SHOWN_CHARS) + "... (1000 chars)"
    assert shown(list(range(100))).endswith("... (100 items)")
    assert str(CampaignNotFoundError("z" * 500)).endswith("... (500 chars) does not exist")
    assert "(70000 chars)" in str(InvalidReportError("batch_id", "b" * 70_000, "1 to 128"))
    long = status_message(RuntimeError("w" * 100_000))
    assert len(long) <= MAX_STATUS_MESSAGE_CHARS and long.endswith("(message cut from 100000 chars)")


# ---------------------------------------------------------------------------------------------- item 5


def test_report_ids_and_batch_ids_share_one_namespace_without_collisions(client: Client) -> None:
    client.create("c")
    assert client.collector.Submit(_batch("r:q1", 5), timeout=10).accepted == 5
    first = client.collector.SubmitReport(_report("q1"), timeout=10)
    assert (first.duplicate, first.accepted) == (False, 1)  # schema 2 answered duplicate and dropped it
    assert client.collector.SubmitReport(_report("q1"), timeout=10).duplicate  # its retry
    # One namespace: a batch with a report's id is the same submission (the contract), and vice versa.
    assert client.collector.Submit(_batch("q1", 5), timeout=10).duplicate
    assert client.collector.Submit(_batch("b2", 5), timeout=10).accepted == 5
    assert client.collector.SubmitReport(_report("b2"), timeout=10).duplicate
    assert client.n_reports("c") == 11


# ---------------------------------------------------------------------------------------------- item 6


def test_authentication_stays_on_after_every_token_is_revoked_and_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")).start().stop()
    _, record = new_token_record(Role.ADMIN)
    add_token(db, record)
    assert revoke_token(db, record.token_id)
    # Restarted with no valid token: still on, and the log says that every call is refused.
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ldp_aggregator")
    logger.addHandler(handler)
    try:
        server = BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")).start()
    finally:
        logger.removeHandler(handler)
    try:
        events = {json.loads(line)["event"] for line in stream.getvalue().splitlines()}
        assert "no_valid_tokens" in events and "auth_disabled" not in events
        assert server.authenticator is not None and server.authenticator.required
        c = Client(server)
        err = _error(c.analyst.ListCampaigns, analyst_pb2.ListCampaignsRequest())
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        c.channel.close()
    finally:
        server.stop()
    token, fresh = new_token_record(Role.ANALYST)
    add_token(db, fresh)
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
        c = Client(server)
        md = (("authorization", f"Bearer {token}"),)
        c.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=10, metadata=md)
        c.channel.close()


# ---------------------------------------------------------------------------------------------- item 7


def test_the_server_creates_its_database_files_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        db = tmp_path / "data" / "ldp.sqlite3"
        with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
            c = Client(server)
            c.create("c")
            c.collector.Submit(_batch("b"), timeout=10)
            modes = {p.name: p.stat().st_mode & 0o777 for p in db.parent.iterdir()}
            c.channel.close()
    finally:
        os.umask(old)
    assert db.parent.stat().st_mode & 0o777 == 0o700
    assert {"ldp.sqlite3", "ldp.sqlite3-wal", "ldp.sqlite3-shm", "ldp.sqlite3.lock"} <= set(modes)
    assert all(mode == 0o600 for mode in modes.values()), {k: oct(v) for k, v in modes.items()}


# ---------------------------------------------------------------------------------------------- item 9


def test_failed_authentication_is_limited_per_address_and_logged_without_secrets(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")).start().stop()
    token, record = new_token_record(Role.ANALYST)
    add_token(db, record)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ldp_aggregator")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    limits = Limits(failed_auth_per_s=0.01, failed_auth_burst=3)  # refills one call per 100 s
    try:
        with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0", limits=limits)) as server:
            c = Client(server)
            req = analyst_pb2.ListCampaignsRequest()
            bad = (("authorization", "Bearer ldp_guessed-token"),)
            codes = [_error(c.analyst.ListCampaigns, req, metadata=bad).code() for _ in range(3)]
            assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 3
            err = _error(c.analyst.ListCampaigns, req, metadata=bad)
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "without a valid access token" in (err.details() or "")
            assert int(dict(err.trailing_metadata() or ())[RETRY_AFTER_METADATA]) > 1000  # type: ignore[attr-defined]
            assert _error(c.analyst.ListCampaigns, req).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # A valid token from the same address is never refused for its neighbours' failures.
            c.analyst.ListCampaigns(req, timeout=10, metadata=(("authorization", f"Bearer {token}"),))
            c.channel.close()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    logs = stream.getvalue()
    events = [json.loads(line) for line in logs.splitlines()]
    assert any(e["event"] == "auth_failures" for e in events)
    for needle in ("ldp_guessed-token", token, "127.0.0.1:", "ipv4", "peer"):
        assert needle not in logs.replace(f"127.0.0.1:{server.port}", ""), needle


def test_a_flood_of_silent_sockets_does_not_lock_out_new_clients(tmp_path: Path) -> None:
    """300 connections that never speak, against a server limited to 256 open files: a new client gets
    in once the silent ones time out their handshake (1 s here), instead of waiting for a minute."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip("needs at least 1024 open files in the test process")
    config = tmp_path / "ldp.toml"
    config.write_text("[connections]\nhandshake_timeout_s = 1\n")

    serve = [sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(tmp_path / "db.sqlite3"),
             "--listen", "127.0.0.1:0", "--config", str(config)]  # fmt: skip
    # The server's soft limit starts below its hard limit (serve raises it). Set by a small interpreter
    # that then execs serve, not by a preexec_fn: that runs Python in the forked copy of this process,
    # whose gRPC (busy in other threads after earlier tests, e.g. on a pytest-xdist worker) may then
    # abort the child before its exec ("epoll_wait error: Bad file descriptor").
    limit_then_exec = (
        "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (200, 256));"
        " os.execv(sys.argv[1], sys.argv[1:])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", limit_then_exec, *serve],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    silent: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), (line, proc.stderr.read() if proc.stderr else "")
        port = int(line.split()[-1])
        limits_file = Path(f"/proc/{proc.pid}/limits")
        if limits_file.exists():
            row = next(r for r in limits_file.read_text().splitlines() if r.startswith("Max open files"))
            assert row.split()[3:5] == ["256", "256"], row  # soft raised to the hard limit
        for _ in range(300):
            silent.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            # wait_for_ready: the client reconnects while the silent sockets hold every slot.
            analyst_pb2_grpc.AnalystStub(ch).ListCampaigns(
                analyst_pb2.ListCampaignsRequest(), timeout=30, wait_for_ready=True
            )
    finally:
        for s in silent:
            s.close()
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "max_connections=128" in err  # 256 open files minus the reserve of 128


# ---------------------------------------------------------------------------------------------- item 17


def _reflect(channel: grpc.Channel, service: str, *requests: Any) -> list[Any]:
    call = channel.stream_stream(
        f"/{service}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    return list(call(iter(requests), timeout=10))


def test_reflection_is_served_under_v1_and_v1alpha(client: Client) -> None:
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    # v1alpha through grpcio-reflection's own client.
    db = ProtoReflectionDescriptorDatabase(client.channel)
    services = set(db.get_services())
    assert {"ldp.v1.Collector", "ldp.v1.Analyst", "grpc.health.v1.Health", REFLECTION_V1_SERVICE} <= services
    # Issue 14: the device's service and the analysts' live in two files (generated into the client and the
    # aggregator package); reflection names the file that declares each.
    assert db.FindFileContainingSymbol("ldp.v1.Collector").name == "ldp/v1/collector.proto"
    assert db.FindFileContainingSymbol("ldp.v1.Analyst").name == "ldp/v1/analyst.proto"
    # v1, as grpcurl and other current tools call it (the same messages under the stable package name).
    for service in ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"):
        (listed,) = _reflect(
            client.channel, service, reflection_pb2.ServerReflectionRequest(list_services="")
        )
        names = {s.name for s in listed.list_services_response.service}
        assert {"ldp.v1.Collector", "ldp.v1.Analyst", "grpc.reflection.v1.ServerReflection"} <= names
        for symbol, file_name in (
            ("ldp.v1.Analyst", "ldp/v1/analyst.proto"),
            ("grpc.reflection.v1.ServerReflection", "grpc/reflection/v1/reflection.proto"),
        ):
            (resp,) = _reflect(
                client.channel, service, reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
            )
            files = [
                descriptor_pb2.FileDescriptorProto.FromString(b)
                for b in resp.file_descriptor_response.file_descriptor_proto
            ]
            assert files and files[0].name == file_name, (service, symbol, resp)
            if symbol == "ldp.v1.Analyst":  # its imports come along, from both generated packages
                assert {f.name for f in files} >= {
                    "ldp/v1/analyst.proto",
                    "ldp/v1/collector.proto",
                    "ldp/v1/campaign.proto",
                    "ldp/v1/decode.proto",
                    "ldp/v1/estimates.proto",
                }, [f.name for f in files]
    analyst = next(s for s in files[0].service if s.name == "ServerReflection")
    assert analyst.method[0].input_type == ".grpc.reflection.v1.ServerReflectionRequest"


def test_an_estimate_says_why_rappor_items_are_empty(client: Client) -> None:
    params = RapporParams(k=32, h=2, m=4)
    client.create("bare", params)
    client.create("with", params, candidates=("a", "b"))
    est = client.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="bare"), timeout=10)
    assert not est.items
    assert "candidate" in est.note and "DecodeRappor" in est.note and "'bare'" in est.note
    exported = client.analyst.ExportCampaign(
        analyst_pb2.ExportCampaignRequest(campaign_id="bare"), timeout=10
    )
    assert exported.estimate.note == est.note
    # Candidates in the request or in the campaign: no note.
    req = estimates_pb2.EstimateRequest(campaign_id="bare", candidates=["a"])
    assert client.analyst.GetEstimate(req, timeout=10).note == ""
    assert (
        client.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="with"), timeout=10).note == ""
    )
    client.create("grr")
    assert client.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="grr"), timeout=10).note == ""


def test_id_lengths_count_unicode_code_points(client: Client) -> None:
    """128 code points of 4 UTF-8 bytes (2 UTF-16 units) each are a valid id; 129 are not."""
    emoji = "\U0001f600"
    ok, too_long = emoji * 128, emoji * 129
    assert len(ok.encode("utf-8")) == 512 and len(ok.encode("utf-16-le")) // 2 == 256
    client.create(ok)
    assert client.collector.Submit(_batch(ok, campaign_id=ok), timeout=10).accepted == 5
    assert client.collector.SubmitReport(_report(emoji * 127 + "r", campaign_id=ok), timeout=10).accepted == 1
    bad_campaign = wire.campaign_to_proto(campaign_id="x", params=PARAMS)
    bad_campaign.id = too_long
    bad_batch = _batch("b", campaign_id=ok)
    bad_batch.batch_id = too_long
    bad_report = _report("r", campaign_id=ok)
    bad_report.report_id = too_long
    for fn, request, field in (
        (client.analyst.CreateCampaign, analyst_pb2.CreateCampaignRequest(campaign=bad_campaign), "id"),
        (client.collector.Submit, bad_batch, "batch_id"),
        (client.collector.SubmitReport, bad_report, "report_id"),
    ):
        err = _error(fn, request)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert "1 to 128 Unicode code points" in (err.details() or ""), err.details()
    doc = (ROOT / "docs" / "wire-protocol.md").read_text()
    assert "128 Unicode code points" in doc
    for proto in ("campaign.proto", "reports.proto"):
        assert "128 Unicode code points" in (ROOT / "protos" / "ldp" / "v1" / proto).read_text()
