"""Speed of the longitudinal mechanisms (dbitflip, onebitmean, lgrr, losue; issue 17), public paths.

- device, repeated value: per-report ``encode`` of a value already reported (its memoized part cached; lgrr
  and losue draw their fresh round from the OS CSPRNG), reports per second;
- device, first report: a new encoder per report (the memoized part derived from the client secret:
  HMAC-SHA256 blocks), reports per second;
- batch encoder (simulation, seeded): 10^6 simulated devices, reports per second;
- server ingest: parsed batches of 1,000 reports decoded (``wire.batch_from_proto``), delta, merged.

With ``--calibration R``, also the estimators' MSE / variance and 95% coverage over R seeded repeats (the
functions of ``tests/ldp_aggregator/test_longitudinal_estimates.py``).

Run: .venv/bin/python bench/bench_longitudinal.py [--rounds R] [--calibration R]
"""

from __future__ import annotations

import argparse
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, batch_delta
from ldp_client import wire
from ldp_client.params import make_params
from ldp_client.registry import spec_for
from ldp_client.reporter import encoder_for
from ldp_client.secret import ClientSecret

SECRET = ClientSecret.from_bytes(bytes(range(32)))
CASES: list[tuple[str, dict[str, Any]]] = [
    ("dbitflip", {"epsilon": 2.0, "domain": 64, "fields": {"d": 4}}),
    ("onebitmean", {"epsilon": 1.0, "fields": {"lo": 0.0, "hi": 100.0, "buckets": 64}}),
    ("lgrr", {"epsilon": 1.0, "domain": 64, "fields": {"epsilon_inf": 3.0}}),
    ("losue", {"epsilon": 1.0, "domain": 64, "fields": {"epsilon_inf": 3.0}}),
]


def _best(rounds: int, fn: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _values(params: Any, n: int) -> list[Any]:
    if getattr(params, "domain", None) is None:
        return [params.lo + (params.hi - params.lo) * (i % 997) / 996 for i in range(n)]
    return [i % params.domain.size for i in range(n)]


def speed(name: str, case: dict[str, Any], rounds: int) -> None:
    params = make_params(name, epsilon=case.get("epsilon"), domain=case.get("domain"), fields=case["fields"])
    spec = spec_for(params)
    encode = encoder_for(params, campaign_id="bench", secret=SECRET)
    one = _values(params, 1)[0]
    encode(one)

    def repeated() -> None:
        for _ in range(20_000):
            encode(one)

    t = _best(rounds, repeated)
    print(f"{name} device, repeated value: {20_000 / t:,.0f} reports/s")
    fresh = _values(params, 2_000)

    def new() -> None:
        # A new device (encoder) per report: its memoized part is derived for the value (and, for dbitflip
        # and onebitmean, its per-device state) before the report.
        for i, v in enumerate(fresh):
            encoder_for(params, campaign_id=f"bench-{i}", secret=SECRET)(v)

    t = _best(rounds, new)
    print(f"{name} device, first report of a new device: {2_000 / t:,.0f} reports/s")
    rng = np.random.default_rng(1)
    n = 1_000_000
    if spec.kind.value == "mean":
        values = rng.uniform(params.lo, params.hi, size=(n, 1))
        t = _best(rounds, lambda: spec.encode_values(params, values, rng))
    else:
        idx = rng.integers(0, params.domain.size, size=n)
        t = _best(rounds, lambda: spec.encode_batch(params, idx, rng, campaign_id="bench", labels=[]))
    print(f"{name} batch encoder (simulation): {n / t:,.0f} reports/s")
    reports = [encode(v) for v in _values(params, 1_000)]
    msg = wire.batch_to_proto(
        campaign_id="bench", batch_id="b", params=params, columns=wire.batch_from_reports(params, reports)
    )
    acc = accumulator_for(params)

    def ingest() -> None:
        total = acc
        for _ in range(200):
            total = total + batch_delta(params, wire.batch_from_proto(msg, params, campaign_id="bench"))

    t = _best(rounds, ingest)
    print(f"{name} server ingest (batches of 1,000): {200_000 / t:,.0f} reports/s")


def calibration(repeats: int) -> None:
    from tests.ldp_aggregator.test_longitudinal_estimates import (
        FREQUENCY_CASES,
        frequency_calibration,
        mean_calibration,
    )

    for name, fields in FREQUENCY_CASES:
        ratio, cov = frequency_calibration(name, fields, reps=repeats, seed=zlib.crc32(name.encode()))
        print(f"{name} calibration ({repeats} repeats x 8 items): MSE/var {ratio:.3f}, coverage {cov:.4f}")
    ratio, cov = mean_calibration(reps=4 * repeats, seed=17)
    print(f"onebitmean calibration ({4 * repeats} repeats): MSE/var {ratio:.3f}, coverage {cov:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calibration", type=int, default=0, help="repeats of the calibration (0: none)")
    args = parser.parse_args()
    for name, case in CASES:
        speed(name, case, args.rounds)
    if args.calibration:
        calibration(args.calibration)


if __name__ == "__main__":
    main()
