"""``ldp-aggregator`` campaign and estimate commands against a running server and a database file."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from ldp_aggregator.auth import Role, new_token_record
from ldp_aggregator.cli import app
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import Aggregator, open_store
from ldp_aggregator.store import add_token
from ldp_client import wire
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.params import GRRParams, make_params
from tests.ldp_aggregator.conftest import Running

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_campaign_commands_and_estimate(running: Running, tmp_path: Path) -> None:
    server = running.server.target
    code, out = _run(
        "campaign", "create", "color", "--mechanism", "grr", "--labels", "red,green,blue",
        "--epsilon", "2", "--description", "favourite colour", "--server", server,
    )  # fmt: skip
    assert code == 0, out
    assert "color" in out and "grr" in out
    toml = tmp_path / "words.toml"
    toml.write_text('mechanism = "rappor"\ncandidates = ["a", "b"]\n[params]\nk = 16\nh = 2\nm = 2\n')
    code, out = _run("campaign", "create", "words", "--from-file", str(toml), "--server", server)
    assert code == 0, out
    code, out = _run("campaign", "list", "--server", server)
    assert code == 0 and "color" in out and "words" in out
    code, out = _run("campaign", "show", "words", "--server", server)
    assert code == 0 and "RapporParams" in out and "candidates: 2" in out

    params = GRRParams.from_epsilon(["red", "green", "blue"], 2.0)
    rng = np.random.default_rng(5)
    reports = GRREncoder(params).encode_batch(rng.integers(0, 3, 3000), rng)
    running.collector.Submit(
        wire.batch_to_proto(campaign_id="color", batch_id="b", params=params, columns=reports)
    )
    code, out = _run("estimate", "color", "--json", "--server", server)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["n_reports"] == 3000 and [it["label"] for it in doc["items"]] == ["red", "green", "blue"]
    assert all(it["ci_low"] <= it["count"] <= it["ci_high"] for it in doc["items"])
    code, table = _run("estimate", "color", "--server", server)
    assert code == 0 and "red" in table and "interval" in table

    # The database can be read directly while the server holds it.
    code, out = _run("estimate", "color", "--json", "--db", str(running.server.config.db))
    assert code == 0, out
    assert json.loads(out)["items"] == doc["items"]


def test_cli_errors_are_clear(running: Running, tmp_path: Path) -> None:
    server = running.server.target
    code, out = _run("campaign", "create", "x", "--mechanism", "nope", "--server", server)
    assert code == 2 and "mechanism='nope'" in out
    code, out = _run("campaign", "create", "x", "--mechanism", "rappor", "--param", "k=0", "--server", server)
    assert code == 2 and "k=0" in out
    code, out = _run("campaign", "create", "x", "--mechanism", "grr", "--epsilon", "1", "--server", server)
    assert code == 2 and "domain" in out
    code, out = _run("campaign", "show", "missing", "--server", server)
    assert code == 3 and "NOT_FOUND" in out  # the server refused: exit 3
    code, out = _run("estimate", "missing", "--db", str(tmp_path / "none.sqlite3"))
    assert code == 2 and "no such database" in out
    code, out = _run("campaign", "create", "y", "--mechanism", "rr", "--epsilon", "1", "--server", server)
    assert code == 0
    code, out = _run("campaign", "create", "y", "--mechanism", "rr", "--epsilon", "1", "--server", server)
    assert code == 3 and "ALREADY_EXISTS" in out


# ------------------------------------------------------------------------- issue 13: CLI conventions


def _strict(text: str) -> Any:
    """Parse JSON refusing NaN/Infinity tokens (Python's json accepts them by default)."""

    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), env=env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("error:") and "Traceback" not in output
    return lines[0]


def test_exit_codes_say_what_failed(running: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    server = running.server.target
    result = _invoke("campaign", "create", "x", "--mechanism", "nope", "--server", server)
    assert result.exit_code == 2  # bad input
    result = _invoke("campaign", "show", "missing", "--server", server)
    assert result.exit_code == 3 and "NOT_FOUND" in _one_error_line(result.output)  # refused
    result = _invoke("campaign", "create", "y", "--mechanism", "rr", "--epsilon", "1", "--server", server)
    assert result.exit_code == 0, result.output
    result = _invoke("estimate", "y", "--confidence", "1.5", "--server", server)
    assert result.exit_code == 2 and "INVALID_ARGUMENT" in _one_error_line(result.output)  # bad input
    closed = f"127.0.0.1:{_free_port()}"
    result = _invoke("campaign", "list", "--server", closed)
    line = _one_error_line(result.output)
    assert result.exit_code == 4 and "UNAVAILABLE" in line and closed in line  # unreachable
    # Anything unexpected is a bug: exit 1 and one line, never a traceback.
    monkeypatch.setattr("ldp_aggregator.cli_campaigns._analyst", lambda server: 1 / 0)
    result = _invoke("campaign", "list", "--server", server)
    line = _one_error_line(result.output)
    assert result.exit_code == 1 and "internal error" in line and "ZeroDivisionError" in line


def test_json_everywhere_is_strict_with_inf_as_a_string(running: Running, tmp_path: Path) -> None:
    server = running.server.target
    result = _invoke(
        "campaign", "create", "color", "--mechanism", "grr", "--labels", "red,green", "--epsilon", "1",
        "--server", server, "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    created = _strict(result.stdout)
    assert created["id"] == "color" and created["mechanism"] == "grr" and created["epsilon_inf"] == "inf"
    assert created["closed"] is False and isinstance(created["created_unix_ms"], int)
    result = _invoke("campaign", "list", "--server", server, "--json")
    assert result.exit_code == 0, result.output
    assert [c["id"] for c in _strict(result.stdout)["campaigns"]] == ["color"]
    result = _invoke("campaign", "show", "color", "--server", server, "--json")
    assert result.exit_code == 0 and _strict(result.stdout) == created
    result = _invoke("estimate", "color", "--server", server, "--json")
    assert result.exit_code == 0 and _strict(result.stdout)["epsilon_inf"] == "inf"
    result = _invoke("campaign", "export", "color", "--server", server, "--json")
    assert result.exit_code == 0, result.output
    assert _strict(result.stdout)["campaign"]["epsilon_inf"] == "inf"  # was "Infinity"
    result = _invoke("campaign", "close", "color", "--server", server, "--json")
    assert result.exit_code == 0 and _strict(result.stdout)["closed"] is True
    db = tmp_path / "tokens.sqlite3"
    result = _invoke("token", "create", "--role", "analyst", "--name", "me", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().startswith("ldp_") and "\n" not in result.stdout.strip()  # the token alone
    result = _invoke("token", "list", "--db", str(db), "--json")
    assert result.exit_code == 0, result.output
    [tok] = _strict(result.stdout)["tokens"]
    assert tok["role"] == "analyst" and tok["name"] == "me" and tok["revoked_unix_ms"] is None


def test_version() -> None:
    result = _invoke("--version")
    assert result.exit_code == 0 and re.fullmatch(r"ldp-aggregator \S+\n", result.stdout)


def _all_help_texts(root: Any) -> dict[str, str]:
    """``--help`` of every command and group of a Typer app, by command path."""
    command = typer.main.get_command(root)
    texts: dict[str, str] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        result = runner.invoke(root, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        texts[" ".join(path) or "(root)"] = result.output
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(command, [])
    return texts


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_help_is_clean_and_shows_defaults() -> None:
    texts = _all_help_texts(app)
    assert {"(root)", "serve", "campaign create", "token list", "decode"} <= set(texts)
    for path, text in texts.items():
        for markup in ("``", ":mod:", ":func:", ":class:", "::"):
            assert markup not in text, (path, markup)
    root = _flat(texts["(root)"])
    assert "Exit codes" in root and "3 the server refused" in root and "--version" in root
    serve = _flat(texts["serve"])
    for default in ("ldp-data/ldp.sqlite3", "127.0.0.1:50051", "retain", "off", "text", "info"):
        assert f"[default: ({default})]" in serve, default  # none of them blank
    assert "[default: 0.95]" in _flat(texts["decode"])


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """A server with authentication on: (target, admin token, reporter token)."""
    db = tmp_path / "auth.sqlite3"
    open_store(str(db)).close()
    tokens = {}
    for role in (Role.ADMIN, Role.REPORTER):
        token, record = new_token_record(role)
        add_token(db, record)
        tokens[role] = token
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
        yield server.target, tokens[Role.ADMIN], tokens[Role.REPORTER]


def test_access_errors_name_the_cli_option(guarded: tuple[str, str, str]) -> None:
    # Issue 13: the error spoke of gRPC metadata; a CLI user needs --token or LDP_TOKEN.
    target, admin, reporter = guarded
    result = _invoke("campaign", "list", "--server", target)
    line = _one_error_line(result.output)
    assert result.exit_code == 3 and "UNAUTHENTICATED" in line
    assert "--token" in line and "LDP_TOKEN" in line and "token create --role admin" in line
    assert "metadata" not in line
    result = _invoke("--token", "ldp_not-a-token", "campaign", "list", "--server", target)
    line = _one_error_line(result.output)
    assert result.exit_code == 3 and "refused" in line and "LDP_TOKEN" in line
    result = _invoke("campaign", "close", "nope", "--server", target, env={"LDP_TOKEN": reporter})
    line = _one_error_line(result.output)
    assert result.exit_code == 3 and "PERMISSION_DENIED" in line and "needs admin" in line
    assert "--token" in line and "LDP_TOKEN" in line
    result = _invoke("campaign", "list", "--server", target, env={"LDP_TOKEN": admin})
    assert result.exit_code == 0, result.output


# ------------------------------------------------------- issue 13: bad input is one line, data aside


def test_request_options_are_checked_before_the_data(running: Running, tmp_path: Path) -> None:
    # Issue 13: duplicate candidates and alpha=NaN passed on an empty campaign and failed once it had
    # reports. Now the answer is the same either way: a bad option, exit 2, whatever the data.
    server = running.server.target
    toml = tmp_path / "words.toml"
    toml.write_text('mechanism = "rappor"\n[params]\nk = 16\nh = 2\nm = 2\n', encoding="utf-8")
    assert _invoke("campaign", "create", "words", "--from-file", str(toml), "--server", server).exit_code == 0
    dup = tmp_path / "dup.txt"
    dup.write_text("a\na\n", encoding="utf-8")
    db = str(running.server.config.db)
    for where in (["--server", server], ["--db", db]):
        result = _invoke("estimate", "words", "--candidates", str(dup), *where)
        assert result.exit_code == 2 and "repeated" in _one_error_line(result.output), result.output
        result = _invoke("decode", "words", "--candidates", str(dup), *where)
        assert result.exit_code == 2 and "repeated" in _one_error_line(result.output), result.output
        result = _invoke("decode", "words", "--alpha", "nan", *where, "--candidates", str(toml))
        assert result.exit_code == 2 and "alpha=nan" in _one_error_line(result.output), result.output
        result = _invoke("decode", "words", "--confidence", "2", *where, "--candidates", str(toml))
        assert result.exit_code == 2 and "confidence=2" in _one_error_line(result.output), result.output


def test_paired_options_are_checked_before_the_data(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "p.sqlite3"))
    try:
        agg = Aggregator(store)
        params = make_params(
            "paired", fields={"first": "grr", "first.domain": "3", "first.epsilon": "1", "second": "rr",
                              "second.epsilon": "1"},
        )  # fmt: skip
        agg.create_campaign(wire.campaign_to_proto(campaign_id="pair", params=params))
        with pytest.raises(InvalidParameterError, match="confidence"):
            agg.estimate_association("pair", confidence=float("nan"))
        with pytest.raises(InvalidParameterError, match="first_candidates"):
            agg.estimate_association("pair", first_candidates=["a"])
    finally:
        store.close()


@pytest.mark.parametrize("command", [["estimate", "x"], ["decode", "x"], ["associate", "x"],
                                     ["campaign", "export", "x"]])  # fmt: skip
@pytest.mark.parametrize("content", [b"", b"not a database, just text\n"])
def test_an_unusable_db_file_is_one_line(tmp_path: Path, command: list[str], content: bytes) -> None:
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(content)
    result = _invoke(*command, "--db", str(bad))
    line = _one_error_line(result.output)
    assert result.exit_code == 2 and f"--db {bad}" in line and "allowed an ldp-aggregator database" in line


def test_a_busy_metrics_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _invoke(
            "serve",
            "--db",
            str(tmp_path / "m.sqlite3"),
            "--listen",
            "127.0.0.1:0",
            "--metrics-port",
            str(port),
        )
    line = _one_error_line(result.output)
    assert result.exit_code == 2 and f"metrics_port={port}" in line and "free TCP port" in line


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["estimate", "x", "--confidence", "abc"], ["--confidence", "'abc'", "estimate --help"]),
        (["campaign", "list", "--jsn"], ["--jsn", "--json"]),
        (["token", "create"], ["--role"]),
        (["nosuch"], ["nosuch"]),
    ],
)
def test_usage_errors_are_one_line_too(argv: list[str], needles: list[str]) -> None:
    # Issue 13: the library drew a boxed panel of several lines; the convention is one error line.
    result = _invoke(*argv)
    line = _one_error_line(result.output)
    assert result.exit_code == 2
    for needle in needles:
        assert needle in line, (needle, line)


def test_estimate_says_why_rappor_items_are_empty(running: Running, tmp_path: Path) -> None:
    # Issue 13 item 17: GetEstimate on a RAPPOR campaign without candidates answered empty items and no
    # explanation; the CLI shows the server's note, from the server and from the database file alike.
    server = running.server.target
    toml = tmp_path / "words.toml"
    toml.write_text('mechanism = "rappor"\n[params]\nk = 16\nh = 2\nm = 2\n', encoding="utf-8")
    assert _invoke("campaign", "create", "words", "--from-file", str(toml), "--server", server).exit_code == 0
    db = str(running.server.config.db)
    for where in (["--server", server], ["--db", db]):
        result = _invoke("estimate", "words", *where)
        assert result.exit_code == 0, result.output
        assert "no candidate strings" in _flat(result.output) and "DecodeRappor" in _flat(result.output)
        result = _invoke("estimate", "words", "--json", *where)
        assert result.exit_code == 0, result.output
        assert "no candidate strings" in _strict(result.stdout)["note"]
