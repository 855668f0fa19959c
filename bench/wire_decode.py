"""Throughput of the wire layer: encode columns -> ReportBatch -> bytes -> parse -> validate + decode.

Run: .venv/bin/python bench/wire_decode.py

Each batch is sized to about 4 MiB (gRPC's default maximum message size). Prints, per mechanism, the batch
size and the best-of-5 time and throughput of batch_to_proto, SerializeToString, FromString and
batch_from_proto (the server's validate-and-decode step).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ldp_client import wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    Domain,
    GRRParams,
    MechanismParams,
    RapporParams,
)


def _columns(params: MechanismParams, n: int, rng: np.random.Generator) -> Any:
    if isinstance(params, BinaryRRParams):
        return rng.integers(0, 2, size=n).astype(bool)
    if isinstance(params, GRRParams):
        return rng.integers(0, params.domain.size, size=n, dtype=np.int64)
    bits = np.packbits(rng.integers(0, 2, size=(n, params.k), dtype=np.uint8), axis=1, bitorder="little")
    if isinstance(params, RapporParams):
        return rng.integers(0, params.m, size=n, dtype=np.uint32), bits
    return bits


def _best(fn: Callable[[], object], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    rng = np.random.default_rng(12345)
    cases: list[tuple[str, MechanismParams, int]] = [
        ("rr", BinaryRRParams.from_epsilon(1.0), 32_000_000),
        ("grr d=1000", GRRParams.from_epsilon(1000, 2.0), 1_000_000),
        ("rappor k=128 m=64", RapporParams(k=128, h=2, m=64), 200_000),
        ("rappor k=4096", RapporParams(k=4096, h=2, m=64), 8_000),
        ("basic-rappor d=100", BasicRapporParams(domain=Domain.of(100)), 300_000),
        ("boolean-rappor", BooleanRapporParams(), 4_000_000),
    ]
    header = f"{'mechanism':<20} {'reports':>10} {'MiB':>6} | {'to_proto':>9} {'serialize':>9} {'parse':>9} "
    header += f"{'from_proto':>10} | {'decode Mreports/s':>17}"
    print(header)
    print("-" * len(header))
    for name, params, n in cases:
        columns = _columns(params, n, rng)
        msg = wire.batch_to_proto(campaign_id="bench", batch_id="b", params=params, columns=columns)
        data = msg.SerializeToString()
        parsed = reports_pb2.ReportBatch.FromString(data)
        t_to = _best(
            partial(wire.batch_to_proto, campaign_id="bench", batch_id="b", params=params, columns=columns)
        )
        t_ser = _best(msg.SerializeToString)
        t_parse = _best(partial(reports_pb2.ReportBatch.FromString, data))
        t_from = _best(partial(wire.batch_from_proto, parsed, params, campaign_id="bench"))
        print(
            f"{name:<20} {n:>10,} {len(data) / 2**20:>6.2f} | {t_to * 1e3:>7.2f}ms {t_ser * 1e3:>7.2f}ms "
            f"{t_parse * 1e3:>7.2f}ms {t_from * 1e3:>8.2f}ms | {n / t_from / 1e6:>17.1f}"
        )


if __name__ == "__main__":
    main()
