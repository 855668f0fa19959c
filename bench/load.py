"""Sustained load on a real aggregator over loopback, with durable commits (issue 7).

A ``ldp-aggregator serve`` process (SQLite WAL, synchronous=FULL: every acknowledged batch is fsynced;
raw-report retention on; token authentication on; Prometheus metrics on a loopback port) receives RAPPOR
batches (k=128, h=2, m=64, as bench_ingest.py) from client processes on the same machine for
``--seconds`` or ``--max-reports``, whichever comes first. Reported:

* throughput overall and in each ``--sample-s`` window after warm-up (from the server's
  ``ldp_reports_accepted_total``: committed reports only), with the slowest window;
* server RSS after warm-up: first, max, last and growth;
* commit latency p50/p95/p99 from the server's ``ldp_commit_latency_seconds`` histogram (queue wait +
  transaction + fsync; interpolated in its buckets), and the client-side ``Submit`` RPC latency (exact
  percentiles over every call: decode, validation, commit and the network round trip).

    .venv/bin/python bench/load.py --seconds 600            # the issue's 10-minute run
    .venv/bin/python bench/load.py --seconds 60 --warmup 10 # a quick check
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from bench_ingest import LABELS, PARAMS
from harness import (
    create_token,
    free_port,
    histogram_quantiles,
    integrity,
    metric,
    percentiles,
    rss_mib,
    scrape,
    start_server,
    stop_server,
)

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from ldp_client.mechanisms.rappor import encode_batch_rappor

QS = (0.5, 0.95, 0.99)


def _client(
    target: str,
    token: str,
    worker: int,
    seconds: float,
    max_reports: int,
    batch_size: int,
    inflight: int,
    out: Any,
) -> None:
    rng = np.random.default_rng(worker)
    cohorts, bits = encode_batch_rappor(
        PARAMS, campaign_id="load", values=rng.integers(0, len(LABELS), batch_size), labels=LABELS, rng=rng
    )
    template = wire.batch_to_proto(campaign_id="load", batch_id="x", params=PARAMS, columns=(cohorts, bits))
    metadata = (("authorization", f"Bearer {token}"),)
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()
    state = {"sent": 0, "errors": 0}
    latencies: list[list[float]] = [[] for _ in range(inflight)]

    def loop(t: int) -> None:
        lat = latencies[t]
        with grpc.insecure_channel(target) as ch:
            stub = collector_pb2_grpc.CollectorStub(ch)
            i = 0
            msg = type(template)()
            while time.monotonic() < stop_at:
                with lock:
                    if state["sent"] + batch_size > max_reports:
                        return
                    state["sent"] += batch_size  # reserved; given back if the call fails
                msg.CopyFrom(template)
                msg.batch_id = f"w{worker}-t{t}-{i}"
                start = time.perf_counter()
                try:
                    stub.Submit(msg, timeout=60, metadata=metadata)
                except grpc.RpcError:
                    with lock:
                        state["sent"] -= batch_size
                        state["errors"] += 1
                    continue
                lat.append(time.perf_counter() - start)
                i += 1

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(inflight)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    all_lat = np.array([x for lat in latencies for x in lat], dtype=np.float64)
    out.put((state["sent"], state["errors"], all_lat.tobytes()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0, help="how long the clients send")
    ap.add_argument("--max-reports", type=int, default=500_000_000, help="upper bound on reports sent")
    ap.add_argument("--clients", type=int, default=2, help="client processes")
    ap.add_argument("--inflight", type=int, default=4, help="concurrent Submit calls per client process")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument(
        "--warmup", type=float, default=60.0, help="seconds excluded from the RSS and window figures"
    )
    ap.add_argument("--sample-s", type=float, default=10.0, help="throughput/RSS sampling interval")
    ap.add_argument("--no-retain-raw", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the database directory")
    args = ap.parse_args()
    if args.seconds <= 0 or args.max_reports <= 0:
        ap.error("--seconds and --max-reports must be positive")

    tmp = Path(tempfile.mkdtemp(prefix="ldp-load-"))
    db = tmp / "ldp.sqlite3"
    reporter_token = create_token(db, "reporter")
    admin_token = create_token(db, "admin")
    metrics_port = free_port()
    server_args = ["--metrics-port", str(metrics_port), "--log-format", "json"]
    if args.no_retain_raw:
        server_args.append("--no-retain-raw")
    log_path = tmp / "server.log"
    with log_path.open("w") as log:
        server, target = start_server(db, *server_args, log=log)
        try:
            assert target.startswith("127.0.0.1:")  # loopback only
            with grpc.insecure_channel(target) as ch:
                analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
                    analyst_pb2.CreateCampaignRequest(
                        campaign=wire.campaign_to_proto(campaign_id="load", params=PARAMS)
                    ),
                    metadata=(("authorization", f"Bearer {admin_token}"),),
                    timeout=30,
                )
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            per_client = args.max_reports // args.clients
            procs = [
                ctx.Process(
                    target=_client,
                    args=(
                        target,
                        reporter_token,
                        w,
                        args.seconds,
                        per_client,
                        args.batch_size,
                        args.inflight,
                        q,
                    ),
                )
                for w in range(args.clients)
            ]
            samples: list[tuple[float, float, float]] = []  # (t, accepted_total, rss MiB)
            t0 = time.monotonic()
            for p in procs:
                p.start()
            results = []
            next_sample = t0
            while len(results) < len(procs):
                now = time.monotonic()
                if now >= next_sample:
                    samples.append(
                        (
                            now - t0,
                            metric(scrape(metrics_port), "ldp_reports_accepted_total"),
                            rss_mib(server.pid),
                        )
                    )
                    next_sample += args.sample_s
                try:
                    results.append(q.get(timeout=max(0.05, min(1.0, next_sample - time.monotonic()))))
                except Exception:  # queue.Empty
                    continue
            for p in procs:
                p.join()
            elapsed = time.monotonic() - t0
            text = scrape(metrics_port)
            samples.append((elapsed, metric(text, "ldp_reports_accepted_total"), rss_mib(server.pid)))
        except BaseException:
            server.kill()  # never leave the server behind
            server.wait()
            print(f"load run failed; server log and database kept in {tmp}")
            raise
        code = stop_server(server, signal.SIGTERM)
    sent = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    lat = np.concatenate([np.frombuffer(r[2], dtype=np.float64) for r in results])
    accepted = metric(text, "ldp_reports_accepted_total")

    print(
        f"load: {args.clients} client processes x {args.inflight} in flight, batches of {args.batch_size}, "
        f"RAPPOR k={PARAMS.k} h={PARAMS.h} m={PARAMS.m}, retain_raw={not args.no_retain_raw}, token auth on, "
        "SQLite WAL synchronous=FULL (every acknowledged batch fsynced), loopback"
    )
    print(
        f"sent {sent:,} reports in {elapsed:.1f} s ({errors} failed calls); server committed {accepted:,.0f} "
        f"= {accepted / elapsed:,.0f} reports/s overall"
    )
    warm = [s for s in samples if s[0] >= args.warmup]
    rates = [(b[0], (b[1] - a[1]) / (b[0] - a[0])) for a, b in itertools.pairwise(warm) if b[0] - a[0] > 0.5]
    full = [r for t, r in rates if t <= args.seconds]  # windows while the clients were sending
    if full:
        print(
            f"throughput per {args.sample_s:g} s window after {args.warmup:g} s warm-up: "
            f"min {min(full):,.0f}, median {float(np.median(full)):,.0f}, max {max(full):,.0f} reports/s "
            f"({len(full)} windows)"
        )
    if warm:
        rss = [s[2] for s in warm]
        print(
            f"server RSS after warm-up: first {rss[0]:.1f} MiB, max {max(rss):.1f} MiB, "
            f"last {rss[-1]:.1f} MiB, growth {100 * (rss[-1] / rss[0] - 1):+.1f}% "
            f"(max {100 * (max(rss) / rss[0] - 1):+.1f}%)"
        )
    server_q = histogram_quantiles(text, "ldp_commit_latency_seconds", QS)
    n_commits = metric(text, "ldp_commit_latency_seconds_count")
    print(
        "commit latency (server histogram, queue + transaction + fsync, "
        f"{n_commits:,.0f} batches): " + ", ".join(f"p{int(q * 100)} {server_q[q] * 1000:.2f} ms" for q in QS)
    )
    client_q = percentiles(lat, QS)
    print(
        f"Submit RPC latency (client side, {lat.size:,} calls): "
        + ", ".join(f"p{int(q * 100)} {client_q[q] * 1000:.2f} ms" for q in QS)
        + f", max {lat.max() * 1000 if lat.size else float('nan'):.1f} ms"
    )
    print(f"server stopped with SIGTERM, exit code {code}; database integrity_check: {integrity(db)}")
    db_size = sum(p.stat().st_size for p in tmp.iterdir() if p.name.startswith("ldp.sqlite3"))
    print(f"database size {db_size / 2**30:.2f} GiB")
    summary = {
        "seconds": elapsed,
        "accepted": accepted,
        "reports_per_s": accepted / elapsed,
        "min_window_reports_per_s": min(full) if full else None,
        "rss_first_mib": warm[0][2] if warm else None,
        "rss_last_mib": warm[-1][2] if warm else None,
        "rss_max_mib": max(s[2] for s in warm) if warm else None,
        "commit_latency_ms": {f"p{int(q * 100)}": server_q[q] * 1000 for q in QS},
        "rpc_latency_ms": {f"p{int(q * 100)}": client_q[q] * 1000 for q in QS},
        "exit_code": code,
    }
    print("json:", json.dumps(summary))
    if args.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
