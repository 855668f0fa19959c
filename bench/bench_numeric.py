"""Speed of the numeric (mean) mechanisms.

    .venv/bin/python bench/bench_numeric.py [--reports 200000] [--batch 1000000]

Per mechanism (epsilon 1 on [0, 100]; multidim: D = 8 attributes at epsilon 1 (k = 1) and at epsilon 6
(k = 2), base hybrid):

* per-report encode with the OS CSPRNG (``encoder.encode(x)`` in a Python loop, one ``os.urandom`` call
  per report), reports/s: the acceptance is >= 50,000 reports/s for every mechanism;
* batch encode (``encode_batch`` with a seeded numpy Generator, for simulation), reports/s;
* server side: ``wire.batch_from_proto`` decode + validation of 1,000,000-report batches, ``add_columns``
  into the exact accumulator, and one ``estimate_means``.

Each figure is the best of 3 runs (time.perf_counter).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.means import MeanAccumulator, estimate_means
from ldp_client import wire
from ldp_client.mechanisms.numeric import numeric_encoder
from ldp_client.numeric_params import MultidimParams, NumericParams
from ldp_client.params import make_params


def _best(fn: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _cases() -> list[tuple[str, NumericParams]]:
    out: list[tuple[str, NumericParams]] = []
    for name in ("laplace", "duchi", "piecewise", "hybrid", "sr"):
        p = make_params(name, epsilon=1.0, fields={"lo": 0, "hi": 100})
        out.append((name, p))  # type: ignore[arg-type]
    for eps in (1.0, 6.0):
        p = make_params("multidim", epsilon=eps, domain=8, fields={"lo": 0, "hi": 100, "base": "hybrid"})
        assert isinstance(p, MultidimParams)
        out.append((f"multidim D=8 k={p.k}", p))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=200_000, help="per-report encodes per timing run")
    ap.add_argument("--batch", type=int, default=1_000_000, help="reports per batch")
    args = ap.parse_args()
    n1, nb = args.reports, args.batch
    print(f"# numeric mechanisms: per-report x{n1:,}, batch x{nb:,}; best of 3; reports/s")
    print(
        f"{'mechanism':<20} {'per-report':>12} {'batch encode':>14} {'wire decode':>13} "
        f"{'accumulate':>12} {'estimate ms':>12}"
    )
    rng = np.random.default_rng(1)
    for label, params in _cases():
        enc = numeric_encoder(params)
        if isinstance(params, MultidimParams):
            one: object = [float(v) for v in rng.uniform(0, 100, params.d)]
            values = rng.uniform(0, 100, (nb, params.d))
        else:
            one = 37.25
            values = rng.uniform(0, 100, nb)
        encode = enc.encode

        def per_report(encode: Callable[[object], object] = encode, one: object = one) -> None:
            for _ in range(n1):
                encode(one)

        t_one = _best(per_report)
        t_batch = _best(lambda enc=enc, values=values: enc.encode_batch(values, np.random.default_rng(2)))  # type: ignore[misc]
        cols = enc.encode_batch(values, np.random.default_rng(3))  # type: ignore[arg-type]
        msg = wire.batch_to_proto(campaign_id="c", batch_id="b", params=params, columns=cols)
        t_wire = _best(lambda msg=msg, params=params: wire.batch_from_proto(msg, params))  # type: ignore[misc]

        def accumulate(params: NumericParams = params, cols: object = cols) -> MeanAccumulator:
            acc = accumulator_for(params)
            add_columns(acc, params, cols)
            assert isinstance(acc, MeanAccumulator)
            return acc

        t_acc = _best(accumulate)
        acc = accumulate()
        t_est = _best(lambda acc=acc, params=params: estimate_means(params, acc))  # type: ignore[misc]
        print(
            f"{label:<20} {n1 / t_one:>12,.0f} {nb / t_batch:>14,.0f} {nb / t_wire:>13,.0f} "
            f"{nb / t_acc:>12,.0f} {1000 * t_est:>12.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
