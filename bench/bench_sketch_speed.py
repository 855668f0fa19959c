"""Speed of the sketches (cms, hcms) at k = 64 rows, width m = 1024, epsilon 4, through the public paths.

- device: per-report encode (``encoder_for``: SHA-256 fingerprint, one CSPRNG read, the row's hash), in
  reports per second, on strings of 5 to 40 characters;
- server ingest: a parsed ``ReportBatch`` of 1,000 reports decoded (``wire.batch_from_proto``), turned into
  the layout's delta (``batch_delta``) and merged, in reports per second;
- estimate: ``estimate_frequencies`` of 10^6 candidate strings on a full accumulator (support counts per
  row, the collision term, the score intervals, one item object per candidate), cold (the candidates'
  SHA-256 fingerprints computed) and warm (fingerprints cached for the list, as for a campaign's own
  candidates), and of that the spec's ``candidate_support`` alone (the sketch's own work).

Run: .venv/bin/python bench/bench_sketch_speed.py [--candidates M] [--rounds R]
Prints one line per path (the best of R rounds).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, batch_delta
from ldp_aggregator.estimators import estimate_frequencies
from ldp_client import wire
from ldp_client.mechanisms.sketch import hashing
from ldp_client.registry import spec_named
from ldp_client.reporter import encoder_for

K, M, EPSILON = 64, 1024, 4.0


def _best(rounds: int, fn: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    strings = [f"https://site-{i}.example/page"[: 5 + i % 36] for i in range(20_000)]
    for name in ("cms", "hcms"):
        spec = spec_named(name)
        params = spec.make(epsilon=EPSILON, domain=None, fields={"k": K, "m": M})
        encode = encoder_for(params, campaign_id="bench")

        def device(encode: Callable[[str], object] = encode) -> None:
            for s in strings:
                encode(s)

        t = _best(args.rounds, device)
        print(f"{name} device encode: {len(strings) / t:,.0f} reports/s")

        rng = np.random.default_rng(14)
        labels = tuple(f"string-{i}" for i in range(100_000))
        batches = []
        for b in range(20):
            values = rng.integers(0, len(labels), size=1000)
            cols = spec.encode_batch(params, values, rng, campaign_id="bench", labels=labels)
            batches.append(
                wire.batch_to_proto(campaign_id="bench", batch_id=f"b{b}", params=params, columns=cols)
            )

        def ingest(params: object = params, batches: list = batches) -> None:
            acc = accumulator_for(params)  # type: ignore[arg-type]
            for msg in batches:
                acc += batch_delta(params, wire.batch_from_proto(msg, params, campaign_id="bench"))  # type: ignore[arg-type, operator]

        t = _best(args.rounds, ingest)
        print(f"{name} server ingest (batches of 1,000): {20_000 / t:,.0f} reports/s")

        # A full accumulator: 10^6 users over 10^5 strings from the exact sum sampler.
        sampler = spec.sum_sampler(params)
        assert sampler is not None
        counts = rng.multinomial(1_000_000, np.full(len(labels), 1 / len(labels)))
        from ldp_aggregator.accumulators import accumulator_from_sums

        acc = accumulator_from_sums(params, sampler(counts, rng, campaign_id="bench", labels=labels))
        cands = [f"candidate-{name}-{i}" for i in range(args.candidates)]
        t0 = time.perf_counter()
        est = estimate_frequencies(params, acc, candidates=cands, campaign_id="bench")
        cold = time.perf_counter() - t0
        assert len(est.items) == args.candidates
        t0 = time.perf_counter()
        hashing.fingerprints(tuple(cands))
        fingerprints = time.perf_counter() - t0

        def warm(cands: list[str] = cands, acc: object = acc, params: object = params) -> None:
            estimate_frequencies(params, acc, candidates=cands, campaign_id="bench")  # type: ignore[arg-type]

        def support(
            cands: list[str] = cands, acc: object = acc, params: object = params, spec: object = spec
        ) -> None:
            spec.candidate_support(params, acc, cands, campaign_id="bench")  # type: ignore[attr-defined]

        t = _best(args.rounds, warm)
        t_support = _best(args.rounds, support)
        print(
            f"{name} estimate {args.candidates:,} candidates x {K} rows: cold {cold:.2f} s, warm {t:.2f} s, "
            f"of which the sketch's Support (support counts and collision term) {t_support:.2f} s "
            f"(cached fingerprints lookup {fingerprints:.2f} s)"
        )


if __name__ == "__main__":
    main()
