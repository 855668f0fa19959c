"""Benchmark: the sum-only sampler at 10^9 users (one report per user, sufficient statistics only).

Run: .venv/bin/python bench/bench_sum_sampler.py [--users N] [--repeats R]

RAPPOR (k=128, h=2, m=64, 1,000 values, Zipf(1.1)) end to end: population counts -> cohort split ->
Bloom set counts -> bit counts, first with the Bloom positions computed inside (as a single run does),
then with a precomputed position table (as repeated runs over the same labels do). Then GRR at
d = 1024, 4096 and 10,000, and binary RR. Each figure is the median of R runs (wall clock, seconds).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from ldp_client.params import BinaryRRParams, GRRParams, RapporParams
from simulations.populations import ZipfPopulation
from simulations.sampling import (
    bloom_position_table,
    rappor_set_counts,
    sample_grr_counts,
    sample_rappor_bits,
    sample_rr_counts,
    split_by_cohort,
)


def timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--users", type=int, default=10**9)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    n, reps = args.users, args.repeats
    rng = np.random.default_rng(2024)
    print(f"python {platform.python_version()}, numpy {np.__version__}, users={n:,}, median of {reps} runs")

    # ---- RAPPOR end to end
    params = RapporParams(k=128, h=2, m=64)
    n_values = 1000
    pop = ZipfPopulation(s=1.1)
    labels = [f"value-{i}" for i in range(n_values)]
    campaign = "bench-campaign"

    stages: dict[str, list[float]] = {
        "population": [],
        "cohort split": [],
        "set counts": [],
        "bit counts": [],
    }

    def rappor_once(table: np.ndarray | None) -> None:
        t0 = time.perf_counter()
        counts = pop.sample_counts(n, n_values, rng)
        t1 = time.perf_counter()
        by_cohort = split_by_cohort(counts, params.m, rng)
        t2 = time.perf_counter()
        s = rappor_set_counts(
            params, campaign_id=campaign, labels=labels, counts_by_cohort=by_cohort, position_table=table
        )
        t3 = time.perf_counter()
        ones = sample_rappor_bits(params, s, by_cohort.sum(axis=1), rng)
        t4 = time.perf_counter()
        if table is None:
            for key, dt in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                stages[key].append(dt)
        assert int(by_cohort.sum()) == n and ones.shape == (params.m, params.k)

    total = timed(lambda: rappor_once(None), reps)
    print(f"RAPPOR k=128 h=2 m=64, {n_values} values, Zipf(1.1), end to end (hashing inside): {total:.3f} s")
    for key, values in stages.items():
        print(f"    {key:<13} {statistics.median(values):.4f} s")
    t0 = time.perf_counter()
    table = bloom_position_table(params, campaign_id=campaign, labels=labels)
    built = time.perf_counter() - t0
    print(f"  position table ({params.m} x {n_values} x {params.h}) built once: {built:.3f} s")
    cached = timed(lambda: rappor_once(table), reps)
    print(f"RAPPOR end to end with a precomputed position table: {cached:.3f} s")

    # ---- GRR
    for d in (1024, 4096, 10_000):
        grr = GRRParams.from_epsilon(d, 4.0)
        counts = pop.sample_counts(n, d, rng)
        t = timed(partial(sample_grr_counts, grr, counts, rng), reps)
        print(f"GRR d={d} eps=4, population counts given: {t:.4f} s")

    # ---- RR
    rr = BinaryRRParams.from_epsilon(1.0)
    t = timed(lambda: sample_rr_counts(rr, np.array([n // 3, n - n // 3]), rng), reps)
    print(f"binary RR: {t * 1e6:.1f} us")


if __name__ == "__main__":
    main()
