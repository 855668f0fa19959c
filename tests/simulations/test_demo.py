"""The main job runs end to end (small N): server process, three campaigns over gRPC, plot, clean stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations import demo


@pytest.mark.timeout(180)
def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--users", "3000", "--db", str(tmp_path / "db.sqlite3"), "--out", str(tmp_path / "out")]
    code = demo.main(args)
    out = capsys.readouterr().out
    assert code == 0
    assert "exit code 0 (clean)" in out
    for question in ("password manager", "browser", "home page"):
        assert question in out
    png = tmp_path / "out" / "demo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
