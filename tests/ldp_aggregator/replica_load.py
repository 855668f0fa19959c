"""Clients and replicas for the PostgreSQL replica tests and benchmarks (test_replicas_pg.py, bench/).

A :class:`Replica` is an ``ldp-aggregator serve --store URL`` process on a free loopback port. A
:class:`FailoverClient` sends its own sequence of GRR batches (batch ids ``r{round}-w{worker}-{i}``) to
its home replica and, when a call fails (the replica died, PostgreSQL is away), resends the SAME batch to
the next replica until one acknowledges it, as a client behind a load balancer would. What it records
(acknowledged and attempted batches) is what the checks compare with the database.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO

import grpc
import numpy as np
from numpy.typing import NDArray

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_aggregator.accumulators import CountAccumulator, accumulator_from_bytes
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc, reports_pb2
from ldp_client.params import GRRParams

__all__ = [
    "BATCH",
    "PARAMS",
    "FailoverClient",
    "Replica",
    "batch",
    "create_campaign",
    "expected_counts",
    "stored_counts",
]

BATCH = 200
PARAMS = GRRParams.from_epsilon(8, 1.0)
D = PARAMS.domain.size
ROOT = Path(__file__).resolve().parents[2]


class Replica:
    """``ldp-aggregator serve --store URL ARGS`` on 127.0.0.1 (a free port), started at construction.

    ``url`` None: no ``--store`` (the ARGS say where, e.g. ``--config FILE``).
    """

    def __init__(self, url: str | None, *args: str, log: IO[str] | None = None) -> None:
        store = ["--store", url] if url is not None else []
        cmd = [sys.executable, "-m", "ldp_aggregator", "serve", *store, "--listen", "127.0.0.1:0", *args]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log or subprocess.DEVNULL, text=True, cwd=ROOT
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"ready on port (\d+)", line)
        if match is None:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"replica did not start: {line!r}")
        self.target = f"127.0.0.1:{match.group(1)}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 60) -> int:
        """Send ``sig`` and wait; returns the exit code."""
        if self.alive:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def values(round_: int, worker: int, i: int) -> NDArray[np.int64]:
    """A batch's reported values: different for every batch id, so per-value counts tell which were stored."""
    return np.random.default_rng([round_, worker, i]).integers(0, D, BATCH)


def batch(round_: int, worker: int, i: int) -> reports_pb2.ReportBatch:
    return wire.batch_to_proto(
        campaign_id="c", batch_id=f"r{round_}-w{worker}-{i}", params=PARAMS, columns=values(round_, worker, i)
    )


def expected_counts(batches: Iterable[tuple[int, int, int]]) -> NDArray[np.int64]:
    counts = np.zeros(D, dtype=np.int64)
    for round_, w, i in batches:
        counts += np.bincount(values(round_, w, i), minlength=D)
    return counts


def create_campaign(target: str) -> None:
    with grpc.insecure_channel(target) as ch:
        analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id="c", params=PARAMS)
            ),
            timeout=30,
        )


def stored_counts(target: str) -> tuple[NDArray[np.int64], int]:
    """Campaign "c"'s committed per-value counts and batch count, as a replica exports them."""
    with grpc.insecure_channel(target) as ch:
        resp = analyst_pb2_grpc.AnalystStub(ch).ExportCampaign(
            analyst_pb2.ExportCampaignRequest(campaign_id="c"), timeout=30
        )
    acc = accumulator_from_bytes(resp.accumulator)
    assert isinstance(acc, CountAccumulator)
    return acc.counts, int(resp.n_batches)


class FailoverClient(threading.Thread):
    """One client: batches in order to its home replica, each resent to the others until acknowledged
    (the replica that answered becomes its home, as a load balancer drops a dead backend).

    Args:
        targets: Every replica's address (the list may be changed while running: a restarted replica).
        home: Index of the first replica to try.
        round_, worker: Its batch ids' prefix.
        stop: Set to stop after the batch in hand is acknowledged (or ``give_up_s`` passed).
        give_up_s: How long one batch may go unacknowledged before the client stops with it in flight.
    """

    def __init__(
        self,
        targets: Sequence[str],
        home: int,
        round_: int,
        worker: int,
        stop: threading.Event,
        *,
        give_up_s: float = 60.0,
    ) -> None:
        super().__init__(daemon=True)
        self.targets = list(targets)
        self.home = home
        self.first_home = home
        self.round = round_
        self.worker = worker
        self.stop_event = stop
        self.give_up_s = give_up_s
        self.acked: list[int] = []
        self.attempted = 0
        self.failovers = 0
        self.errors: dict[str, int] = {}
        self.acked_at: list[float] = []

    def run(self) -> None:
        channels = {t: grpc.insecure_channel(t) for t in self.targets}
        try:
            i = 0
            while not self.stop_event.is_set():
                self.attempted = i + 1
                if not self._send(channels, batch(self.round, self.worker, i)):
                    return
                self.acked.append(i)
                self.acked_at.append(time.monotonic())
                i += 1
        finally:
            for ch in channels.values():
                ch.close()

    def _send(self, channels: dict[str, grpc.Channel], msg: reports_pb2.ReportBatch) -> bool:
        deadline = time.monotonic() + self.give_up_s
        k = self.home
        while time.monotonic() < deadline:
            target = self.targets[k % len(self.targets)]
            if target not in channels:
                channels[target] = grpc.insecure_channel(target)
            try:
                collector_pb2_grpc.CollectorStub(channels[target]).Submit(msg, timeout=10)
                self.home = k % len(self.targets)  # stay with the replica that answered
                return True
            except grpc.RpcError as exc:
                code = exc.code().name  # type: ignore[attr-defined]
                self.errors[code] = self.errors.get(code, 0) + 1
                self.failovers += 1
                k += 1  # the same batch id, to the next replica
                time.sleep(0.02)
        return False


def wait_for(predicate: object, timeout: float = 30.0) -> None:
    """Poll ``predicate()`` until true (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.005)
