"""The main job runs end to end (small N): server process, three campaigns over gRPC, plot, clean stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ldp_aggregator.cli import app as aggregator_cli
from ldp_aggregator.service import open_store
from ldp_aggregator.store import list_tokens
from simulations import demo


def _create_token(db: Path) -> None:
    result = CliRunner().invoke(aggregator_cli, ["token", "create", "--role", "reporter", "--db", str(db)])
    assert result.exit_code == 0, result.output


@pytest.mark.timeout(180)
def test_demo_runs_end_to_end_on_a_database_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 13: the README's operator steps create a token in ldp-data/ldp.sqlite3 (authentication on).
    # `make demo` must neither use nor change that database, and must start from a fresh database of its
    # own even when an earlier run (or a curious user) left a token in it.
    monkeypatch.chdir(tmp_path)
    operator_db = Path("ldp-data") / "ldp.sqlite3"
    demo_db = Path("demo-output") / "demo.sqlite3"
    _create_token(operator_db)
    _create_token(demo_db)
    operator_tokens = list_tokens(operator_db)

    code = demo.main(["--users", "3000"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "exit code 0 (clean)" in out
    assert "web view (read-only, docs/web.md): http://127.0.0.1:" in out  # issue 19
    for question in ("password manager", "browser", "home page"):
        assert question in out
    png = Path("demo-output") / "demo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The operator's database is as it was: same tokens, no demo campaigns.
    assert list_tokens(operator_db) == operator_tokens
    store = open_store(str(operator_db), read_only=True)
    try:
        assert store.list_campaigns() == []
    finally:
        store.close()
    # The demo's database was made afresh: no token survived from before, three campaigns in it.
    assert list_tokens(demo_db) == []
    store = open_store(str(demo_db), read_only=True)
    try:
        assert len(store.list_campaigns()) == 3
    finally:
        store.close()


@pytest.mark.timeout(180)
def test_demo_keeps_its_web_view_up_until_ctrl_c(tmp_path: Path) -> None:
    """Issue 19: ``--keep-web`` (``make demo KEEP_WEB=1``): after the demo the aggregator and its web view
    stay up with the demo's campaigns, until Ctrl-C (SIGINT to the process group, as a terminal sends)."""
    cmd = [sys.executable, "-m", "simulations.demo", "--users", "2000", "--out", str(tmp_path), "--keep-web"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "stays up at" in line:
                break
        url = re.search(r"stays up at (\S+)", lines[-1])
        assert url is not None, "".join(lines)
        with urllib.request.urlopen(url.group(1) + "api/campaigns", timeout=30) as resp:
            doc = json.loads(resp.read())
        assert [c["n_reports"] for c in doc["campaigns"]] == [2000, 2000, 2000]
        os.killpg(proc.pid, signal.SIGINT)
        rest = proc.stdout.read()
        assert proc.wait(timeout=60) == 0, rest
        assert "exit code 0 (clean)" in rest
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
