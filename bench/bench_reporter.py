"""Throughput of Reporter.report() on the app thread, string RAPPOR k=128, against an in-process server.

What is timed: the app thread's ``report()`` calls only (encode with the OS CSPRNG + append under a lock);
the background thread journals, seals (fsync) and sends concurrently, sharing the GIL, so it is part of
the cost seen. Separately, the end-to-end rate (reports until ``flush()`` returns, everything
acknowledged by the server) is printed.

Cases: a small vocabulary (100 values: the PRR memo hits, the common case) and all-distinct values (each
report derives a new PRR with HMAC-SHA256). GRR (d=16) is shown for reference.

Each case runs ``--repeats`` times (fresh server and reporter each time) and the fastest run is shown,
the one least disturbed by other processes.

Run: .venv/bin/python bench/bench_reporter.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2_grpc, reports_pb2
from ldp_client.params import Domain, GRRParams, MechanismParams, RapporParams
from ldp_client.reporter import Reporter
from ldp_client.secret import ClientSecret

CID = "bench"


class _Collector(collector_pb2_grpc.CollectorServicer):
    """Accepts every batch after validating it (as the real server would decode it)."""

    def __init__(self, campaign: campaign_pb2.Campaign) -> None:
        self.campaign = campaign
        self.params = wire.params_from_proto(campaign)
        self.reports = 0

    def GetCampaign(self, request: Any, context: Any) -> campaign_pb2.Campaign:
        return self.campaign

    def Submit(self, request: reports_pb2.ReportBatch, context: Any) -> reports_pb2.SubmitResponse:
        wire.batch_from_proto(request, self.params, campaign_id=CID)
        self.reports += request.count
        return reports_pb2.SubmitResponse(batch_id=request.batch_id, accepted=request.count)

    def SubmitStream(self, request_iterator: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "")

    def SubmitReport(self, request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "")


def _run(params: MechanismParams, values: list[Any], batch_size: int) -> tuple[float, float, int]:
    """(report() calls/s on the app thread, end-to-end reports/s, reports the server counted)."""
    servicer = _Collector(wire.campaign_to_proto(campaign_id=CID, params=params))
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    collector_pb2_grpc.add_CollectorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with tempfile.TemporaryDirectory() as state:
            reporter = Reporter(
                f"127.0.0.1:{port}",
                CID,
                max_epsilon=10.0,
                state_dir=state,
                secret=ClientSecret.generate(),
                batch_size=batch_size,
                max_pending=10 * len(values),
            )
            while reporter.stats().state != "running":
                time.sleep(0.005)
            report = reporter.report
            t0 = time.perf_counter()
            for v in values:
                report(v)
            t1 = time.perf_counter()
            ok = reporter.flush(timeout=300)
            t2 = time.perf_counter()
            stats = reporter.stats()
            reporter.close()
            if not ok or stats.dropped_overflow:
                raise SystemExit(f"flush={ok}, dropped_overflow={stats.dropped_overflow}")
            return len(values) / (t1 - t0), len(values) / (t2 - t0), servicer.reports
    finally:
        server.stop(None).wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer reports")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case; the fastest is shown")
    args = parser.parse_args()
    n = 20_000 if args.quick else 200_000
    rappor = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)
    grr = GRRParams(domain=Domain.of(16), truth_probability=0.5)
    cases: list[tuple[str, MechanismParams, list[Any]]] = [
        ("rappor k=128, 100 distinct values (PRR memo hits)", rappor, [f"value-{i % 100}" for i in range(n)]),
        ("rappor k=128, all values distinct (PRR per report)", rappor, [f"value-{i}" for i in range(n // 4)]),
        ("grr d=16 (reference)", grr, [i % 16 for i in range(n)]),
    ]
    print(
        f"Python {platform.python_version()}, {platform.machine()}, batch_size=1000, up to {n} reports per "
        f"case, best of {args.repeats}"
    )
    print(f"{'case':<55} {'report() calls/s':>17} {'end-to-end /s':>14}")
    for name, params, values in cases:
        app_rate = e2e_rate = 0.0
        for _ in range(args.repeats):
            app, e2e, counted = _run(params, values, 1000)
            if counted != len(values):
                raise SystemExit(f"{name}: server counted {counted} of {len(values)}")
            app_rate, e2e_rate = max(app_rate, app), max(e2e_rate, e2e)
        print(f"{name:<55} {app_rate:>17,.0f} {e2e_rate:>14,.0f}")


if __name__ == "__main__":
    main()
