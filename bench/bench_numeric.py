"""Speed of the numeric (mean) mechanisms.

    .venv/bin/python bench/bench_numeric.py [--reports 200000] [--batch 1000000]

Per mechanism (epsilon 1 on [0, 100]; multidim: D = 8 attributes at epsilon 1 (k = 1) and at epsilon 6
(k = 2), base hybrid):

* per-report encode with the OS CSPRNG (``encoder.encode(x)`` in a Python loop, one ``os.urandom`` call
  per report), reports/s: the acceptance is >= 50,000 reports/s for every mechanism;
* batch encode (``encode_batch`` with a seeded numpy Generator, for simulation), reports/s;
* server side: ``wire.batch_from_proto`` decode + validation of 1,000,000-report batches, ``add_columns``
  into the exact accumulator, and one ``estimate_means``;
* the ingest path of a Submit, reports/s: 100 batches of 1,000 decoded, turned into their increment
  (``batch_delta``) and merged into the committed accumulator; single reports (``wire.report_from_proto``,
  ``batch_delta``, merge), 2,000 per round;
* the device's journal: 1,000 journal rows sealed into a batch (``_journal_rows.batch_from_rows``), 100 per
  round, reports/s.

Each figure is the best of 3 runs (``--runs``; time.perf_counter). To compare two builds, run the script
alternately with ``PYTHONPATH=<tree>`` set to each (it uses only names both export).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import ldp_client
from ldp_aggregator.accumulators import accumulator_for, add_columns, batch_delta
from ldp_aggregator.means import MeanAccumulator, estimate_means
from ldp_client import _journal_rows, wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.mechanisms.numeric import numeric_encoder
from ldp_client.numeric_params import MultidimParams, NumericParams
from ldp_client.params import make_params


class _Timing:
    runs = 3  # timed runs per figure (--runs)


def _best(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(_Timing.runs):
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
    ap.add_argument("--runs", type=int, default=3, help="timed runs per figure (the best is shown)")
    args = ap.parse_args()
    _Timing.runs = args.runs
    n1, nb = args.reports, args.batch
    print(f"# numeric mechanisms: per-report x{n1:,}, batch x{nb:,}; best of {_Timing.runs}; reports/s")
    print(f"# tree: {ldp_client.__file__.rsplit('/', 2)[0]}")
    print(
        f"{'mechanism':<20} {'per-report':>12} {'batch encode':>14} {'wire decode':>13} "
        f"{'accumulate':>12} {'estimate ms':>12} {'ingest':>12} {'single':>10} {'rows':>13}"
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
        t_ingest, t_single, t_rows = _ingest_paths(params, enc, values[:1000])
        print(
            f"{label:<20} {n1 / t_one:>12,.0f} {nb / t_batch:>14,.0f} {nb / t_wire:>13,.0f} "
            f"{nb / t_acc:>12,.0f} {1000 * t_est:>12.2f} {100_000 / t_ingest:>12,.0f} "
            f"{2000 / t_single:>10,.0f} {100_000 / t_rows:>13,.0f}",
            flush=True,
        )


def _ingest_paths(params: NumericParams, enc: object, values: object) -> tuple[float, float, float]:
    """Seconds of: 100 batches of 1,000 decoded, their increments merged; 2,000 single reports the same
    way; 100 batches sealed from 1,000 journal rows."""
    cols = enc.encode_batch(values, np.random.default_rng(4))  # type: ignore[attr-defined]
    msgs = [
        reports_pb2.ReportBatch.FromString(
            wire.batch_to_proto(
                campaign_id="c", batch_id=f"b{i}", params=params, columns=cols
            ).SerializeToString()
        )
        for i in range(100)
    ]
    committed = accumulator_for(params)

    def ingest() -> None:
        acc = committed
        for msg in msgs:
            acc += batch_delta(params, wire.batch_from_proto(msg, params, campaign_id="c"))

    one = [enc.encode(v) for v in np.asarray(values).tolist()]  # type: ignore[attr-defined]
    singles = [
        reports_pb2.Report.FromString(
            wire.report_to_proto(
                campaign_id="c", report_id=f"r{i}", params=params, report=one[i % len(one)]
            ).SerializeToString()
        )
        for i in range(2000)
    ]

    def ingest_single() -> None:
        acc = committed
        for msg in singles:
            acc += batch_delta(params, wire.report_from_proto(msg, params, campaign_id="c"))

    pack = _journal_rows.row_packer(params)
    rows = b"".join(pack(r) for r in one)

    def seal() -> None:
        for i in range(100):
            _journal_rows.batch_from_rows(campaign_id="c", batch_id=f"b{i}", params=params, rows=rows)

    return _best(ingest), _best(ingest_single), _best(seal)


if __name__ == "__main__":
    main()
