"""Speed of the issue-6 frequency oracles (oue, sue, olh, blh, ss, hr, set-valued).

Run: ``.venv/bin/python bench/bench_frequency_oracles.py`` (``--quick`` for a short smoke run).

Prints, best of several runs each:

* per-report CSPRNG encode at d = 1024 for every mechanism and eps in {0.5, 1, 2, 4} (target >= 50,000/s);
* OUE (and SUE) batch encode at d = 1024 (target >= 1,000,000 reports/s), with the sampler used;
* OLH aggregation of 10^6 reports at d = 1024 (target < 5 s): support counts of a decoded batch;
* for reference: SS and HR batch encode, HR decoding (FWHT), unary-encoding ingest.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.support import local_hash_support
from ldp_client.mechanisms.hr import hadamard_support
from ldp_client.mechanisms.sets import SetValuedEncoder, oracle_encoder
from ldp_client.mechanisms.ue import sparse_or_dense
from ldp_client.params import HadamardParams, SetValuedParams, make_params

D = 1024
EPSILONS = (0.5, 1.0, 2.0, 4.0)


def best_of(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def per_report(n: int, repeats: int) -> None:
    print(f"\nper-report CSPRNG encode, d={D}, {n:,} reports per run, best of {repeats} (target >= 50,000/s)")
    print(f"{'mechanism':<34}" + "".join(f"{f'eps={e:g}':>12}" for e in EPSILONS))
    names = ["oue", "sue", "olh", "blh", "ss", "hr"]
    for name in names:
        row = []
        for eps in EPSILONS:
            enc = oracle_encoder(make_params(name, epsilon=eps, domain=D))  # type: ignore[arg-type]
            encode = enc.encode
            values = [i % D for i in range(n)]

            def run(encode: Callable[[int], object] = encode, values: list[int] = values) -> None:
                for v in values:
                    encode(v)

            row.append(n / best_of(run, repeats))
        print(f"{name:<34}" + "".join(f"{r:>12,.0f}" for r in row))
    for inner in ("oue", "olh", "ss"):
        row = []
        for eps in EPSILONS:
            params = SetValuedParams.from_epsilon(D - 4, eps, max_items=4, inner=inner)
            sv = SetValuedEncoder(params)
            sets = [[i % (D - 4), (i + 1) % (D - 4)] for i in range(n)]

            def run_sets(sv: SetValuedEncoder = sv, sets: list[list[int]] = sets) -> None:
                for s in sets:
                    sv.encode(s)

            row.append(n / best_of(run_sets, repeats))
        label = f"set-valued (L=4, 2 items, {inner})"
        print(f"{label:<34}" + "".join(f"{r:>12,.0f}" for r in row))


def batch_encode(n: int, repeats: int) -> None:
    print(f"\nbatch encode (seeded Generator), d={D}, {n:,} reports per call, best of {repeats}")
    rng = np.random.default_rng(1)
    values = rng.integers(0, D, size=n)
    for name in ("oue", "sue", "ss", "hr", "olh"):
        cells = []
        for eps in EPSILONS:
            params = make_params(name, epsilon=eps, domain=D)
            enc = oracle_encoder(params)  # type: ignore[arg-type]
            rate = n / best_of(lambda enc=enc: enc.encode_batch(values, rng), repeats)
            how = f" ({sparse_or_dense(params)})" if name in ("oue", "sue") else ""  # type: ignore[arg-type]
            cells.append(f"eps={eps:g}: {rate:,.0f}/s{how}")
        target = "  [target >= 1,000,000/s]" if name == "oue" else ""
        print(f"  {name:<4} " + "; ".join(cells) + target)


def aggregation(n: int, repeats: int) -> None:
    print(f"\naggregation at d={D}, n={n:,} reports, best of {repeats}")
    rng = np.random.default_rng(2)
    values = rng.integers(0, D, size=n)
    for eps in (1.0, 4.0):
        params = make_params("olh", epsilon=eps, domain=D)
        a, b, y = oracle_encoder(params).encode_batch(values, rng)  # type: ignore[arg-type]
        t = best_of(lambda p=params, a=a, b=b, y=y: local_hash_support(a, b, y, p), repeats)  # type: ignore[misc]
        print(f"  OLH support counts (eps={eps:g}, g={params.g}): {t:.2f} s  [target < 5 s]")  # type: ignore[union-attr]
        acc = accumulator_for(params)
        t = best_of(lambda p=params, acc=acc, cols=(a, b, y): add_columns(acc, p, cols), 1)  # type: ignore[misc]
        print(f"  OLH add_columns (validation + support counts) : {t:.2f} s")
    for name in ("oue", "ss"):
        params = make_params(name, epsilon=1.0, domain=D)
        rows = oracle_encoder(params).encode_batch(values, rng)  # type: ignore[arg-type]
        acc = accumulator_for(params)
        t = best_of(lambda p=params, acc=acc, rows=rows: add_columns(acc, p, rows), repeats)  # type: ignore[misc]
        print(f"  {name} add_columns (bit column counts): {t:.2f} s")
    hr = make_params("hr", epsilon=1.0, domain=D)
    assert isinstance(hr, HadamardParams)
    idx = oracle_encoder(hr).encode_batch(values, rng)
    counts = np.bincount(idx, minlength=hr.order).astype(np.int64)
    t = best_of(lambda: hadamard_support(hr, counts), repeats)
    print(f"  HR decoding (FWHT, K={hr.order}): {t * 1e3:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = parser.parse_args()
    if args.quick:
        per_report(2_000, 1)
        batch_encode(50_000, 1)
        aggregation(50_000, 1)
    else:
        per_report(30_000, 3)
        batch_encode(1_000_000, 3)
        aggregation(1_000_000, 3)


if __name__ == "__main__":
    main()
