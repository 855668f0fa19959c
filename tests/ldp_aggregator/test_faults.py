"""Faults (issue 7): SIGTERM under load, a full disk, a read-only disk, and a reporter app killed with
SIGKILL whose outbox drains into the real server on restart.

Also covering faults elsewhere in the suite:

* SIGKILL of the server at random moments under load, repeated, exactly-once afterwards:
  ``tests/ldp_aggregator/test_crash.py`` (3 rounds) and ``bench/kill_loop.py --rounds N`` (longer).
* Store-level crash and disk-failure tests: ``tests/ldp_aggregator/test_store.py``.
* The reporter's journal surviving SIGKILL against a stub server, torn tails, never counted twice:
  ``tests/ldp_client/test_reporter.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, estimates_pb2
from ldp_aggregator.accumulators import BitCountAccumulator
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.store import Store
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc, reports_pb2
from ldp_client.mechanisms.rappor import encode_batch_rappor
from ldp_client.params import GRRParams, RapporParams
from ldp_client.reporter import Reporter
from tests.ldp_aggregator.test_crash import (
    BATCH,
    _batch,
    _client,
    _start,
    _stop,
    expected_counts,
    stored_counts,
)

ROOT = Path(__file__).resolve().parents[2]
RAPPOR = RapporParams(k=128, h=2, m=16)


def _create(target: str, campaign_id: str, params: Any) -> None:
    with grpc.insecure_channel(target) as ch:
        analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id=campaign_id, params=params)
            ),
            timeout=10,
        )


def _n_reports(target: str, campaign_id: str = "c") -> int:
    with grpc.insecure_channel(target) as ch:
        est = analyst_pb2_grpc.AnalystStub(ch).GetEstimate(
            estimates_pb2.EstimateRequest(campaign_id=campaign_id), timeout=30
        )
    return int(est.n_reports)


def _integrity(db: Path) -> str:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def _collector_health(channel: grpc.Channel) -> int:
    resp = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="ldp.v1.Collector"), timeout=10
    )
    return int(resp.status)


def _wait_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------- SIGTERM


def test_sigterm_under_load_is_graceful_and_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "ldp.sqlite3"
    proc, target = _start(db)
    _create(target, "c", GRRParams.from_epsilon(8, 1.0))
    workers = 4
    acked: list[tuple[int, int]] = []
    attempted = [0] * workers
    stop = threading.Event()
    threads = [
        threading.Thread(target=_client, args=(target, 0, w, acked, attempted, stop)) for w in range(workers)
    ]
    for t in threads:
        t.start()
    _wait_for(lambda: len(acked) >= 100, 30, "100 acknowledged batches")
    assert _stop(proc, signal.SIGTERM) == 0  # exit code 0: drained and closed cleanly
    stop.set()
    for t in threads:
        t.join()
    assert _integrity(db) == "ok"
    proc, target = _start(db)
    try:
        # Exactly the acknowledged batches: every one is there, and nothing else was committed (a graceful
        # stop answers every call it took; the calls it refused were never processed).
        assert _n_reports(target) == BATCH * len(acked)
        counts, n_batches = stored_counts(target)
        np.testing.assert_array_equal(counts, expected_counts((0, w, i) for w, i in acked))
        assert n_batches == len(acked)
        with grpc.insecure_channel(target) as ch:
            stub = collector_pb2_grpc.CollectorStub(ch)
            for w, i in acked[:50]:
                assert stub.Submit(_batch(0, w, i), timeout=10).duplicate
    finally:
        assert _stop(proc, signal.SIGTERM) == 0


# ---------------------------------------------------------------------------------------------- full disk


def _rappor_batch(batch_id: str, n: int, campaign_id: str = "c") -> reports_pb2.ReportBatch:
    rng = np.random.default_rng(zlib.crc32(batch_id.encode()))  # the same batch for the same id, always
    cohorts, bits = encode_batch_rappor(
        RAPPOR,
        campaign_id=campaign_id,
        values=rng.integers(0, 50, n),
        labels=[f"v{i}" for i in range(50)],
        rng=rng,
    )
    return wire.batch_to_proto(
        campaign_id=campaign_id, batch_id=batch_id, params=RAPPOR, columns=(cohorts, bits)
    )


def _fill_until_unavailable(
    stub: collector_pb2_grpc.CollectorStub, n: int = 2000
) -> tuple[list[str], str, str]:
    """Submit batches until the store fails; returns (acknowledged ids, refused id, refusal message)."""
    acked: list[str] = []
    for i in range(10_000):
        batch_id = f"fill-{i}"
        try:
            stub.Submit(_rappor_batch(batch_id, n), timeout=30)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, (exc.code(), exc.details())
            return acked, batch_id, str(exc.details())
        acked.append(batch_id)
    raise AssertionError("the disk never filled up")


def _expected_bit_counts(batch_ids: list[str], n: int) -> BitCountAccumulator:
    """The RAPPOR accumulator of exactly these batches, summed here from the batches as sent."""
    cohort_reports = np.zeros(RAPPOR.m, dtype=np.int64)
    ones = np.zeros((RAPPOR.m, RAPPOR.k), dtype=np.int64)
    for batch_id in batch_ids:
        msg = _rappor_batch(batch_id, n)
        cohorts = np.frombuffer(msg.rappor.cohorts, dtype="<u4").astype(np.intp)
        rows = np.frombuffer(msg.rappor.bits, dtype=np.uint8).reshape(n, -1)
        bits = np.unpackbits(rows, axis=1, bitorder="little")[:, : RAPPOR.k]
        np.add.at(cohort_reports, cohorts, 1)
        np.add.at(ones, cohorts, bits.astype(np.int64))
    return BitCountAccumulator(cohort_reports, ones)


def _check_on_disk(db: Path, acknowledged: list[str], n: int = 2000) -> None:
    """What the database file holds, read after the server stopped: exactly the acknowledged batch ids, and
    an accumulator equal to the sum of exactly those batches (not only a self-consistent count)."""
    assert _integrity(db) == "ok"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        ids = [row[0] for row in conn.execute("SELECT batch_id FROM batches WHERE campaign_id = 'c'")]
    assert sorted(ids) == sorted(acknowledged)
    store = Store.open(db, decode_accumulator=_decode, zero_accumulator=_zero, read_only=True)
    try:
        assert store.accumulator("c") == _expected_bit_counts(acknowledged, n)
        assert store.batch_count("c") == len(acknowledged)
    finally:
        store.close()


def _check_full_disk_cycle(server: BackgroundServer, free_space: Callable[[], None]) -> list[str]:
    """Fill the disk, check the refusal and the recovery; returns the acknowledged batch ids."""
    with grpc.insecure_channel(server.target) as ch:
        stub = collector_pb2_grpc.CollectorStub(ch)
        _create(server.target, "c", RAPPOR)
        acked, refused, message = _fill_until_unavailable(stub)
        assert acked, "nothing fit on the disk"
        assert "full" in message and "nothing was stored" in message and "retry" in message, message
        store = server.aggregator.store  # type: ignore[union-attr]
        # The refused batch left no trace: the committed state is exactly the acknowledged batches.
        assert store.accumulator("c") == _expected_bit_counts(acked, 2000)
        assert not store.has_batch("c", refused)
        _wait_for(
            lambda: _collector_health(ch) == health_pb2.HealthCheckResponse.NOT_SERVING, 5, "NOT_SERVING"
        )
        # Reads keep working while the disk is full.
        assert _n_reports(server.target) == 2000 * len(acked)
        free_space()
        # The same batch id, retried, now commits: the server recovered without a restart.
        resp = stub.Submit(_rappor_batch(refused, 2000), timeout=30)
        assert (resp.accepted, resp.duplicate) == (2000, False)
        _wait_for(lambda: _collector_health(ch) == health_pb2.HealthCheckResponse.SERVING, 5, "SERVING")
        assert _n_reports(server.target) == 2000 * (len(acked) + 1)
        for batch_id in acked[:5]:
            assert stub.Submit(_rappor_batch(batch_id, 2000), timeout=30).duplicate
        assert store.accumulator("c") == _expected_bit_counts([*acked, refused], 2000)
    return [*acked, refused]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root and mount permission; skipped otherwise)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=False, capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_gives_unavailable_then_recovers(small_tmpfs: Path) -> None:
    filler = small_tmpfs / "filler"
    filler.write_bytes(b"\0" * (1 << 20))  # half the disk, to give back later
    db = small_tmpfs / "ldp.sqlite3"
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0", max_message_bytes=1 << 22)) as server:
        acknowledged = _check_full_disk_cycle(server, filler.unlink)
    _check_on_disk(db, acknowledged)


def _decode(record: Any, blob: bytes) -> Any:
    from ldp_aggregator.service import decode_accumulator

    return decode_accumulator(record, blob)


def _zero(record: Any) -> Any:
    from ldp_aggregator.service import zero_accumulator

    return zero_accumulator(record)


def test_database_size_limit_behaves_like_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same cycle without root: SQLite's max_page_count makes the file "full" (SQLITE_FULL)."""
    pages = [0]  # 0: no limit; set below once the file exists
    connect_writer = Store._connect_writer

    def limited(self: Store) -> sqlite3.Connection:
        conn = connect_writer(self)
        if pages[0]:
            conn.execute(f"PRAGMA max_page_count = {pages[0]}")
        return conn

    monkeypatch.setattr(Store, "_connect_writer", limited)
    db = tmp_path / "ldp.sqlite3"
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0", max_message_bytes=1 << 22)) as server:
        store = server.aggregator.store  # type: ignore[union-attr]
        wconn = store._wconn
        assert wconn is not None
        current = wconn.execute("PRAGMA page_count").fetchone()[0]
        pages[0] = current + 40  # ~640 KiB more at 16 KiB pages
        wconn.execute(f"PRAGMA max_page_count = {pages[0]}")

        def free() -> None:
            pages[0] = 1_000_000
            conn = store._wconn
            if conn is not None:
                conn.execute(f"PRAGMA max_page_count = {pages[0]}")

        acknowledged = _check_full_disk_cycle(server, free)
    _check_on_disk(db, acknowledged)


# ---------------------------------------------------------------------------------------------- read-only


def test_read_only_database_gives_unavailable_then_recovers(tmp_path: Path) -> None:
    """The writer's connection turned read-only (SQLITE_READONLY, as for a file that lost write access)."""
    db = tmp_path / "ldp.sqlite3"
    with (
        BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server,
        grpc.insecure_channel(server.target) as ch,
    ):
        stub = collector_pb2_grpc.CollectorStub(ch)
        _create(server.target, "c", RAPPOR)
        stub.Submit(_rappor_batch("b0", 500), timeout=30)
        store = server.aggregator.store  # type: ignore[union-attr]
        assert store._wconn is not None
        store._wconn.execute("PRAGMA query_only = ON")
        with pytest.raises(grpc.RpcError) as info:
            stub.Submit(_rappor_batch("b1", 500), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "readonly" in (info.value.details() or "")
        assert store.accumulator("c").n == 500 and not store.has_batch("c", "b1")
        _wait_for(
            lambda: _collector_health(ch) == health_pb2.HealthCheckResponse.NOT_SERVING, 5, "NOT_SERVING"
        )
        assert store._wconn is not None
        store._wconn.execute("PRAGMA query_only = OFF")
        assert stub.Submit(_rappor_batch("b1", 500), timeout=30).accepted == 500
        _wait_for(lambda: _collector_health(ch) == health_pb2.HealthCheckResponse.SERVING, 5, "SERVING")
    assert _integrity(db) == "ok"


def test_read_only_disk_injected_with_strace(tmp_path: Path) -> None:
    """EROFS from every write and fsync of the server process, as a disk remounted read-only returns
    (injected with strace; the mount itself cannot be flipped while the server holds files open)."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    db = tmp_path / "ldp.sqlite3"
    proc, target = _start(db)
    tracer: subprocess.Popen[bytes] | None = None
    try:
        _create(target, "c", RAPPOR)
        with grpc.insecure_channel(target) as ch:
            stub = collector_pb2_grpc.CollectorStub(ch)
            stub.Submit(_rappor_batch("b0", 500), timeout=30)
            tracer = subprocess.Popen(
                ["strace", "-f", "-p", str(proc.pid), "-o", "/dev/null",
                 "-e", "trace=pwrite64,fsync,fdatasync", "-e", "inject=pwrite64,fsync,fdatasync:error=EROFS"],
                stderr=subprocess.PIPE,
            )  # fmt: skip
            assert tracer.stderr is not None
            line = tracer.stderr.readline().decode()
            if "attached" not in line:
                tracer.kill()
                tracer.wait()
                tracer.stderr.close()
                tracer = None
                pytest.skip(f"strace cannot attach here: {line.strip()}")
            time.sleep(0.3)  # every thread attached
            codes = []
            for i in range(3):
                try:
                    stub.Submit(_rappor_batch(f"ro-{i}", 500), timeout=30)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    codes.append(exc.code())
                    assert "I/O error" in (exc.details() or "") or "readonly" in (exc.details() or "")
            assert codes == [grpc.StatusCode.UNAVAILABLE] * 3
            assert _n_reports(target) == 500  # reads still work
            tracer.send_signal(signal.SIGINT)  # detach: the "disk" is writable again
            tracer.wait(timeout=30)
            tracer.stderr.close()
            tracer = None
            for i in range(3):
                assert stub.Submit(_rappor_batch(f"ro-{i}", 500), timeout=30).accepted == 500
            assert _n_reports(target) == 2000
    finally:
        if tracer is not None:
            tracer.kill()
            tracer.wait()
            if tracer.stderr is not None:
                tracer.stderr.close()
        assert _stop(proc, signal.SIGTERM) == 0
    assert _integrity(db) == "ok"
    proc, target = _start(db)
    try:
        assert _n_reports(target) == 2000
    finally:
        _stop(proc, signal.SIGTERM)


# ---------------------------------------------------------------------------------------------- reporter


CHILD = r"""
import sys, time
from ldp_client.reporter import Reporter
target, state_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = Reporter(target, "app", max_epsilon=2.0, state_dir=state_dir, batch_size=250, max_batch_age_s=3600.0)
for i in range(n):
    r.report(i % 8)
deadline = time.monotonic() + 60
while r.stats().journaled < n:
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.005)
print("ready", r.stats().sent_reports, flush=True)
time.sleep(120)
"""


def test_reporter_outbox_survives_an_app_kill_and_drains_into_the_real_server(tmp_path: Path) -> None:
    db = tmp_path / "ldp.sqlite3"
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
        _create(server.target, "app", GRRParams.from_epsilon(8, 1.0))
        state = tmp_path / "device"
        n = 1100  # 4 full batches (some may already be sent) and a journal of 100
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, server.target, str(state), str(n)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("ready")
        finally:
            os.kill(proc.pid, signal.SIGKILL)  # the app dies without closing its reporter
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()
        before = _n_reports(server.target, "app")
        assert before < n
        with Reporter(server.target, "app", max_epsilon=2.0, state_dir=state) as reporter:
            assert reporter.flush(timeout=30)
            stats = reporter.stats()
        assert stats.recovered_reports >= n - before
        assert _n_reports(server.target, "app") == n  # every journaled report, exactly once
