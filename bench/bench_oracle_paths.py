"""The frequency oracles' hot paths through the public facades, in one process (issue 14, phase 2).

What the mechanism registry puts a lookup and a spec call in front of, for oue, sue, olh, blh, ss, hr and
set-valued at d = 1024: the server's ingest of a parsed Submit (``wire.batch_from_proto``, ``batch_delta``,
merge; batches of 1,000) and of single reports; the device's per-report encode (``encoder_for``) and its
journal rows sealed into a batch; the simulator's batch encode (``runners._encode_columns``) and exact sum
sampler (a ``sum`` run of 10^9 users); the estimate of a full accumulator (``estimate_frequencies``). It uses
only names that exist before and after the registry, so the same script times both trees: run it
alternately with ``PYTHONPATH=<tree>`` and compare the figures path by path.

Run: PYTHONPATH=. .venv/bin/python bench/bench_oracle_paths.py [--seconds S]
Prints one line per path, ``name: rate unit`` (the best of the timed rounds).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import ldp_client
from ldp_aggregator.accumulators import accumulator_for, add_columns, batch_delta
from ldp_aggregator.estimators import estimate_frequencies
from ldp_client import _journal_rows, wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.params import make_params
from ldp_client.reporter import encoder_for
from simulations.runners import SimulationConfig, _encode_columns, simulate

D = 1024
BATCH = 1_000
LABELS = [str(i) for i in range(D)]


def _rate(run: Callable[[], object], units: int, seconds: float) -> float:
    """Units per second of the fastest round (rounds repeated for ``seconds`` in all, at least twice)."""
    best = float("inf")
    stop = time.perf_counter() + seconds
    rounds = 0
    while True:
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
        rounds += 1
        if rounds >= 2 and time.perf_counter() > stop:
            return units / best


def _encoder_input(domain: Any, index: int) -> Any:
    """What an encoder takes for ``index``: the label, or the integer (spelt out so that the script also
    runs on trees from before ``Domain.value``, for paired before/after runs)."""
    return domain.labels[index] if domain.labels is not None else index


def _show(what: str, rate: float, unit: str = "reports/s") -> None:
    print(f"{what}: {rate:,.1f} {unit}", flush=True)


def _params() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {
            name: make_params(name, epsilon=2.0, domain=D)
            for name in ("oue", "sue", "olh", "blh", "ss", "hr")
        }
        for inner in ("oue", "olh"):
            out[f"set-valued/{inner}"] = make_params(
                "set-valued", epsilon=2.0, domain=D - 4, fields={"max_items": 4, "inner": inner}
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per path")
    args = parser.parse_args()
    sec = args.seconds
    print(f"tree: {ldp_client.__file__.rsplit('/', 2)[0]}")
    rng = np.random.default_rng(1)
    all_params = _params()

    for name, params in all_params.items():
        values = rng.integers(0, params.domain.size, BATCH)
        columns = _encode_columns(params, values, rng, campaign_id="c", labels=LABELS)

        # Server: 20 batches of 1,000 (decode, increment, merge).
        msgs = [
            reports_pb2.ReportBatch.FromString(
                wire.batch_to_proto(
                    campaign_id="c", batch_id=f"b{i}", params=params, columns=columns
                ).SerializeToString()
            )
            for i in range(20)
        ]
        committed = accumulator_for(params)

        def ingest(msgs: list[Any] = msgs, params: Any = params, acc: Any = committed) -> None:
            for msg in msgs:
                acc += batch_delta(params, wire.batch_from_proto(msg, params, campaign_id="c"))

        _show(f"{name} batch ingest", _rate(ingest, 20 * BATCH, sec))

        # Device: per-report encode, then the journal rows of 1,000 reports sealed into a batch.
        encode = encoder_for(params, campaign_id="c")
        inputs = (
            [[v] for v in values.tolist()]
            if name.startswith("set-valued")
            else [_encoder_input(params.domain, v) for v in values.tolist()]
        )

        def encode_all(encode: Callable[[Any], Any] = encode, inputs: list[Any] = inputs) -> None:
            for x in inputs:
                encode(x)

        _show(f"{name} per-report encode", _rate(encode_all, len(inputs), sec))
        outputs = [encode(x) for x in inputs]
        pack = _journal_rows.row_packer(params)
        rows = b"".join(pack(y) for y in outputs)

        def seal(params: Any = params, rows: bytes = rows) -> None:
            for i in range(10):
                _journal_rows.batch_from_rows(campaign_id="c", batch_id=f"b{i}", params=params, rows=rows)

        _show(f"{name} journal rows -> batch", _rate(seal, 10 * BATCH, sec))

        # Server: single reports (SubmitReport), 300 per round.
        singles = [
            wire.report_to_proto(campaign_id="c", report_id=f"r{i}", params=params, report=y)
            for i, y in enumerate(outputs[:300])
        ]

        def ingest_single(params: Any = params, singles: list[Any] = singles, acc: Any = committed) -> None:
            for msg in singles:
                acc += batch_delta(params, wire.report_from_proto(msg, params, campaign_id="c"))

        _show(f"{name} single-report ingest", _rate(ingest_single, len(singles), sec))

        # Simulator: batch encode of 100,000 users.
        many = rng.integers(0, params.domain.size, 100_000)

        def encode_batch(params: Any = params, many: Any = many) -> None:
            _encode_columns(params, many, rng, campaign_id="c", labels=LABELS)

        _show(f"{name} batch encode", _rate(encode_batch, many.size, sec))

        # Server: the estimate of an accumulator holding 10^5 reports.
        acc = accumulator_for(params)
        add_columns(acc, params, _encode_columns(params, many, rng, campaign_id="c", labels=LABELS))
        _show(
            f"{name} estimate",
            _rate(lambda p=params, a=acc: estimate_frequencies(p, a), 1, sec),
            "estimates/s",
        )

    # Simulator: the exact sum samplers (oue, sue, hr), a sum run of 10^9 users (includes the estimate).
    for name in ("oue", "sue", "hr"):
        cfg = SimulationConfig(
            mechanism=name, population="zipf:1.1", n_users=10**9, domain=D, epsilon=2.0, mode="sum", seed=3
        )

        def run(cfg: SimulationConfig = cfg) -> None:
            simulate(cfg)

        _show(f"{name} sum run (10^9 users)", _rate(run, 1, sec), "runs/s")


if __name__ == "__main__":
    main()
