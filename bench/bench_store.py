"""Benchmark: durable group-committed ingest throughput of ldp_aggregator.store.

N threads each keep ``--inflight`` batches outstanding (as concurrent gRPC requests would), every batch
carrying ``--batch-size`` reports, a fake accumulator delta (an int64 count vector of ``--acc-size``
entries, added and serialized like a real frequency accumulator) and, with retention on, a raw payload
of ``--payload-bytes``. Latency is submit -> future resolved, i.e. until the batch's transaction is
committed with synchronous=FULL.

Run: ``.venv/bin/python bench/bench_store.py [--threads 8 --inflight 4 --seconds 5 ...]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import numpy as np

from ldp_aggregator.store import CampaignRecord, Store, SubmitOutcome


@dataclass(frozen=True, slots=True)
class CountsAccumulator:
    """Stand-in for a frequency accumulator: report count plus a count vector."""

    n: int
    counts: np.ndarray

    def __add__(self, other: Self) -> Self:
        return type(self)(n=self.n + other.n, counts=self.counts + other.counts)

    def to_bytes(self) -> bytes:
        return self.n.to_bytes(8, "little") + self.counts.astype("<i8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> CountsAccumulator:
        return cls(n=int.from_bytes(data[:8], "little"), counts=np.frombuffer(data[8:], dtype="<i8").copy())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--inflight", type=int, default=4, help="outstanding batches per thread")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--acc-size", type=int, default=1024, help="entries in the fake count vector")
    ap.add_argument("--payload-bytes", type=int, default=8000, help="raw payload per batch (0 = none)")
    ap.add_argument("--no-retain-raw", action="store_true")
    ap.add_argument("--campaigns", type=int, default=1)
    ap.add_argument("--group-commit-max", type=int, default=256)
    ap.add_argument("--page-size", type=int, default=16384)
    ap.add_argument("--db", type=Path, default=None, help="database path (default: a fresh temp dir)")
    args = ap.parse_args()

    tmp = None
    if args.db is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_store_")
        args.db = Path(tmp.name) / "ldp.sqlite3"
    size = args.acc_size

    store = Store.open(
        args.db,
        retain_raw=not args.no_retain_raw,
        decode_accumulator=lambda r, b: CountsAccumulator.from_bytes(b),
        zero_accumulator=lambda r: CountsAccumulator(n=0, counts=np.zeros(size, dtype=np.int64)),
        group_commit_max=args.group_commit_max,
        page_size=args.page_size,
    )
    cids = [f"bench-{c}" for c in range(args.campaigns)]
    for cid in cids:
        store.create_campaign(
            CampaignRecord(campaign_id=cid, mechanism="grr", params_blob=b"bench", created_unix_ms=0)
        )
    rng = np.random.default_rng(1)
    delta = CountsAccumulator(
        n=args.batch_size, counts=rng.multinomial(args.batch_size, np.full(size, 1 / size))
    )
    payload = os.urandom(args.payload_bytes) if args.payload_bytes else None

    latencies: list[float] = []
    lat_lock = threading.Lock()
    stop_at = time.perf_counter() + args.seconds
    done_batches = [0] * args.threads

    def worker(t: int) -> None:
        window: list[Future[SubmitOutcome]] = []
        local: list[float] = []
        i = 0
        while time.perf_counter() < stop_at:
            while len(window) < args.inflight:
                t0 = time.perf_counter()
                fut = store.submit(cids[i % len(cids)], f"{t}-{i}", args.batch_size, delta, payload)
                fut.add_done_callback(lambda f, t0=t0: local.append(time.perf_counter() - t0))
                window.append(fut)
                i += 1
            window.pop(0).result()
            done_batches[t] += 1
        for f in window:
            f.result()
            done_batches[t] += 1
        with lat_lock:
            latencies.extend(local)

    before = store.stats()
    t_start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(args.threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t_start
    after = store.stats()
    store.close()
    db_bytes = sum(p.stat().st_size for p in args.db.parent.glob(args.db.name + "*"))
    if tmp is not None:
        tmp.cleanup()

    batches = after.batches_accepted - before.batches_accepted
    commits = after.commits - before.commits
    lat_ms = np.array(latencies) * 1e3
    print(
        f"threads={args.threads} inflight={args.inflight} batch_size={args.batch_size} acc_size={size} "
        f"payload_bytes={args.payload_bytes} retain_raw={not args.no_retain_raw} campaigns={args.campaigns} "
        f"page_size={args.page_size}"
    )
    print(
        f"elapsed_s={elapsed:.2f} batches={batches} commits={commits} failed_commits={after.failed_commits}"
    )
    print(f"batches_per_s={batches / elapsed:,.0f}")
    print(f"reports_per_s={batches * args.batch_size / elapsed:,.0f}")
    print(f"commits_per_s={commits / elapsed:,.0f}  mean_group={batches / max(commits, 1):.1f} batches")
    print(
        f"commit_latency_ms p50={np.percentile(lat_ms, 50):.2f} p99={np.percentile(lat_ms, 99):.2f} "
        f"max={lat_ms.max():.2f}"
    )
    print(f"db_size_mb={db_bytes / 1e6:.1f}")


if __name__ == "__main__":
    main()
