"""Operating the aggregator (issue 7): health checking, reflection, Prometheus metrics on a loopback port,
structured logs, closing and exporting campaigns."""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, estimates_pb2
from ldp_aggregator.accumulators import accumulator_from_bytes
from ldp_aggregator.auth import Role, new_token_record, token_digest
from ldp_aggregator.cli import app
from ldp_aggregator.logs import JsonFormatter, TextFormatter, configure_logging, log_event
from ldp_aggregator.ratelimit import Limits
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import open_store
from ldp_aggregator.store import add_token, revoke_token
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2, collector_pb2_grpc, reports_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.rappor import encode_batch_rappor
from ldp_client.params import GRRParams, RapporParams

PARAMS = GRRParams.from_epsilon(["a", "b", "c", "d"], 2.0)
runner = CliRunner()


class Ops:
    def __init__(self, server: BackgroundServer) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(server.target)
        self.analyst = analyst_pb2_grpc.AnalystStub(self.channel)
        self.collector = collector_pb2_grpc.CollectorStub(self.channel)

    def scrape(self) -> str:
        url = f"http://127.0.0.1:{self.server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return str(resp.read().decode())

    def create(
        self, campaign_id: str = "c", params: object = PARAMS, candidates: tuple[str, ...] = ()
    ) -> None:
        msg = wire.campaign_to_proto(campaign_id=campaign_id, params=params, candidates=candidates)  # type: ignore[arg-type]
        self.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), timeout=10)


@pytest.fixture
def ops(tmp_path: Path) -> Iterator[Ops]:
    config = ServerConfig(db=tmp_path / "db.sqlite3", listen="127.0.0.1:0", metrics_port=0)
    with BackgroundServer(config) as server:
        o = Ops(server)
        yield o
        o.channel.close()


def _batch(batch_id: str, values: list[int], campaign_id: str = "c") -> reports_pb2.ReportBatch:
    return wire.batch_to_proto(
        campaign_id=campaign_id, batch_id=batch_id, params=PARAMS, columns=np.array(values, dtype=np.int64)
    )


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? ([0-9.e+-]+)$"
    for match in re.finditer(pattern, text, flags=re.MULTILINE):
        got = ",".join(sorted((match.group(1) or "").split(","))) if match.group(1) else ""
        if got == want:
            return float(match.group(2))
    raise AssertionError(f"{name}{{{want}}} not in the scrape")


def test_health_and_reflection(ops: Ops) -> None:
    stub = health_pb2_grpc.HealthStub(ops.channel)
    for service in ("", "ldp.v1.Collector", "ldp.v1.Analyst"):
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING, service
    with pytest.raises(grpc.RpcError) as info:
        stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND

    refl = reflection_pb2_grpc.ServerReflectionStub(ops.channel)
    responses = list(
        refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    )
    names = {s.name for s in responses[0].list_services_response.service}
    assert {"ldp.v1.Collector", "ldp.v1.Analyst", "grpc.health.v1.Health"} <= names
    # The file descriptors are served too (grpcurl can describe the methods).
    req = reflection_pb2.ServerReflectionRequest(file_containing_symbol="ldp.v1.Analyst")
    (resp,) = list(refl.ServerReflectionInfo(iter([req])))
    assert resp.file_descriptor_response.file_descriptor_proto


def test_metrics_are_scraped_from_a_loopback_port(ops: Ops) -> None:
    assert ops.server.metrics_port
    ops.create()
    ops.collector.Submit(_batch("b1", [0, 1, 2, 3, 0]), timeout=10)
    ops.collector.Submit(_batch("b1", [0, 1, 2, 3, 0]), timeout=10)  # retry: duplicate
    ops.collector.Submit(_batch("b2", [1] * 100), timeout=10)
    with pytest.raises(grpc.RpcError):
        bad = np.array([9, 9, 9], dtype="<u4").tobytes()  # out of the domain: 3 reports rejected
        ops.collector.Submit(
            reports_pb2.ReportBatch(campaign_id="c", batch_id="bad", count=3, grr_indices=bad), timeout=10
        )
    with pytest.raises(grpc.RpcError):
        ops.collector.Submit(_batch("x", [0, 0], campaign_id="missing"), timeout=10)
    raw = grpc.insecure_channel(ops.server.target)
    with raw:
        call = raw.unary_unary("/ldp.v1.Collector/Submit")
        with pytest.raises(grpc.RpcError) as info:
            call(b"\xff\xff\xff", timeout=10)  # not a protobuf message
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    text = ops.scrape()
    assert _metric(text, "ldp_reports_accepted_total") == 105
    assert _metric(text, "ldp_batches_total", duplicate="false") == 2
    assert _metric(text, "ldp_batches_total", duplicate="true") == 1
    assert _metric(text, "ldp_reports_rejected_total", reason="invalid_argument") == 3
    assert _metric(text, "ldp_reports_rejected_total", reason="not_found") == 2
    assert _metric(text, "ldp_reports_rejected_total", reason="malformed") == 0
    assert _metric(text, "ldp_commit_latency_seconds_count") == 3
    assert _metric(text, "ldp_batch_size_count") == 2 and _metric(text, "ldp_batch_size_sum") == 105
    assert _metric(text, "ldp_batch_size_bucket", le="10.0") == 1
    assert _metric(text, "ldp_rpcs_total", method="Collector/Submit", code="OK") == 3
    assert _metric(text, "ldp_rpcs_total", method="Collector/Submit", code="INVALID_ARGUMENT") == 2
    assert _metric(text, "ldp_store_commits_total") >= 3
    assert _metric(text, "ldp_auth_required") == 0
    # Bound to loopback only: the metrics server's socket listens on 127.0.0.1.
    assert ops.server.metrics is not None
    http = ops.server.metrics._http
    assert http is not None and http[0].server_address[0] == "127.0.0.1"  # type: ignore[attr-defined]


def test_structured_json_logs(ops: Ops) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ldp_aggregator")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        ops.create("logged")
        ops.analyst.CloseCampaign(analyst_pb2.CloseCampaignRequest(campaign_id="logged"), timeout=10)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    created = next(e for e in events if e["event"] == "campaign_created")
    assert created["campaign"] == "logged" and created["mechanism"] == "grr" and created["level"] == "info"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", created["ts"])
    assert any(e["event"] == "campaign_closed" and e["campaign"] == "logged" for e in events)


def test_log_formatters_and_configuration() -> None:
    log = logging.getLogger("ldp_aggregator.test")
    record = log.makeRecord(log.name, logging.WARNING, __file__, 1, "disk_full", (), None)
    record.ldp_fields = {"campaign": "c", "n": 3, "ratio": float("inf")}
    doc = json.loads(JsonFormatter().format(record))
    assert (
        doc["event"] == "disk_full" and doc["n"] == 3 and doc["ratio"] == "inf" and doc["level"] == "warning"
    )
    assert TextFormatter().format(record).endswith("disk_full campaign=c n=3 ratio=inf")
    try:
        raise OSError("no space")
    except OSError:
        import sys

        rec = log.makeRecord(log.name, logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    assert json.loads(JsonFormatter().format(rec))["error"] == "OSError: no space"
    with pytest.raises(InvalidParameterError, match="log_format"):
        configure_logging("xml")
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("json", "DEBUG")
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        log_event(log, "configured", level=logging.DEBUG)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_close_campaign_stops_new_reports_but_answers_retries(ops: Ops) -> None:
    ops.create()
    ops.collector.Submit(_batch("before", [0, 1]), timeout=10)
    closed = ops.analyst.CloseCampaign(analyst_pb2.CloseCampaignRequest(campaign_id="c"), timeout=10)
    assert closed.closed and closed.id == "c"
    with pytest.raises(grpc.RpcError) as info:
        ops.collector.Submit(_batch("after", [0, 1]), timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "closed" in (
        info.value.details() or ""
    )
    report = wire.report_to_proto(campaign_id="c", report_id="r1", params=PARAMS, report=1)
    with pytest.raises(grpc.RpcError) as info:
        ops.collector.SubmitReport(report, timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ops.collector.Submit(_batch("before", [0, 1]), timeout=10).duplicate  # a retry still succeeds
    assert ops.collector.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="c"), timeout=10).closed
    # Idempotent, and NOT_FOUND for an unknown campaign.
    assert ops.analyst.CloseCampaign(analyst_pb2.CloseCampaignRequest(campaign_id="c"), timeout=10).closed
    with pytest.raises(grpc.RpcError) as info:
        ops.analyst.CloseCampaign(analyst_pb2.CloseCampaignRequest(campaign_id="zz"), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    est = ops.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="c"), timeout=10)
    assert est.n_reports == 2
    # The CLI command.
    ops.create("d")
    result = runner.invoke(app, ["campaign", "close", "d", "--server", ops.server.target])
    assert result.exit_code == 0 and "[closed]" in result.output, result.output


def test_export_campaign_rpc_and_cli(ops: Ops) -> None:
    ops.create()
    values = [0] * 50 + [1] * 30 + [2] * 15 + [3] * 5
    ops.collector.Submit(_batch("b1", values[:60]), timeout=10)
    ops.collector.Submit(_batch("b2", values[60:]), timeout=10)
    resp = ops.analyst.ExportCampaign(analyst_pb2.ExportCampaignRequest(campaign_id="c"), timeout=10)
    assert resp.n_reports == 100 and resp.n_batches == 2 and resp.campaign.id == "c"
    acc = accumulator_from_bytes(resp.accumulator)
    assert acc.counts.tolist() == [50, 30, 15, 5]  # type: ignore[union-attr]
    est = ops.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="c"), timeout=10)
    assert resp.estimate == est

    result = runner.invoke(app, ["campaign", "export", "c", "--json", "--server", ops.server.target])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["format"] == "ldp-export/1" and doc["n_reports"] == 100 and doc["n_batches"] == 2
    assert doc["accumulator"]["type"] == "CountAccumulator"
    assert doc["accumulator"]["arrays"]["counts"] == {"shape": [4], "data": [50, 30, 15, 5]}
    assert base64.b64decode(doc["accumulator"]["bytes_base64"]) == resp.accumulator
    assert doc["campaign"]["id"] == "c" and "grr" in doc["campaign"]
    assert [it["label"] for it in doc["estimate"]["items"]] == ["a", "b", "c", "d"]
    # The same export from the database file, while the server runs.
    result = runner.invoke(app, ["campaign", "export", "c", "--json", "--db", str(ops.server.config.db)])
    assert result.exit_code == 0, result.output
    offline = json.loads(result.output)
    assert offline["accumulator"] == doc["accumulator"] and offline["estimate"] == doc["estimate"]
    result = runner.invoke(app, ["campaign", "export", "c", "--server", ops.server.target])
    assert result.exit_code == 0 and "CountAccumulator" in result.output and "100 reports" in result.output
    result = runner.invoke(app, ["campaign", "export", "zz", "--server", ops.server.target])
    assert result.exit_code == 3 and "NOT_FOUND" in result.output


def test_export_rappor_bit_counts(ops: Ops) -> None:
    params = RapporParams(k=16, h=2, m=4)
    ops.create("w", params, candidates=("x", "y"))
    rng = np.random.default_rng(3)
    cohorts, bits = encode_batch_rappor(
        params, campaign_id="w", values=rng.integers(0, 2, 400), labels=["x", "y"], rng=rng
    )
    ops.collector.Submit(
        wire.batch_to_proto(campaign_id="w", batch_id="b", params=params, columns=(cohorts, bits)), timeout=10
    )
    result = runner.invoke(app, ["campaign", "export", "w", "--json", "--server", ops.server.target])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    arrays = doc["accumulator"]["arrays"]
    assert arrays["cohort_reports"]["shape"] == [4] and sum(arrays["cohort_reports"]["data"]) == 400
    assert arrays["ones"]["shape"] == [4, 16]
    assert [it["label"] for it in doc["estimate"]["items"]] == ["x", "y"]
    assert doc["estimate"]["rappor_bits"]["m"] == 4


def test_serve_command_with_a_settings_file(tmp_path: Path) -> None:
    """``ldp-aggregator serve --config``: settings from the file, options on top, JSON logs on stderr,
    metrics on the loopback port, SIGTERM exits 0."""
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    cfg = tmp_path / "ldp.toml"
    cfg.write_text(f'db = "data/ldp.sqlite3"\nmetrics_port = {metrics_port}\n[log]\nformat = "json"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "ldp_aggregator", "serve", "--config", str(cfg), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert line.startswith("ready on port"), line
        assert (tmp_path / "data" / "ldp.sqlite3").is_file()  # relative to the settings file
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            assert b"ldp_reports_accepted_total" in resp.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        err = proc.stderr.read() if proc.stderr is not None else ""
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert code == 0
    events = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    names = [e["event"] for e in events]
    assert "server_started" in names and "stopped" in names
    started = events[names.index("server_started")]
    assert started["metrics_port"] == metrics_port and started["auth"] == "off"


# ------------------------------------------------------------------------------------------ privacy of logs

#: Markers sent by "devices" that must never reach a log line: batch and report ids (a client may build
#: them from a device id), a reported value, and the value of a bad report (error messages name it).
_SECRET_BATCH = "devbatch-7f3a9c"
_SECRET_REPORT = "devreport-52e1d0"
_SECRET_STREAM = "devstream-c4b8e6"
_SECRET_UNKNOWN_CAMPAIGN = "devcampaign-9d2f71"
_BAD_VALUE = 987654321


def test_a_realistic_run_logs_no_token_id_address_or_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every log record of a server run at DEBUG (JSON and text, every logger), through campaign creation,
    batches, single reports, a stream, duplicates, bad reports, bad, malformed, wrong-role and revoked
    tokens, a rate limit, a disk that refuses writes, estimates, exports, metrics and shutdown, with TLS
    off: no token (nor its digest), no batch or report id, no reported value, no client address. Allowed:
    campaign ids, token ids and names, the server's own listening address."""
    db = tmp_path / "db.sqlite3"
    open_store(str(db)).close()
    tokens: dict[Role, str] = {}
    for role in Role:
        tokens[role], record = new_token_record(role, name=f"ops {role.value}")
        add_token(db, record)
    revoked, revoked_record = new_token_record(Role.REPORTER, name="old phone")
    add_token(db, revoked_record)
    revoke_token(db, revoked_record.token_id)
    bad_tokens = ["ldp_" + "q" * 43, "ldp_notarealtoken0000000000000000000000000000", "x" * 600]
    secrets = [*tokens.values(), revoked, *bad_tokens]
    secrets += [token_digest(t).hex() for t in (*tokens.values(), revoked)]

    # The server's real logging setup (configure_logging, as `serve --log-level debug` does), plus a
    # text handler, both capturing every logger's records.
    json_out, text_out = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    monkeypatch.setattr(sys, "stderr", json_out)
    configure_logging("json", "DEBUG")
    text_handler = logging.StreamHandler(text_out)
    text_handler.setFormatter(TextFormatter())
    root.addHandler(text_handler)
    try:
        config = ServerConfig(
            db=db,
            listen="127.0.0.1:0",
            metrics_port=0,
            token_refresh_s=0.05,
            limits=Limits(max_batch_reports=1000),
        )
        with BackgroundServer(config) as server:
            server_ports = {str(server.target.rpartition(":")[2]), str(server.metrics_port)}
            _realistic_calls(server, tokens, revoked, bad_tokens)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    logs = json_out.getvalue() + text_out.getvalue()
    events = [json.loads(line)["event"] for line in json_out.getvalue().splitlines() if line.startswith("{")]
    # The run did log: creation, the store's refusal, health changes, shutdown.
    for event in ("server_started", "campaign_created", "campaign_closed", "health_changed"):
        assert event in events, (event, events)
    assert "store commit of 1 batch(es) failed" in logs
    for secret in secrets:
        assert secret not in logs, f"a token (or its digest) was logged: {secret[:12]}..."
    for marker in (_SECRET_BATCH, _SECRET_REPORT, _SECRET_STREAM, _SECRET_UNKNOWN_CAMPAIGN, str(_BAD_VALUE)):
        assert marker not in logs, f"client data was logged: {marker}"
    for needle in ("ipv4:", "ipv6:", "peer"):
        assert needle not in logs, needle
    for port in re.findall(r"(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)", logs):
        assert port in server_ports, f"a client address was logged: port {port}"


def _realistic_calls(
    server: BackgroundServer, tokens: dict[Role, str], revoked: str, bad_tokens: list[str]
) -> None:
    """The RPCs of the logging test, each with the outcome it must have."""

    def md(token: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {token}"),)

    admin, analyst_md, reporter = md(tokens[Role.ADMIN]), md(tokens[Role.ANALYST]), md(tokens[Role.REPORTER])

    def refused(call: Any, request: Any, metadata: Any) -> grpc.StatusCode:
        with pytest.raises(grpc.RpcError) as info:
            call(request, timeout=10, metadata=metadata)
        return info.value.code()  # type: ignore[no-any-return]

    with grpc.insecure_channel(server.target) as ch:
        analyst = analyst_pb2_grpc.AnalystStub(ch)
        collector = collector_pb2_grpc.CollectorStub(ch)
        for cid, params, cands in (
            ("logs-grr", PARAMS, ()),
            ("logs-rappor", RapporParams(k=16, h=2, m=4), ("x", "y")),
        ):
            msg = wire.campaign_to_proto(campaign_id=cid, params=params, candidates=cands)  # type: ignore[arg-type]
            analyst.CreateCampaign(
                analyst_pb2.CreateCampaignRequest(campaign=msg), timeout=10, metadata=admin
            )
        good = _batch(f"{_SECRET_BATCH}-1", [0, 1, 2, 3, 3], campaign_id="logs-grr")
        assert collector.Submit(good, timeout=10, metadata=reporter).accepted == 5
        assert collector.Submit(good, timeout=10, metadata=reporter).duplicate
        report = wire.report_to_proto(
            campaign_id="logs-grr", report_id=_SECRET_REPORT, params=PARAMS, report=2
        )
        assert collector.SubmitReport(report, timeout=10, metadata=reporter).accepted == 1
        stream = [_batch(f"{_SECRET_STREAM}-{i}", [i % 4] * 3, campaign_id="logs-grr") for i in range(3)]
        assert collector.SubmitStream(iter(stream), timeout=10, metadata=reporter).accepted == 9
        # Bad input of every kind.
        bad_value = reports_pb2.ReportBatch(
            campaign_id="logs-grr",
            batch_id=f"{_SECRET_BATCH}-bad",
            count=2,
            grr_indices=np.array([1, _BAD_VALUE], dtype="<u4").tobytes(),
        )
        assert refused(collector.Submit, bad_value, reporter) == grpc.StatusCode.INVALID_ARGUMENT
        short = reports_pb2.ReportBatch(
            campaign_id="logs-grr", batch_id=f"{_SECRET_BATCH}-short", count=3, grr_indices=bytes(4)
        )
        assert refused(collector.Submit, short, reporter) == grpc.StatusCode.INVALID_ARGUMENT
        unknown = _batch(f"{_SECRET_BATCH}-2", [1], campaign_id=_SECRET_UNKNOWN_CAMPAIGN)
        assert refused(collector.Submit, unknown, reporter) == grpc.StatusCode.NOT_FOUND
        too_big = _batch(f"{_SECRET_BATCH}-big", [1] * 1001, campaign_id="logs-grr")
        assert refused(collector.Submit, too_big, reporter) == grpc.StatusCode.RESOURCE_EXHAUSTED
        raw = ch.unary_unary("/ldp.v1.Collector/Submit")
        assert (
            refused(raw, b"\xff\xff\xff" + _SECRET_BATCH.encode(), reporter)
            == grpc.StatusCode.INVALID_ARGUMENT
        )
        # Bad credentials of every kind.
        list_req = analyst_pb2.ListCampaignsRequest()
        for token in bad_tokens:
            assert refused(analyst.ListCampaigns, list_req, md(token)) == grpc.StatusCode.UNAUTHENTICATED
        assert refused(analyst.ListCampaigns, list_req, md(revoked)) == grpc.StatusCode.UNAUTHENTICATED
        assert refused(analyst.ListCampaigns, list_req, ()) == grpc.StatusCode.UNAUTHENTICATED
        basic = (("authorization", "Basic " + bad_tokens[0]),)
        assert refused(analyst.ListCampaigns, list_req, basic) == grpc.StatusCode.UNAUTHENTICATED
        wrong_role = analyst_pb2.CloseCampaignRequest(campaign_id="logs-grr")
        assert refused(analyst.CloseCampaign, wrong_role, reporter) == grpc.StatusCode.PERMISSION_DENIED
        # The disk refuses writes for a moment (the writer's connection turned read-only), then recovers.
        store = server.aggregator.store  # type: ignore[union-attr]
        assert store._wconn is not None
        store._wconn.execute("PRAGMA query_only = ON")
        failing = _batch(f"{_SECRET_BATCH}-3", [3, 2], campaign_id="logs-grr")
        assert refused(collector.Submit, failing, reporter) == grpc.StatusCode.UNAVAILABLE
        _wait_for_health(ch, health_pb2.HealthCheckResponse.NOT_SERVING)
        store._wconn.execute("PRAGMA query_only = OFF")
        assert collector.Submit(failing, timeout=10, metadata=reporter).accepted == 2
        _wait_for_health(ch, health_pb2.HealthCheckResponse.SERVING)
        # Reading, then closing.
        est = analyst.GetEstimate(
            estimates_pb2.EstimateRequest(campaign_id="logs-grr"), timeout=10, metadata=analyst_md
        )
        assert est.n_reports == 17
        analyst.ExportCampaign(
            analyst_pb2.ExportCampaignRequest(campaign_id="logs-rappor"), timeout=10, metadata=analyst_md
        )
        analyst.CloseCampaign(
            analyst_pb2.CloseCampaignRequest(campaign_id="logs-grr"), timeout=10, metadata=admin
        )
        late = _batch(f"{_SECRET_BATCH}-4", [0], campaign_id="logs-grr")
        assert refused(collector.Submit, late, reporter) == grpc.StatusCode.FAILED_PRECONDITION
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert b"ldp_reports_accepted_total" in resp.read()


def _wait_for_health(channel: grpc.Channel, status: int) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for _ in range(200):
        resp = stub.Check(health_pb2.HealthCheckRequest(service="ldp.v1.Collector"), timeout=10)
        if resp.status == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"health never became {status}")
