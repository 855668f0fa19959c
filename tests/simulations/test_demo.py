"""The main job runs end to end (small N): server process, three campaigns over gRPC, plot, clean stop."""

from __future__ import annotations

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
