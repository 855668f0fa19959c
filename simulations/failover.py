"""Aggregator replicas as processes, and device clients that fail over between them (``make demo-cluster``).

A :class:`Replica` is an ``ldp-aggregator serve --store URL --retain-raw`` process on a free loopback port.
A :class:`FailoverClient` thread sends its :class:`DeviceBatch` es in order to its home replica and, when a
call fails (the replica died, PostgreSQL is away), resends the SAME batch, under the same batch id (the
idempotency key), to the next replica until one acknowledges it, as a client behind a load balancer would.
A :class:`Ledger`, shared by the clients, records who acknowledged what; it sets an event once a given
number of batches are acknowledged (the demo kills a replica then).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = [
    "GIVE_UP_S",
    "DeviceBatch",
    "FailoverClient",
    "Ledger",
    "Replica",
    "ReplicaError",
]

SUBMIT_TIMEOUT_S: Final = 30.0
GIVE_UP_S: Final = 120.0  # one batch unacknowledged this long: the client stops and says why
RETRY_PAUSE_S: Final = 0.05


class ReplicaError(Exception):
    """A replica did not start; the message says why (its last log line)."""


# ------------------------------------------------------------------------------------------- replicas


class Replica:
    """``ldp-aggregator serve --store URL --retain-raw`` on a free loopback port (started at construction).

    It runs in a session of its own, so a Ctrl-C in the terminal reaches only the program that started it,
    which then stops it in order. Its log goes to ``log``; the PostgreSQL password reaches it as
    ``PGPASSWORD``, never on a command line.
    """

    def __init__(self, name: str, url: str, password: str, log: Path) -> None:
        self.name = name
        cmd = [sys.executable, "-m", "ldp_aggregator", "serve", "--store", url]
        cmd += ["--listen", "127.0.0.1:0", "--retain-raw"]
        env = {**os.environ, "PGPASSWORD": password}
        with log.open("w", encoding="utf-8") as log_file:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=log_file, text=True, env=env, start_new_session=True
            )
        self.log = log
        self.target = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self) -> None:
        """Read its "ready on port N" line; raises ReplicaError with its last log line if it did not start."""
        if self.proc.stdout is None:  # unreachable: stdout is a pipe
            raise ReplicaError(f"replica {self.name} has no stdout pipe")
        line = self.proc.stdout.readline()
        match = re.search(r"ready on port (\d+)", line)
        if match is None:
            self.proc.wait(timeout=30)
            lines = self.log.read_text(encoding="utf-8").strip().splitlines()
            raise ReplicaError(
                f"replica {self.name} did not start: {lines[-1] if lines else line!r} (log: {self.log})"
            )
        self.target = f"127.0.0.1:{match.group(1)}"

    def kill(self) -> None:
        """SIGKILL, as a crashed machine: nothing drains, nothing is committed after this."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM (drain, commit, exit 0) if it still runs, SIGKILL if it does not stop; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return int(self.proc.returncode)


# ------------------------------------------------------------------------------------------- clients


@dataclass(frozen=True, kw_only=True)
class DeviceBatch:
    """One device batch: its id (the idempotency key) and the message sent under it."""

    batch_id: str
    message: Any  # reports_pb2.ReportBatch


@dataclass(kw_only=True)
class Ledger:
    """What the clients saw, shared between their threads (under ``lock``)."""

    mark_after: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: int = 0
    acked_by: dict[str, int] = field(default_factory=dict)
    acked_batches: dict[str, list[DeviceBatch]] = field(default_factory=dict)
    resent: int = 0  # batches acknowledged by another replica than the one first tried
    duplicates: int = 0  # of those, answered "duplicate": the first replica had committed them
    marked: threading.Event = field(default_factory=threading.Event)
    abort: threading.Event = field(default_factory=threading.Event)
    failure: str | None = None

    def record(self, batch: DeviceBatch, replica: str, *, moved: bool, duplicate: bool) -> None:
        with self.lock:
            self.acked += 1
            self.acked_by[replica] = self.acked_by.get(replica, 0) + 1
            self.acked_batches.setdefault(replica, []).append(batch)
            self.resent += moved
            self.duplicates += duplicate
            if self.acked >= self.mark_after:
                self.marked.set()


class FailoverClient(threading.Thread):
    """A device population's uplink: its batches in order to its home replica; a failed call is resent,
    the same batch id, to the next replica until one acknowledges it (which becomes its home)."""

    def __init__(
        self, batches: list[DeviceBatch], replicas: Sequence[Replica], home: int, ledger: Ledger
    ) -> None:
        super().__init__(daemon=True, name="failover-client")
        self.batches = batches
        self.replicas = replicas
        self.home = home
        self.ledger = ledger

    def run(self) -> None:
        import grpc

        from ldp_client._proto.ldp.v1 import collector_pb2_grpc

        channels = {r.name: grpc.insecure_channel(r.target) for r in self.replicas}
        stubs = {name: collector_pb2_grpc.CollectorStub(ch) for name, ch in channels.items()}
        try:
            for batch in self.batches:
                if not self._send(stubs, batch):
                    return
        except Exception as exc:  # a bug: reported by the main thread as one line
            self.ledger.failure = f"client thread failed: {type(exc).__name__}: {exc}"
            self.ledger.abort.set()
        finally:
            for ch in channels.values():
                ch.close()

    def _send(self, stubs: dict[str, Any], batch: DeviceBatch) -> bool:
        import grpc

        deadline = time.monotonic() + GIVE_UP_S
        k = self.home
        first = self.replicas[k].name
        last_error = ""
        while time.monotonic() < deadline and not self.ledger.abort.is_set():
            replica = self.replicas[k % len(self.replicas)]
            try:
                resp = stubs[replica.name].Submit(batch.message, timeout=SUBMIT_TIMEOUT_S)
            except grpc.RpcError as exc:
                last_error = f"{exc.code().name}: {exc.details()}"
                k += 1  # the same batch (same id) to the next replica
                time.sleep(RETRY_PAUSE_S)
                continue
            self.home = k % len(self.replicas)
            moved = replica.name != first
            self.ledger.record(batch, replica.name, moved=moved, duplicate=bool(resp.duplicate))
            return True
        if not self.ledger.abort.is_set():
            self.ledger.failure = (
                f"batch {batch.batch_id!r} was not acknowledged in {GIVE_UP_S:g} s: {last_error}"
            )
            self.ledger.abort.set()
        return False
