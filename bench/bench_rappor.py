"""RAPPOR encoding throughput and memory.

Run: .venv/bin/python bench/bench_rappor.py [--total 10000000] [--chunk 1000000]

Measures, on one core:
1. per-report ``RapporEncoder.encode`` (OS CSPRNG, one os.urandom call per report) at k=128, h=2, f=0.5,
   p=0.5, q=0.75: warm memo (values repeat, as in real use) and cold (every value distinct, so each report
   also hashes the Bloom filter and derives the PRR with HMAC-SHA256); target >= 100,000 reports/s;
2. batch ``encode_batch_rappor`` with a seeded generator at k=128, m=64, 1,000 labels;
   target >= 2,000,000 reports/s;
3. 10 million reports encoded in chunks, with the process's peak RSS (target < 1 GiB).
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time

import numpy as np

from ldp_client.mechanisms.rappor import (
    BasicRapporEncoder,
    BooleanRapporEncoder,
    RapporEncoder,
    encode_batch_rappor,
)
from ldp_client.params import BasicRapporParams, BooleanRapporParams, RapporParams
from ldp_client.secret import ClientSecret

PARAMS = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>12,.0f} reports/s  ({n:,} in {seconds:.3f} s)"


def _best_of(repeats: int, fn: object) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def bench_per_report(n: int) -> None:
    secret = ClientSecret.generate()
    enc = RapporEncoder(PARAMS, campaign_id="bench", secret=secret)
    warm_values = [f"value-{i % 100}" for i in range(n)]
    for v in set(warm_values):
        enc.encode(v)
    encode = enc.encode

    def warm() -> None:
        for v in warm_values:
            encode(v)

    t = _best_of(3, warm)
    print(f"per-report warm memo (100 repeating values)      {_rate(n, t)}")

    cold_values = [f"distinct-value-{i}" for i in range(n)]

    def cold() -> None:
        e = RapporEncoder(PARAMS, campaign_id="bench", secret=secret).encode
        for v in cold_values:
            e(v)

    t = _best_of(3, cold)
    print(f"per-report cold memo (every value distinct)      {_rate(n, t)}")

    # Extra context (no target): non-dyadic probabilities and wide filters cost more random words.
    other = RapporParams(k=128, h=2, m=64, f=0.3, p=0.3, q=0.7)
    e2 = RapporEncoder(other, campaign_id="bench", secret=secret).encode
    m = n // 4
    t = _best_of(2, lambda: [e2(v) for v in warm_values[:m]])
    print(f"per-report warm, non-dyadic f=0.3 p=0.3 q=0.7    {_rate(m, t)}")
    wide = RapporParams(k=4096, h=16, m=64, f=0.5, p=0.5, q=0.75)
    e3 = RapporEncoder(wide, campaign_id="bench", secret=secret).encode
    t = _best_of(2, lambda: [e3(v) for v in warm_values[:m]])
    print(f"per-report warm, k=4096 h=16                     {_rate(m, t)}")
    b = BasicRapporEncoder(BasicRapporParams(domain=32), campaign_id="bench", secret=secret).encode
    ints = [i % 32 for i in range(m)]
    t = _best_of(2, lambda: [b(i) for i in ints])
    print(f"per-report warm, basic d=32                      {_rate(m, t)}")
    bo = BooleanRapporEncoder(BooleanRapporParams(), campaign_id="bench", secret=secret).encode
    bools = [bool(i & 1) for i in range(m)]
    t = _best_of(2, lambda: [bo(x) for x in bools])
    print(f"per-report boolean                               {_rate(m, t)}")


def bench_batch(n: int) -> None:
    labels = [f"label-{i}" for i in range(1000)]
    rng = np.random.default_rng(1)
    values = rng.integers(0, len(labels), size=n)

    def run() -> None:
        encode_batch_rappor(PARAMS, campaign_id="bench", values=values, labels=labels, rng=rng)

    run()  # warm-up
    t = _best_of(3, run)
    print(f"batch k=128 m=64 1,000 labels, n={n:,}        {_rate(n, t)}")


def bench_many(total: int, chunk: int) -> None:
    labels = [f"label-{i}" for i in range(1000)]
    rng = np.random.default_rng(2)
    ones = np.zeros(PARAMS.k, dtype=np.int64)
    gc.collect()
    t0 = time.perf_counter()
    done = 0
    while done < total:
        n = min(chunk, total - done)
        values = rng.integers(0, len(labels), size=n)
        _, bits = encode_batch_rappor(PARAMS, campaign_id="bench", values=values, labels=labels, rng=rng)
        # Consume the chunk (as an accumulator would) so nothing is kept across chunks.
        ones += np.unpackbits(bits, axis=1, bitorder="little").sum(axis=0, dtype=np.int64)
        done += n
    t = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(f"{total:,} reports in chunks of {chunk:,}          {_rate(total, t)}")
    print(f"peak RSS of the whole process                    {peak_kib / 1024:,.1f} MiB (target < 1024 MiB)")
    print(f"  (sanity: mean report bit rate {ones.sum() / (total * PARAMS.k):.4f})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-report", type=int, default=200_000, help="reports per per-report measurement")
    ap.add_argument("--batch", type=int, default=1_000_000, help="rows in the batch measurement")
    ap.add_argument("--total", type=int, default=10_000_000, help="reports in the chunked run")
    ap.add_argument("--chunk", type=int, default=1_000_000, help="chunk size of the chunked run")
    args = ap.parse_args(argv)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; params {PARAMS}")
    bench_per_report(args.per_report)
    bench_batch(args.batch)
    bench_many(args.total, args.chunk)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
