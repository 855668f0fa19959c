"""Report archives in Parquet and their analysis on a real Dask cluster (issue 15, items 2 and 3).

Campaigns of every registered mechanism (one per registry entry, so every kind and layout) are filled
through the service's own ingest path on a real SQLite store, exported, verified, tampered with, and
reduced on a real ``distributed.LocalCluster`` started here (threads, two workers: fast) or reached by its
scheduler address; the reduce must give the store's accumulator byte for byte and the service's answers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster
from typer.testing import CliRunner

from ldp_aggregator import archive, reduce
from ldp_aggregator.analysis import estimate_campaign, estimate_to_proto
from ldp_aggregator.cli import app
from ldp_aggregator.service import Aggregator, open_store
from ldp_aggregator.store import Store
from ldp_client import registry, wire
from ldp_client.errors import CampaignNotFoundError, InvalidParameterError
from ldp_client.params import GRRParams
from ldp_client.spec import Kind, MechanismSpec

runner = CliRunner()
DAY = "2026-11-25"
ROOT = Path(__file__).resolve().parents[2]
SPEC_CASES = [pytest.param(spec, id=spec.name) for spec in registry.SPECS]


def _cid(spec: MechanismSpec[Any]) -> str:
    return f"k-{spec.name}"


async def _fill(
    agg: Aggregator, spec: MechanismSpec[Any], rng: np.random.Generator, batches: int, start: int = 0
) -> None:
    """``batches`` batches of 150 encoded reports and one single report, through the service's ingest."""
    params = spec.examples()[0]
    cid = _cid(spec)
    inputs = spec.campaign_inputs(params, cid)
    labels = [str(x) for x in inputs]
    for b in range(start, start + batches):
        values = rng.integers(0, len(labels), size=150)
        cols = spec.encode_batch(params, values, rng, campaign_id=cid, labels=labels)
        await agg.submit_batch(
            wire.batch_to_proto(campaign_id=cid, batch_id=f"b{b}", params=params, columns=cols)
        )
    output = next(iter(spec.campaign_outputs(params, inputs[-1], cid)))
    report = wire.report_to_proto(campaign_id=cid, report_id=f"r{start}", params=params, report=output)
    await agg.submit_report(report)


def _create(agg: Aggregator, spec: MechanismSpec[Any], candidates: tuple[str, ...] = ()) -> None:
    params = spec.examples()[0]
    agg.create_campaign(wire.campaign_to_proto(campaign_id=_cid(spec), params=params, candidates=candidates))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(str(tmp_path / "ldp.sqlite3")) as s:
        yield s


@pytest.fixture(scope="module")
def dask(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """A real LocalCluster (two single-threaded workers in this process) and its client."""
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        yield client


def _grr_store(store: Store, batches: int = 3) -> Aggregator:
    agg = Aggregator(store)
    spec = registry.spec_named("grr")
    _create(agg, spec)
    asyncio.run(_fill(agg, spec, np.random.default_rng(7), batches))
    return agg


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.suffix == ".parquet"}


# ------------------------------------------------------------------------------------ the store's method


def test_iter_raw_batches_yields_positions_in_ingest_order_and_resumes(store: Store) -> None:
    _grr_store(store, batches=3)
    rows = list(store.iter_raw_batches("k-grr", 0))
    assert len(rows) == 4  # three batches and one single report
    positions = [p for p, _ in rows]
    assert positions == sorted(positions) and len(set(positions)) == 4 and positions[0] >= 1
    assert [payload for _, payload in rows] == list(store.raw_payloads("k-grr"))
    assert list(store.iter_raw_batches("k-grr", positions[1])) == rows[2:]
    assert list(store.iter_raw_batches("k-grr", positions[-1])) == []
    with pytest.raises(InvalidParameterError, match="after_position"):
        store.iter_raw_batches("k-grr", -1)
    with pytest.raises(CampaignNotFoundError):
        store.iter_raw_batches("nope", 0)


def test_an_export_after_a_purge_that_emptied_the_table_misses_nothing(store: Store, tmp_path: Path) -> None:
    """Positions are never reused: with a plain rowid, a purge that deletes every raw row makes the next
    report take position 1 again, and an export resuming after its last position skipped it silently."""
    agg = _grr_store(store, batches=3)
    root = tmp_path / "archive"
    first = archive.export_archive(store, root, day=lambda: DAY)
    assert first.rows == 4
    assert store.purge_raw(2**62) == 4  # retention: every raw row goes
    asyncio.run(_fill(agg, registry.spec_named("grr"), np.random.default_rng(9), 2, start=10))
    fresh = list(store.iter_raw_batches("k-grr", 0))
    last_archived = max(
        p for f in archive.archive_files(root, "k-grr") for p in archive.read_file(f.path).positions
    )
    assert len(fresh) == 3 and min(p for p, _ in fresh) > last_archived
    again = archive.export_archive(store, root, day=lambda: "2026-11-26")
    assert again.rows == 3  # the new reports are archived, not skipped


# ------------------------------------------------------------------------------------------------ export


def test_export_is_incremental_and_never_rewrites_a_file(store: Store, tmp_path: Path) -> None:
    agg = _grr_store(store, batches=3)
    root = tmp_path / "archive"
    first = archive.export_archive(store, root, day=lambda: DAY, max_file_rows=2)
    assert first.rows == 4 and len(first.files) == 2
    before = _files(root)
    again = archive.export_archive(store, root, day=lambda: DAY)
    assert again.rows == 0 and again.files == []
    assert _files(root) == before  # nothing appended, nothing rewritten
    asyncio.run(_fill(agg, registry.spec_named("grr"), np.random.default_rng(8), 2, start=10))
    third = archive.export_archive(store, root, day=lambda: "2026-11-26")
    assert third.rows == 3 and len(third.files) == 1
    after = _files(root)
    assert {p: after[p] for p in before} == before  # the old files are byte for byte as they were
    assert "day=2026-11-26" in str(third.files[0])
    report = archive.verify_archive(root, store=store)
    assert report.problems == [] and report.rows == 7 and report.files == 3
    archived = [p for f in archive.archive_files(root, "k-grr") for p in archive.read_file(f.path).payloads]
    assert archived == list(store.raw_payloads("k-grr"))


def test_export_writes_only_positions_and_payloads_with_parameters_and_checksum(
    store: Store, tmp_path: Path
) -> None:
    _grr_store(store, batches=1)
    root = tmp_path / "archive"
    (path,) = archive.export_archive(store, root, day=lambda: DAY).files
    table = pq.read_table(path)
    assert table.column_names == ["position", "payload"]
    meta = {k.decode(): v.decode() for k, v in pq.read_metadata(path).metadata.items()}
    assert base64.b64decode(meta["ldp.campaign"]) == store.get_campaign("k-grr").params_blob
    assert meta["ldp.checksum"].startswith("sha256:") and meta["ldp.rows"] == "2"
    assert path.parent.name == f"day={DAY}" and path.parent.parent.name == "campaign=k-grr"


class _FailingSource:
    """A store whose raw reports fail half-way (a lost connection, a full disk)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def get_campaign(self, campaign_id: str) -> Any:
        return self._store.get_campaign(campaign_id)

    def list_campaigns(self) -> Any:
        return self._store.list_campaigns()

    def iter_raw_batches(self, campaign_id: str, after_position: int) -> Iterator[tuple[int, bytes]]:
        rows = self._store.iter_raw_batches(campaign_id, after_position)
        yield next(rows)
        yield next(rows)
        raise OSError("connection lost")


def test_a_failed_export_leaves_nothing_half_written(store: Store, tmp_path: Path) -> None:
    _grr_store(store, batches=3)
    root = tmp_path / "archive"
    with pytest.raises(OSError, match="connection lost"):
        archive.export_archive(_FailingSource(store), root, day=lambda: DAY)
    assert [p for p in root.rglob("*") if p.is_file() and p.name != ".export.lock"] == []
    assert archive.export_archive(store, root, day=lambda: DAY).rows == 4  # the next export has it all


def _rewrite(path: Path, *, payloads: list[bytes] | None = None, meta: dict[str, str] | None = None) -> None:
    """Rewrite an archive file with other rows or metadata (keeping whatever is not given)."""
    table = pq.read_table(path)
    old = {
        k.decode(): v.decode() for k, v in pq.read_metadata(path).metadata.items() if k.startswith(b"ldp.")
    }
    new_meta = {**old, **(meta or {})}
    if payloads is not None:
        table = table.set_column(1, "payload", pa.array(payloads, type=pa.large_binary()))
    pq.write_table(table.replace_schema_metadata(new_meta), path)


def test_verify_names_a_file_whose_payload_was_changed(store: Store, tmp_path: Path) -> None:
    _grr_store(store, batches=3)
    root = tmp_path / "archive"
    archive.export_archive(store, root, day=lambda: DAY, max_file_rows=2)
    good, bad = (f.path for f in archive.archive_files(root, "k-grr"))
    payloads = archive.read_file(bad).payloads
    flipped = payloads[0][:-1] + bytes([payloads[0][-1] ^ 1])
    _rewrite(bad, payloads=[flipped, *payloads[1:]])
    report = archive.verify_archive(root)
    assert [(p.path, p.message.split(" (")[0]) for p in report.problems] == [(bad, "checksum mismatch")]
    result = runner.invoke(app, ["archive", "verify", str(root)])
    assert result.exit_code == 2
    assert f"bad: {bad}: checksum mismatch" in result.stderr
    assert str(good) not in result.stderr


def test_verify_names_a_file_with_a_wrong_row_count(store: Store, tmp_path: Path) -> None:
    _grr_store(store, batches=1)
    root = tmp_path / "archive"
    (path,) = archive.export_archive(store, root, day=lambda: DAY).files
    _rewrite(path, meta={"ldp.rows": "3"})
    (problem,) = archive.verify_archive(root).problems
    assert problem.path == path and "2 rows, but its metadata says ldp.rows=3" in problem.message


def _foreign_blob(store: Store) -> bytes:
    other = wire.campaign_to_proto(campaign_id="k-grr", params=GRRParams.from_epsilon(["a", "b", "c"], 0.5))
    other.created_unix_ms = store.get_campaign("k-grr").created_unix_ms
    return other.SerializeToString()


def _make_foreign(path: Path, blob: bytes) -> None:
    """Give a file another campaign's parameters, with a checksum that matches them (a well-formed file)."""
    content = archive.read_file(path)
    meta = content.meta
    checksum = archive._checksum(
        meta["ldp.campaign_id"], blob, meta["ldp.day"], zip(content.positions, content.payloads, strict=True)
    )
    _rewrite(path, meta={"ldp.campaign": base64.b64encode(blob).decode(), "ldp.checksum": checksum})


def test_foreign_parameters_are_named_by_verify_and_refused_by_export_and_reduce(
    store: Store, tmp_path: Path, dask: Client
) -> None:
    _grr_store(store, batches=3)
    root = tmp_path / "archive"
    archive.export_archive(store, root, day=lambda: DAY, max_file_rows=2)
    _, second = (f.path for f in archive.archive_files(root, "k-grr"))
    _make_foreign(second, _foreign_blob(store))
    problems = archive.verify_archive(root).problems
    assert [p.path for p in problems] == [second] and "foreign file" in problems[0].message
    before = _files(root)
    with pytest.raises(archive.ArchiveError, match=re.escape(f"{second}: holds campaign 'k-grr' with other")):
        archive.export_archive(store, root, day=lambda: DAY)
    assert _files(root) == before
    with pytest.raises(archive.ArchiveError, match=re.escape(f"{second}: campaign parameters differ")):
        reduce.reduce_archive(dask, root, "k-grr")


def test_verify_against_the_store_names_foreign_parameters_in_every_file(
    store: Store, tmp_path: Path
) -> None:
    _grr_store(store, batches=1)
    root = tmp_path / "archive"
    (path,) = archive.export_archive(store, root, day=lambda: DAY).files
    _make_foreign(path, _foreign_blob(store))
    assert archive.verify_archive(root).problems == []  # consistent on its own
    (problem,) = archive.verify_archive(root, store=store).problems
    assert problem.path == path and "parameters differ from the store's" in problem.message


# ------------------------------------------------------------------------------------------------ reduce


@pytest.fixture
def every_kind(store: Store) -> Aggregator:
    """One campaign per registered mechanism (every kind and layout), filled through the service."""
    agg = Aggregator(store)
    rng = np.random.default_rng(20261125)
    for spec in registry.SPECS:
        _create(agg, spec)
        asyncio.run(_fill(agg, spec, rng, batches=3))
    return agg


def test_reduce_on_dask_equals_the_store_for_every_registered_mechanism(
    every_kind: Aggregator, store: Store, tmp_path: Path, dask: Client
) -> None:
    root = tmp_path / "archive"
    archive.export_archive(store, root, day=lambda: DAY, max_file_rows=2)
    kinds = set()
    for spec in registry.SPECS:
        cid = _cid(spec)
        result = reduce.reduce_archive(dask, root, cid)
        assert result.files == 2 and result.rows == 4
        assert result.accumulator.to_bytes() == store.accumulator(cid).to_bytes(), spec.name
        payloads = lambda cid=cid: archive.iter_payloads(root, cid)  # noqa: E731 (read by discovery)
        ours = estimate_to_proto(estimate_campaign(result.info, result.accumulator, reports=payloads))
        assert ours == estimate_to_proto(every_kind.estimate(cid)), spec.name
        kinds.add(spec.kind)
    assert kinds == set(Kind)


def test_a_tampered_file_fails_the_reduce_naming_it(store: Store, tmp_path: Path, dask: Client) -> None:
    _grr_store(store, batches=3)
    root = tmp_path / "archive"
    archive.export_archive(store, root, day=lambda: DAY, max_file_rows=2)
    _, bad = (f.path for f in archive.archive_files(root, "k-grr"))
    payloads = archive.read_file(bad).payloads
    _rewrite(bad, payloads=[payloads[0][:-1] + bytes([payloads[0][-1] ^ 1]), *payloads[1:]])
    with pytest.raises(archive.ArchiveError, match=re.escape(f"{bad}: checksum mismatch")):
        reduce.reduce_archive(dask, root, "k-grr")


def _json(args: list[str]) -> Any:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cli_answers_as_the_server_for_decodes_and_associations_on_a_scheduler_address(
    store: Store, tmp_path: Path, dask: Client
) -> None:
    """``archive decode`` and ``archive associate`` on ``--scheduler`` give the store's answers."""
    agg = Aggregator(store)
    rng = np.random.default_rng(11)
    rappor = next(s for s in registry.SPECS if s.kind is Kind.RAPPOR)
    paired = next(s for s in registry.SPECS if s.kind is Kind.PAIRED)
    labels = [str(x) for x in rappor.campaign_inputs(rappor.examples()[0], _cid(rappor))]
    _create(agg, rappor, candidates=(*labels, "never.example"))
    _create(agg, paired)
    for spec in (rappor, paired):
        asyncio.run(_fill(agg, spec, rng, batches=4))
    db = tmp_path / "ldp.sqlite3"
    root = tmp_path / "archive"
    store.close()
    assert runner.invoke(app, ["archive", "export", str(root), "--db", str(db)]).exit_code == 0
    scheduler = ["--scheduler", dask.scheduler.address]
    for command, cid in (("decode", _cid(rappor)), ("associate", _cid(paired)), ("estimate", _cid(paired))):
        reduced = _json(["archive", command, str(root), cid, "--json", *scheduler])
        assert reduced == _json([command, cid, "--json", "--db", str(db)]), command


def test_cli_bad_scheduler_address_is_one_line(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reduce, "CONNECT_TIMEOUT_S", 1.0)
    _grr_store(store, batches=1)
    root = tmp_path / "archive"
    archive.export_archive(store, root, day=lambda: DAY)
    result = runner.invoke(
        app, ["archive", "estimate", str(root), "k-grr", "--scheduler", "tcp://127.0.0.1:1"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --scheduler 'tcp://127.0.0.1:1': cannot reach a Dask scheduler")
    assert len(result.stderr.strip().splitlines()) == 1


# -------------------------------------------------------------------------------------------------- docs

_DOC_MARKER = "<!-- archive-steps:"


def _doc_commands() -> list[list[str]]:
    text = (ROOT / "docs" / "operations.md").read_text()
    block = text[text.index(_DOC_MARKER) :].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    return [line.split()[1:] for line in lines if line.startswith(".venv/bin/ldp-aggregator ")]


def test_operations_doc_archive_steps_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/operations.md's archive block, in order, on a database with the README's two campaigns."""
    monkeypatch.chdir(tmp_path)
    with open_store("ldp-data/ldp.sqlite3") as db:
        agg = Aggregator(db)
        grr = registry.spec_named("grr")
        params = GRRParams.from_epsilon(["chrome", "safari", "other"], 2.0)
        agg.create_campaign(wire.campaign_to_proto(campaign_id="browser", params=params))
        rng = np.random.default_rng(3)
        for b in range(3):
            cols = grr.encode_batch(
                params, rng.integers(0, 3, size=1000), rng, campaign_id="browser", labels=[]
            )
            asyncio.run(
                agg.submit_batch(
                    wire.batch_to_proto(campaign_id="browser", batch_id=f"b{b}", params=params, columns=cols)
                )
            )
    commands = _doc_commands()
    assert len(commands) >= 5
    outputs = []
    for args in commands:
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        outputs.append(result.stdout)
    reduced = outputs[[a[:2] for a in commands].index(["archive", "estimate"])]
    direct = outputs[[a[:1] for a in commands].index(["estimate"])]
    assert reduced == direct  # the same table, from the archive on Dask and from the store
