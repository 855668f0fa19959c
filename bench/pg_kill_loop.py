"""SIGKILL one of two aggregator replicas on PostgreSQL under sustained load, many rounds (issue 15).

Each round: 4 failover clients (tests/ldp_aggregator/replica_load.py: batches of 200 GRR reports, each
unanswered batch resent with the same id to the other replica) submit to both replicas; after a random
number of acknowledgements one replica (alternately) is killed with SIGKILL; the clients carry on through
the survivor for ``--after`` more acknowledgements; the victim is restarted. After every round the stored
per-value counts must equal those of exactly the acknowledged batches (each once), and the batch count
their number. Prints per round: batches acknowledged, how many were resent to the other replica, the
longest pause in acknowledgements around the kill, and the check.

    .venv/bin/python bench/pg_kill_loop.py --rounds 20
"""

from __future__ import annotations

import argparse
import signal
import threading
import time

import numpy as np
from harness import ROOT

from tests.ldp_aggregator.pg_cluster import PgCluster, new_schema_url
from tests.ldp_aggregator.replica_load import (
    FailoverClient,
    Replica,
    create_campaign,
    expected_counts,
    stored_counts,
    wait_for,
)

assert ROOT  # the harness put the repository root on sys.path (for the tests import above)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--after", type=int, default=200, help="acknowledgements through the survivor")
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    stored: list[tuple[int, int, int]] = []
    failures = 0
    t_start = time.monotonic()
    with PgCluster.running() as cluster:
        url = new_schema_url(cluster.url)
        replicas = [Replica(url), Replica(url)]
        try:
            create_campaign(replicas[0].target)
            for round_ in range(args.rounds):
                victim = round_ % 2
                stop = threading.Event()
                targets = [r.target for r in replicas]
                clients = [FailoverClient(targets, w % 2, round_, w, stop) for w in range(args.clients)]
                for c in clients:
                    c.start()
                want = int(rng.integers(20, 400))
                wait_for(lambda clients=clients, want=want: sum(len(c.acked) for c in clients) >= want)
                time.sleep(float(rng.uniform(0, 0.05)))
                killed_at = time.monotonic()
                replicas[victim].stop(signal.SIGKILL)
                after_kill = sum(len(c.acked) for c in clients)
                target_acks = after_kill + args.after
                wait_for(
                    lambda clients=clients, n=target_acks: sum(len(c.acked) for c in clients) >= n,
                    timeout=120,
                )
                stop.set()
                for c in clients:
                    c.join(timeout=120)
                resent = sum(c.failovers for c in clients)
                unacked = sum(c.attempted - len(c.acked) for c in clients)
                # The longest pause of a victim's client around the kill: its last ack before, first after.
                pauses = []
                for c in clients:
                    before = [t for t in c.acked_at if t <= killed_at]
                    after = [t for t in c.acked_at if t > killed_at]
                    if before and after:
                        pauses.append(after[0] - before[-1])
                stored += [(round_, c.worker, i) for c in clients for i in c.acked]
                replicas[victim] = Replica(url)
                counts, n_batches = stored_counts(replicas[victim].target)
                ok = (
                    unacked == 0
                    and n_batches == len(stored)
                    and bool(np.array_equal(counts, expected_counts(stored)))
                )
                failures += not ok
                print(
                    f"round {round_ + 1:3d}: killed replica {victim}, {sum(len(c.acked) for c in clients):5d}"
                    f" batches acked ({resent} resent to the other replica), longest pause"
                    f" {1000 * max(pauses, default=0.0):6.1f} ms; stored {n_batches:6d} batches,"
                    f" each acked batch exactly once: {'ok' if ok else 'FAILED'}",
                    flush=True,
                )
            codes = [r.stop(signal.SIGTERM) for r in replicas]
        finally:
            for r in replicas:
                if r.alive:
                    r.stop(signal.SIGKILL)
    print(
        f"{args.rounds} rounds in {time.monotonic() - t_start:.0f} s: {len(stored):,} batches"
        f" ({len(stored) * 200:,} reports) acknowledged, {failures} failed round(s); replicas' SIGTERM exit"
        f" codes {codes}"
    )
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
