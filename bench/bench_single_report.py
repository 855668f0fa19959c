"""The aggregator core's single-report path, in process (no gRPC): reports/s at C concurrent callers.

What ``Collector.SubmitReport`` does besides gRPC: decode and validate the report, build its increment
(``accumulators.batch_delta``), hand it to the store's group commit (SQLite WAL, synchronous=FULL, raw
retention on) and wait for COMMIT. RAPPOR k=128, h=2, m=64, as ``bench_ingest.py``.

    .venv/bin/python bench/bench_single_report.py [--reports 6000] [--callers 16] [--profile] [--postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import tempfile
import time

from harness import ROOT

from ldp_aggregator.service import Aggregator, open_store
from ldp_client import wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.mechanisms.rappor import RapporEncoder
from ldp_client.params import RapporParams
from tests.ldp_aggregator.pg_cluster import PgCluster, new_schema_url

assert ROOT  # the harness put the repository root on sys.path (for the tests import above)

PARAMS = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)


async def _run(agg: Aggregator, msgs: list[reports_pb2.Report], callers: int) -> float:
    queue: asyncio.Queue[reports_pb2.Report] = asyncio.Queue()
    for m in msgs:
        queue.put_nowait(m)

    async def caller() -> None:
        while not queue.empty():
            await agg.submit_report(queue.get_nowait())

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=6000)
    ap.add_argument("--callers", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--profile", action="store_true", help="cProfile the event-loop thread, top 15 by own time"
    )
    ap.add_argument(
        "--postgresql", action="store_true", help="on a throwaway PostgreSQL cluster instead of SQLite"
    )
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        pg_base = stack.enter_context(PgCluster.running()).url if args.postgresql else None
        _main(args, pg_base)


def _main(args: argparse.Namespace, pg_base: str | None) -> None:
    enc = RapporEncoder(PARAMS, campaign_id="bench", secret=os.urandom(32))
    rates = []
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(
                os.path.join(tmp, "ldp.sqlite3") if pg_base is None else new_schema_url(pg_base)
            )
            try:
                agg = Aggregator(store)
                agg.create_campaign(wire.campaign_to_proto(campaign_id="bench", params=PARAMS))
                msgs = [
                    wire.report_to_proto(
                        campaign_id="bench",
                        report_id=f"{r}-{i}",
                        params=PARAMS,
                        report=enc.encode(f"v{i % 1000}"),
                    )
                    for i in range(args.reports)
                ]
                prof = cProfile.Profile() if args.profile and r == 0 else None
                if prof is not None:
                    prof.enable()
                seconds = asyncio.run(_run(agg, msgs, args.callers))
                if prof is not None:
                    prof.disable()
                    pstats.Stats(prof).sort_stats("tottime").print_stats(15)
                commits = store.stats().commits
            finally:
                store.close()
        rates.append(args.reports / seconds)
        print(
            f"run {r}: {rates[-1]:,.0f} single reports/s ({args.callers} concurrent callers),"
            f" {commits:,} commits ({args.reports / max(commits, 1):.1f} reports per commit)",
            flush=True,
        )
    print(f"best {max(rates):,.0f} reports/s over {args.repeats} runs")


if __name__ == "__main__":
    main()
