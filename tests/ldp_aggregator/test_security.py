"""Security of the aggregator service (issue 7): TLS and mutual TLS, token authentication with roles,
per-token rate limits and size limits, loopback-only without tokens, no identifiers stored, raw-report
retention, the schema migration that added tokens, and the settings file."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, decode_pb2, estimates_pb2
from ldp_aggregator.auth import METHOD_ROLES, Authenticator, Role, new_token_record, required_roles
from ldp_aggregator.cli import app
from ldp_aggregator.config import load_settings
from ldp_aggregator.logs import JsonFormatter
from ldp_aggregator.ratelimit import RETRY_AFTER_METADATA, Limits, RateLimiter, RequestTooLargeError
from ldp_aggregator.server import BackgroundServer, ServerConfig, is_loopback
from ldp_aggregator.service import open_store
from ldp_aggregator.store import SCHEMA_VERSION, StoreSchemaError, add_token, list_tokens, revoke_token
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2, collector_pb2_grpc, reports_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.paired import encode_batch_paired
from ldp_client.mechanisms.pem import PEMParams
from ldp_client.mechanisms.pem.rounds import encode_round_batch, round_plan
from ldp_client.mechanisms.rappor import encode_batch_rappor
from ldp_client.params import BinaryRRParams, GRRParams, PairedParams, RapporParams
from ldp_client.reporter import Reporter

PARAMS = GRRParams.from_epsilon(4, 1.0)
RAPPOR = RapporParams(k=32, h=2, m=4)
WORDS = ("alpha", "beta", "gamma")
PAIR = PairedParams(first=BinaryRRParams.from_epsilon(1.5), second=BinaryRRParams.from_epsilon(1.5))
ROUNDS = PEMParams.from_epsilon(4.0, max_length=4, top_k=2, step_bits=8, adaptive=True)
runner = CliRunner()


def _batch(batch_id: str, n: int = 10, campaign_id: str = "c") -> reports_pb2.ReportBatch:
    return wire.batch_to_proto(
        campaign_id=campaign_id, batch_id=batch_id, params=PARAMS, columns=np.arange(n) % 4
    )


def _code(fn: object, *args: object, **kw: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, timeout=10, **kw)  # type: ignore[operator]
    return info.value.code()  # type: ignore[no-any-return]


def _md(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _create_db(db: Path) -> None:
    open_store(str(db)).close()


def _token(db: Path, role: Role, name: str = "") -> tuple[str, str]:
    token, record = new_token_record(role, name=name)
    add_token(db, record)
    return token, record.token_id


# ---------------------------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip


def _make_leaf(d: Path, ca: str, name: str, ext: str) -> None:
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip
    (d / f"{name}.ext").write_text(ext)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A test CA with a server and a client certificate, and a second CA with its own client."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    _make_ca(d, "ca")
    _make_ca(d, "other-ca")
    _make_leaf(d, "ca", "server", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _make_leaf(d, "ca", "client", "extendedKeyUsage=clientAuth\n")
    _make_leaf(d, "other-ca", "intruder", "extendedKeyUsage=clientAuth\n")
    return Pki(
        ca=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        other_ca=d / "other-ca.pem",
        other_client_cert=d / "intruder.pem",
        other_client_key=d / "intruder.key",
    )


def _list(channel: grpc.Channel) -> analyst_pb2.ListCampaignsResponse:
    return analyst_pb2_grpc.AnalystStub(channel).ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=10)


def test_tls_handshake_with_the_test_ca_and_refusals(pki: Pki, tmp_path: Path) -> None:
    config = ServerConfig(
        db=tmp_path / "db.sqlite3", listen="127.0.0.1:0", tls_cert=pki.server_cert, tls_key=pki.server_key
    )
    with BackgroundServer(config) as server:
        good = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
        with grpc.secure_channel(server.target, good) as ch:
            assert list(_list(ch).campaigns) == []
        # A client that does not trust the test CA (the system roots) fails the handshake.
        with grpc.secure_channel(server.target, grpc.ssl_channel_credentials()) as ch:
            assert _code(
                analyst_pb2_grpc.AnalystStub(ch).ListCampaigns, analyst_pb2.ListCampaignsRequest()
            ) == (grpc.StatusCode.UNAVAILABLE)
        wrong = grpc.ssl_channel_credentials(root_certificates=pki.other_ca.read_bytes())
        with grpc.secure_channel(server.target, wrong) as ch:
            stub = analyst_pb2_grpc.AnalystStub(ch)
            assert (
                _code(stub.ListCampaigns, analyst_pb2.ListCampaignsRequest()) == grpc.StatusCode.UNAVAILABLE
            )
        with grpc.insecure_channel(server.target) as ch:  # plaintext to a TLS port
            stub = analyst_pb2_grpc.AnalystStub(ch)
            assert (
                _code(stub.ListCampaigns, analyst_pb2.ListCampaignsRequest()) == grpc.StatusCode.UNAVAILABLE
            )


def test_mutual_tls_requires_a_client_certificate_from_the_client_ca(pki: Pki, tmp_path: Path) -> None:
    config = ServerConfig(
        db=tmp_path / "db.sqlite3",
        listen="127.0.0.1:0",
        tls_cert=pki.server_cert,
        tls_key=pki.server_key,
        tls_client_ca=pki.ca,
    )
    ca = pki.ca.read_bytes()
    with BackgroundServer(config) as server:
        with_cert = grpc.ssl_channel_credentials(
            ca, pki.client_key.read_bytes(), pki.client_cert.read_bytes()
        )
        with grpc.secure_channel(server.target, with_cert) as ch:
            assert list(_list(ch).campaigns) == []
        without = grpc.ssl_channel_credentials(root_certificates=ca)
        with grpc.secure_channel(server.target, without) as ch:
            stub = analyst_pb2_grpc.AnalystStub(ch)
            assert (
                _code(stub.ListCampaigns, analyst_pb2.ListCampaignsRequest()) == grpc.StatusCode.UNAVAILABLE
            )
        foreign = grpc.ssl_channel_credentials(
            ca, pki.other_client_key.read_bytes(), pki.other_client_cert.read_bytes()
        )
        with grpc.secure_channel(server.target, foreign) as ch:
            stub = analyst_pb2_grpc.AnalystStub(ch)
            assert (
                _code(stub.ListCampaigns, analyst_pb2.ListCampaignsRequest()) == grpc.StatusCode.UNAVAILABLE
            )


def test_cli_client_options_use_tls_and_the_token(pki: Pki, tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    _create_db(db)
    admin, _ = _token(db, Role.ADMIN)
    config = ServerConfig(db=db, listen="127.0.0.1:0", tls_cert=pki.server_cert, tls_key=pki.server_key)
    with BackgroundServer(config) as server:
        target = f"localhost:{server.port}"
        base = ["--tls-ca", str(pki.ca), "campaign"]
        result = runner.invoke(app, [*base, "list", "--server", target])
        assert result.exit_code == 3 and "UNAUTHENTICATED" in result.output  # refused: exit 3
        result = runner.invoke(
            app, ["--token", admin, *base[:-1], "campaign", "create", "c", "--mechanism", "rr",
                  "--epsilon", "1", "--server", target],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        result = runner.invoke(app, [*base, "list", "--server", target], env={"LDP_TOKEN": admin})
        assert result.exit_code == 0 and "c" in result.output
        result = runner.invoke(app, ["campaign", "list", "--server", target], env={"LDP_TOKEN": admin})
        assert result.exit_code == 4 and "UNAVAILABLE" in result.output  # no --tls-ca: plaintext to TLS


def test_tls_settings_are_checked_at_start(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="tls_key"):
        ServerConfig(db=tmp_path / "d", tls_cert=pki.server_cert)
    with pytest.raises(InvalidParameterError, match="tls_client_ca"):
        ServerConfig(db=tmp_path / "d", tls_client_ca=pki.ca)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    for cert, key, field in (
        (tmp_path / "missing.pem", pki.server_key, "tls_cert"),
        (pki.server_cert, not_pem, "tls_key"),
    ):
        config = ServerConfig(db=tmp_path / "db.sqlite3", listen="127.0.0.1:0", tls_cert=cert, tls_key=key)
        with pytest.raises(InvalidParameterError, match=field):
            BackgroundServer(config).start()


# ---------------------------------------------------------------------------------------------- tokens


#: The callers of the role matrix: every role, and a reporter token limited to campaign "c".
SCOPED = "reporter limited to c"


@dataclass
class AuthServer:
    server: BackgroundServer
    db: Path
    tokens: dict[Role, str]
    ids: dict[Role, str]
    channel: grpc.Channel
    scoped: str = ""

    @property
    def collector(self) -> collector_pb2_grpc.CollectorStub:
        return collector_pb2_grpc.CollectorStub(self.channel)

    @property
    def analyst(self) -> analyst_pb2_grpc.AnalystStub:
        return analyst_pb2_grpc.AnalystStub(self.channel)


def _auth_server(tmp_path: Path, **kw: object) -> Iterator[AuthServer]:
    db = tmp_path / "db.sqlite3"
    _create_db(db)
    tokens: dict[Role, str] = {}
    ids: dict[Role, str] = {}
    for role in Role:
        tokens[role], ids[role] = _token(db, role, name=f"test {role.value}")
    scoped, record = new_token_record(Role.REPORTER, name="scoped", campaigns=["c"])
    add_token(db, record)
    config = ServerConfig(db=db, listen="127.0.0.1:0", token_refresh_s=0.05, **kw)  # type: ignore[arg-type]
    with BackgroundServer(config) as server, grpc.insecure_channel(server.target) as ch:
        s = AuthServer(server, db, tokens, ids, ch, scoped)
        s.analyst.CreateCampaign(
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id="c", params=PARAMS)
            ),
            metadata=_md(tokens[Role.ADMIN]),
        )
        yield s


@pytest.fixture
def auth(tmp_path: Path) -> Iterator[AuthServer]:
    yield from _auth_server(tmp_path)


def _matrix_campaigns(s: AuthServer) -> None:
    """A RAPPOR campaign and a paired one with reports, so that decoding and association succeed."""
    admin, reporter = _md(s.tokens[Role.ADMIN]), _md(s.tokens[Role.REPORTER])
    for cid, params, cands in (("words", RAPPOR, WORDS), ("pair", PAIR, ())):
        msg = wire.campaign_to_proto(campaign_id=cid, params=params, candidates=cands)
        s.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), metadata=admin)
    rng = np.random.default_rng(3)
    values = rng.choice(3, size=2000, p=[0.6, 0.3, 0.1])
    columns = encode_batch_rappor(RAPPOR, campaign_id="words", values=values, labels=WORDS, rng=rng)
    batch = wire.batch_to_proto(campaign_id="words", batch_id="w", params=RAPPOR, columns=columns)
    s.collector.Submit(batch, timeout=10, metadata=reporter)
    first = rng.random(2000) < 0.5
    second = first ^ (rng.random(2000) < 0.2)
    pair = encode_batch_paired(PAIR, campaign_id="pair", first_values=first, second_values=second, rng=rng)
    batch = wire.batch_to_proto(campaign_id="pair", batch_id="p", params=PAIR, columns=pair)
    s.collector.Submit(batch, timeout=10, metadata=reporter)
    # An adaptive discovery campaign with reports in its round 0, so that NextRound succeeds (issue 16).
    msg = wire.campaign_to_proto(campaign_id="rounds", params=ROUNDS)
    s.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), metadata=admin)
    cols = encode_round_batch(round_plan(ROUNDS, 0, ()), np.zeros(50, dtype=np.int64), ["kiwi"], rng)
    batch = wire.batch_to_proto(campaign_id="rounds", batch_id="r", params=ROUNDS, columns=cols)
    s.collector.Submit(batch, timeout=10, metadata=reporter)


def _calls(s: AuthServer) -> dict[str, tuple[object, object]]:
    """One call per ldp.v1 RPC that succeeds when authorized (method name -> (callable, request))."""
    n = iter(range(10**6))
    return {
        "/ldp.v1.Collector/GetCampaign": (
            s.collector.GetCampaign,
            collector_pb2.GetCampaignRequest(campaign_id="c"),
        ),
        "/ldp.v1.Collector/Submit": (s.collector.Submit, _batch(f"b{next(n)}")),
        "/ldp.v1.Collector/SubmitStream": (
            lambda batches, **kw: s.collector.SubmitStream(iter(batches), **kw),
            [_batch(f"s{next(n)}"), _batch(f"s{next(n)}")],
        ),
        "/ldp.v1.Collector/SubmitReport": (
            s.collector.SubmitReport,
            wire.report_to_proto(campaign_id="c", report_id="r", params=PARAMS, report=1),
        ),
        "/ldp.v1.Analyst/GetCampaign": (
            s.analyst.GetCampaign,
            collector_pb2.GetCampaignRequest(campaign_id="c"),
        ),
        "/ldp.v1.Analyst/ListCampaigns": (s.analyst.ListCampaigns, analyst_pb2.ListCampaignsRequest()),
        "/ldp.v1.Analyst/GetEstimate": (
            s.analyst.GetEstimate,
            estimates_pb2.EstimateRequest(campaign_id="c"),
        ),
        "/ldp.v1.Analyst/ExportCampaign": (
            s.analyst.ExportCampaign,
            analyst_pb2.ExportCampaignRequest(campaign_id="c"),
        ),
        "/ldp.v1.Analyst/CreateCampaign": (
            s.analyst.CreateCampaign,
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id="new", params=PARAMS)
            ),
        ),
        "/ldp.v1.Analyst/NextRound": (
            s.analyst.NextRound,  # admin only: called once
            analyst_pb2.NextRoundRequest(campaign_id="rounds", round=0),
        ),
        "/ldp.v1.Analyst/CloseCampaign": (
            s.analyst.CloseCampaign,  # idempotent: every allowed role may close "words" again
            analyst_pb2.CloseCampaignRequest(campaign_id="words"),
        ),
        "/ldp.v1.Analyst/DecodeRappor": (
            s.analyst.DecodeRappor,
            decode_pb2.DecodeRapporRequest(campaign_id="words"),
        ),
        "/ldp.v1.Analyst/EstimateAssociation": (
            s.analyst.EstimateAssociation,
            decode_pb2.AssociationRequest(campaign_id="pair"),
        ),
    }


def test_each_role_may_call_exactly_its_rpcs(auth: AuthServer) -> None:
    _matrix_campaigns(auth)
    calls = _calls(auth)
    # Every RPC of both services is in the matrix: a new one cannot be left out by accident.
    served = {
        f"/{service.full_name}/{method.name}"
        for descriptor in (collector_pb2.DESCRIPTOR, analyst_pb2.DESCRIPTOR)
        for service in descriptor.services_by_name.values()
        for method in service.methods
    }
    assert set(calls) == served
    callers: dict[str, tuple[str, Role]] = {r.value: (auth.tokens[r], r) for r in Role}
    callers[SCOPED] = (auth.scoped, Role.REPORTER)  # scoped to "c", which every Collector call uses
    for method, (fn, request) in calls.items():
        allowed = required_roles(method)
        assert allowed is not None, method
        for name, (token, role) in callers.items():
            md = _md(token)
            if role in allowed:
                fn(request, timeout=30, metadata=md)  # type: ignore[operator]
                if method.endswith("CreateCampaign"):  # only once
                    request = analyst_pb2.CreateCampaignRequest(  # noqa: PLW2901
                        campaign=wire.campaign_to_proto(campaign_id=f"new-{role.value}", params=PARAMS)
                    )
            else:
                assert _code(fn, request, metadata=md) == grpc.StatusCode.PERMISSION_DENIED, (method, name)
    # The rules, spelled out.
    assert METHOD_ROLES["/ldp.v1.Collector/Submit"] == {Role.REPORTER}
    assert METHOD_ROLES["/ldp.v1.Analyst/GetEstimate"] == {Role.ANALYST, Role.ADMIN}
    assert METHOD_ROLES["/ldp.v1.Analyst/CreateCampaign"] == {Role.ADMIN}
    assert METHOD_ROLES["/ldp.v1.Analyst/CloseCampaign"] == {Role.ADMIN}
    assert METHOD_ROLES["/ldp.v1.Analyst/NextRound"] == {Role.ADMIN}
    # Fail closed: an RPC nobody classified needs admin; health and reflection need nothing.
    assert required_roles("/ldp.v1.Analyst/SomethingNew") == {Role.ADMIN}
    assert required_roles("/ldp.v1.Analyst/DecodeRappor") == {Role.ANALYST, Role.ADMIN}
    assert required_roles("/ldp.v1.Collector/DecodeRappor") == {Role.ADMIN}
    assert required_roles("/grpc.health.v1.Health/Check") is None
    assert required_roles("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo") is None
    assert required_roles("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo") is None


def test_a_scoped_reporter_token_reaches_only_its_campaigns(auth: AuthServer) -> None:
    admin = _md(auth.tokens[Role.ADMIN])
    for cid in ("other", "third"):
        msg = wire.campaign_to_proto(campaign_id=cid, params=PARAMS)
        auth.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), metadata=admin)
    md = _md(auth.scoped)
    auth.collector.Submit(_batch("mine", 10), timeout=10, metadata=md)
    refused = [
        (auth.collector.GetCampaign, collector_pb2.GetCampaignRequest(campaign_id="other")),
        (auth.collector.Submit, _batch("theirs", 10, campaign_id="other")),
        (
            auth.collector.SubmitReport,
            wire.report_to_proto(campaign_id="other", report_id="r", params=PARAMS, report=1),
        ),
    ]
    for fn, request in refused:
        with pytest.raises(grpc.RpcError) as info:
            fn(request, timeout=10, metadata=md)  # type: ignore[operator]
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "'other' is not one of them" in (info.value.details() or "")
    # A stream stops at the first batch for another campaign; the batches before it stay committed.
    stream = [_batch("s1", 10), _batch("s2", 10, campaign_id="other"), _batch("s3", 10)]
    with pytest.raises(grpc.RpcError) as info:
        auth.collector.SubmitStream(iter(stream), timeout=10, metadata=md)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _n_reports(auth) == 20
    reporter = _md(auth.tokens[Role.REPORTER])  # the unscoped reporter token reaches every campaign
    auth.collector.Submit(_batch("any", 10, campaign_id="other"), timeout=10, metadata=reporter)
    est = auth.analyst.GetEstimate(
        estimates_pb2.EstimateRequest(campaign_id="other"), timeout=10, metadata=admin
    )
    assert est.n_reports == 10


def test_token_create_with_campaigns_and_the_list_shows_them(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    result = runner.invoke(
        app,
        ["token", "create", "--role", "reporter", "--campaign", "b", "--campaign", "a", "--db", str(db),
         "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["campaigns"] == ["a", "b"] and doc["role"] == "reporter"
    result = runner.invoke(app, ["token", "list", "--db", str(db)])
    assert result.exit_code == 0 and "a, b" in result.output
    result = runner.invoke(app, ["token", "create", "--role", "analyst", "--campaign", "a", "--db", str(db)])
    assert result.exit_code == 2 and "--campaign" in result.output and "reporter" in result.output
    (record,) = list_tokens(db)
    assert record.campaigns == ("a", "b")


def test_missing_wrong_or_malformed_tokens_are_unauthenticated(auth: AuthServer) -> None:
    req = collector_pb2.GetCampaignRequest(campaign_id="c")
    for md in (
        (),
        _md("ldp_not-a-real-token"),
        (("authorization", "Basic dXNlcjpwYXNz"),),
        (("authorization", "Bearer"),),
        (("authorization", "Bearer " + "x" * 1000),),
        (*_md(auth.tokens[Role.REPORTER]), *_md(auth.tokens[Role.REPORTER])),
    ):
        with pytest.raises(grpc.RpcError) as info:
            auth.collector.GetCampaign(req, timeout=10, metadata=md)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert auth.tokens[Role.REPORTER] not in (info.value.details() or "")
    # "bearer" in any case is accepted.
    auth.collector.GetCampaign(
        req, timeout=10, metadata=(("authorization", "bearer " + auth.tokens[Role.REPORTER]),)
    )
    # Health checking needs no token.
    resp = health_pb2_grpc.HealthStub(auth.channel).Check(
        health_pb2.HealthCheckRequest(service=""), timeout=10
    )
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_revoked_token_is_refused_promptly_and_new_tokens_work(auth: AuthServer) -> None:
    req = collector_pb2.GetCampaignRequest(campaign_id="c")
    md = _md(auth.tokens[Role.REPORTER])
    auth.collector.GetCampaign(req, timeout=10, metadata=md)
    result = runner.invoke(app, ["token", "revoke", auth.ids[Role.REPORTER], "--db", str(auth.db)])
    assert result.exit_code == 0 and "revoked" in result.output
    start = time.monotonic()
    while True:
        try:
            auth.collector.GetCampaign(req, timeout=10, metadata=md)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
            break
        # The server re-reads tokens every 0.05 s here; 10 s is generous for a loaded machine (parallel test
        # workers), and a revocation that is never picked up still fails.
        assert time.monotonic() - start < 10.0, "revocation did not take effect within 10 s"
        time.sleep(0.01)
    result = runner.invoke(app, ["token", "create", "--role", "reporter", "--db", str(auth.db), "--json"])
    assert result.exit_code == 0, result.output
    fresh = json.loads(result.output)["token"]
    deadline = time.monotonic() + 10.0
    while True:
        try:
            auth.collector.GetCampaign(req, timeout=10, metadata=_md(fresh))
            break
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED and time.monotonic() < deadline
            time.sleep(0.01)


def test_a_token_created_a_moment_ago_is_accepted_at_once(tmp_path: Path) -> None:
    # The README's operator steps create a reporter token and use it in the next command; the periodic
    # refresh (here: once an hour) must not be what decides. An unknown token makes the server re-read
    # the tokens before refusing (at most every 0.25 s), and a wrong role is still PERMISSION_DENIED.
    db = tmp_path / "db.sqlite3"
    _create_db(db)
    admin, _ = _token(db, Role.ADMIN)
    config = ServerConfig(db=db, listen="127.0.0.1:0", token_refresh_s=3600.0)
    with BackgroundServer(config) as server, grpc.insecure_channel(server.target) as ch:
        analyst = analyst_pb2_grpc.AnalystStub(ch)
        collector = collector_pb2_grpc.CollectorStub(ch)
        msg = wire.campaign_to_proto(campaign_id="c", params=PARAMS)
        analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), metadata=_md(admin))
        time.sleep(0.3)  # past the reload interval, so the first unknown token triggers a reload
        reporter, _ = _token(db, Role.REPORTER)
        req = collector_pb2.GetCampaignRequest(campaign_id="c")
        assert collector.GetCampaign(req, timeout=10, metadata=_md(reporter)).id == "c"
        time.sleep(0.3)
        viewer, _ = _token(db, Role.ANALYST)
        with pytest.raises(grpc.RpcError) as err:
            collector.Submit(reports_pb2.ReportBatch(campaign_id="c", batch_id="b"), metadata=_md(viewer))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as err:  # an unknown token stays unknown
            collector.GetCampaign(req, timeout=10, metadata=_md("ldp_" + "x" * 43))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_token_cli_and_only_hashes_are_stored(tmp_path: Path) -> None:
    db = tmp_path / "fresh" / "db.sqlite3"
    result = runner.invoke(
        app, ["token", "create", "--role", "analyst", "--name", "dashboards", "--db", str(db)]
    )
    assert result.exit_code == 0, result.output
    token = result.output.strip().splitlines()[-1]
    assert token.startswith("ldp_") and len(token) == 4 + 43
    result = runner.invoke(app, ["token", "list", "--db", str(db)])
    assert result.exit_code == 0 and "analyst" in result.output and "dashboards" in result.output
    assert token not in result.output
    (record,) = list_tokens(db)
    assert record.role == "analyst" and not record.revoked
    # Nowhere in the database files is the token itself, only its SHA-256.
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    blob = b"".join(p.read_bytes() for p in db.parent.iterdir() if p.is_file())
    assert token.encode() not in blob
    result = runner.invoke(app, ["token", "create", "--role", "root", "--db", str(db)])
    assert result.exit_code == 2 and "reporter, analyst, admin" in result.output
    result = runner.invoke(app, ["token", "revoke", "tok_nope", "--db", str(db)])
    assert result.exit_code == 2 and "token_id='tok_nope'" in result.output
    assert revoke_token(db, record.token_id) is True
    assert revoke_token(db, record.token_id) is False
    result = runner.invoke(app, ["token", "list", "--db", str(tmp_path / "none.sqlite3")])
    assert result.exit_code == 2 and "no such database" in result.output


def test_authenticator_unit_rules() -> None:
    _, rec = new_token_record(Role.REPORTER)
    assert not Authenticator().required
    auth = Authenticator([rec])
    assert auth.required and auth.active_tokens == 1
    # Revoking every token never switches authentication off.
    auth.load([])
    assert auth.required
    # Nor does starting with revoked tokens only (a token existed), or with the database's flag.
    revoked = dataclasses.replace(rec, revoked_unix_ms=1)
    assert Authenticator([revoked]).required and Authenticator([revoked]).active_tokens == 0
    assert Authenticator(required=True).required
    off = Authenticator()
    assert off.check("/ldp.v1.Analyst/CreateCampaign", ()) is None  # auth off: anyone (loopback only)
    assert off.load([rec]) is True and off.required
    with pytest.raises(InvalidParameterError, match="role"):
        new_token_record("superuser")


def test_without_tokens_only_loopback_and_the_log_says_so(tmp_path: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("[::]")
    db = tmp_path / "db.sqlite3"
    for listen in ("0.0.0.0:0", "[::]:0"):
        with pytest.raises(InvalidParameterError, match="loopback"):
            BackgroundServer(ServerConfig(db=db, listen=listen)).start()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ldp_aggregator")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")):
            pass
        events = [json.loads(line) for line in stream.getvalue().splitlines()]
        started = next(e for e in events if e["event"] == "server_started")
        assert started["auth"] == "off"
        assert any(e["event"] == "auth_disabled" and "loopback only" in e["note"] for e in events)
        # With a token the same server may listen on every interface.
        _token(db, Role.REPORTER)
        with BackgroundServer(ServerConfig(db=db, listen="0.0.0.0:0")) as server:
            assert server.authenticator is not None and server.authenticator.required
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_token_created_while_running_switches_authentication_on(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    config = ServerConfig(db=db, listen="127.0.0.1:0", token_refresh_s=0.05)
    with BackgroundServer(config) as server, grpc.insecure_channel(server.target) as ch:
        stub = analyst_pb2_grpc.AnalystStub(ch)
        stub.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=10)
        token, _ = _token(db, Role.ANALYST)
        deadline = time.monotonic() + 10  # refresh every 0.05 s: generous for a loaded machine
        while True:
            try:
                stub.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=10)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
                break
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stub.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=10, metadata=_md(token))


# ---------------------------------------------------------------------------------------------- limits


def _n_reports(s: AuthServer) -> int:
    est = s.analyst.GetEstimate(
        estimates_pb2.EstimateRequest(campaign_id="c"), timeout=10, metadata=_md(s.tokens[Role.ANALYST])
    )
    return int(est.n_reports)


def test_report_rate_limit_per_token_refuses_whole_batches(tmp_path: Path) -> None:
    limits = Limits(reports_per_s=100, burst_s=1.0, max_batch_reports=80)
    for s in _auth_server(tmp_path, limits=limits):
        md = _md(s.tokens[Role.REPORTER])
        s.collector.Submit(_batch("a", 60), timeout=10, metadata=md)
        with pytest.raises(grpc.RpcError) as info:
            s.collector.Submit(_batch("b", 60), timeout=10, metadata=md)
        err = info.value
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "reports/s" in (err.details() or "")
        trailing = dict(err.trailing_metadata() or ())  # type: ignore[attr-defined]
        wait_ms = int(trailing[RETRY_AFTER_METADATA])
        assert 100 <= wait_ms <= 600  # 20 of 60 reports left at 100/s: 0.2 s (plus time passed)
        assert _n_reports(s) == 60  # nothing of "b" was stored
        # Too large for the burst or over max_batch_reports: no retry hint (it must be split).
        for n in (81, 200):
            with pytest.raises(grpc.RpcError) as info:
                s.collector.Submit(_batch(f"big{n}", n), timeout=10, metadata=md)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert RETRY_AFTER_METADATA not in dict(info.value.trailing_metadata() or ())  # type: ignore[attr-defined]
        time.sleep(wait_ms / 1000 + 0.05)
        assert s.collector.Submit(_batch("b", 60), timeout=10, metadata=md).accepted == 60
        assert _n_reports(s) == 120


def test_rate_limit_on_the_stream_stops_at_the_first_batch_over_it(tmp_path: Path) -> None:
    for s in _auth_server(tmp_path, limits=Limits(reports_per_s=50, burst_s=1.0)):
        md = _md(s.tokens[Role.REPORTER])
        batches = [_batch(f"s{i}", 20) for i in range(4)]  # 80 reports against a burst of 50
        with pytest.raises(grpc.RpcError) as info:
            s.collector.SubmitStream(iter(batches), timeout=10, metadata=md)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert RETRY_AFTER_METADATA in dict(info.value.trailing_metadata() or ())  # type: ignore[attr-defined]
        assert _n_reports(s) == 40  # the two batches before it were committed, the rest not


def test_request_rate_limit_and_size_limits(tmp_path: Path) -> None:
    limits = Limits(requests_per_s=5, burst_s=1.0, max_candidates=3)
    for s in _auth_server(tmp_path, limits=limits, max_message_bytes=64 * 1024):
        md = _md(s.tokens[Role.ANALYST])
        codes = []
        for _ in range(8):
            try:
                s.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=10, metadata=md)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
        assert codes[:5] == [grpc.StatusCode.OK] * 5
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes[5:]
        # Another token has its own bucket.
        s.analyst.ListCampaigns(
            analyst_pb2.ListCampaignsRequest(), timeout=10, metadata=_md(s.tokens[Role.ADMIN])
        )
        md = _md(s.tokens[Role.ADMIN])
        req = estimates_pb2.EstimateRequest(campaign_id="c", candidates=["a", "b", "c", "d"])
        assert _code(s.analyst.GetEstimate, req, metadata=md) == grpc.StatusCode.RESOURCE_EXHAUSTED
        huge = reports_pb2.ReportBatch(campaign_id="c", batch_id="h", count=1, grr_indices=b"\0" * 100_000)
        code = _code(s.collector.Submit, huge, metadata=_md(s.tokens[Role.REPORTER]))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED  # over max_message_bytes


def test_limits_unit() -> None:
    clock = [0.0]
    limiter = RateLimiter(Limits(reports_per_s=10, burst_s=2.0), clock=lambda: clock[0])
    limiter.admit_reports("t", 20)  # the full burst
    with pytest.raises(RequestTooLargeError):
        limiter.admit_reports("t", 21)
    clock[0] = 0.5
    limiter.admit_reports("t", 5)
    limiter.admit_reports("other", 20)  # buckets are per key
    with pytest.raises(InvalidParameterError, match="burst_s"):
        Limits(burst_s=0)
    with pytest.raises(InvalidParameterError, match="reports_per_s"):
        Limits(reports_per_s=float("nan"))


def test_reporter_retries_rate_limited_batches_without_splitting_or_losing(tmp_path: Path) -> None:
    limits = Limits(reports_per_s=2000, burst_s=0.5)
    for s in _auth_server(tmp_path, limits=limits):
        with Reporter(
            s.server.target,
            "c",
            max_epsilon=2.0,
            state_dir=tmp_path / "app",
            batch_size=500,
            max_batch_age_s=0.05,
            metadata=_md(s.tokens[Role.REPORTER]),
        ) as reporter:
            for i in range(3000):
                reporter.report(i % 4)
            assert reporter.flush(timeout=30)
            stats = reporter.stats()
        assert stats.sent_reports == 3000 and stats.rejected_batches == 0 and stats.retries > 0
        assert _n_reports(s) == 3000
        assert (
            s.server.aggregator is not None and s.server.aggregator.store.batch_count("c") == 6
        )  # no splits


# ---------------------------------------------------------------------------------------------- privacy


def test_nothing_identifying_is_stored_or_logged(auth: AuthServer) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        sent = _batch("b-1", 50)
        auth.collector.Submit(sent, timeout=10, metadata=_md(auth.tokens[Role.REPORTER]))
        with pytest.raises(grpc.RpcError):
            auth.collector.Submit(_batch("b-3"), timeout=10, metadata=_md("ldp_wrong"))
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    store = auth.server.aggregator.store  # type: ignore[union-attr]
    # The stored raw payload is exactly the batch the device sent: no address, token or time added.
    assert list(store.raw_payloads("c")) == [sent.SerializeToString()]
    with sqlite3.connect(f"file:{auth.db}?mode=ro", uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
    assert columns["batches"] == ["campaign_id", "batch_id", "n_reports", "received_unix_ms"]
    assert columns["raw_reports"] == [
        "position",
        "campaign_id",
        "batch_id",
        "payload",
    ]  # position: ingest order
    # The tokens table is never joined with reports: no report table has a token column.
    for table in ("batches", "raw_reports", "accumulators", "campaigns"):
        assert not any("token" in c for c in columns[table])
    logs = stream.getvalue()
    for needle in ("127.0.0.1", "ipv4:", "ipv6:", "peer", *auth.tokens.values(), "ldp_wrong"):
        assert needle not in logs, needle
    for line in logs.splitlines():
        json.loads(line)


def test_retention_purge_in_the_server_and_by_command(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    # 1e-5 days = 0.864 s; the purge runs every 0.1 s.
    config = ServerConfig(db=db, listen="127.0.0.1:0", raw_retention_days=1e-5, purge_interval_s=0.1)
    with BackgroundServer(config) as server, grpc.insecure_channel(server.target) as ch:
        analyst = analyst_pb2_grpc.AnalystStub(ch)
        collector = collector_pb2_grpc.CollectorStub(ch)
        analyst.CreateCampaign(
            analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id="c", params=PARAMS))
        )
        collector.Submit(_batch("old", 20))
        store = server.aggregator.store  # type: ignore[union-attr]
        assert len(list(store.raw_payloads("c"))) == 1
        deadline = time.monotonic() + 10
        while list(store.raw_payloads("c")):
            assert time.monotonic() < deadline, "the periodic purge did not run"
            time.sleep(0.05)
        # Counts and duplicate detection survive the purge.
        assert store.accumulator("c").n == 20
        assert collector.Submit(_batch("old", 20)).duplicate
        assert server.metrics is not None and server.metrics.raw_purged._value.get() >= 1
    # The command, with no server running (and the same code path as with one).
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
        with grpc.insecure_channel(server.target) as ch:
            collector_pb2_grpc.CollectorStub(ch).Submit(_batch("new", 20))
        result = runner.invoke(app, ["purge", "--older-than", "1h", "--db", str(db)])
        assert result.exit_code == 0 and "purged 0" in result.output
        result = runner.invoke(app, ["purge", "--older-than", "0s", "--db", str(db)])
        assert result.exit_code == 0 and "purged 1" in result.output, result.output
        assert list(server.aggregator.store.raw_payloads("c")) == []  # type: ignore[union-attr]
    result = runner.invoke(app, ["purge", "--older-than", "soon", "--db", str(db)])
    assert result.exit_code == 2 and "unit" in result.output


# ---------------------------------------------------------------------------------------------- schema


def test_schema_version_1_is_migrated_in_place(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    server = BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0"))
    with server, grpc.insecure_channel(server.target) as ch:
        analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
            analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id="c", params=PARAMS))
        )
        collector_pb2_grpc.CollectorStub(ch).Submit(_batch("b", 30))
    # Turn the file back into what version 1 wrote.
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE tokens")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    # A read-only open reads version 1 as it is (no tokens) and changes nothing.
    ro = open_store(str(db), read_only=True)
    assert ro.accumulator("c").n == 30 and ro.list_tokens() == []
    ro.close()
    with pytest.raises(StoreSchemaError, match="schema_version='1'"):
        list_tokens(db)  # maintenance needs the current version
    store = open_store(str(db))
    try:
        assert store.accumulator("c").n == 30 and store.batch_count("c") == 1
        assert store.list_tokens() == []
    finally:
        store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    _token(db, Role.ADMIN)
    assert len(list_tokens(db)) == 1


# ---------------------------------------------------------------------------------------------- settings


def test_settings_file_and_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "conf" / "ldp.toml"
    cfg.parent.mkdir()
    cfg.write_text(
        'db = "data/ldp.sqlite3"\nlisten = "127.0.0.1:6000"\nmetrics_port = 0\nraw_retention_days = 30\n'
        '[tls]\ncert = "s.pem"\nkey = "s.key"\n[limits]\nreports_per_s = 1e6\nmax_batch_reports = 5000\n'
        '[log]\nformat = "json"\n'
    )
    s = load_settings(cfg, {"listen": "127.0.0.1:7000", "db": None, "burst_s": 2.5})
    assert s.server.db == cfg.parent / "data" / "ldp.sqlite3"  # relative to the file
    assert s.server.listen == "127.0.0.1:7000"  # the option wins
    assert s.server.tls_cert == cfg.parent / "s.pem" and s.server.metrics_port is None
    assert s.server.raw_retention_days == 30
    assert s.server.limits == Limits(reports_per_s=1e6, max_batch_reports=5000, burst_s=2.5)
    assert s.log_format == "json"
    for text, field in (
        ("lisen = 'x:1'\n", "lisen"),
        ("[tls]\ncertificate = 'x'\n", "tls.certificate"),
        ("[limits]\nreports_per_s = 'fast'\n", "reports_per_s"),
        ("retain_raw = 1\n", "retain_raw"),
        ("[log]\nformat = 'xml'\n", "log_format"),
        ("[limits]\nburst_s = 0\n", "burst_s"),
        ("tls_cert = 'x'\n", "tls_cert"),
    ):
        cfg.write_text(text)
        with pytest.raises(InvalidParameterError, match=field):
            load_settings(cfg)
    cfg.write_text("this is = not toml [")
    with pytest.raises(InvalidParameterError, match="TOML"):
        load_settings(cfg)


def test_serve_command_refuses_a_public_address_without_tokens(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(tmp_path / "db.sqlite3"),
         "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "loopback" in done.stderr and "token create" in done.stderr


def test_a_scoped_token_is_refused_on_calls_without_one_campaign(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: a server-streaming RPC (none in ldp.v1 yet) whose request names no campaign_id."""
    import asyncio

    from ldp_aggregator.guard import Guard

    monkeypatch.setitem(METHOD_ROLES, "/ldp.v1.Collector/Watch", frozenset({Role.REPORTER}))  # type: ignore[index]

    token, record = new_token_record(Role.REPORTER, campaigns=["c"])
    guard = Guard(Authenticator([record]), RateLimiter(Limits()), None)

    async def watch(request: object, context: object) -> object:
        yield "event"

    class Context:
        def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
            return _md(token)

        def peer(self) -> str:
            return "ipv4:127.0.0.1:5000"

        async def abort(self, code: grpc.StatusCode, message: str, **kw: object) -> None:
            raise PermissionError(code, message)

    handler = grpc.unary_stream_rpc_method_handler(watch)
    wrapped = guard._admission_only("/ldp.v1.Collector/Watch", handler).unary_stream

    async def first(request: object) -> object:
        async for item in wrapped(request, Context()):  # type: ignore[misc]
            return item
        return None

    assert asyncio.run(first(collector_pb2.GetCampaignRequest(campaign_id="c"))) == "event"
    for request in (
        collector_pb2.GetCampaignRequest(campaign_id="other"),
        analyst_pb2.ListCampaignsRequest(),
    ):
        with pytest.raises(PermissionError) as info:
            asyncio.run(first(request))
        assert info.value.args[0] == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(InvalidParameterError, match="campaigns"):
        new_token_record(Role.REPORTER, campaigns=["x" * 129])


def test_the_guard_wraps_each_method_once_and_rewraps_a_new_servicer_handler() -> None:
    """gRPC asks the interceptor for every call; the guarded handler is built once per method and reused
    (a new closure and handler per single report cost the server about 7% of its CPU), but a different
    servicer handler for the method is wrapped anew, never answered by the old one."""
    import asyncio

    from ldp_aggregator.guard import Guard

    guard = Guard(Authenticator([]), RateLimiter(Limits()), None)

    async def submit(request: object, context: object) -> object:
        return request

    handlers = [grpc.unary_unary_rpc_method_handler(submit), grpc.unary_unary_rpc_method_handler(submit)]
    method = "/ldp.v1.Collector/SubmitReport"

    async def intercept(handler: object, name: str = method) -> object:
        async def continuation(details: object) -> object:
            return handler

        @dataclass
        class Details:
            method: str
            invocation_metadata: tuple[tuple[str, str], ...] = ()

        return await guard.intercept_service(continuation, Details(name))  # type: ignore[arg-type]

    first = asyncio.run(intercept(handlers[0]))
    assert first is not handlers[0] and first.request_deserializer is None  # type: ignore[attr-defined]
    assert asyncio.run(intercept(handlers[0])) is first
    other = asyncio.run(intercept(handlers[1]))
    assert other is not first and other is not handlers[1]
    assert asyncio.run(intercept(handlers[1])) is other
    # Methods outside ldp.v1 (health, reflection) pass through unwrapped.
    assert asyncio.run(intercept(handlers[0], "/grpc.health.v1.Health/Check")) is handlers[0]
