"""Aggregator replicas on one PostgreSQL database, as processes (``ldp-aggregator serve --store URL``).

* SIGKILL one of two replicas under sustained load, five rounds: clients resend an unanswered batch (same
  id) to the other replica; afterwards the campaign holds every acknowledged batch exactly once, value by
  value (bench/pg_kill_loop.py runs the long version with figures).
* PostgreSQL crash-restarted under load: nothing acknowledged is lost, the replicas answer UNAVAILABLE
  meanwhile and serve again without a restart of their own.
* The command line against PostgreSQL: tokens and purge with ``--store``; a malformed URL, a wrong
  password or an unreachable server give one line, a non-zero exit code, and write nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import psycopg
import pytest

from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from tests.ldp_aggregator.pg_cluster import PgCluster, new_schema_url
from tests.ldp_aggregator.replica_load import (
    ROOT,
    FailoverClient,
    Replica,
    batch,
    create_campaign,
    expected_counts,
    stored_counts,
    wait_for,
)

pytestmark = pytest.mark.grpc


def _acked(clients: list[FailoverClient]) -> int:
    return sum(len(c.acked) for c in clients)


def test_sigkill_one_of_two_replicas_under_load_counts_every_acked_batch_once(
    pg_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "replica.toml"
    config.write_text(f"store = {json.dumps(pg_url)}\n")  # one replica takes the URL from its settings file
    replicas = [Replica(pg_url), Replica(None, "--config", str(config))]
    rng = np.random.default_rng(15)
    stored: list[tuple[int, int, int]] = []
    try:
        create_campaign(replicas[0].target)
        for round_ in range(5):
            victim = round_ % 2
            stop = threading.Event()
            targets = [r.target for r in replicas]
            clients = [FailoverClient(targets, w % 2, round_, w, stop) for w in range(4)]
            for c in clients:
                c.start()
            want = int(rng.integers(20, 120))
            wait_for(lambda clients=clients, want=want: _acked(clients) >= want)
            time.sleep(float(rng.uniform(0, 0.03)))
            assert replicas[victim].stop(signal.SIGKILL) == -signal.SIGKILL
            # Sustained load: the survivor takes over every client, the victim's included.
            after_kill = _acked(clients)
            wait_for(lambda clients=clients, n=after_kill: _acked(clients) >= n + 40)
            stop.set()
            for c in clients:
                c.join(timeout=90)
            for c in clients:  # every batch a client sent was acknowledged, by one replica or the other
                assert len(c.acked) == c.attempted, (round_, c.worker, c.errors)
            moved = [c.failovers > 0 for c in clients if c.first_home == victim]
            assert moved and all(moved), [c.errors for c in clients]  # the victim's clients failed over
            stored += [(round_, c.worker, i) for c in clients for i in c.acked]
            replicas[victim] = Replica(pg_url)
            # Each acknowledged batch is stored exactly once: the sums are those of exactly these batches.
            counts, n_batches = stored_counts(replicas[victim].target)
            assert n_batches == len(stored), (round_, n_batches, len(stored))
            np.testing.assert_array_equal(counts, expected_counts(stored))
            with grpc.insecure_channel(replicas[1 - victim].target) as ch:
                stub = collector_pb2_grpc.CollectorStub(ch)
                for c in clients[:2]:  # a late retry of any of them is a duplicate, on either replica
                    assert all(stub.Submit(batch(round_, c.worker, i), timeout=10).duplicate for i in c.acked)
        for r in replicas:
            assert r.stop(signal.SIGTERM) == 0
    finally:
        for r in replicas:
            if r.alive:
                r.stop(signal.SIGKILL)


def test_postgres_restarted_under_load_loses_nothing_and_replicas_recover_by_themselves(
    pg_cluster: PgCluster,
) -> None:
    url = new_schema_url(pg_cluster.url)
    replicas = [Replica(url), Replica(url)]
    pids = [r.proc.pid for r in replicas]
    try:
        create_campaign(replicas[0].target)
        stop = threading.Event()
        targets = [r.target for r in replicas]
        clients = [FailoverClient(targets, w % 2, 0, w, stop, give_up_s=120) for w in range(4)]
        for c in clients:
            c.start()
        wait_for(lambda: _acked(clients) >= 60)
        pg_cluster.restart("immediate")  # a crash of PostgreSQL and its WAL recovery, under load
        restarted = time.monotonic()
        # Both replicas serve again, the same processes: each acknowledges new batches after the restart.
        wait_for(
            lambda: all(sum(1 for t in c.acked_at if t > restarted) >= 10 for c in clients),
            timeout=60,
        )
        stop.set()
        for c in clients:
            c.join(timeout=150)
        assert [r.proc.pid for r in replicas] == pids and all(r.alive for r in replicas)
        errors = {code for c in clients for code in c.errors}
        assert errors == {"UNAVAILABLE"}, errors  # the outage was answered UNAVAILABLE, never INTERNAL
        for c in clients:
            assert len(c.acked) == c.attempted, c.errors
        acked = [(0, c.worker, i) for c in clients for i in c.acked]
        for r in replicas:
            counts, n_batches = stored_counts(r.target)
            assert n_batches == len(acked)
            np.testing.assert_array_equal(counts, expected_counts(acked))
        for r in replicas:
            assert r.stop(signal.SIGTERM) == 0
    finally:
        for r in replicas:
            if r.alive:
                r.stop(signal.SIGKILL)


# ---------------------------------------------------------------------------------------------- the CLI


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ldp_aggregator", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
    return {r[0] for r in rows}


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_bad_store_urls_and_logins_are_one_line_and_write_nothing(pg_url: str) -> None:
    params = psycopg.conninfo.conninfo_to_dict(pg_url)
    wrong = (
        f"postgresql://postgres:not-the-secret@{params['host']}:{params['port']}/postgres"
        f"?options={pg_url.partition('options=')[2]}"
    )
    cases = [
        (["serve", "--store", "postgresql://u:hunter2@h:port/db"], 2, "a port is a number"),
        (["serve", "--store", "sqlite:///x.db"], 2, "a PostgreSQL URL"),
        (["serve", "--store", wrong], 2, "password authentication failed"),
        (["serve", "--db", "x.sqlite3", "--store", pg_url], 2, "not both"),
        (["token", "create", "--role", "admin", "--store", wrong], 2, "password authentication failed"),
        (["token", "list", "--store", "postgresql://u@h/db?port=99999"], 2, "a port is a number"),
        (["token", "list", "--store", pg_url], 2, "holding ldp-aggregator tables"),
        (["purge", "--older-than", "1d", "--store", pg_url], 2, "holding ldp-aggregator tables"),
        (["serve", "--store", "postgresql://u:not-the-secret@127.0.0.1:1/postgres"], 4, "cannot reach"),
    ]
    for args, code, phrase in cases:
        proc = _cli(*args)
        line = _one_line(proc)
        assert proc.returncode == code, (args, proc.returncode, line)
        assert phrase in line, (args, line)
        assert "hunter2" not in line and "not-the-secret" not in line and params["password"] not in line
    assert _tables(pg_url) == set()  # nothing half-written, nothing at all


def test_token_and_purge_commands_work_on_postgres(pg_url: str) -> None:
    created = _cli("token", "create", "--role", "admin", "--name", "ops", "--store", pg_url, "--json")
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)
    listed = _cli("token", "list", "--store", pg_url, "--json")
    assert [t["id"] for t in json.loads(listed.stdout)["tokens"]] == [token["id"]]
    revoked = _cli("token", "revoke", token["id"], "--store", pg_url)
    assert revoked.returncode == 0 and f"revoked {token['id']}" in revoked.stdout
    purged = _cli("purge", "--older-than", "1d", "--store", pg_url)
    assert purged.returncode == 0 and "purged 0" in purged.stdout
    # A replica started now needs tokens (auth_required was set with the first token), and refuses a
    # non-loopback listen address only when no token was ever created: here it starts.
    replica = Replica(pg_url)
    try:
        with grpc.insecure_channel(replica.target) as ch, pytest.raises(grpc.RpcError) as info:
            collector_pb2_grpc.CollectorStub(ch).Submit(batch(0, 0, 0), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
        assert replica.stop(signal.SIGTERM) == 0
    finally:
        if replica.alive:
            replica.stop(signal.SIGKILL)
