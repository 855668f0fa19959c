"""Throughput of the RR and GRR encoders on one core.

Per-report (OS CSPRNG, the production path): target GRR >= 300,000 reports/s.
Batch (seeded numpy Generator, the simulation path): target GRR >= 30 million reports/s at 10^7 reports
per call.

Run: .venv/bin/python bench/bench_rr_grr.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import numpy as np

from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.mechanisms.rr import BinaryRREncoder
from ldp_client.params import BinaryRRParams, GRRParams

PER_REPORT_TARGET = 300_000
BATCH_TARGET = 30_000_000


def _best_rate(run: Callable[[], None], reports: int, repeats: int) -> float:
    """Reports per second of the fastest of ``repeats`` runs (the least disturbed by other processes)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return reports / best


def _per_report(encode: Callable[[object], object], values: list[object], repeats: int) -> float:
    def run() -> None:
        for v in values:
            encode(v)

    return _best_rate(run, len(values), repeats)


def _line(name: str, rate: float, target: float | None) -> None:
    verdict = "" if target is None else ("  ok" if rate >= target else f"  BELOW target {target:,.0f}")
    print(f"{name:<48} {rate:>16,.0f} reports/s{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer reports (smoke run)")
    args = parser.parse_args()
    n_single = 50_000 if args.quick else 300_000
    n_batch = 1_000_000 if args.quick else 10_000_000
    repeats = 3 if args.quick else 5
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, one core")
    print(f"per-report: {n_single:,} reports per run; batch: {n_batch:,} reports per call; best of {repeats}")

    rng = np.random.default_rng(12345)

    rr = BinaryRREncoder(BinaryRRParams.from_epsilon(1.0))
    values_rr: list[object] = [bool(b) for b in rng.integers(0, 2, size=n_single)]
    _line("rr encode (CSPRNG)", _per_report(rr.encode, values_rr, repeats), None)  # type: ignore[arg-type]

    for d in (16, 1024):
        enc = GRREncoder(GRRParams.from_epsilon(d, 1.0))
        ints: list[object] = [int(i) for i in rng.integers(0, d, size=n_single)]
        _line(
            f"grr d={d} encode(int) (CSPRNG)",
            _per_report(enc.encode, ints, repeats),  # type: ignore[arg-type]
            PER_REPORT_TARGET,
        )
        _line(
            f"grr d={d} encode_index (CSPRNG)",
            _per_report(enc.encode_index, ints, repeats),  # type: ignore[arg-type]
            PER_REPORT_TARGET,
        )
        labels = [f"item-{i}" for i in range(d)]
        enc_l = GRREncoder(GRRParams.from_epsilon(labels, 1.0))
        strs: list[object] = [labels[i] for i in rng.integers(0, d, size=n_single)]
        _line(
            f"grr d={d} encode(label) (CSPRNG)",
            _per_report(enc_l.encode, strs, repeats),  # type: ignore[arg-type]
            PER_REPORT_TARGET,
        )

    bools = rng.integers(0, 2, size=n_batch).astype(bool)

    def run_rr_batch() -> None:
        rr.encode_batch(bools, rng)

    _line("rr encode_batch (seeded Generator)", _best_rate(run_rr_batch, n_batch, repeats), None)
    for d in (16, 1024):
        enc = GRREncoder(GRRParams.from_epsilon(d, 1.0))
        idx = rng.integers(0, d, size=n_batch)

        def run_grr_batch(enc: GRREncoder = enc, idx: np.ndarray = idx) -> None:
            enc.encode_batch(idx, rng)

        _line(
            f"grr d={d} encode_batch (seeded Generator)",
            _best_rate(run_grr_batch, n_batch, repeats),
            BATCH_TARGET,
        )


if __name__ == "__main__":
    main()
