"""Benchmark of the three simulation runners (simulations.runners.simulate), end to end.

Run: .venv/bin/python bench/bench_runners.py [--quick] [--cases sum,report,grpc]

Workload: string RAPPOR k=128, h=2, m=64 (f=0.5, p=0.5, q=0.75), a Zipf(1.1) population over 1,000
values, estimated for the 1,000 labels as candidates (weighted least squares), one repeat.

* ``sum``: 10^9 users (target: under 5 s). Timed twice in one process: cold (first call: Bloom positions
  and the estimator's design matrix are computed) and warm (the estimator's design cache is hit).
* ``report``: 10^8 users, every report encoded with ``encode_batch_rappor`` and added to the accumulator in
  chunks of 2^20 users (target: under 2 minutes, peak RSS under 2 GiB).
* ``grpc``: 10^6 users through an in-process aggregator (temporary SQLite database), 2 spawned worker
  processes encoding with ``encode_batch`` and submitting batches of 50,000 over gRPC (target: under 60 s).

Each case runs in a fresh Python process so that its peak RSS (``ru_maxrss``, in KiB on Linux) is its own;
for ``grpc`` the workers' peak (RUSAGE_CHILDREN, the largest child) is shown too. ``--quick`` divides
every N by 100.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

from simulations.runners import SimulationConfig, simulate

RAPPOR = {"k": 128, "h": 2, "m": 64}
TARGETS = {"sum": "< 5 s", "report": "< 120 s, RSS < 2 GiB", "grpc": "< 60 s"}


def _config(mode: str, n_users: int) -> SimulationConfig:
    return SimulationConfig(
        mechanism="rappor",
        population="zipf:1.1",
        domain=1000,
        n_users=n_users,
        params=RAPPOR,
        mode=mode,  # type: ignore[arg-type]
        seed=1,
        workers=2,
    )


def _run_case(case: str, scale: int) -> dict[str, object]:
    n = {"sum": 10**9, "report": 10**8, "grpc": 10**6}[case] // scale
    out: dict[str, object] = {"case": case, "n_users": n}
    t0 = time.perf_counter()
    result = simulate(_config(case, n))
    out["seconds"] = time.perf_counter() - t0
    if case == "sum":
        t1 = time.perf_counter()
        simulate(_config(case, n))
        out["warm_seconds"] = time.perf_counter() - t1
    out["n_reports"] = int(result.n_reports[0])
    out["coverage"] = result.metrics.coverage
    out["mse_over_variance"] = result.metrics.mse_over_variance
    out["max_z"] = float(np.max(np.abs(result.estimates - result.truth) / result.std_errors))
    out["maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["children_maxrss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="divide every N by 100")
    ap.add_argument("--cases", default="sum,report,grpc")
    ap.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case in this process
    ap.add_argument("--scale", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(_run_case(args.case, args.scale)))
        return

    scale = 100 if args.quick else 1
    print(
        f"# bench_runners: {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}"
    )
    print("# workload: rappor k=128 h=2 m=64, zipf:1.1 over 1,000 values, 1,000 candidates, 1 repeat")
    for case in args.cases.split(","):
        proc = subprocess.run(
            [sys.executable, __file__, "--case", case, "--scale", str(scale)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(f"{case}: FAILED\n{proc.stderr}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        line = f"{case:6s} N={r['n_users']:>13,}  {r['seconds']:8.2f} s"
        if "warm_seconds" in r:
            line += f" (warm {r['warm_seconds']:.2f} s)"
        line += f"  peak RSS {r['maxrss_mib']:7.0f} MiB"
        if case == "grpc":
            line += f" (largest worker {r['children_maxrss_mib']:.0f} MiB)"
        line += (
            f"  coverage {r['coverage']:.3f}  MSE/var {r['mse_over_variance']:.3f}  max|z| {r['max_z']:.2f}"
        )
        line += f"  [target {TARGETS[case]}]"
        print(line, flush=True)


if __name__ == "__main__":
    main()
