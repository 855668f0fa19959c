"""``ldp-sim run --mechanism pem --param rounds=adaptive`` (issue 16): the rounds in process (report mode)
and as a real campaign closed round by round over gRPC (grpc mode), the same users giving the same result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ldp_client.mechanisms.pem import SPEC as PEM
from simulations.cli import app as sim_app

runner = CliRunner()


@pytest.mark.parametrize("alphabet", ["", "abcdefghijklmnopqrstuvwxyz0123456789"])
def test_ldp_sim_runs_adaptive_rounds_in_report_and_grpc_mode(tmp_path: Path, alphabet: str) -> None:
    """Over bytes, and over a declared alphabet (6-bit symbols: 5 characters take 3 rounds, not 5)."""
    csv = tmp_path / "words.csv"
    csv.write_text("value,count\nalpha,500\nbeta,300\ngamma,200\n" + "".join(f"w{i},5\n" for i in range(40)))
    fields = {
        "top_k": "4",
        "max_length": "5",
        "rounds": "adaptive",
        **({"alphabet": alphabet} if alphabet else {}),
    }
    levels = PEM.make(epsilon=8.0, domain=None, fields=fields).levels
    assert levels == (4 if alphabet else 7)  # 6-bit symbols: 30 bits, not 40
    docs = {}
    for mode in ("report", "grpc"):
        out = tmp_path / f"{mode}.json"
        args = ["run", "--mechanism", "pem", "-p", f"empirical:{csv}", "-n", "30000", "-e", "8"]
        args += ["--param", "top_k=4", "--param", "max_length=5"]
        args += ["--param", f"alphabet={alphabet}"] if alphabet else []
        args += ["--param", "rounds=adaptive"]
        result = runner.invoke(sim_app, [*args, "--mode", mode, "--json-out", str(out)])
        assert result.exit_code == 0, result.output
        docs[mode] = json.loads(out.read_text())
    for doc in docs.values():
        items = doc["items"]
        assert [it["label"] for it in items[:3]] == ["alpha", "beta", "gamma"], items
        assert doc["summary"]["params"]["rounds"] == "adaptive"
        assert doc["summary"]["params"].get("alphabet", "") == alphabet
        assert [lv["level"] for lv in doc["levels"]] == list(range(levels))
        assert sum(lv["reports"] for lv in doc["levels"]) == 30_000
        for it in items[:3]:
            assert abs(it["estimate"] - it["true_count"]) < 4 * it["std_error"]
    # The same seeded users and reports: the server's rounds find what the in-process rounds find.
    assert docs["grpc"]["items"] == docs["report"]["items"]
    assert docs["grpc"]["levels"] == docs["report"]["levels"]
    bad = runner.invoke(sim_app, [*args[:-2], "--param", "rounds=twice", "--mode", "report"])
    assert bad.exit_code == 2 and "rounds" in bad.output and "adaptive" in bad.output
