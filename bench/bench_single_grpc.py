"""Single-report ``SubmitReport`` calls per replica over gRPC, each answered after its commit (issue 15).

One ``ldp-aggregator serve`` process (SQLite by default, or ``--store postgresql`` on a throwaway cluster
from tests/ldp_aggregator/pg_cluster.py, or the server of ``--url``), raw retention on, RAPPOR k=128, h=2,
m=64 (as bench_ingest.py). ``--clients`` processes share ``--callers`` concurrent callers (asyncio tasks on
one grpc.aio channel per process), each sending one report per call and waiting for its answer before the
next. Reports are encoded (CSPRNG) and serialized before the timed window, so the clients spend their CPU
on the calls, not on encoding: the 2 cores are shared with the server.

Prints reports/s and the server's CPU time per report (user + system, from /proc), the second being the
steadier figure on a shared machine. ``--tree LABEL=PATH`` (repeatable) runs the server from another
checkout (e.g. a ``git worktree`` of the commit before a change) by putting PATH first on ``PYTHONPATH``;
with several trees, ``--rounds`` alternates them (A B A B ...) so that before and after see the same load.

    .venv/bin/python bench/bench_single_grpc.py --seconds 10 --rounds 3 \\
        --tree before=/tmp/ldp-before --tree after=.
    .venv/bin/python bench/bench_single_grpc.py --store postgresql --seconds 10
    .venv/bin/python bench/bench_single_grpc.py --profile /tmp/single   # py-spy (pip install py-spy)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import uvloop
from harness import ROOT, free_port, metric, scrape

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc, reports_pb2
from ldp_client.mechanisms.rappor import RapporEncoder
from ldp_client.params import RapporParams
from tests.ldp_aggregator.pg_cluster import PgCluster, new_schema_url

PARAMS = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)
LABELS = [f"value-{i}" for i in range(1000)]
CAMPAIGN = "single"
_METHOD = "/ldp.v1.Collector/SubmitReport"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """Per thread of a process: (user, system) CPU seconds so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(task.name)] = (int(fields[11]) / tick, int(fields[12]) / tick)
    return out


def _client(target: str, worker: int, callers: int, n_reports: int, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """``callers`` concurrent device-like callers; puts the number of answered calls."""
    enc = RapporEncoder(PARAMS, campaign_id=CAMPAIGN, secret=os.urandom(32))
    tag = os.urandom(4).hex()
    payloads = [
        wire.report_to_proto(
            campaign_id=CAMPAIGN,
            report_id=f"{tag}-{worker}-{i}",
            params=PARAMS,
            report=enc.encode(LABELS[i % len(LABELS)]),
        ).SerializeToString()
        for i in range(n_reports)
    ]
    out.put(("ready", worker))

    async def run() -> int:
        async with grpc.aio.insecure_channel(target) as ch:
            call = ch.unary_unary(_METHOD)  # bytes in, bytes out: no client-side (de)serialization
            await call(payloads[0], timeout=60)  # connect before the window
            stop_at = time.monotonic() + seconds
            next_index = 1

            async def caller() -> int:
                nonlocal next_index
                done = 0
                while time.monotonic() < stop_at and next_index < len(payloads):
                    i = next_index
                    next_index += 1
                    await call(payloads[i], timeout=60)
                    done += 1
                return done

            return sum(await asyncio.gather(*(caller() for _ in range(callers))))

    cpu0 = time.process_time()
    done = asyncio.run(run())
    out.put(("done", done, time.process_time() - cpu0))


@contextlib.contextmanager
def _store_urls(kind: str, url: str | None) -> Iterator[str | None]:
    """Yields the PostgreSQL base URL (a fresh schema is made per server), or None for SQLite."""
    if kind == "sqlite":
        yield None
    elif url is not None:
        yield url
    else:
        with PgCluster.running() as cluster:
            yield cluster.url


def _round(
    tree: Path, pg_base: str | None, args: argparse.Namespace, *, label: str, echo: bool = False
) -> tuple[float, float, float]:
    """One server from ``tree``, one timed window: reports/s, server and clients' CPU µs per report."""
    with tempfile.TemporaryDirectory(prefix="ldp-single-") as tmp:
        where = (
            ["--db", str(Path(tmp) / "ldp.sqlite3")]
            if pg_base is None
            else ["--store", new_schema_url(pg_base)]
        )
        env = dict(os.environ, PYTHONPATH=str(tree))
        metrics_port = free_port()
        serve = [
            sys.executable, "-m", "ldp_aggregator", "serve", *where, "--listen", "127.0.0.1:0",
            "--metrics-port", str(metrics_port),
        ]  # fmt: skip
        if echo:
            serve = [sys.executable, str(Path(__file__).resolve()), "--serve-echo"]
        server = subprocess.Popen(
            serve,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=tree,
            env=env,
        )
        try:
            assert server.stdout is not None
            port = re.search(r"ready on port (\d+)", server.stdout.readline())
            if port is None:
                raise RuntimeError(f"the server from {tree} did not start")
            target = f"127.0.0.1:{port.group(1)}"
            if not echo:
                with grpc.insecure_channel(target) as ch:
                    analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
                        analyst_pb2.CreateCampaignRequest(
                            campaign=wire.campaign_to_proto(campaign_id=CAMPAIGN, params=PARAMS)
                        )
                    )
            ctx = mp.get_context("spawn")
            q: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
            per_client = args.callers // args.clients
            n_reports = int(args.max_rate * args.seconds / args.clients) + per_client + 1
            procs = [
                ctx.Process(target=_client, args=(target, w, per_client, n_reports, args.seconds, q))
                for w in range(args.clients)
            ]
            for p in procs:
                p.start()
            for _ in procs:
                assert q.get()[0] == "ready"
            spy = None
            if args.profile:
                spy = subprocess.Popen(
                    [
                        str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(server.pid),
                        "--duration", str(max(1, int(args.seconds) - 1)), "--format", "raw",
                        "--output", f"{args.profile}.{label}", "--threads",
                        *(["--native"] if args.native else ["--nonblocking"]),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            threads0 = _thread_cpu(server.pid)
            commits0 = 0.0 if echo else metric(scrape(metrics_port), "ldp_store_commits_total")
            cpu0, t0 = _cpu_seconds(server.pid), time.monotonic()
            total = 0
            client_cpu = 0.0
            for _ in procs:
                kind, n, cpu_s = q.get()
                assert kind == "done"
                total += n
                client_cpu += cpu_s
            elapsed, cpu = time.monotonic() - t0, _cpu_seconds(server.pid) - cpu0
            if not echo:
                commits = metric(scrape(metrics_port), "ldp_store_commits_total") - commits0
                print(f"  {total / max(commits, 1):.1f} reports per commit ({commits:,.0f} commits)")
            if args.threads:
                per_thread = []
                for tid, (user, system) in _thread_cpu(server.pid).items():
                    u0, s0 = threads0.get(tid, (0.0, 0.0))
                    name = "main" if tid == server.pid else str(tid)
                    per_thread.append((user - u0 + system - s0, name, user - u0, system - s0))
                per = 1e6 / max(total, 1)
                for total_s, name, user, system in sorted(per_thread, reverse=True)[:6]:
                    print(
                        f"  thread {name}: {per * total_s:,.0f} µs/report"
                        f" (user {per * user:,.0f}, system {per * system:,.0f})"
                    )
            for p in procs:
                p.join()
            if spy is not None:
                spy.wait(timeout=60)
        finally:
            server.terminate()
            server.wait(timeout=60)
            if server.stdout is not None:
                server.stdout.close()
    return total / elapsed, 1e6 * cpu / max(total, 1), 1e6 * client_cpu / max(total, 1)


class _EchoCollector(collector_pb2_grpc.CollectorServicer):
    """Answers every report as accepted and stores nothing: the cost of a gRPC call alone."""

    async def SubmitReport(
        self, request: reports_pb2.Report, context: grpc.aio.ServicerContext[Any, Any]
    ) -> reports_pb2.SubmitResponse:
        return reports_pb2.SubmitResponse(batch_id=request.report_id, duplicate=False, accepted=1)


def _serve_echo() -> None:
    """The floor: a grpc.aio server (on uvloop, as ``serve``) whose SubmitReport does nothing."""

    async def run() -> None:
        server = grpc.aio.server()
        collector_pb2_grpc.add_CollectorServicer_to_server(_EchoCollector(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"ready on port {port}", flush=True)
        await server.wait_for_termination()

    uvloop.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--callers", type=int, default=32, help="concurrent callers in all")
    ap.add_argument("--clients", type=int, default=2, help="client processes sharing the callers")
    ap.add_argument("--rounds", type=int, default=1, help="windows per tree, alternating the trees")
    ap.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--url", help="an existing PostgreSQL server (a fresh schema per server)")
    ap.add_argument("--max-rate", type=float, default=12_000, help="reports encoded ahead, per second")
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="py-spy the server over each window (collapsed stacks, to FILE.LABEL)",
    )
    ap.add_argument("--native", action="store_true", help="with --profile: native frames too")
    ap.add_argument("--threads", action="store_true", help="the server's CPU per thread, user and system")
    ap.add_argument(
        "--echo",
        action="store_true",
        help="also run the floor: a gRPC server whose SubmitReport does nothing",
    )
    ap.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--tree", action="append", default=[], metavar="LABEL=PATH", help="a checkout to run the server from"
    )
    args = ap.parse_args()
    if args.serve_echo:
        _serve_echo()
        return
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("this", str(ROOT))]
    if args.echo:
        trees.append(("echo", str(ROOT)))
    results: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in trees}
    with _store_urls(args.store, args.url) as pg_base:
        for r in range(args.rounds):
            for label, path in trees:
                rate, cpu_us, client_us = _round(
                    Path(path).resolve(), pg_base, args, label=label, echo=label == "echo"
                )
                results[label].append((rate, cpu_us, client_us))
                print(
                    f"round {r} {label}: {rate:,.0f} reports/s, server CPU {cpu_us:,.0f} µs/report,"
                    f" clients' CPU {client_us:,.0f} µs/report"
                    f" ({args.store}, {args.callers} callers in {args.clients} processes)",
                    flush=True,
                )
    for label, rows in results.items():
        rates = [x for x, _, _ in rows]
        cpus = [y for _, y, _ in rows]
        print(
            f"{label}: median {statistics.median(rates):,.0f} reports/s (min {min(rates):,.0f},"
            f" max {max(rates):,.0f}); median server CPU {statistics.median(cpus):,.0f} µs/report"
        )


if __name__ == "__main__":
    main()
