"""``ldp-aggregator`` campaign and estimate commands against a running server and a database file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from ldp_aggregator.cli import app
from ldp_client import wire
from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.params import GRRParams
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
