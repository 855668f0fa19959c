"""Issue 13 item 11: the device needs no numpy, and the console commands name their missing extra.

Each check runs in a fresh interpreter whose ``sys.meta_path`` refuses to import numpy (and, for the
console commands, every package of their extra), as on a device that installed the bare client.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ldp_client.params import GRRParams, RapporParams
from tests.ldp_client.test_reporter import FakeServer, campaign

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = r"""
import importlib.abc, sys

class _Blocked(importlib.abc.MetaPathFinder):
    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, _Blocked(BLOCKED))
"""


def _run(code: str, blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    program = f"BLOCKED = {blocked!r}\n" + BLOCKER + code
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


ENCODE_ALL = r"""
import ldp_client, ldp_client.reporter, ldp_client.wire, ldp_client.campaign_file  # noqa
from ldp_client import wire
from ldp_client._journal_rows import batch_from_rows, check_rows, row_packer, rows_from_batch
from ldp_client.reporter import encoder_for
from ldp_client.secret import ClientSecret
from tests.ldp_client.test_journal_rows import CASES

secret = ClientSecret.from_bytes(bytes(range(32)))
for name, (params, values) in CASES.items():
    encode = encoder_for(params, campaign_id="c", secret=secret)
    reports = [encode(v) for v in values]
    for r in reports:  # the single-report wire path (SubmitReport) too
        wire.report_to_proto(campaign_id="c", report_id="r", params=params, report=r)
    pack = row_packer(params)
    rows = b"".join(pack(r) for r in reports)
    check_rows(params, "c", rows)
    msg = batch_from_rows(campaign_id="c", batch_id="b", params=params, rows=rows)
    assert msg.count == len(values) and rows_from_batch(params, msg) == rows, name
assert "numpy" not in sys.modules
print("encoded", len(CASES), "mechanisms")
"""


def test_every_per_report_encoder_and_the_batch_rows_work_without_numpy() -> None:
    proc = _run(ENCODE_ALL, ("numpy",))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("encoded ")


REPORT = r"""
from ldp_client import wire
from ldp_client.params import RapporParams
from ldp_client.reporter import Reporter

target, cid, state = sys.argv[1], sys.argv[2], sys.argv[3]
with Reporter(target, cid, max_epsilon=10.0, state_dir=state, batch_size=7, max_batch_age_s=3600.0,
              initial_retry_delay_s=0.01, max_retry_delay_s=0.05) as r:
    values = ["a", "b", "c", "d"] * 5 if cid == "grr" else ["x.example", "y.example"] * 10
    for v in values:
        r.report(v)
    assert r.flush(timeout=30), r.stats()
    assert r.stats().sent_reports == 20
assert "numpy" not in sys.modules
print("reported")
"""


@pytest.mark.parametrize(
    "params",
    [GRRParams.from_epsilon(["a", "b", "c", "d"], 1.0), RapporParams(k=16, h=2, m=4)],
    ids=["grr", "rappor"],
)
def test_the_reporter_sends_without_numpy(params: Any, tmp_path: Path) -> None:
    cid = "grr" if isinstance(params, GRRParams) else "rappor"
    server = FakeServer(campaign(params, cid=cid))
    try:
        proc = _run(REPORT, ("numpy",), server.target, cid, str(tmp_path / "state"))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "reported"
        assert sorted(server.servicer.counts()) == [6, 7, 7]
    finally:
        server.stop()


def test_import_time_shows_no_numpy() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import ldp_client.reporter"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )
    modules = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "ldp_client.reporter" in modules
    assert not [m for m in modules if m.split(".")[0] == "numpy"]


ENTRY = r"""
import importlib
module = sys.argv.pop(1)
importlib.import_module(module).main()
"""


@pytest.mark.parametrize(
    ("module", "line"),
    [
        (
            "ldp_aggregator.entry",
            "ldp-aggregator needs the 'aggregator' extra: pip install 'ldp-collect[aggregator]'",
        ),
        ("simulations.entry", "ldp-sim needs the 'sim' extra: pip install 'ldp-collect[sim]'"),
    ],
)
@pytest.mark.parametrize(
    "blocked", [("numpy",), ("typer", "rich"), ("numpy", "scipy", "typer", "grpc_health")]
)
def test_console_commands_name_their_missing_extra(module: str, line: str, blocked: tuple[str, ...]) -> None:
    proc = _run(ENTRY, blocked, module)
    assert proc.returncode == 1
    assert proc.stderr == line + "\n"
    assert proc.stdout == ""


def test_a_missing_module_that_is_not_an_extra_is_not_disguised() -> None:
    proc = _run(ENTRY, ("ldp_aggregator.cli",), "ldp_aggregator.entry")
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr


def test_the_console_commands_run_with_their_extras() -> None:
    for command in ("ldp-aggregator", "ldp-sim"):
        proc = subprocess.run(
            [str(Path(sys.executable).with_name(command)), "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "Usage" in proc.stdout


def test_numpy_is_an_extra_of_the_package() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not [d for d in meta["dependencies"] if d.startswith("numpy")]
    extras = meta["optional-dependencies"]
    assert [d for d in extras["batch"] if d.startswith("numpy")]
    assert "ldp-collect[batch]" in extras["aggregator"]
    assert "ldp-collect[aggregator]" in extras["sim"]
    assert meta["scripts"] == {
        "ldp-aggregator": "ldp_aggregator.entry:main",
        "ldp-sim": "simulations.entry:main",
    }
