"""Tests for ldp_aggregator.store: campaigns, idempotent group-committed ingest, durability, failures."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldp_aggregator.store import (
    SCHEMA_VERSION,
    CampaignRecord,
    Store,
    StoreSchemaError,
    SubmitOutcome,
)
from ldp_client.errors import (
    CampaignClosedError,
    CampaignExistsError,
    CampaignNotFoundError,
    InvalidParameterError,
    InvalidReportError,
    StoreUnavailableError,
)
from tests.ldp_aggregator import store_crash_worker as worker
from tests.ldp_aggregator.store_crash_worker import FakeAccumulator, delta_for, n_reports_for

WORKER = Path(worker.__file__)


def record(cid: str = "c1", *, created: int = 1_000, closed: bool = False) -> CampaignRecord:
    return CampaignRecord(
        campaign_id=cid,
        mechanism="rr",
        params_blob=b"\x08\x01params-" + cid.encode(),
        description=f"campaign {cid}",
        created_unix_ms=created,
        closed=closed,
    )


def open_store(path: Path, **kwargs: Any) -> Store:
    return worker.open_store(str(path), **kwargs)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "ldp.sqlite3"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    s = open_store(db)
    yield s
    s.close()


def acc(n: int, total: int = 0, sq: int = 0) -> FakeAccumulator:
    return FakeAccumulator(n=n, total=total, sq=sq)


def submit(s: Store, cid: str, bid: str, n: int = 3, payload: bytes | None = None) -> Future[SubmitOutcome]:
    return s.submit(cid, bid, n, acc(n, total=n), raw_payload=payload)


class PausedWriter:
    """Blocks the writer thread on a command so that submissions made meanwhile form ONE group."""

    def __init__(self, s: Store) -> None:
        self._started = threading.Event()
        self._release = threading.Event()

        def block(conn: sqlite3.Connection) -> None:
            self._started.set()
            self._release.wait(10)

        self._thread = threading.Thread(target=s._run_in_writer, args=(block,))

    def __enter__(self) -> PausedWriter:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._thread.join(10)


# ---------------------------------------------------------------------------------------------- campaigns


def test_open_creates_parent_dirs_and_uses_wal_full(db: Path, store: Store) -> None:
    assert db.exists()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 16384
    assert store._run_in_writer(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == 2  # FULL


def test_create_get_list_close_campaigns(store: Store) -> None:
    a, b = record("a", created=20), record("b", created=10)
    store.create_campaign(a)
    store.create_campaign(b)
    assert store.get_campaign("a") == a
    assert [r.campaign_id for r in store.list_campaigns()] == ["b", "a"]
    assert store.accumulator("a") == FakeAccumulator()
    assert store.batch_count("a") == 0
    store.close_campaign("a")
    assert store.get_campaign("a").closed
    store.close_campaign("a")  # idempotent
    assert not store.get_campaign("b").closed
    with pytest.raises(CampaignNotFoundError):
        store.get_campaign("nope")
    with pytest.raises(CampaignNotFoundError):
        store.close_campaign("nope")
    with pytest.raises(CampaignNotFoundError):
        store.accumulator("nope")


def test_duplicate_campaign_changes_nothing(db: Path, store: Store) -> None:
    store.create_campaign(record("a"))
    assert submit(store, "a", "b1").result() == SubmitOutcome(duplicate=False, accepted=3)
    other = CampaignRecord(campaign_id="a", mechanism="grr", params_blob=b"x", created_unix_ms=5)
    with pytest.raises(CampaignExistsError) as info:
        store.create_campaign(other)
    assert info.value.campaign_id == "a"
    assert store.get_campaign("a") == record("a")
    assert store.accumulator("a") == acc(3, 3)
    store.close()
    with open_store(db) as again:
        assert again.list_campaigns() == [record("a")]
        assert again.accumulator("a") == acc(3, 3)


def test_campaign_record_validation() -> None:
    with pytest.raises(InvalidParameterError, match="campaign_id"):
        CampaignRecord(campaign_id="", mechanism="rr", params_blob=b"", created_unix_ms=0)
    with pytest.raises(InvalidParameterError, match="params_blob"):
        CampaignRecord(campaign_id="x", mechanism="rr", params_blob="text", created_unix_ms=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="created_unix_ms"):
        CampaignRecord(campaign_id="x", mechanism="rr", params_blob=b"", created_unix_ms=-1)
    r = CampaignRecord(campaign_id="x", mechanism="rr", params_blob=bytearray(b"ab"), created_unix_ms=0)  # type: ignore[arg-type]
    assert r.params_blob == b"ab"


def test_zero_accumulator_error_surfaces_before_any_write(db: Path) -> None:
    def bad_zero(r: CampaignRecord) -> FakeAccumulator:
        raise InvalidParameterError("params_blob", r.params_blob, "a Campaign protobuf")

    with open_store(db, zero_accumulator=bad_zero) as s:
        with pytest.raises(InvalidParameterError):
            s.create_campaign(record("a"))
        assert s.list_campaigns() == []


# ---------------------------------------------------------------------------------------------- ingest


def test_submit_then_read_and_duplicates_across_groups(store: Store) -> None:
    store.create_campaign(record("a"))
    assert submit(store, "a", "b1", 5).result() == SubmitOutcome(duplicate=False, accepted=5)
    assert submit(store, "a", "b2", 2).result() == SubmitOutcome(duplicate=False, accepted=2)
    assert submit(store, "a", "b1", 5).result() == SubmitOutcome(duplicate=True, accepted=0)
    assert store.accumulator("a") == acc(7, 7)
    assert store.batch_count("a") == 2
    assert store.has_batch("a", "b1") and not store.has_batch("a", "b3")
    st = store.stats()
    assert (st.batches_accepted, st.batches_duplicate, st.reports_accepted) == (2, 1, 7)


def test_duplicates_within_one_group_counted_once(store: Store) -> None:
    store.create_campaign(record("a"))
    store.create_campaign(record("b"))
    commits_before = store.stats().commits
    with PausedWriter(store):
        futs = [
            submit(store, "a", "x", 4, b"p1"),
            submit(store, "a", "x", 4, b"p1-again"),
            submit(store, "b", "x", 1, b"p2"),  # same batch id, other campaign: distinct
            submit(store, "a", "y", 2, b"p3"),
            submit(store, "a", "y", 2, b"p3-again"),
        ]
        assert not any(f.done() for f in futs)
    outcomes = [f.result(10) for f in futs]
    assert [o.duplicate for o in outcomes] == [False, True, False, False, True]
    assert [o.accepted for o in outcomes] == [4, 0, 1, 2, 0]
    assert store.stats().commits == commits_before + 1  # one transaction for the whole group
    assert store.accumulator("a") == acc(6, 6)
    assert store.accumulator("b") == acc(1, 1)
    assert store.batch_count("a") == 2
    assert list(store.raw_payloads("a")) == [b"p1", b"p3"]
    assert list(store.raw_payloads("b")) == [b"p2"]


def test_group_commit_max_bounds_group_size(db: Path) -> None:
    with open_store(db, group_commit_max=2) as s:
        s.create_campaign(record("a"))
        before = s.stats().commits
        with PausedWriter(s):
            futs = [submit(s, "a", f"b{i}", 1) for i in range(5)]
        assert all(f.result(10).accepted == 1 for f in futs)
        assert s.stats().commits - before == 3  # groups of 2, 2, 1
        assert s.accumulator("a") == acc(5, 5)


def test_unknown_and_closed_campaigns_fail_without_touching_state(store: Store) -> None:
    store.create_campaign(record("a"))
    assert not submit(store, "a", "old").result().duplicate
    with pytest.raises(CampaignNotFoundError):
        submit(store, "nope", "b1").result()
    store.close_campaign("a")
    with pytest.raises(CampaignClosedError):
        submit(store, "a", "new").result()
    # A retry of a batch committed before the close is still answered as a duplicate (it is stored).
    assert submit(store, "a", "old").result() == SubmitOutcome(duplicate=True, accepted=0)
    assert store.accumulator("a") == acc(3, 3)
    assert store.batch_count("a") == 1
    assert not store.has_batch("a", "new")


def test_submit_validates_arguments(store: Store) -> None:
    store.create_campaign(record("a"))
    with pytest.raises(InvalidReportError, match="n_reports"):
        store.submit("a", "b", 4, acc(3))
    with pytest.raises(InvalidReportError, match="n_reports"):
        store.submit("a", "b", -1, acc(-1))
    with pytest.raises(InvalidParameterError, match="batch_id"):
        store.submit("a", "", 1, acc(1))
    with pytest.raises(InvalidParameterError, match="batch_id"):
        store.submit("a", "x" * 1000, 1, acc(1))
    assert store.batch_count("a") == 0


def test_bad_delta_fails_alone(store: Store) -> None:
    class Incompatible:
        n = 1

        def __add__(self, other: object) -> Incompatible:
            return self

        def to_bytes(self) -> bytes:
            return b""

    store.create_campaign(record("a"))
    with PausedWriter(store):
        good = submit(store, "a", "good", 2)
        bad = store.submit("a", "bad", 1, Incompatible())  # type: ignore[arg-type]
    assert good.result(10).accepted == 2
    with pytest.raises(TypeError):
        bad.result(10)
    assert store.accumulator("a") == acc(2, 2)
    assert not store.has_batch("a", "bad")


def test_cancelled_before_commit_is_not_stored(store: Store) -> None:
    store.create_campaign(record("a"))
    with PausedWriter(store):
        f1 = submit(store, "a", "kept")
        f2 = submit(store, "a", "dropped")
        assert f2.cancel()
    assert f1.result(10).accepted == 3
    assert not store.has_batch("a", "dropped")
    assert store.accumulator("a") == acc(3, 3)


def test_concurrent_submitters(store: Store) -> None:
    store.create_campaign(record("a"))
    n_threads, per_thread = 6, 60

    def run(t: int) -> list[SubmitOutcome]:
        futs = [submit(store, "a", f"{t}-{i % 40}", 1) for i in range(per_thread)]  # 20 retries each
        return [f.result(30) for f in futs]

    results: list[list[SubmitOutcome]] = [[] for _ in range(n_threads)]
    threads = [threading.Thread(target=lambda t=t: results.__setitem__(t, run(t))) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    flat = [o for r in results for o in r]
    assert sum(o.accepted for o in flat) == n_threads * 40
    assert sum(o.duplicate for o in flat) == n_threads * 20
    assert store.accumulator("a").n == n_threads * 40
    assert store.batch_count("a") == n_threads * 40
    assert store.stats().commits < n_threads * 40  # grouping happened (exact count depends on timing)


def test_submit_async(store: Store) -> None:
    store.create_campaign(record("a"))

    async def go() -> list[SubmitOutcome]:
        return list(
            await asyncio.gather(
                store.submit_async("a", "b1", 2, acc(2, 2)),
                store.submit_async("a", "b2", 1, acc(1, 1)),
                store.submit_async("a", "b1", 2, acc(2, 2)),
            )
        )

    outcomes = asyncio.run(go())
    assert sum(o.accepted for o in outcomes) == 3
    assert sum(o.duplicate for o in outcomes) == 1
    assert store.accumulator("a") == acc(3, 3)


def test_max_pending_back_pressure(db: Path) -> None:
    with open_store(db, max_pending=2) as s:
        s.create_campaign(record("a"))
        with PausedWriter(s):
            f1, f2, f3 = (submit(s, "a", f"b{i}") for i in range(3))
            with pytest.raises(StoreUnavailableError, match="max_pending"):
                f3.result(0)
        assert f1.result(10).accepted == f2.result(10).accepted == 3
        assert s.batch_count("a") == 2


# ---------------------------------------------------------------------------------------------- lifecycle


def test_restart_keeps_everything(db: Path) -> None:
    with open_store(db) as s:
        s.create_campaign(record("a"))
        s.create_campaign(record("b", created=5))
        for i in range(10):
            submit(s, "a", f"b{i}", i + 1, f"payload{i}".encode()).result()
        submit(s, "b", "only", 4).result()
        s.close_campaign("b")
    with open_store(db) as s:
        assert [r.campaign_id for r in s.list_campaigns()] == ["b", "a"]
        assert s.get_campaign("b").closed
        assert s.accumulator("a") == acc(55, 55)
        assert s.accumulator("b") == acc(4, 4)
        assert s.batch_count("a") == 10
        assert list(s.raw_payloads("a")) == [f"payload{i}".encode() for i in range(10)]
        assert submit(s, "a", "b3", 4).result().duplicate
        assert submit(s, "a", "b10", 1).result().accepted == 1
        assert s.accumulator("a") == acc(56, 56)


def test_close_drains_pending_and_refuses_later_work(db: Path) -> None:
    s = open_store(db)
    s.create_campaign(record("a"))
    futs = [submit(s, "a", f"b{i}", 1) for i in range(200)]
    s.close()
    assert all(f.result(0).accepted == 1 for f in futs)
    with pytest.raises(StoreUnavailableError, match="closed"):
        submit(s, "a", "late").result(0)
    with pytest.raises(StoreUnavailableError, match="closed"):
        s.create_campaign(record("z"))
    with pytest.raises(StoreUnavailableError, match="closed"):
        s.has_batch("a", "b1")
    s.close()  # idempotent
    with open_store(db) as again:
        assert again.batch_count("a") == 200
        assert again.accumulator("a").n == 200


def test_second_store_on_same_file_is_refused(db: Path, store: Store) -> None:
    with pytest.raises(StoreUnavailableError, match="already open"):
        open_store(db)


def test_read_only_open_beside_the_writer(db: Path, store: Store) -> None:
    store.create_campaign(record("a"))
    submit(store, "a", "b1", 2, b"p").result()
    with open_store(db, read_only=True) as ro:
        assert ro.list_campaigns() == [record("a")]
        assert ro.accumulator("a") == acc(2, 2)  # snapshot taken at open
        assert ro.batch_count("a") == 1
        assert ro.has_batch("a", "b1")
        assert list(ro.raw_payloads("a")) == [b"p"]
        with pytest.raises(StoreUnavailableError, match="read-only"):
            ro.submit("a", "b2", 1, acc(1)).result(0)
        with pytest.raises(StoreUnavailableError, match="read-only"):
            ro.create_campaign(record("z"))
        with pytest.raises(StoreUnavailableError, match="read-only"):
            ro.purge_raw(0)
        submit(store, "a", "b2", 1).result()  # the writer is unaffected
        assert ro.has_batch("a", "b2")  # direct reads see new commits
    assert store.accumulator("a") == acc(3, 3)


def test_read_only_open_of_missing_file_creates_nothing(db: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        open_store(db, read_only=True)
    assert not db.exists()


def test_retain_raw_off(db: Path) -> None:
    with open_store(db, retain_raw=False) as s:
        s.create_campaign(record("a"))
        submit(s, "a", "b1", 1, b"secret-ish payload").result()
        assert list(s.raw_payloads("a")) == []
        assert s.purge_raw(10**15) == 0
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "raw_reports" not in tables


def test_raw_payloads_chunked_and_purge(db: Path) -> None:
    now = [1_000]
    with open_store(db, clock=lambda: now[0]) as s:
        s.create_campaign(record("a"))
        with pytest.raises(CampaignNotFoundError):
            s.raw_payloads("nope")
        for i in range(600):  # more than one read chunk
            if i == 300:
                now[0] = 2_000
            submit(s, "a", f"b{i}", 1, f"p{i}".encode()).result()
        assert list(s.raw_payloads("a")) == [f"p{i}".encode() for i in range(600)]
        assert s.purge_raw(2_000) == 300
        assert list(s.raw_payloads("a")) == [f"p{i}".encode() for i in range(300, 600)]
        assert s.batch_count("a") == 600  # ids and sums are kept: retries still detected
        assert submit(s, "a", "b0", 1).result().duplicate
        assert s.accumulator("a").n == 600


# ---------------------------------------------------------------------------------------------- failures


def test_disk_full_fails_group_then_recovers(store: Store) -> None:
    store.create_campaign(record("a"))
    assert submit(store, "a", "before", 2).result().accepted == 2
    # max_page_count cannot go below the current size, so this caps the file where it is: the next
    # transaction that needs a new page fails with SQLITE_FULL ("database or disk is full").
    store._run_in_writer(lambda c: c.execute("PRAGMA max_page_count = 1").fetchone())
    big = os.urandom(200_000)
    with PausedWriter(store):
        futs = [
            submit(store, "a", "big", 5, big),
            submit(store, "a", "small", 1),
            submit(store, "a", "before", 2),  # a duplicate in a failing group fails too
        ]
    for f in futs:
        with pytest.raises(StoreUnavailableError, match="database or disk is full") as info:
            f.result(10)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert store.accumulator("a") == acc(2, 2)
    assert store.batch_count("a") == 1
    assert not store.has_batch("a", "big") and not store.has_batch("a", "small")
    assert store.stats().failed_commits == 1
    # The disk "recovers": the same batches now commit, exactly once.
    store._run_in_writer(lambda c: c.execute("PRAGMA max_page_count = 1073741823").fetchone())
    assert submit(store, "a", "big", 5, big).result().accepted == 5
    assert submit(store, "a", "small", 1).result().accepted == 1
    assert store.accumulator("a") == acc(8, 8)
    assert list(store.raw_payloads("a")) == [big]


class _FailingCommit:
    """Connection proxy whose COMMIT raises like a failing fsync (the real transaction stays open)."""

    def __init__(self, real: sqlite3.Connection, message: str) -> None:
        self._real = real
        self._message = message
        self.fail = True

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self.fail and sql == "COMMIT":
            raise sqlite3.OperationalError(self._message)
        return self._real.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.mark.parametrize("message", ["disk I/O error", "attempt to write a readonly database"])
def test_commit_io_error_rolls_back_and_recovers(db: Path, message: str) -> None:
    s = open_store(db)
    try:
        s.create_campaign(record("a"))
        submit(s, "a", "ok", 1, b"ok").result()
        proxy = _FailingCommit(s._run_in_writer(lambda c: c), message)
        s._run_in_writer(lambda c: setattr(s, "_wconn", proxy))
        with pytest.raises(StoreUnavailableError, match=message):
            submit(s, "a", "lost", 3, b"lost").result(10)
        with pytest.raises(StoreUnavailableError, match=message):
            s.close_campaign("a")
        assert not s.get_campaign("a").closed
        assert s.accumulator("a") == acc(1, 1)
        assert not s.has_batch("a", "lost")
        proxy.fail = False
        assert submit(s, "a", "lost", 3, b"lost").result(10).accepted == 3
        assert s.accumulator("a") == acc(4, 4)
    finally:
        s.close()
    with open_store(db) as again:
        assert again.accumulator("a") == acc(4, 4)
        assert list(again.raw_payloads("a")) == [b"ok", b"lost"]


def test_writer_reconnects_after_failed_rollback(store: Store) -> None:
    store.create_campaign(record("a"))

    class Broken:
        in_transaction = True

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            raise sqlite3.OperationalError("disk I/O error")

        def close(self) -> None:
            pass

    real = store._run_in_writer(lambda c: c)
    store._run_in_writer(lambda c: setattr(store, "_wconn", Broken()))
    with pytest.raises(StoreUnavailableError, match="disk I/O error"):
        submit(store, "a", "b1").result(10)
    real.close()  # the store dropped the broken connection and will open a fresh one
    assert submit(store, "a", "b1").result(10).accepted == 3
    assert store.accumulator("a") == acc(3, 3)


# ---------------------------------------------------------------------------------------------- schema


def test_schema_has_no_ip_or_client_identifier_columns(store: Store, db: Path) -> None:
    store.create_campaign(record("a"))
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
    # sqlite_sequence: SQLite's own AUTOINCREMENT high-water marks (name, seq) for raw_reports.position.
    assert set(columns) == {
        "meta", "campaigns", "batches", "accumulators", "raw_reports", "tokens", "sqlite_sequence"
    }  # fmt: skip
    assert columns["batches"] == ["campaign_id", "batch_id", "n_reports", "received_unix_ms"]
    assert columns["raw_reports"] == ["position", "campaign_id", "batch_id", "payload"]
    forbidden = ("ip", "addr", "host", "peer", "client", "device", "user", "install", "session", "agent")
    for table, cols in columns.items():
        for col in cols:
            words = col.lower().split("_")
            assert not any(w in forbidden for w in words), f"{table}.{col} looks like an identifier"


def test_schema_version_row(store: Store, db: Path) -> None:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert row == (str(SCHEMA_VERSION),)


@pytest.mark.parametrize("version", [str(SCHEMA_VERSION + 1), "0", "garbage"])
def test_schema_version_mismatch_refused(db: Path, version: str) -> None:
    open_store(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
    with pytest.raises(StoreSchemaError, match=f"schema_version='{version}'"):
        open_store(db)
    # The refusal released the lock file: fixing the file makes it openable again.
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    open_store(db).close()


def test_foreign_database_refused(db: Path) -> None:
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    with pytest.raises(StoreSchemaError, match="no 'meta' table"):
        open_store(db)


def test_not_a_database_refused(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreUnavailableError, match="not a database"):
        open_store(db)


def test_memory_path_refused() -> None:
    with pytest.raises(InvalidParameterError, match="path"):
        worker.open_store(":memory:")


# ---------------------------------------------------------------------------------------------- crash


def _read_until_acks(proc: subprocess.Popen[bytes], want: int, deadline: float) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    acks = 0
    while acks < want:
        if time.monotonic() > deadline:
            raise AssertionError(f"worker gave only {acks} acks before the deadline")
        line = proc.stdout.readline().decode()
        if not line:
            raise AssertionError(f"worker exited early ({proc.poll()}); {acks} acks")
        lines.append(line)
        acks += line.startswith("ack ")
    return lines


def _committed_batches(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT batch_id, n_reports FROM batches WHERE campaign_id = ?", (worker.CAMPAIGN,)
        ).fetchall()


def test_kill_9_loses_no_acknowledged_batch(db: Path) -> None:
    rng = np.random.default_rng(20240611)
    with open_store(db) as s:
        s.create_campaign(record(worker.CAMPAIGN))
    all_acked: set[str] = set()
    t_end = time.monotonic() + 40
    for run in range(5):
        want = int(rng.integers(100, 1500))
        extra_sleep = float(rng.uniform(0.0, 0.05))
        err_path = db.parent / f"worker{run}.stderr"
        with err_path.open("wb") as err_file:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), str(db), str(run), "4"], stdout=subprocess.PIPE, stderr=err_file
            )
        assert proc.stdout is not None
        try:
            lines = _read_until_acks(proc, want, t_end)
            time.sleep(extra_sleep)  # kill at an arbitrary point, typically mid-group
            os.kill(proc.pid, signal.SIGKILL)
            # Read the rest through the same buffered reader (communicate() would skip its buffer).
            out = proc.stdout.read()
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL, err_path.read_text()
        lines += out.decode().splitlines(keepends=True)
        assert all(line.endswith("\n") for line in lines)  # each ack line was written atomically
        acks = [line.split() for line in lines if line.startswith("ack ")]
        assert len(acks) >= want
        # Each worker thread resubmits its id j (j % 5 == 1) three submissions later: the first ack of an
        # id says "new", a second one (if acknowledged before the kill) says "duplicate".
        flags: dict[str, list[str]] = {}
        for _, bid, dup in acks:
            flags.setdefault(bid, []).append(dup)
        for bid, seen in flags.items():
            allowed = [["0"], ["0", "1"]] if int(bid.split("-")[2]) % 5 == 1 else [["0"]]
            assert seen in allowed, (bid, seen)
        all_acked.update(bid for _, bid, _ in acks)

        rows = _committed_batches(db)
        committed = {bid for bid, _ in rows}
        assert len(committed) == len(rows)  # every batch id at most once
        assert all_acked <= committed, sorted(all_acked - committed)[:5]
        with open_store(db) as s:
            expected = FakeAccumulator()
            for bid, n in rows:
                assert n == n_reports_for(bid)
                expected = expected + delta_for(bid, n)
            # The blob equals the sum of exactly the committed batches: no partial or doubled group.
            assert s.accumulator(worker.CAMPAIGN) == expected
            assert s.batch_count(worker.CAMPAIGN) == len(rows)
            payloads = list(s.raw_payloads(worker.CAMPAIGN))
            assert sorted(payloads) == sorted(bid.encode() for bid in committed)


# ---------------------------------------------------------------------------------------------- issue 13


def test_files_are_created_private_and_existing_ones_tightened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old_umask = os.umask(0o022)  # the usual umask: files would otherwise be 0644, directories 0755
    try:
        db = tmp_path / "new-dir" / "ldp.sqlite3"
        with open_store(db) as s:
            s.create_campaign(record("a"))
            submit(s, "a", "b1").result(10)
            modes = {p.name: p.stat().st_mode & 0o777 for p in db.parent.iterdir()}
        assert db.parent.stat().st_mode & 0o777 == 0o700
        assert {"ldp.sqlite3", "ldp.sqlite3-wal", "ldp.sqlite3-shm", "ldp.sqlite3.lock"} <= set(modes)
        assert set(modes.values()) == {0o600}, {k: oct(v) for k, v in modes.items()}
        # Files an older version left world-readable are made private on the next open, with a warning.
        for name in ("ldp.sqlite3", "ldp.sqlite3.lock"):
            (db.parent / name).chmod(0o644)
        caplog.set_level("WARNING", logger="ldp_aggregator.store")
        with open_store(db):
            pass
        for name in ("ldp.sqlite3", "ldp.sqlite3.lock"):
            assert (db.parent / name).stat().st_mode & 0o777 == 0o600, name
        assert any("0644" in r.getMessage() and "0600" in r.getMessage() for r in caplog.records)
    finally:
        os.umask(old_umask)


def test_a_new_campaign_stores_no_zero_accumulator(db: Path) -> None:
    """Creating a campaign writes an empty blob (nothing summed yet), not its whole zero accumulator."""
    with open_store(db) as s:
        s.create_campaign(record("a"))
        s.create_campaign(record("b"))
        submit(s, "b", "x", n=4).result(10)
    with sqlite3.connect(db) as conn:
        blobs = dict(conn.execute("SELECT campaign_id, length(data) FROM accumulators"))
    assert blobs["a"] == 0 and blobs["b"] > 0
    with open_store(db) as s:  # the empty row reads back as the zero accumulator
        assert s.accumulator("a") == FakeAccumulator()
        assert s.accumulator("b").n == 4
        submit(s, "a", "y", n=2).result(10)
        assert s.accumulator("a").n == 2
    ro = open_store(db, read_only=True)
    try:
        assert ro.accumulator("a").n == 2
    finally:
        ro.close()


def _report_payload(report_id: str) -> bytes:
    from ldp_client._proto.ldp.v1 import reports_pb2

    return reports_pb2.Report(campaign_id="a", report_id=report_id, grr_index=1).SerializeToString()


def _batch_payload(batch_id: str) -> bytes:
    from ldp_client._proto.ldp.v1 import reports_pb2

    msg = reports_pb2.ReportBatch(campaign_id="a", batch_id=batch_id, count=1, grr_indices=b"\1\0\0\0")
    return msg.SerializeToString()


def _as_schema_2(db: Path) -> None:
    """Turn a current file back into what schema version 2 wrote (keys aside, which the test writes)."""
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE tokens DROP COLUMN campaigns")
        conn.execute("DELETE FROM meta WHERE key = 'auth_required'")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")


def test_schema_2_report_keys_move_to_the_plain_report_id(db: Path) -> None:
    """Schema 2 stored report X as batch key 'r:X', colliding with a batch whose id is 'r:X'."""
    with open_store(db) as s:
        s.create_campaign(record("a"))
        # What schema 2 wrote: a report "q1" (key r:q1), a batch really named "r:b1", a report whose raw
        # payload was purged ("r:gone"), a batch of 3 named "r:three", and a report "x" whose plain id
        # "x" is also a batch (a client broke the one-namespace rule; both stay as they are).
        submit(s, "a", "r:q1", n=1, payload=_report_payload("q1")).result(10)
        submit(s, "a", "r:b1", n=1, payload=_batch_payload("r:b1")).result(10)
        submit(s, "a", "r:gone", n=1).result(10)
        submit(s, "a", "r:three", n=3, payload=_batch_payload("r:three")).result(10)
        submit(s, "a", "x", n=1, payload=_batch_payload("x")).result(10)
        submit(s, "a", "r:x", n=1, payload=_report_payload("x")).result(10)
    _as_schema_2(db)
    with open_store(db) as s:
        keys = {
            k: s.has_batch("a", k)
            for k in ("q1", "r:q1", "r:b1", "b1", "gone", "r:gone", "r:three", "three", "x", "r:x")
        }
        assert keys == {
            "q1": True, "r:q1": False,  # the report moved to its own id
            "r:b1": True, "b1": False,  # the batch kept its id
            "gone": True, "r:gone": True,  # unknown: both spellings stay taken (retries are duplicates)
            "r:three": True, "three": False,  # a batch of 3 is never a report
            "x": True, "r:x": True,  # conflict: nothing renamed
        }  # fmt: skip
        assert s.accumulator("a").n == 8 and s.batch_count("a") == 6  # counts untouched
        assert sorted(s.raw_payloads("a")) == sorted(
            [
                _report_payload("q1"), _batch_payload("r:b1"), _batch_payload("r:three"),
                _batch_payload("x"), _report_payload("x"),
            ]
        )  # fmt: skip
        # The retry of the migrated report is a duplicate; a new batch "r:q1" is new.
        assert submit(s, "a", "q1", n=1).result(10).duplicate
        assert not submit(s, "a", "r:q1", n=1).result(10).duplicate
    with sqlite3.connect(db) as conn:
        raw_keys = sorted(r[0] for r in conn.execute("SELECT batch_id FROM raw_reports"))
        assert raw_keys == ["q1", "r:b1", "r:three", "r:x", "x"]
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_schema_2_tokens_gain_scopes_and_auth_stays_on(db: Path) -> None:
    from ldp_aggregator.auth import Role, new_token_record
    from ldp_aggregator.store import add_token, list_tokens, revoke_token

    open_store(db).close()
    _, rec = new_token_record(Role.REPORTER)
    add_token(db, rec)
    revoke_token(db, rec.token_id)
    _as_schema_2(db)  # a version 2 file whose only token is revoked
    with open_store(db) as s:
        assert s.auth_required()  # a token existed once: authentication stays on
        (token,) = s.list_tokens()
        assert token.revoked and token.campaigns is None
    _, scoped = new_token_record(Role.REPORTER, campaigns=["b", "a", "b"])
    add_token(db, scoped)
    assert [t.campaigns for t in list_tokens(db)] == [None, ("a", "b")]
    with pytest.raises(InvalidParameterError, match="campaigns"):
        new_token_record(Role.ANALYST, campaigns=["a"])


def test_proto_id_field_walk() -> None:
    from ldp_aggregator.store.schema import _proto_string_field_2

    assert _proto_string_field_2(_report_payload("q1")) == "q1"
    assert _proto_string_field_2(_batch_payload("r:b1")) == "r:b1"
    assert _proto_string_field_2(b"") is None
    assert _proto_string_field_2(b"\x12\x05ab") is None  # truncated: not a valid string
    assert _proto_string_field_2(b"\x0b") is None  # a group: not ours


def test_schema_3_raw_rows_keep_their_positions_and_batch_ids(db: Path) -> None:
    """3 -> 4 gives raw_reports a stable AUTOINCREMENT position: rows, order and positions are kept, and a
    schema 3 batch whose id starts with 'r:' is a real batch id (the 2 -> 3 key move does not run)."""
    with open_store(db) as s:
        s.create_campaign(record("a"))
        for batch_id in ("b1", "r:b2", "b3"):
            submit(s, "a", batch_id, n=1, payload=_batch_payload(batch_id)).result(10)
    with sqlite3.connect(db) as conn:  # what schema 3 wrote: a plain rowid table, a gap in the rowids
        conn.execute("DELETE FROM raw_reports WHERE batch_id = 'b1'")
        rows = conn.execute(
            "SELECT rowid, campaign_id, batch_id, payload FROM raw_reports ORDER BY rowid"
        ).fetchall()
        conn.execute("DROP TABLE raw_reports")
        conn.execute("DELETE FROM sqlite_sequence")
        conn.execute(
            "CREATE TABLE raw_reports (campaign_id TEXT NOT NULL, batch_id TEXT NOT NULL,"
            " payload BLOB NOT NULL)"
        )
        conn.executemany(
            "INSERT INTO raw_reports (rowid, campaign_id, batch_id, payload) VALUES (?, ?, ?, ?)", rows
        )
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with open_store(db) as s:
        assert [(p, payload) for p, payload in s.iter_raw_batches("a", 0)] == [(r[0], r[3]) for r in rows]
        assert s.has_batch("a", "r:b2") and not s.has_batch("a", "b2")
        s.purge_raw(2**62)
        submit(s, "a", "b4", n=1, payload=_batch_payload("b4")).result(10)
        ((position, _),) = list(s.iter_raw_batches("a", 0))
        assert position > rows[-1][0]  # never reused after the purge
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.parametrize(
    ("column", "scope"),
    [
        (None, None),
        ('["b", "a"]', ("a", "b")),
        ("not json", ()),
        ("[]", ()),
        ('["a", 3]', ()),
        ('{"a": 1}', ()),
    ],
)
def test_a_token_scope_that_cannot_be_read_limits_the_token_to_no_campaign(
    column: str | None, scope: tuple[str, ...] | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Both stores read token rows through token_from_row: an unreadable scope fails closed."""
    from ldp_aggregator.store.records import token_from_row

    record = token_from_row("t1", "reporter", "app", b"\x01" * 32, 5, None, column)
    assert record.campaigns == scope
    assert ("unreadable campaign scope" in caplog.text) == (scope == ())
