"""A server process killed with SIGKILL while clients submit loses no acknowledged batch and counts none
twice: after a restart, every acknowledged batch is present, and resending every batch ever attempted
(as a client retry would) leaves exactly one copy of each."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from ldp_client import wire
from ldp_client._proto.ldp.v1 import estimates_pb2, reports_pb2, services_pb2, services_pb2_grpc
from ldp_client.params import GRRParams

BATCH = 200
PARAMS = GRRParams.from_epsilon(8, 1.0)


def _start(db: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(db), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"ready on port (\d+)", line)
    assert match, f"server did not start: {line!r}"
    return proc, f"127.0.0.1:{match.group(1)}"


def _batch(round_: int, worker: int, i: int) -> reports_pb2.ReportBatch:
    values = np.full(BATCH, (worker + i) % 8)
    batch_id = f"r{round_}-w{worker}-{i}"
    return wire.batch_to_proto(campaign_id="c", batch_id=batch_id, params=PARAMS, columns=values)


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
        stub = services_pb2_grpc.CollectorStub(ch)
        i = 0
        while not stop.is_set():
            attempted[worker] = i + 1
            try:
                stub.Submit(_batch(round_, worker, i), timeout=5)
            except grpc.RpcError:
                return  # the server died under us
            acked.append((worker, i))
            i += 1


def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = tmp_path / "ldp.sqlite3"
    rng = np.random.default_rng(99)
    proc, target = _start(db)
    with grpc.insecure_channel(target) as ch:
        services_pb2_grpc.AnalystStub(ch).CreateCampaign(
            services_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id="c", params=PARAMS)
            )
        )
    workers = 3
    expected_reports = 0
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
        with grpc.insecure_channel(target) as ch:
            stub = services_pb2_grpc.CollectorStub(ch)
            for w, i in acked:  # every acknowledged batch survived the kill
                assert stub.Submit(_batch(round_, w, i)).duplicate, (round_, w, i)
            for w in range(workers):  # the client retries everything it may not have seen acknowledged
                for i in range(attempted[w]):
                    stub.Submit(_batch(round_, w, i))
            est = services_pb2_grpc.AnalystStub(ch).GetEstimate(
                estimates_pb2.EstimateRequest(campaign_id="c")
            )
        # Exactly one copy of every batch ever attempted: nothing lost, nothing counted twice.
        expected_reports += BATCH * sum(attempted)
        assert est.n_reports == expected_reports
    assert _stop(proc, signal.SIGTERM) == 0  # graceful shutdown exits cleanly
