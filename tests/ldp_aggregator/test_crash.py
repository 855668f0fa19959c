"""Durability of acknowledged batches, against a process kill and against a power loss.

* SIGKILL under load: after a restart, the stored accumulator holds exactly the acknowledged batches plus
  some of the batches that were in flight (those a resend answers ``duplicate``), value by value; resending
  every batch ever attempted (as a client retry would) then leaves exactly one copy of each.
* A kill only proves that the data reached the operating system. Surviving a power loss needs the WAL to
  be on stable storage before the answer leaves: the server is run under ``strace`` and, for every
  acknowledged batch, the trace must show the batch's WAL writes, then an fsync/fdatasync of the WAL, then
  the response on the socket, in that order (``synchronous=OFF`` or ``NORMAL`` fail this check).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
from numpy.typing import NDArray

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_aggregator.accumulators import CountAccumulator, accumulator_from_bytes
from ldp_aggregator.service import open_store
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc, reports_pb2
from ldp_client.params import GRRParams

BATCH = 200
PARAMS = GRRParams.from_epsilon(8, 1.0)
D = PARAMS.domain.size


def _start(db: Path, *, wrapper: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], str]:
    """Start ``ldp_aggregator serve`` on ``db`` (under ``wrapper``, e.g. strace, if given)."""
    proc = subprocess.Popen(
        [
            *wrapper,
            sys.executable,
            "-m",
            "ldp_aggregator",
            "serve",
            "--db",
            str(db),
            "--listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"ready on port (\d+)", line)
    assert match, f"server did not start: {line!r}"
    return proc, f"127.0.0.1:{match.group(1)}"


def _values(round_: int, worker: int, i: int) -> NDArray[np.int64]:
    """The reported values of one batch: a mix of every value, different for every batch id, so the
    per-value counts tell which batches were stored (not only how many)."""
    return np.random.default_rng([round_, worker, i]).integers(0, D, BATCH)


def _batch(round_: int, worker: int, i: int) -> reports_pb2.ReportBatch:
    batch_id = f"r{round_}-w{worker}-{i}"
    return wire.batch_to_proto(
        campaign_id="c", batch_id=batch_id, params=PARAMS, columns=_values(round_, worker, i)
    )


def expected_counts(batches: Iterable[tuple[int, int, int]]) -> NDArray[np.int64]:
    """Per-value counts of exactly these (round, worker, i) batches."""
    counts = np.zeros(D, dtype=np.int64)
    for round_, w, i in batches:
        counts += np.bincount(_values(round_, w, i), minlength=D)
    return counts


def stored_counts(target: str) -> tuple[NDArray[np.int64], int]:
    """The committed per-value counts of campaign "c" and its number of batches, as exported."""
    with grpc.insecure_channel(target) as ch:
        resp = analyst_pb2_grpc.AnalystStub(ch).ExportCampaign(
            analyst_pb2.ExportCampaignRequest(campaign_id="c"), timeout=30
        )
    acc = accumulator_from_bytes(resp.accumulator)
    assert isinstance(acc, CountAccumulator)
    return acc.counts, int(resp.n_batches)


def _stop(proc: subprocess.Popen[str], sig: signal.Signals) -> int:
    proc.send_signal(sig)
    code = proc.wait(timeout=30)
    if proc.stdout is not None:
        proc.stdout.close()
    return code


def _client(
    target: str,
    round_: int,
    worker: int,
    acked: list[tuple[int, int]],
    attempted: list[int],
    stop: threading.Event,
) -> None:
    with grpc.insecure_channel(target) as ch:
        stub = collector_pb2_grpc.CollectorStub(ch)
        i = 0
        while not stop.is_set():
            attempted[worker] = i + 1
            try:
                stub.Submit(_batch(round_, worker, i), timeout=5)
            except grpc.RpcError:
                return  # the server died under us
            acked.append((worker, i))
            i += 1


def _create_campaign(target: str) -> None:
    with grpc.insecure_channel(target) as ch:
        analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id="c", params=PARAMS)
            ),
            timeout=30,
        )


def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = tmp_path / "ldp.sqlite3"
    started: list[subprocess.Popen[str]] = []
    try:
        proc = _kill_rounds(db, started)
        assert _stop(proc, signal.SIGTERM) == 0  # graceful shutdown exits cleanly
    finally:
        for leftover in started:  # a failed check may leave a server running: do not leak it
            if leftover.poll() is None:
                leftover.kill()
                leftover.wait()


def _kill_rounds(db: Path, started: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """Three rounds of load, SIGKILL, restart and checks; returns the server left running (every server
    started is appended to ``started``)."""
    rng = np.random.default_rng(99)
    proc, target = _start(db)
    started.append(proc)
    _create_campaign(target)
    workers = 3
    stored: list[tuple[int, int, int]] = []  # every batch of earlier rounds (all resent, so all stored)
    for round_ in range(3):
        acked: list[tuple[int, int]] = []
        attempted = [0] * workers
        stop = threading.Event()
        threads = [
            threading.Thread(target=_client, args=(target, round_, w, acked, attempted, stop))
            for w in range(workers)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        want = int(rng.integers(20, 200))
        while len(acked) < want and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(float(rng.uniform(0, 0.05)))
        _stop(proc, signal.SIGKILL)
        stop.set()
        for t in threads:
            t.join()
        assert acked, "no batch was acknowledged before the kill"
        proc, target = _start(db)
        started.append(proc)
        counts_after_kill, n_batches_after_kill = stored_counts(target)
        # Each worker's last attempt is in flight unless it was acknowledged (a worker may not have started).
        last = [(w, attempted[w] - 1) for w in range(workers) if attempted[w] > 0]
        in_flight = [batch for batch in last if batch not in acked]
        with grpc.insecure_channel(target) as ch:
            stub = collector_pb2_grpc.CollectorStub(ch)
            for w, i in acked:  # every acknowledged batch survived the kill
                assert stub.Submit(_batch(round_, w, i)).duplicate, (round_, w, i)
            # An in-flight batch may or may not have been committed before the kill; a resend says which.
            committed_in_flight = [
                (w, i) for w, i in in_flight if stub.Submit(_batch(round_, w, i)).duplicate
            ]
            for w in range(workers):  # the client retries everything it may not have seen acknowledged
                for i in range(attempted[w]):
                    stub.Submit(_batch(round_, w, i))
        # What the restarted server held is exactly the acknowledged batches plus the in-flight ones it had
        # committed, value by value: nothing lost, nothing extra, nothing altered.
        committed = [(round_, w, i) for w, i in acked + committed_in_flight]
        np.testing.assert_array_equal(counts_after_kill, expected_counts(stored + committed))
        assert n_batches_after_kill == len(stored) + len(committed)
        # After the retries: exactly one copy of every batch ever attempted.
        stored += [(round_, w, i) for w in range(workers) for i in range(attempted[w])]
        counts, n_batches = stored_counts(target)
        np.testing.assert_array_equal(counts, expected_counts(stored))
        assert n_batches == len(stored)
    return proc


# ------------------------------------------------------------------------------------- fsync before the ack

#: Syscalls that write file data, sync it, or send on a socket (what the ordering check needs).
_TRACED = "pwrite64,pwritev,pwritev2,write,writev,sendmsg,sendto,fsync,fdatasync"
_LINE = re.compile(r"^(\d+) +(?:<\.\.\. (\w+) resumed>|(\w+)\((\d+)<((?:\\x[0-9a-f]{2})*)>)")
_STRING = re.compile(r'"((?:\\x[0-9a-f]{2})*)"')


def _hex_bytes(escaped: str) -> bytes:
    """Bytes of an ``strace -xx`` string (every byte written as \\xNN)."""
    return bytes.fromhex(escaped.replace("\\x", ""))


@dataclass
class _Syscall:
    """One system call of the trace: where its entry and its completion appear in the output."""

    name: str
    path: str
    entry: int
    done: int | None = None
    data: bytes = b""


def _parse_strace(text: str) -> list[_Syscall]:
    """Calls of an ``strace -f -y -xx`` log, with a call split by other threads' events (``<unfinished
    ...>`` then ``<... name resumed>``) paired by thread id. Line numbers give the order of events: strace
    reports each event while the thread is stopped, so a call reported complete before another call's
    entry completed before that entry."""
    calls: list[_Syscall] = []
    pending: dict[str, _Syscall] = {}
    for number, line in enumerate(text.splitlines()):
        match = _LINE.match(line)
        if match is None:
            continue
        tid, resumed, name, _fd, path = match.groups()
        if resumed is not None:
            call = pending.pop(tid, None)
            if call is not None and call.name == resumed:
                call.done = number
            continue
        call = _Syscall(name=name, path=_hex_bytes(path).decode(errors="replace"), entry=number)
        call.data = b"".join(_hex_bytes(s) for s in _STRING.findall(line))
        if line.rstrip().endswith("<unfinished ...>"):
            pending[tid] = call
        else:
            call.done = number
        calls.append(call)
    return calls


def _children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # exited meanwhile
            # Fields after the command name (which may hold spaces, in parentheses): state, ppid, ...
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _strace_usable() -> bool:
    if shutil.which("strace") is None:
        return False
    done = subprocess.run(
        ["strace", "-f", "--seccomp-bpf", "-o", os.devnull, "-e", "trace=fsync", "true"],
        check=False,
        capture_output=True,
    )
    return done.returncode == 0


def test_every_acknowledged_batch_was_fsynced_before_its_answer(tmp_path: Path) -> None:
    """Power-loss durability: the WAL holding a batch is fsynced after the batch is written to it and
    before the answer that acknowledges it is sent (observed in the server's system calls)."""
    if not _strace_usable():
        pytest.skip("strace (with --seccomp-bpf) cannot trace a child process here")
    db = tmp_path / "ldp.sqlite3"
    log = tmp_path / "server.strace"
    wrapper = (
        "strace",
        "-f",
        "--seccomp-bpf",
        "-y",
        "-xx",
        "-s",
        "4096",
        "-o",
        str(log),
        "-e",
        f"trace={_TRACED}",
    )
    strace_proc, target = _start(db, wrapper=wrapper)
    answers: list[bytes] = []
    try:
        _create_campaign(target)
        with grpc.insecure_channel(target) as ch:
            stub = collector_pb2_grpc.CollectorStub(ch)
            # One call at a time, so every WAL write between two answers belongs to the second one.
            for i in range(12):
                resp = stub.Submit(
                    wire.batch_to_proto(
                        campaign_id="c", batch_id=f"fsync-check-{i:03d}", params=PARAMS,
                        columns=_values(9, 9, i)[: 1 + 17 * i],
                    ),
                    timeout=30,
                )  # fmt: skip
                assert resp.accepted == 1 + 17 * i
                answers.append(resp.SerializeToString())
            for i in range(4):
                report = wire.report_to_proto(
                    campaign_id="c", report_id=f"fsync-report-{i:03d}", params=PARAMS, report=i
                )
                resp = stub.SubmitReport(report, timeout=30)
                assert resp.accepted == 1
                answers.append(resp.SerializeToString())
    finally:
        for pid in _children(strace_proc.pid):  # the server, strace's child: stop it; strace exits with it
            os.kill(pid, signal.SIGTERM)
        strace_proc.wait(timeout=60)
        if strace_proc.stdout is not None:
            strace_proc.stdout.close()
    calls = _parse_strace(log.read_text())
    wal = str(db) + "-wal"
    sends = [
        c
        for c in calls
        if c.name in ("sendmsg", "sendto", "write", "writev") and c.path.startswith("socket:")
    ]
    wal_writes = [
        c for c in calls if c.path == wal and c.name.startswith(("pwrite", "write")) and c.done is not None
    ]
    wal_syncs = [
        c for c in calls if c.path == wal and c.name in ("fsync", "fdatasync") and c.done is not None
    ]
    previous = 0
    for k, answer in enumerate(answers):
        # gRPC frames the message after a 5-byte prefix: flag 0, big-endian length.
        framed = b"\x00" + len(answer).to_bytes(4, "big") + answer
        sent = next((c for c in sends if c.entry > previous and framed in c.data), None)
        assert sent is not None, f"answer {k} not found in the server's socket writes"
        written = [c for c in wal_writes if previous < c.entry and c.done is not None and c.done < sent.entry]
        assert written, f"answer {k} was sent with no WAL write since the previous answer"
        last_write = max(c.done for c in written if c.done is not None)
        synced = [c for c in wal_syncs if c.entry > last_write and c.done is not None and c.done < sent.entry]
        assert synced, (
            f"answer {k} was sent before the WAL holding its batch was fsynced: not durable against a power"
            " loss (synchronous=OFF or NORMAL?)"
        )
        previous = sent.entry


def test_the_writer_connection_syncs_every_commit(tmp_path: Path) -> None:
    """The same promise read from SQLite itself (runs where strace cannot): the connection that commits
    batches is in WAL mode with synchronous=FULL (2) or EXTRA (3), the levels at which SQLite fsyncs the
    WAL at every commit; NORMAL (1) syncs only at checkpoints and OFF (0) never."""
    store = open_store(str(tmp_path / "ldp.sqlite3"))
    try:
        conn = store._writer_connection()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] in (2, 3)
        assert conn.execute("PRAGMA fullfsync").fetchone()[0] == 1  # macOS: flush the drive's cache too
    finally:
        store.close()
