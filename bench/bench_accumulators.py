"""Benchmark of the aggregator's hot paths: accumulating report batches and computing estimates.

Run: ``.venv/bin/python bench/bench_accumulators.py`` (single process; numpy may use one core).
Prints best-of-N wall times. Inputs are synthetic (uniform random bytes/values, or bits sampled from the
RAPPOR channel for the candidate decode), seeded.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import numpy as np

from ldp_aggregator.accumulators import BitCountAccumulator, CountAccumulator
from ldp_aggregator.estimators import estimate_frequencies
from ldp_aggregator.rappor_estimates import estimate_rappor_candidates, rappor_design
from ldp_client.errors import PrivacyQuantizationWarning
from ldp_client.params import GRRParams, RapporParams


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_add_bits(n: int, m: int, k: int, repeat: int = 3) -> None:
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 256, size=(n, (k + 7) // 8), dtype=np.uint8)
    if k % 8:
        bits[:, -1] &= (1 << (k % 8)) - 1
    cohorts = rng.integers(0, m, size=n, dtype=np.uint32) if m > 1 else None
    acc = BitCountAccumulator.zero(m, k)
    dt = best_of(lambda: acc.add_bits(bits, cohorts), repeat)
    print(f"add_bits        n={n:>10,} m={m:<5} k={k:<5} {dt * 1e3:8.1f} ms  {n / dt / 1e6:6.2f} M reports/s")


def bench_add_values(n: int, d: int, repeat: int = 3) -> None:
    rng = np.random.default_rng(2)
    values = rng.integers(0, d, size=n)
    acc = CountAccumulator.zero(d)
    dt = best_of(lambda: acc.add_values(values), repeat)
    print(f"add_values      n={n:>10,} d={d:<12} {dt * 1e3:8.1f} ms  {n / dt / 1e6:6.2f} M reports/s")


def bench_bytes(m: int, k: int, repeat: int = 5) -> None:
    acc = BitCountAccumulator(np.full(m, 10**6), np.full((m, k), 5 * 10**5))
    data = acc.to_bytes()
    dt_to = best_of(acc.to_bytes, repeat)
    dt_from = best_of(lambda: BitCountAccumulator.from_bytes(data), repeat)
    print(
        f"bytes           m={m} k={k}: {len(data):,} bytes, to_bytes {dt_to * 1e3:.2f} ms, "
        f"from_bytes {dt_from * 1e3:.2f} ms"
    )


def bench_estimate_frequencies(d: int, repeat: int = 10) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        params = GRRParams.from_epsilon(d, 4.0)
    rng = np.random.default_rng(3)
    acc = CountAccumulator(rng.integers(100, 10_000, size=d))
    dt = best_of(lambda: estimate_frequencies(params, acc), repeat)
    print(f"estimate_frequencies grr d={d}: {dt * 1e3:.2f} ms")


def bench_rappor_candidates(
    n_candidates: int, k: int = 128, h: int = 2, m: int = 64, repeat: int = 3
) -> None:
    params = RapporParams(k=k, h=h, m=m)
    cands = [f"https://site-{i}.example/" for i in range(n_candidates)]
    rng = np.random.default_rng(4)
    # A Zipf-like population over the candidates, 10^6 users spread evenly over cohorts, bits drawn
    # from the exact channel (the model's expected counts plus binomial noise).
    t0 = time.perf_counter()
    pos = rappor_design(params, "bench", cands)
    design_s = time.perf_counter() - t0
    weights = 1.0 / np.arange(1, n_candidates + 1)
    per_cohort = rng.multinomial(10**6 // m, weights / weights.sum(), size=m).T  # (M, m)
    t = np.zeros((m, k), dtype=np.int64)
    rows = np.arange(n_candidates)[:, None]
    for j in range(m):
        member = np.zeros((n_candidates, k), dtype=np.int64)
        member[rows, pos[:, j, :]] = 1  # a bit hit by two hashes is set once
        t[j] = per_cohort[:, j] @ member
    N = per_cohort.sum(axis=0)
    ones = rng.binomial(t, params.prob_one_if_set) + rng.binomial(N[:, None] - t, params.prob_one_if_clear)
    acc = BitCountAccumulator(N, ones)
    dt = best_of(
        lambda: estimate_rappor_candidates(params, acc, campaign_id="bench", candidates=cands), repeat
    )
    print(
        f"estimate_rappor_candidates k={k} h={h} m={m} M={n_candidates}: {dt * 1e3:.0f} ms "
        f"(design cached; building the design the first time: {design_s * 1e3:.0f} ms)"
    )


def main() -> None:
    bench_add_bits(5_000_000, 64, 128)
    bench_add_bits(5_000_000, 1, 128)
    bench_add_bits(1_000_000, 1024, 128)
    bench_add_bits(1_000_000, 64, 1000)
    bench_add_bits(5_000_000, 1, 1)
    bench_add_values(5_000_000, 2)
    bench_add_values(5_000_000, 1024)
    bench_bytes(64, 128)
    bench_estimate_frequencies(1024)
    bench_rappor_candidates(1000)


if __name__ == "__main__":
    main()
