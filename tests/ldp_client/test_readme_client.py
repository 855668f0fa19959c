"""The README's client snippet reports to a campaign the README's operator creates, and runs as written
(issue 13 item 10: its campaign id was "home-page" while the operator creates "browser" and "home")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ldp_client.params import RapporParams
from tests.ldp_client.test_reporter import FakeServer, campaign

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _client_snippet() -> str:
    section = README[README.index("App developer (the client)") : README.index("Operator:")]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "no python block in the README's client section"
    return match.group(1)


def test_the_client_snippet_uses_the_operators_campaign_ids() -> None:
    code = _client_snippet()
    created = set(re.findall(r"campaign create (\S+)", README))
    used = set(re.findall(r'Reporter\(\s*"[^"]*",\s*"([^"]+)"', code))
    used |= set(re.findall(r'campaign_id="([^"]+)"', code))
    assert used, "the snippet names no campaign"
    assert used <= created, (used, created)


def test_the_client_snippet_runs_against_the_operators_home_campaign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The operator's `home`: --mechanism rappor --param k=128 --param h=2 --param m=64 (f, p, q defaults).
    server = FakeServer(campaign(RapporParams(k=128, h=2, m=64), cid="home"))
    try:
        code = _client_snippet().replace("127.0.0.1:50051", server.target)
        code = code.replace("/var/lib/myapp/ldp", str(tmp_path / "ldp"))
        monkeypatch.chdir(tmp_path)
        exec(compile(code, "README.md", "exec"), {})  # leaving its `with` block raises on any loss
        out = capsys.readouterr().out
        assert "RapporReport(cohort=" in out
        assert f"Spend(epsilon={RapporParams(k=128, h=2, m=64).epsilon_inf!r}, delta=0.0)" in out
        assert server.servicer.counts() == [2]
    finally:
        server.stop()
