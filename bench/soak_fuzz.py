"""Fuzz soak (issue 7): at least ``--count`` malformed inputs against a real ``ldp-aggregator serve``
process, with the generators of ``tests/ldp_aggregator/test_fuzz.py`` (random bytes to every RPC and on the
stream, malformed batches, reports, campaigns, estimate/export requests, unknown fields and enum values).

Every input must get one of its allowed status codes (never INTERNAL/UNKNOWN, never a dropped
connection); stored state (every campaign, its accumulator bytes and batch count, via ExportCampaign) is
compared with the state before the soak every ``--check-every`` inputs and at the end, and must not have
changed (state only grows, so an unchanged snapshot proves no input in between changed it); the server
must still answer health checks, stop with exit code 0 on SIGTERM and leave a sound database.

    .venv/bin/python bench/soak_fuzz.py --count 100000
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness import ROOT, integrity, start_server, stop_server
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from tests.ldp_aggregator.test_fuzz import CASE_FAMILIES, MAX_MESSAGE_BYTES, Case, run_case, seed_campaigns

assert ROOT  # the harness put the repository root on sys.path (for the tests import above)


class RemoteTarget:
    """A server process reached over gRPC; its state snapshot is taken through ExportCampaign."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 1 << 26)])
        self.analyst = analyst_pb2_grpc.AnalystStub(self.channel)
        self.check_every = 1
        self.calls = 0
        self.reference: Any = None

    def call(self, method: str, payload: bytes) -> grpc.StatusCode:
        try:
            self.channel.unary_unary(method)(payload, timeout=60)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK

    def stream(self, payloads: list[bytes]) -> grpc.StatusCode:
        try:
            self.channel.stream_unary("/ldp.v1.Collector/SubmitStream")(iter(payloads), timeout=60)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK

    def full_snapshot(self) -> Any:
        rows = []
        for c in self.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=60).campaigns:
            exp = self.analyst.ExportCampaign(analyst_pb2.ExportCampaignRequest(campaign_id=c.id), timeout=60)
            rows.append((c.SerializeToString(), exp.accumulator, exp.n_batches, exp.n_reports))
        return tuple(rows)

    def snapshot(self) -> Any:
        # run_case compares a snapshot before and after each input; a full export for every input would
        # dominate the soak, so only every check_every-th input pays for one (state can only grow, so an
        # unchanged snapshot shows that no input since the last one changed it).
        self.calls += 1  # two per input: before and after
        if self.calls % (2 * self.check_every) == 0 or self.reference is None:
            self.reference = self.full_snapshot()
        return self.reference

    def alive(self) -> bool:
        resp = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100_000, help="inputs to send (at least)")
    ap.add_argument("--chunk", type=int, default=5_000, help="inputs per hypothesis run (a new seed each)")
    ap.add_argument("--check-every", type=int, default=200, help="full state comparison interval")
    ap.add_argument("--seed", type=int, default=20261121)
    ap.add_argument(
        "--skip-method", action="append", default=[], help="leave out an RPC (e.g. one not implemented yet)"
    )
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ldp-soak-"))
    db = tmp / "ldp.sqlite3"
    log_path = tmp / "server.log"
    codes: collections.Counter[str] = collections.Counter()
    families: collections.Counter[str] = collections.Counter()
    with log_path.open("w") as log:
        proc, target = start_server(
            db, "--max-message-bytes", str(MAX_MESSAGE_BYTES), "--log-format", "json", log=log
        )
        try:
            seed_campaigns(target)
            remote = RemoteTarget(target)
            remote.check_every = args.check_every
            initial = remote.full_snapshot()
            sent = 0
            t0 = time.monotonic()
            run = 0
            # Each family equally often (one_of would favour the simplest).
            strategy = st.sampled_from(sorted(CASE_FAMILIES)).flatmap(lambda name: CASE_FAMILIES[name])
            if args.skip_method:
                skip = frozenset(args.skip_method)
                strategy = strategy.filter(lambda case: case.method not in skip)
            while sent < args.count:
                n = min(args.chunk, args.count - sent)

                @seed(args.seed + run)
                @settings(
                    max_examples=n,
                    database=None,
                    deadline=None,
                    derandomize=False,
                    suppress_health_check=list(HealthCheck),
                    report_multiple_bugs=False,
                    phases=(
                        Phase.explicit,
                        Phase.generate,
                    ),  # no shrinking: report the first failure as it was
                )
                @given(case=strategy)
                def soak(case: Case) -> None:
                    nonlocal sent
                    code = run_case(remote, case)
                    sent += 1
                    codes[code.name] += 1
                    families[case.family] += 1

                soak()
                run += 1
                assert proc.poll() is None, f"the server died (exit code {proc.returncode})"
                rate = sent / (time.monotonic() - t0)
                print(f"  {sent:,} inputs, {rate:,.0f}/s, codes so far {dict(codes)}", flush=True)
            elapsed = time.monotonic() - t0
            unchanged = remote.full_snapshot() == initial
            alive = remote.alive()
            remote.channel.close()
        except BaseException:
            proc.kill()  # never leave the server behind; the database and log stay for inspection
            proc.wait()
            print(f"soak failed; server log and database kept in {tmp}")
            raise
        exit_code = stop_server(proc, signal.SIGTERM)
    errors = [line for line in log_path.read_text().splitlines() if '"level":"error"' in line]
    print(
        f"soak: {sent:,} malformed inputs in {elapsed:.0f} s ({sent / elapsed:,.0f}/s), {run} hypothesis runs"
    )
    print(
        f"families: {dict(sorted(families.items()))}"
        + (f"; skipped RPCs {args.skip_method}" if args.skip_method else "")
    )
    print(f"status codes: {dict(sorted(codes.items()))}")
    print(
        f"server crashed: no (answered every input); stored state unchanged: {unchanged}; "
        f"health SERVING at the end: {alive}; SIGTERM exit code {exit_code}; "
        f"integrity_check: {integrity(db)}; "
        f"error-level log lines: {len(errors)}"
    )
    shutil.rmtree(tmp, ignore_errors=True)
    if not (unchanged and alive and exit_code == 0 and not errors):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
