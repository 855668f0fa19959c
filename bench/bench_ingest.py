"""Loopback ingest into a real aggregator process with durable (synchronous=FULL) group commits.

Measures (issue 3): batched RAPPOR ingest (k=128, h=2, m=64, batches of 1,000) in reports/s, single-report
SubmitReport calls/s, and the server's resident memory over the run (to show it stays flat).

    .venv/bin/python bench/bench_ingest.py --seconds 60 --clients 4
    .venv/bin/python bench/bench_ingest.py --seconds 300 --clients 4     # the 5-minute memory run
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from ldp_client.mechanisms.rappor import RapporEncoder, encode_batch_rappor
from ldp_client.params import RapporParams

PARAMS = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)
LABELS = [f"value-{i}" for i in range(1000)]


def _rss_mib(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(match.group(1)) / 1024 if match else float("nan")


def _batch_client(
    target: str, worker: int, seconds: float, batch_size: int, inflight: int, out: mp.Queue
) -> None:  # type: ignore[type-arg]
    rng = np.random.default_rng(worker)
    cohorts, bits = encode_batch_rappor(
        PARAMS, campaign_id="bench", values=rng.integers(0, len(LABELS), batch_size), labels=LABELS, rng=rng
    )
    template = wire.batch_to_proto(campaign_id="bench", batch_id="x", params=PARAMS, columns=(cohorts, bits))
    sent = 0
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()

    def loop(t: int) -> None:
        nonlocal sent
        with grpc.insecure_channel(target) as ch:
            stub = collector_pb2_grpc.CollectorStub(ch)
            i = 0
            while time.monotonic() < stop_at:
                template_i = type(template)()
                template_i.CopyFrom(template)
                template_i.batch_id = f"w{worker}-t{t}-{i}"
                stub.Submit(template_i, timeout=60)
                i += 1
                with lock:
                    sent += batch_size

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(inflight)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    out.put(sent)


def _single_client(target: str, worker: int, seconds: float, inflight: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """Device-like callers: ``inflight`` concurrent callers (asyncio tasks on one grpc.aio channel), each
    encoding one report per call with the CSPRNG encoder and waiting for its commit before the next."""

    async def run() -> int:
        stop_at = time.monotonic() + seconds
        async with grpc.aio.insecure_channel(target) as ch:
            stub = collector_pb2_grpc.CollectorStub(ch)

            async def caller(t: int) -> int:
                enc = RapporEncoder(PARAMS, campaign_id="single", secret=bytes([worker, t]) * 16)
                i = 0
                while time.monotonic() < stop_at:
                    rep = enc.encode(LABELS[i % len(LABELS)])
                    msg = wire.report_to_proto(
                        campaign_id="single", report_id=f"w{worker}-t{t}-{i}", params=PARAMS, report=rep
                    )
                    await stub.SubmitReport(msg, timeout=60)
                    i += 1
                return i

            return sum(await asyncio.gather(*(caller(t) for t in range(inflight))))

    out.put(asyncio.run(run()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--single-seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=2, help="client processes")
    ap.add_argument("--inflight", type=int, default=4, help="concurrent RPCs per client process")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument(
        "--single-inflight", type=int, default=8, help="concurrent single-report callers per process"
    )
    ap.add_argument("--no-retain-raw", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ldp-bench-"))
    cmd = [
        sys.executable,
        "-m",
        "ldp_aggregator",
        "serve",
        "--db",
        str(tmp / "ldp.sqlite3"),
        "--listen",
        "127.0.0.1:0",
    ]
    if args.no_retain_raw:
        cmd.append("--no-retain-raw")
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None
    port = re.search(r"ready on port (\d+)", server.stdout.readline())
    assert port
    target = f"127.0.0.1:{port.group(1)}"
    with grpc.insecure_channel(target) as ch:
        analyst = analyst_pb2_grpc.AnalystStub(ch)
        for cid in ("bench", "single"):
            analyst.CreateCampaign(
                analyst_pb2.CreateCampaignRequest(
                    campaign=wire.campaign_to_proto(campaign_id=cid, params=PARAMS)
                )
            )

    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    rss: list[tuple[float, float]] = []
    procs = [
        ctx.Process(target=_batch_client, args=(target, w, args.seconds, args.batch_size, args.inflight, q))
        for w in range(args.clients)
    ]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    while any(p.is_alive() for p in procs):
        rss.append((time.monotonic() - t0, _rss_mib(server.pid)))
        time.sleep(min(5.0, args.seconds / 20))
    total = sum(q.get() for _ in procs)
    elapsed = time.monotonic() - t0
    for p in procs:
        p.join()
    print(
        f"batched ingest: {total:,} reports in {elapsed:.1f} s = {total / elapsed:,.0f} reports/s "
        f"({args.clients} client processes x {args.inflight} in flight, batches of {args.batch_size}, "
        f"retain_raw={not args.no_retain_raw})"
    )
    warm = [m for t, m in rss if t >= min(10.0, args.seconds / 3)]
    if warm:
        print(
            f"server RSS after warm-up: first {warm[0]:.1f} MiB, max {max(warm):.1f} MiB, "
            f"last {warm[-1]:.1f} MiB, growth {100 * (warm[-1] / warm[0] - 1):+.1f}% "
            f"({len(warm)} samples)"
        )

    procs = [
        ctx.Process(target=_single_client, args=(target, w, args.single_seconds, args.single_inflight, q))
        for w in range(args.clients)
    ]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    total = sum(q.get() for _ in procs)
    elapsed = time.monotonic() - t0
    for p in procs:
        p.join()
    print(
        f"single-report calls: {total:,} in {elapsed:.1f} s = {total / elapsed:,.0f} reports/s "
        f"({len(procs)} client processes x {args.single_inflight} concurrent callers, one call per report, "
        f"each answered after its commit)"
    )

    server.terminate()
    code = server.wait(timeout=60)
    server.stdout.close()
    print(f"server stopped with SIGTERM, exit code {code}")


if __name__ == "__main__":
    main()
