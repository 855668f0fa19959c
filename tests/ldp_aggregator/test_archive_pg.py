"""Report archives exported from a PostgreSQL deployment (issue 15, item 5's gap): ``archive export|verify
--store URL`` on a real throwaway PostgreSQL, while a replica serves it, then reduced on a real Dask cluster.

The reduce of an archive exported from PostgreSQL must answer exactly what the replica answers from the
database (the accumulator byte for byte, the estimate and the RAPPOR decode as JSON), and a ``--store`` URL
must be checked and refused as the token and purge commands refuse it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from distributed import Client, LocalCluster
from typer.testing import CliRunner

from ldp_aggregator import reduce
from ldp_aggregator.cli import app
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import Aggregator, open_store
from ldp_client import ClientSecret, GRREncoder, RapporEncoder, registry, wire
from ldp_client.params import GRRParams, RapporParams

runner = CliRunner()
GRR = GRRParams.from_epsilon(["chrome", "safari", "edge", "other"], 2.0)
RAPPOR = RapporParams(k=64, h=2, m=8)
SITES = [f"site-{i}.example" for i in range(6)]


@pytest.fixture(scope="module")
def dask() -> Iterator[Client]:
    """A real LocalCluster (two single-threaded workers in this process) and its client."""
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        yield client


def _fill_postgres(url: str) -> None:
    """Two campaigns (GRR, and string RAPPOR with candidates) filled through the service's ingest path on
    the PostgreSQL store, raw reports retained: batches and single reports, as replicas commit them."""
    rng = np.random.default_rng(15)
    with open_store(url) as store:
        agg = Aggregator(store)
        agg.create_campaign(wire.campaign_to_proto(campaign_id="browser", params=GRR))
        agg.create_campaign(
            wire.campaign_to_proto(campaign_id="home", params=RAPPOR, candidates=[*SITES, "never.example"])
        )
        for cid, params, labels in (("browser", GRR, []), ("home", RAPPOR, SITES)):
            spec = registry.spec_for(params)
            for b in range(6):
                values = rng.integers(0, 4 if cid == "browser" else len(SITES), size=400)
                cols = spec.encode_batch(params, values, rng, campaign_id=cid, labels=labels)
                asyncio.run(
                    agg.submit_batch(
                        wire.batch_to_proto(campaign_id=cid, batch_id=f"b{b}", params=params, columns=cols)
                    )
                )
        # A single report of each, as a device's per-report encoder makes it (OS randomness).
        singles = (
            ("browser", GRR, GRREncoder(GRR).encode("safari")),
            (
                "home",
                RAPPOR,
                RapporEncoder(RAPPOR, campaign_id="home", secret=ClientSecret.generate()).encode(SITES[0]),
            ),
        )
        for cid, params, output in singles:
            report = wire.report_to_proto(campaign_id=cid, report_id="r0", params=params, report=output)
            asyncio.run(agg.submit_report(report))


def _json(args: list[str]) -> Any:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.stdout)


def test_archive_exported_from_postgresql_reduces_on_dask_to_the_replicas_answers(
    pg_url: str, tmp_path: Path, dask: Client
) -> None:
    _fill_postgres(pg_url)
    root = tmp_path / "archive"
    config = ServerConfig(store=pg_url, listen="127.0.0.1:0")
    with BackgroundServer(config) as replica:  # exported while a replica serves the database
        server = ["--server", replica.target]
        exported = _json(["archive", "export", str(root), "--store", pg_url, "--json"])
        assert exported["campaigns"]["browser"]["rows"] == 7  # six batches and one single report
        assert exported["campaigns"]["home"]["rows"] == 7
        again = _json(["archive", "export", str(root), "--store", pg_url, "--json"])
        assert again["rows"] == 0  # incremental: nothing new since the first export
        verified = _json(["archive", "verify", str(root), "--store", pg_url, "--json"])
        assert verified["ok"] and verified["files"] == 2 and verified["rows"] == 14
        scheduler = ["--scheduler", dask.scheduler.address]
        for command, cid in (("estimate", "browser"), ("estimate", "home"), ("decode", "home")):
            reduced = _json(["archive", command, str(root), cid, "--json", *scheduler])
            assert reduced == _json([command, cid, "--json", *server]), (command, cid)
            assert reduced["n_reports"] == 6 * 400 + 1
    with open_store(pg_url, read_only=True) as store:
        for cid in ("browser", "home"):
            result = reduce.reduce_archive(dask, root, cid)
            assert result.accumulator.to_bytes() == store.accumulator(cid).to_bytes()


def _same_refusal(args: list[str], like: list[str]) -> str:
    """``args`` fail as ``like`` (a token or purge command) fails: the same one line and exit code."""
    ours, theirs = runner.invoke(app, args), runner.invoke(app, like)
    assert ours.exit_code == theirs.exit_code != 0, (args, ours.output, theirs.output)
    assert ours.stderr == theirs.stderr, (args, ours.stderr, theirs.stderr)
    lines = ours.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in ours.output
    return lines[0]


def test_archive_store_urls_are_checked_as_the_token_and_purge_commands_check_them(
    pg_url: str, tmp_path: Path
) -> None:
    params = psycopg.conninfo.conninfo_to_dict(pg_url)
    wrong_password = (
        f"postgresql://postgres:not-the-secret@{params['host']}:{params['port']}/postgres"
        f"?options={pg_url.partition('options=')[2]}"
    )
    root = tmp_path / "archive"
    urls = {
        "malformed": "postgresql://u:hunter2@h:port/db",
        "not postgresql": "sqlite:///x.db",
        "refused login": wrong_password,
        "no tables yet": pg_url,
        "unreachable": "postgresql://u:not-the-secret@127.0.0.1:1/postgres",
    }
    lines = {}
    for case, url in urls.items():
        for command in (["archive", "export", str(root)], ["archive", "verify", str(root)]):
            like = ["token", "list"] if command[1] == "export" else ["purge", "--older-than", "1d"]
            lines[case] = _same_refusal([*command, "--store", url], [*like, "--store", url])
            assert "hunter2" not in lines[case] and "not-the-secret" not in lines[case]
    assert "password authentication failed" in lines["refused login"]
    assert "holding ldp-aggregator tables" in lines["no tables yet"]
    assert runner.invoke(app, ["archive", "export", str(root), "--store", urls["unreachable"]]).exit_code == 4
    both = runner.invoke(app, ["archive", "export", str(root), "--db", "x.sqlite3", "--store", pg_url])
    neither = runner.invoke(app, ["archive", "export", str(root)])
    for result in (both, neither):
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
        assert "--db" in result.stderr and "--store" in result.stderr
    assert not root.exists()  # nothing written by a refused command
    with psycopg.connect(pg_url) as conn:  # and nothing created in the database
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
    assert tables == []
