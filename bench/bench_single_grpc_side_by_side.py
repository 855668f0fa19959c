"""Single-report ``SubmitReport`` calls to two servers at once, one per tree: before/after on a busy machine.

``bench_single_grpc.py --tree`` alternates the trees (A B A B ...), so a burst of other work on the machine
hits one window and not the other. Here both servers (``ldp-aggregator serve`` from each tree, SQLite,
RAPPOR k=128, h=2, m=64 as bench_single_grpc.py) run at the same time, each loaded by its own client
process with ``--callers`` concurrent device-like callers (one report per call, each waiting for its
answer), over the same window: whatever else the machine does, both see it. Which server starts first
alternates by round. Prints, per round and as medians, reports/s and the server's CPU per report (user +
system from /proc), and the ratios after/before.

    .venv/bin/python bench/bench_single_grpc_side_by_side.py --tree before=/tmp/ldp-before --tree after=. \\
        --rounds 6 --seconds 8
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from harness import ROOT

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_client import wire
from ldp_client.mechanisms.rappor import RapporEncoder
from ldp_client.params import RapporParams

PARAMS = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)
CAMPAIGN = "single"
_METHOD = "/ldp.v1.Collector/SubmitReport"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client(
    target: str, callers: int, n_reports: int, seconds: float, start_at: float, out: mp.Queue
) -> None:  # type: ignore[type-arg]
    """``callers`` concurrent callers from ``start_at`` (wall clock) for ``seconds``; puts calls answered."""
    enc = RapporEncoder(PARAMS, campaign_id=CAMPAIGN, secret=os.urandom(32))
    tag = os.urandom(4).hex()
    payloads = [
        wire.report_to_proto(
            campaign_id=CAMPAIGN,
            report_id=f"{tag}-{i}",
            params=PARAMS,
            report=enc.encode(f"value-{i % 1000}"),
        ).SerializeToString()
        for i in range(n_reports)
    ]

    async def run() -> int:
        async with grpc.aio.insecure_channel(target) as ch:
            call = ch.unary_unary(_METHOD)  # bytes in, bytes out
            await call(payloads[0], timeout=60)  # connect before the window
            while time.time() < start_at:
                await asyncio.sleep(0.002)
            stop_at = time.monotonic() + seconds
            indexes = iter(range(1, len(payloads)))

            async def caller() -> int:
                done = 0
                for i in indexes:
                    if time.monotonic() >= stop_at:
                        break
                    await call(payloads[i], timeout=60)
                    done += 1
                return done

            return sum(await asyncio.gather(*(caller() for _ in range(callers))))

    out.put(asyncio.run(run()))


def _start(tree: Path, db: Path) -> tuple[subprocess.Popen[str], str]:
    """A server from ``tree`` on a free loopback port, holding the campaign; (process, target)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(db), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tree,
        env=dict(os.environ, PYTHONPATH=str(tree)),
    )
    assert server.stdout is not None
    port = re.search(r"ready on port (\d+)", server.stdout.readline())
    if port is None:
        server.kill()
        raise RuntimeError(f"the server from {tree} did not start")
    target = f"127.0.0.1:{port.group(1)}"
    with grpc.insecure_channel(target) as ch:
        analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id=CAMPAIGN, params=PARAMS)
            )
        )
    return server, target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tree", action="append", required=True, help="LABEL=PATH, exactly twice (before, after)"
    )
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--callers", type=int, default=16, help="concurrent callers per server")
    ap.add_argument("--max-rate", type=float, default=5_000, help="reports encoded ahead per second")
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    if len(trees) != 2:
        ap.error("--tree: give exactly two, LABEL=PATH each")
    labels = list(trees)
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in labels}
    ctx = mp.get_context("spawn")
    n_reports = int(args.max_rate * args.seconds) + args.callers + 1
    print(f"# {os.cpu_count()} cores; {args.callers} callers per server; trees: {trees} (bench root {ROOT})")
    for r in range(args.rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        with tempfile.TemporaryDirectory(prefix="ldp-side-") as tmp:
            servers = {k: _start(Path(trees[k]).resolve(), Path(tmp) / f"{k}.sqlite3") for k in order}
            try:
                queues = {k: ctx.Queue() for k in order}
                start_at = time.time() + 4 + 2 * args.max_rate * args.seconds / 40_000  # after encoding
                procs = [
                    ctx.Process(
                        target=_client,
                        args=(servers[k][1], args.callers, n_reports, args.seconds, start_at, queues[k]),
                    )
                    for k in order
                ]
                for p in procs:
                    p.start()
                while time.time() < start_at:
                    time.sleep(0.001)
                cpu0 = {k: _cpu_seconds(servers[k][0].pid) for k in order}
                done = {k: queues[k].get() for k in order}
                cpu1 = {k: _cpu_seconds(servers[k][0].pid) for k in order}
                for p in procs:
                    p.join()
            finally:
                for server, _ in servers.values():
                    server.send_signal(signal.SIGTERM)
                    server.wait(timeout=60)
        for k in labels:
            results[k].append((done[k] / args.seconds, 1e6 * (cpu1[k] - cpu0[k]) / max(done[k], 1)))
        print(
            f"round {r}: "
            + "; ".join(
                f"{k} {results[k][-1][0]:,.0f} reports/s, {results[k][-1][1]:,.0f} µs/report" for k in labels
            ),
            flush=True,
        )
    a, b = labels
    rate = [results[b][i][0] / results[a][i][0] for i in range(args.rounds)]
    cpu = [results[b][i][1] / results[a][i][1] for i in range(args.rounds)]
    for k in labels:
        print(
            f"{k}: median {statistics.median(x for x, _ in results[k]):,.0f} reports/s,"
            f" {statistics.median(c for _, c in results[k]):,.0f} µs server CPU/report"
        )
    rounds = ", ".join(f"{x:.3f}" for x in rate)
    print(f"{b}/{a} reports/s: median {statistics.median(rate):.3f} (rounds: {rounds})")
    print(f"{b}/{a} server CPU per report: median {statistics.median(cpu):.3f}")


if __name__ == "__main__":
    main()
