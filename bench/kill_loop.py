"""SIGKILL the aggregator at random moments under load, many times (issue 7): no acknowledged report may
be lost and none counted twice.

Each round: start ``ldp-aggregator serve`` on the same database, let 1 to ``--workers`` clients submit
GRR batches of 200 reports (each a unique batch id), kill the server with SIGKILL after a random number of
acknowledgements plus a random delay, restart it, and check that

* every batch acknowledged before the kill is stored (resubmitting it answers ``duplicate``);
* after the clients retry every batch they ever attempted (as a real client retries an unanswered batch
  with the same id), the campaign holds exactly one copy of each: n_reports == 200 x attempts, cumulative
  over all rounds, so nothing was lost and nothing counted twice.

At the end the server is stopped with SIGTERM (exit code 0) and the database passes integrity_check.
Uses the client and batch helpers of tests/ldp_aggregator/test_crash.py (the suite's 3-round version).

    .venv/bin/python bench/kill_loop.py --rounds 50
"""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np
from harness import ROOT, integrity, start_server, stop_server

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, estimates_pb2
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from tests.ldp_aggregator.test_crash import BATCH, PARAMS, _batch, _client

assert ROOT  # the harness put the repository root on sys.path (for the tests import above)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--workers", type=int, default=4, help="most concurrent clients in a round")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="ldp-kill-"))
    db = tmp / "ldp.sqlite3"
    proc, target = start_server(db)
    try:
        with grpc.insecure_channel(target) as ch:
            analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
                analyst_pb2.CreateCampaignRequest(
                    campaign=wire.campaign_to_proto(campaign_id="c", params=PARAMS)
                ),
                timeout=30,
            )
        expected = 0
        total_acked = total_attempted = 0
        t0 = time.monotonic()
        for round_ in range(args.rounds):
            workers = int(rng.integers(1, args.workers + 1))
            acked: list[tuple[int, int]] = []
            attempted = [0] * workers
            stop = threading.Event()
            threads = [
                threading.Thread(target=_client, args=(target, round_, w, acked, attempted, stop))
                for w in range(workers)
            ]
            for t in threads:
                t.start()
            want = int(rng.integers(0, 400))  # 0: kill while the clients are still connecting
            deadline = time.monotonic() + 30
            while len(acked) < want and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(float(rng.uniform(0, 0.05)))
            code = stop_server(proc, signal.SIGKILL)
            stop.set()
            for t in threads:
                t.join()
            proc, target = start_server(db)
            with grpc.insecure_channel(target) as ch:
                stub = collector_pb2_grpc.CollectorStub(ch)
                lost = [
                    (w, i) for w, i in acked if not stub.Submit(_batch(round_, w, i), timeout=30).duplicate
                ]
                assert not lost, f"round {round_}: acknowledged batches lost: {lost[:5]}"
                for w in range(workers):
                    for i in range(attempted[w]):
                        stub.Submit(_batch(round_, w, i), timeout=30)
                est = analyst_pb2_grpc.AnalystStub(ch).GetEstimate(
                    estimates_pb2.EstimateRequest(campaign_id="c"), timeout=60
                )
            expected += BATCH * sum(attempted)
            assert est.n_reports == expected, f"round {round_}: n_reports {est.n_reports} != {expected}"
            total_acked += len(acked)
            total_attempted += sum(attempted)
            print(
                f"round {round_ + 1}/{args.rounds}: {workers} clients, killed (exit {code}) "
                f"after {len(acked)} acks; "
                f"{sum(attempted) - len(acked)} unacknowledged in flight; all acked present, exact count "
                f"{est.n_reports:,}",
                flush=True,
            )
    except BaseException:
        proc.kill()  # never leave the server behind; the database stays for inspection
        proc.wait()
        print(f"kill loop failed; database kept in {tmp}")
        raise
    code = stop_server(proc, signal.SIGTERM)
    print(
        f"kill loop: {args.rounds} SIGKILLs in {time.monotonic() - t0:.0f} s; "
        f"{total_acked:,} acknowledged batches, "
        f"none lost; {total_attempted:,} batches after retries, each counted once ({expected:,} reports); "
        f"final SIGTERM exit code {code}; integrity_check {integrity(db)}"
    )
    shutil.rmtree(tmp, ignore_errors=True)
    if code != 0:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
