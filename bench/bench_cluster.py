"""Dask figures of issue 15: archive reduce throughput, and ldp-sim's per-report simulation on a cluster.

``--reduce N,...``: a SQLite store gets N GRR reports (d=100, batches of 100,000, raw retention on) through
the service's ingest, is exported to a Parquet archive, and the archive is reduced on a LocalCluster of
``--workers`` processes; prints the reduce time, reports/s and reports/s per worker, and checks that the
merged accumulator equals the store's byte for byte.

``--simulate N,...``: ``simulate_on_cluster`` (what ``ldp-sim run --mode report --cluster`` runs) for
string RAPPOR k=128, h=2, m=64 over zipf:1.1 on 1,000 values; prints the time and the accuracy.

    .venv/bin/python bench/bench_cluster.py --reduce 1000000,10000000 --simulate 10000000,100000000
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from ldp_aggregator import archive, reduce
from ldp_aggregator.service import Aggregator, open_store
from ldp_client import registry, wire
from ldp_client.params import GRRParams
from simulations.cluster import simulate_on_cluster
from simulations.runners import SimulationConfig

BATCH = 100_000


def bench_reduce(n: int, workers: int, client: object) -> None:
    params = GRRParams.from_epsilon([str(i) for i in range(100)], 1.0)
    spec = registry.spec_for(params)
    rng = np.random.default_rng(n)
    with tempfile.TemporaryDirectory(prefix="ldp-bench-reduce-") as tmp:
        root = Path(tmp)
        with open_store(str(root / "db.sqlite3")) as store:
            agg = Aggregator(store)
            agg.create_campaign(wire.campaign_to_proto(campaign_id="g", params=params))
            t0 = time.perf_counter()

            async def ingest() -> None:
                for b in range(0, n, BATCH):
                    size = min(BATCH, n - b)
                    cols = spec.encode_batch(
                        params, rng.integers(0, 100, size=size), rng, campaign_id="g", labels=[]
                    )
                    msg = wire.batch_to_proto(campaign_id="g", batch_id=f"b{b}", params=params, columns=cols)
                    await agg.submit_batch(msg)

            asyncio.run(ingest())
            t_ingest = time.perf_counter() - t0
            t0 = time.perf_counter()
            summary = archive.export_archive(store, root / "archive", max_file_rows=10)
            t_export = time.perf_counter() - t0
            size = sum(p.stat().st_size for p in summary.files)
            result = reduce.reduce_archive(client, root / "archive", "g")  # type: ignore[arg-type]
            same = result.accumulator.to_bytes() == store.accumulator("g").to_bytes()
        rate = n / result.seconds
        print(
            f"reduce n={n:,}: {result.files} files ({size / 1e6:,.1f} MB), ingest {t_ingest:.1f} s, export"
            f" {t_export:.1f} s, reduce {result.seconds:.2f} s = {rate / 1e6:.2f} M reports/s"
            f" ({rate / workers / 1e6:.2f} M/s per worker); equals the store: {same}",
            flush=True,
        )


def bench_simulate(n: int, client: object) -> None:
    config = SimulationConfig(
        mechanism="rappor",
        population="zipf:1.1",
        domain=1000,
        n_users=n,
        params=(("k", 128), ("h", 2), ("m", 64)),
        mode="report",
        seed=0,
    )
    t0 = time.perf_counter()
    result = simulate_on_cluster(config, client)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    m = result.metrics
    print(
        f"simulate rappor n={n:,}: {seconds:.1f} s = {n / seconds / 1e6:.2f} M users/s;"
        f" detected {m.detected:.0f}, false positives {m.false_positives:.0f},"
        f" MSE/variance {m.mse_over_variance:.3f}, coverage {m.coverage:.3f},"
        f" rmse_frequency {result.rmse_frequency:.2e}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reduce", default="", help="report counts of archives to reduce, comma-separated")
    parser.add_argument("--simulate", default="", help="user counts to simulate, comma-separated")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with reduce.dask_client(workers=args.workers) as client:
        for n in (int(x) for x in args.reduce.split(",") if x):
            bench_reduce(n, args.workers, client)
        for n in (int(x) for x in args.simulate.split(",") if x):
            bench_simulate(n, client)


if __name__ == "__main__":
    main()
