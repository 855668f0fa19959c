"""End-to-end tests of the ``ldp-sim`` command line (typer's CliRunner): output files and bad specs."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simulations.cli import app

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ITEM_KEYS = {"label", "repeat", "true_count", "estimate", "std_error", "ci_low", "ci_high"}
METRIC_KEYS = {
    "n_repeats",
    "n_items",
    "mse",
    "mse_over_variance",
    "total_variation",
    "max_abs_error",
    "coverage",
    "detected",
    "false_positives",
    "false_negatives",
    "allocated_mass",
    "rmse_frequency",
    "predicted_rmse_frequency",
    "max_std_error_frequency",
}

runner = CliRunner()


def _invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


def _strict_json(path: Path) -> Any:
    """Parse refusing NaN/Infinity tokens (Python's json accepts them by default)."""

    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def _is_png(path: Path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data.startswith(PNG_MAGIC)


def _csv(tmp_path: Path, rows: list[tuple[str, int]]) -> Path:
    path = tmp_path / "pop.csv"
    path.write_text("value,count\n" + "".join(f"{v},{c}\n" for v, c in rows), encoding="utf-8")
    return path


def test_run_rappor_with_candidates_json_and_plot(tmp_path: Path) -> None:
    pop = _csv(tmp_path, [("apple", 50), ("banana", 30), ("cherry", 20)])
    cands = tmp_path / "cands.txt"
    cands.write_text("apple\nbanana\n\ncherry\ndurian\n", encoding="utf-8")
    out_json, out_png = tmp_path / "run.json", tmp_path / "run.png"
    res = _invoke(
        "run",
        "--mechanism", "rappor",
        "--population", f"empirical:{pop}",
        "--users", "200000",
        "--param", "k=32",
        "--param", "m=8",
        "--candidates", str(cands),
        "--repeat", "2",
        "--seed", "4",
        "--json-out", str(out_json),
        "--plot", str(out_png),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "metrics against the truth" in res.output
    assert "false positives" in res.output
    doc = _strict_json(out_json)
    assert set(doc) == {"summary", "items"}
    s = doc["summary"]
    assert s["mechanism"] == "rappor" and s["mode"] == "sum" and s["n_users"] == 200_000
    assert s["params"]["k"] == 32 and s["params"]["m"] == 8 and s["params"]["h"] == 2
    assert isinstance(s["epsilon"], float) and isinstance(s["epsilon_inf"], float)
    assert s["domain"] == 3 and s["n_items"] == 4 and s["repeats"] == 2
    assert set(s["metrics"]) == METRIC_KEYS
    assert s["detection"]["alpha"] == 0.05 and "Bonferroni" in s["detection"]["method"]
    items = doc["items"]
    assert len(items) == 2 * 4
    assert [(it["repeat"], it["label"]) for it in items[:4]] == [
        (0, "apple"), (0, "banana"), (0, "cherry"), (0, "durian"),
    ]  # fmt: skip
    for it in items:
        assert set(it) == ITEM_KEYS | {"detected"}
        assert isinstance(it["true_count"], int) and isinstance(it["estimate"], float)
        assert it["ci_low"] <= it["ci_high"]
    assert sum(it["true_count"] for it in items if it["repeat"] == 1) == 200_000
    assert items[3]["true_count"] == 0
    assert _is_png(out_png)


def test_run_rr_report_mode_json_infinity_as_string(tmp_path: Path) -> None:
    out_json = tmp_path / "rr.json"
    res = _invoke(
        "run", "-m", "rr", "-e", "1", "-p", "uniform", "-n", "5000", "--mode", "report",
        "--json-out", str(out_json),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = _strict_json(out_json)
    assert doc["summary"]["epsilon_inf"] == "inf"  # rr has no longitudinal bound
    assert doc["summary"]["detection"] is None
    assert doc["summary"]["metrics"]["detected"] is None
    assert {it["label"] for it in doc["items"]} == {"0", "1"}
    assert all(set(it) == ITEM_KEYS for it in doc["items"])


def test_run_grr_many_items_plot(tmp_path: Path) -> None:
    out_png = tmp_path / "grr.png"
    res = _invoke(
        "run", "-m", "grr", "-e", "2", "-d", "200", "-n", "100000", "--plot", str(out_png),
        "--show-items", "5",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "top 5 of 200 items" in res.output
    assert _is_png(out_png)


def test_sweep_over_epsilon_json_and_plot(tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    res = _invoke(
        "sweep", "-m", "grr", "-d", "16", "-n", "50000", "--over", "epsilon", "--values", "0.5,1,2,4",
        "--json-out", str(out_json), "--plot", str(out_png),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "sweep over epsilon" in res.output
    doc = _strict_json(out_json)
    assert doc["summary"]["over"] == "epsilon" and doc["summary"]["values"] == [0.5, 1.0, 2.0, 4.0]
    assert [p["value"] for p in doc["points"]] == [0.5, 1.0, 2.0, 4.0]
    assert all(set(p["metrics"]) == METRIC_KEYS for p in doc["points"])
    assert _is_png(out_png)


def test_sweep_target_error(tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "t.json", tmp_path / "t.png"
    res = _invoke(
        "sweep", "-m", "grr", "-d", "16", "--over", "epsilon", "--values", "1,2",
        "--target-error", "0.01", "--error-metric", "max-se", "--json-out", str(out_json),
        "--plot", str(out_png),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "users needed" in res.output
    doc = _strict_json(out_json)
    assert doc["summary"]["target_error"] == 0.01
    needed = [p["required_users"] for p in doc["points"]]
    assert needed[0] > needed[1] > 0  # more privacy needs more users
    for p in doc["points"]:
        assert p["n_users"] == p["required_users"]
        assert p["achieved_over_target"] == pytest.approx(1.0, abs=0.05)
    assert _is_png(out_png)


def test_help() -> None:
    res = _invoke("run", "--help")
    assert res.exit_code == 0
    assert "--population" in res.output


# ------------------------------------------------------------------------------------------ bad specs


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run", "-m", "grr", "-e", "1", "-d", "8", "-p", "zipff:1.1"], ["--population", "zipff:1.1"]),
        (["run", "-m", "grr", "-e", "1", "-d", "8", "-p", "normal:0,1"], ["--population", "categorical"]),
        (["run", "-m", "grr", "-e", "1", "-d", "8", "-n", "0"], ["--users", "n_users=0"]),
        (["run", "-m", "nope", "-d", "8"], ["--mechanism", "nope"]),
        (["run", "-m", "rappor", "-d", "8", "--param", "zz=3"], ["--param", "zz"]),
        (["run", "-m", "rappor", "-d", "8", "--param", "k=abc"], ["--param", "abc"]),
        (["run", "-m", "rappor", "-d", "8", "--param", "k=0"], ["--param", "k=0"]),
        (["run", "-m", "rappor", "-d", "8", "--param", "k"], ["--param", "NAME=VALUE"]),
        (["run", "-m", "rappor", "-d", "8", "-e", "1"], ["--epsilon"]),
        (["run", "-m", "grr", "-d", "8"], ["--epsilon"]),
        (["run", "-m", "grr", "-e", "1"], ["--domain"]),
        (["run", "-m", "rr", "-e", "1", "-d", "3"], ["--domain", "2 for rr"]),
        (["run", "-m", "grr", "-e", "1", "-d", "8", "--mode", "fast"], ["--mode", "fast"]),
        (["run", "-m", "grr", "-e", "1", "-d", "8", "--repeat", "0"], ["--repeat"]),
        (["run", "-m", "grr", "-e", "1", "-d", "8", "--server", "nohost"], ["--server", "nohost"]),
        (["run", "-m", "rappor", "-d", "8", "--mode", "grpc", "--grpc-client", "reporter"],
         ["--grpc-client"]),
        (["sweep", "-m", "grr", "-d", "8", "--over", "zz", "--values", "1"], ["--over", "zz"]),
        (["sweep", "-m", "grr", "-d", "8", "-e", "1", "--over", "users", "--values", "1.5"],
         ["--values", "1.5"]),
        (["sweep", "-m", "grr", "-d", "8", "-e", "1", "--values", "1,2"], ["--over"]),
        (["sweep", "-m", "grr", "-d", "8", "-e", "1"], ["--over"]),
        (["sweep", "-m", "grr", "-d", "8", "-e", "1", "--target-error", "-1"], ["--target-error"]),
        (["sweep", "-m", "grr", "-d", "8", "-e", "1", "--target-error", "0.1", "--error-metric", "mae"],
         ["--error-metric", "mae"]),
    ],
)  # fmt: skip
def test_bad_spec_exits_2_naming_option_and_value(args: list[str], needles: list[str]) -> None:
    res = _invoke(*args)
    assert res.exit_code == 2, res.output
    for needle in needles:
        assert needle in res.output, (needle, res.output)
    assert "Traceback" not in res.output


def test_domain_smaller_than_support(tmp_path: Path) -> None:
    pop = _csv(tmp_path, [("a", 5), ("b", 4), ("c", 3), ("d", 2), ("e", 1)])
    res = _invoke("run", "-m", "grr", "-e", "1", "-p", f"empirical:{pop}", "-d", "3")
    assert res.exit_code == 2
    assert "--domain" in res.output and "domain=3" in res.output and "at least 5" in res.output


def test_bad_empirical_csv(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("value,count\na,-3\n", encoding="utf-8")
    res = _invoke("run", "-m", "grr", "-e", "1", "-p", f"empirical:{bad}")
    assert res.exit_code == 2
    assert "--population" in res.output and "-3" in res.output
    res = _invoke("run", "-m", "grr", "-e", "1", "-p", f"empirical:{tmp_path / 'missing.csv'}")
    assert res.exit_code == 2
    assert "--population" in res.output and "missing.csv" in res.output


def test_candidates_errors(tmp_path: Path) -> None:
    res = _invoke("run", "-m", "rappor", "-d", "8", "--candidates", str(tmp_path / "nope.txt"))
    assert res.exit_code == 2
    assert "--candidates" in res.output and "nope.txt" in res.output
    cands = tmp_path / "c.txt"
    cands.write_text("a\nb\n", encoding="utf-8")
    res = _invoke("run", "-m", "grr", "-e", "1", "-d", "8", "--candidates", str(cands))
    assert res.exit_code == 2
    assert "--candidates" in res.output and "only for rappor" in res.output
    dup = tmp_path / "dup.txt"
    dup.write_text("a\na\n", encoding="utf-8")
    res = _invoke("run", "-m", "rappor", "-d", "8", "--candidates", str(dup))
    assert res.exit_code == 2
    assert "--candidates" in res.output and "repeated" in res.output


def test_non_integer_users_is_a_usage_error() -> None:
    res = _invoke("run", "-m", "grr", "-e", "1", "-d", "8", "--users", "many")
    assert res.exit_code == 2
    assert "--users" in res.output


def test_unwritable_json_path(tmp_path: Path) -> None:
    res = _invoke(
        "run", "-m", "rr", "-e", "1", "-n", "100", "--json-out", str(tmp_path / "no" / "dir" / "x.json")
    )
    assert res.exit_code == 2
    assert "--json-out" in res.output


# ------------------------------------------------------------------------- issue 13: CLI conventions


def test_json_goes_to_stdout_and_json_out_to_a_file(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", "-m", "rr", "-e", "1", "-n", "2000", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout, parse_constant=lambda t: pytest.fail(f"non-standard JSON token {t}"))
    assert doc["summary"]["mechanism"] == "rr" and doc["summary"]["epsilon_inf"] == "inf"
    out = tmp_path / "sweep.json"
    res = runner.invoke(
        app, ["sweep", "-m", "grr", "-d", "4", "-n", "2000", "--over", "epsilon", "--values", "1,2",
              "--json", "--json-out", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == _strict_json(out)  # the same document on stdout and in the file
    res = runner.invoke(app, ["run", "-m", "laplace", "-p", "normal:0,1", "-e", "1", "-n", "2000", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["summary"]["mechanism"] == "laplace"


def test_exit_codes_unreachable_and_internal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("simulations.runners.grpc_runner._CONNECT_TIMEOUT_S", 0.2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    res = runner.invoke(app, ["run", "-m", "grr", "-e", "1", "-d", "4", "-n", "100", "--mode", "grpc",
                              "--server", closed])  # fmt: skip
    assert res.exit_code == 4, res.output  # unavailable, as ldp-aggregator says it
    assert "cannot connect" in res.output and "Traceback" not in res.output

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("simulations.cli_run.simulate", boom)
    res = runner.invoke(app, ["run", "-m", "grr", "-e", "1", "-d", "4", "-n", "100"])
    assert res.exit_code == 1 and "internal error: RuntimeError: boom" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_version_and_clean_help() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.startswith("ldp-sim ")
    for path in ([], ["run"], ["sweep"], ["associate"]):
        res = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert res.exit_code == 0, res.output
        for markup in ("``", ":mod:", ":func:", "::"):
            assert markup not in res.output, (path, markup)
    root = runner.invoke(app, ["--help"], terminal_width=200).output
    # The examples keep their lines (they were reflowed into one paragraph) and the exit codes are listed.
    assert re.search(r"^\s*ldp-sim run -m grr -e 2 -p zipf:1.1 -d 64 -n 1000000\s*$", root, re.M), root
    flat = " ".join(root.split())
    assert "Exit codes" in flat and "4 unavailable" in flat
    run_help = runner.invoke(app, ["run", "--help"], terminal_width=200).output
    assert "--json-out" in run_help and "[default: zipf:1.1]" in run_help


def test_python_dash_m_simulations_cli_has_every_command() -> None:
    """``python -m simulations.cli`` runs the same command tree as ``ldp-sim``.

    While the command modules imported ``simulations.cli`` back, running it as ``__main__`` registered
    ``associate`` on a second copy of the module, so this help lacked it.
    """
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    command = [sys.executable, "-m", "simulations.cli", "--help"]
    proc = subprocess.run(command, check=False, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = re.findall(r"^│ (\w+) ", proc.stdout, re.M)
    # Every command and group registered on the app (simulations.cli's registration order), none missing.
    registered = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert listed == registered and "privacy" in listed and "days" in listed, proc.stdout
