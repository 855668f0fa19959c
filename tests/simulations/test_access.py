"""``ldp-sim --mode grpc --server`` against a secured aggregator: access tokens and (mutual) TLS (issue 13).

Real servers started here (authentication on: the database holds tokens); ``ldp-sim`` runs in process
through its Typer app, its client workers as spawned processes. ldp-sim needs two tokens against such a
server: an admin token (``--token``/``LDP_TOKEN``: it creates campaigns and reads their estimates) and a
reporter token (``--reporter-token``/``LDP_REPORTER_TOKEN``: its clients submit; an admin may not).
"""

from __future__ import annotations

import json
import pickle
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ldp_aggregator.auth import Role, new_token_record
from ldp_aggregator.client_access import ClientAccess, ClientOptionError, read_client_access
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import open_store
from ldp_aggregator.store import add_token
from simulations.cli import app
from tests.ldp_aggregator.test_operator_docs import run_tls_recipe

runner = CliRunner()
GRR = ["run", "-m", "grr", "-e", "1", "-d", "4", "-n", "400", "--mode", "grpc", "--workers", "1"]


@dataclass(frozen=True)
class Secured:
    server: BackgroundServer
    admin: str
    reporter: str
    db: Path


def _tokens(db: Path) -> tuple[str, str]:
    """An admin and a reporter token added to a new database (authentication is then on)."""
    open_store(str(db)).close()
    made = []
    for role in (Role.ADMIN, Role.REPORTER):
        token, record = new_token_record(role)
        add_token(db, record)
        made.append(token)
    return made[0], made[1]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    db = tmp_path / "auth.sqlite3"
    admin, reporter = _tokens(db)
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
        yield Secured(server, admin, reporter, db)


def _sim(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), env=env)


def _error_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, output  # one line, no traceback
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.grpc
@pytest.mark.timeout(120)
def test_grpc_run_with_admin_and_reporter_tokens(secured: Secured) -> None:
    target = secured.server.target
    tokens = ["--token", secured.admin, "--reporter-token", secured.reporter]
    result = _sim(*GRR, "--server", target, *tokens, "--json")
    assert result.exit_code == 0, result.output
    # The runner checks that the server counted every simulated user (GetEstimate's n_reports).
    assert json.loads(result.stdout)["summary"]["metrics"]["n_repeats"] == 1
    assert secured.server.aggregator is not None
    campaigns = secured.server.aggregator.store.list_campaigns()
    assert len(campaigns) == 1
    # The numeric runner (one client in process) and the environment variables.
    env = {"LDP_TOKEN": secured.admin, "LDP_REPORTER_TOKEN": secured.reporter}
    result = _sim(
        "run", "-m", "laplace", "-p", "normal:0,1", "-e", "1", "-n", "500", "--mode", "grpc",
        "--server", target, "--json", env=env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert len(secured.server.aggregator.store.list_campaigns()) == 2


@pytest.mark.grpc
@pytest.mark.timeout(120)
def test_refused_tokens_name_the_ldp_sim_option(secured: Secured) -> None:
    target = secured.server.target
    # No token: the server's wording about gRPC metadata becomes the ldp-sim option and variable.
    result = _sim(*GRR, "--server", target)
    line = _error_line(result.output)
    assert result.exit_code == 3, result.output
    assert "CreateCampaign" in line and "UNAUTHENTICATED" in line and "admin token" in line
    assert "--token" in line and "LDP_TOKEN" in line and "metadata" not in line
    # A reporter token where the admin one goes: PERMISSION_DENIED, naming --token and the role.
    result = _sim(*GRR, "--server", target, "--token", secured.reporter, "--reporter-token", secured.reporter)
    line = _error_line(result.output)
    assert result.exit_code == 3 and "PERMISSION_DENIED" in line
    assert "admin token with --token TOKEN or LDP_TOKEN" in line
    # The clients' token refused (a well-formed token this server does not know): --reporter-token.
    unknown, _ = new_token_record(Role.REPORTER)
    result = _sim(*GRR, "--server", target, "--token", secured.admin, "--reporter-token", unknown)
    line = _error_line(result.output)
    assert result.exit_code == 3 and "Submit" in line and "UNAUTHENTICATED" in line
    assert "--reporter-token or LDP_REPORTER_TOKEN" in line
    # Only one of the two tokens: refused before anything is created.
    before = len(secured.server.aggregator.store.list_campaigns()) if secured.server.aggregator else -1
    result = _sim(*GRR, "--server", target, "--token", secured.admin)
    line = _error_line(result.output)
    assert result.exit_code == 2 and "--reporter-token" in line and "LDP_REPORTER_TOKEN" in line
    assert secured.server.aggregator is not None
    assert len(secured.server.aggregator.store.list_campaigns()) == before


def test_client_options_are_checked_where_given(tmp_path: Path) -> None:
    # Only with --mode grpc --server; from the environment they are ignored elsewhere.
    result = _sim("run", "-m", "grr", "-e", "1", "-d", "4", "-n", "100", "--token", "ldp_x")
    assert result.exit_code == 2 and "--token: only with --mode grpc --server" in _error_line(result.output)
    result = _sim("run", "-m", "grr", "-e", "1", "-d", "4", "-n", "100", env={"LDP_TLS_CA": "/nowhere"})
    assert result.exit_code == 0, result.output
    grpc_args = [*GRR, "--server", "127.0.0.1:1"]
    result = _sim(*grpc_args, "--tls-ca", str(tmp_path / "missing.pem"))
    line = _error_line(result.output)
    assert result.exit_code == 2 and "--tls-ca" in line and "LDP_TLS_CA" in line and "missing.pem" in line
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello\n", encoding="utf-8")
    result = _sim(*grpc_args, "--tls-ca", str(not_pem))
    assert result.exit_code == 2 and "not a PEM file" in _error_line(result.output)
    result = _sim(*grpc_args, "--tls-cert", str(not_pem))
    assert result.exit_code == 2 and "--tls-cert and --tls-key go together" in _error_line(result.output)
    result = _sim(*grpc_args, "--token", "ldp_with space", "--reporter-token", "ldp_y")
    line = _error_line(result.output)
    assert result.exit_code == 2 and "--token" in line and "with space" not in line  # never echoed


def test_client_access_pickles_and_hides_secrets(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    access = read_client_access(token="ldp_secret-value", tls_ca=pem)
    assert access.tls_ca == pem.read_bytes() and access.uses_tls
    assert pickle.loads(pickle.dumps(access)) == access  # workers are spawned: it travels as bytes
    assert "secret" not in repr(access) and "token=<set>" in repr(access)
    assert access.metadata() == (("authorization", "Bearer ldp_secret-value"),)
    assert ClientAccess().metadata() == () and ClientAccess().credentials() is None
    with pytest.raises(ClientOptionError, match="--tls-key"):
        read_client_access(tls_key=pem)


@pytest.mark.grpc
@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("openssl") is None, reason="the TLS recipe needs openssl")
def test_grpc_run_over_mutual_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_tls_recipe(tmp_path)  # docs/tls.md's recipe: tls/ca.pem, server and client certificates
    tls = tmp_path / "tls"
    db = tmp_path / "tls.sqlite3"
    admin, reporter = _tokens(db)
    config = ServerConfig(
        db=db,
        listen="127.0.0.1:0",
        tls_cert=tls / "server.pem",
        tls_key=tls / "server.key",
        tls_client_ca=tls / "ca.pem",
    )
    with BackgroundServer(config) as server:
        target = f"localhost:{server.port}"  # a name in the server certificate
        client = ["--tls-ca", str(tls / "ca.pem"), "--tls-cert", str(tls / "client.pem")]
        env = {"LDP_TLS_KEY": str(tls / "client.key"), "LDP_TOKEN": admin, "LDP_REPORTER_TOKEN": reporter}
        # The Reporter client too: it gets the channel credentials and the token from the same options.
        result = _sim(*GRR, "--grpc-client", "reporter", "--server", target, *client, "--json", env=env)
        assert result.exit_code == 0, result.output  # every user's report counted (the runner checks)
        assert server.aggregator is not None and len(server.aggregator.store.list_campaigns()) == 1
        monkeypatch.setattr("simulations.runners.grpc_runner._CONNECT_TIMEOUT_S", 0.5)
        tokens = {"LDP_TOKEN": admin, "LDP_REPORTER_TOKEN": reporter}
        result = _sim(*GRR, "--server", target, env=tokens)  # plaintext to a TLS server
        line = _error_line(result.output)
        assert result.exit_code == 4 and "cannot connect" in line and "--tls-ca" in line
