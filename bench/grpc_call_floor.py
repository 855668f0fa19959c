"""The floor under single-report calls (issue 15, item 4): what one grpc.aio unary call costs the server
when the client costs almost nothing.

``bench_single_grpc.py`` drives the server with Python clients, which take about as much CPU per call as
the server and share its 2 cores. Here the load comes from ``h2load`` (nghttp2's HTTP/2 load generator, C;
Debian's ``nghttp2-client`` package), which sends one fixed, framed ``ldp.v1.Report`` per request as a gRPC
call (``content-type: application/grpc``, ``te: trailers``), so nearly all the CPU left goes to the server.

Servers: ``echo``, a grpc.aio server on uvloop whose ``SubmitReport`` stores nothing (the one in
``bench_single_grpc.py``), and ``serve``, ``ldp-aggregator serve`` on SQLite with a RAPPOR campaign. h2load
repeats the same report, so against ``serve`` every call after the first is answered ``duplicate`` after the
store's lookup, without a commit: a lower bound on a stored report's cost, not the cost itself.

Prints calls/s and the server's CPU per call (user + system, /proc) for each concurrency:

    .venv/bin/python bench/grpc_call_floor.py --calls 20000 --concurrency 1x1,4x8,16x8
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
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
from ldp_client.secret import ClientSecret

PARAMS = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)
CAMPAIGN = "single"
_PATH = "/ldp.v1.Collector/SubmitReport"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _framed_report(path: Path) -> None:
    """One serialized Report in gRPC's length-prefixed framing (flag 0, big-endian u32 length)."""
    enc = RapporEncoder(PARAMS, campaign_id=CAMPAIGN, secret=ClientSecret.generate())
    msg = wire.report_to_proto(
        campaign_id=CAMPAIGN, report_id="floor-1", params=PARAMS, report=enc.encode("value-1")
    ).SerializeToString()
    path.write_bytes(b"\x00" + struct.pack(">I", len(msg)) + msg)


def _start(kind: str, tmp: Path) -> subprocess.Popen[str]:
    if kind == "echo":
        cmd = [sys.executable, str(ROOT / "bench" / "bench_single_grpc.py"), "--serve-echo"]
    else:
        cmd = [
            sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(tmp / "ldp.sqlite3"),
            "--listen", "127.0.0.1:0",
        ]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)


def _h2load(h2load: str, port: int, body: Path, calls: int, conns: int, streams: int) -> int:
    """Calls that succeeded."""
    out = subprocess.run(
        [
            h2load, "-n", str(calls), "-c", str(conns), "-m", str(streams), "-d", str(body),
            "-H", "content-type: application/grpc", "-H", "te: trailers",
            f"http://127.0.0.1:{port}{_PATH}",
        ],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    done = re.search(r"(\d+) succeeded", out)
    if done is None:
        raise RuntimeError(f"h2load said:\n{out}")
    return int(done.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--concurrency", default="1x1,4x8,16x8", help="CONNECTIONSxSTREAMS, comma-separated")
    ap.add_argument("--servers", default="echo,serve")
    args = ap.parse_args()
    h2load = shutil.which("h2load")
    if h2load is None:
        raise SystemExit("h2load not found: install Debian's nghttp2-client (apt-get install nghttp2-client)")
    levels = [tuple(int(x) for x in c.split("x")) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="ldp-floor-") as tmp_s:
        tmp = Path(tmp_s)
        body = tmp / "report.bin"
        _framed_report(body)
        for kind in args.servers.split(","):
            server = _start(kind, tmp)
            try:
                assert server.stdout is not None
                line = server.stdout.readline()
                found = re.search(r"ready on port (\d+)", line)
                while found is None and line:
                    line = server.stdout.readline()
                    found = re.search(r"ready on port (\d+)", line)
                if found is None:
                    raise RuntimeError(f"{kind} did not start")
                port = int(found.group(1))
                if kind == "serve":
                    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                        analyst_pb2_grpc.AnalystStub(ch).CreateCampaign(
                            analyst_pb2.CreateCampaignRequest(
                                campaign=wire.campaign_to_proto(campaign_id=CAMPAIGN, params=PARAMS)
                            )
                        )
                _h2load(h2load, port, body, 500, 1, 1)  # warm-up (and the one stored report)
                for conns, streams in levels:
                    cpu0, t0 = _cpu_seconds(server.pid), time.monotonic()
                    done = _h2load(h2load, port, body, args.calls, conns, streams)
                    elapsed, cpu = time.monotonic() - t0, _cpu_seconds(server.pid) - cpu0
                    per_call = 1e6 * cpu / max(done, 1)
                    print(
                        f"{kind:5s} {conns:3d} connections x {streams:2d} streams: "
                        f"{done / elapsed:8,.0f} calls/s, server {per_call:5,.0f} µs CPU per call",
                        flush=True,
                    )
            finally:
                server.terminate()
                server.wait(timeout=60)
                if server.stdout is not None:
                    server.stdout.close()


if __name__ == "__main__":
    main()
