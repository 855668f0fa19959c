"""Batched ingest through two aggregator replicas on one PostgreSQL database (issue 15, item 1).

Starts a throwaway PostgreSQL cluster (fsync on: durable commits; tests/ldp_aggregator/pg_cluster.py, or
the server of ``--url``), two ``ldp-aggregator serve --store URL`` replicas (raw retention on), and client
processes spread over both, each with ``--inflight`` concurrent Submit calls of RAPPOR batches (k=128, h=2,
m=64, 1,000 reports, as bench_ingest.py). Prints reports/s, the batch count and the number of accumulator
shard rows, and checks that the stored total equals what was acknowledged.

    .venv/bin/python bench/bench_pg_ingest.py --seconds 20
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import signal
import time
from collections.abc import Iterator

import grpc
import psycopg
from bench_ingest import PARAMS, _batch_client
from harness import ROOT

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_client import wire
from tests.ldp_aggregator.pg_cluster import PgCluster, new_schema_url
from tests.ldp_aggregator.replica_load import Replica

assert ROOT  # the harness put the repository root on sys.path (for the tests import above)


@contextlib.contextmanager
def _server(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with PgCluster.running() as cluster:
        yield cluster.url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--clients", type=int, default=2, help="client processes (spread over the replicas)")
    ap.add_argument("--inflight", type=int, default=4, help="concurrent Submit calls per client process")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--url", help="an existing PostgreSQL server (a fresh schema is made in it)")
    args = ap.parse_args()

    with _server(args.url) as base:
        url = new_schema_url(base)
        replicas = [Replica(url) for _ in range(args.replicas)]
        try:
            with grpc.insecure_channel(replicas[0].target) as ch:
                analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
                    analyst_pb2.CreateCampaignRequest(
                        campaign=wire.campaign_to_proto(campaign_id="bench", params=PARAMS)
                    ),
                    timeout=30,
                )
            ctx = mp.get_context("spawn")
            q: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
            procs = [
                ctx.Process(
                    target=_batch_client,
                    args=(
                        replicas[w % len(replicas)].target,
                        w,
                        args.seconds,
                        args.batch_size,
                        args.inflight,
                        q,
                    ),
                )
                for w in range(args.clients)
            ]
            t0 = time.monotonic()
            for p in procs:
                p.start()
            total = sum(q.get() for _ in procs)
            elapsed = time.monotonic() - t0
            for p in procs:
                p.join()
            with psycopg.connect(url) as conn:
                row = conn.execute(
                    "SELECT count(*), coalesce(sum(n_reports), 0), coalesce(sum(n_batches), 0)"
                    " FROM ldp_accumulator_shards WHERE campaign_id = 'bench'"
                ).fetchone()
            assert row is not None
            shards, stored, batches = (int(x) for x in row)
            print(
                f"batched ingest through {len(replicas)} replicas on PostgreSQL: {total:,} reports in"
                f" {elapsed:.1f} s = {total / elapsed:,.0f} reports/s ({args.clients} client processes x"
                f" {args.inflight} in flight, batches of {args.batch_size}, raw retention on, fsync on)"
            )
            print(f"stored: {stored:,} reports in {batches:,} batches, {shards} accumulator shard row(s)")
            if stored != total:
                raise SystemExit(f"MISMATCH: {total:,} reports acknowledged, {stored:,} stored")
            codes = [r.stop(signal.SIGTERM) for r in replicas]
            print(f"replicas stopped with SIGTERM, exit codes {codes}")
        finally:
            for r in replicas:
                if r.alive:
                    r.stop(signal.SIGKILL)


if __name__ == "__main__":
    main()
