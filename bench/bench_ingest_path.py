"""The aggregator's ingest path and the device's report path for rr and grr, in one process.

What a Submit costs the server once the bytes are parsed: validate and decode the batch
(``wire.batch_from_proto``), make its increment (``batch_delta``) and merge it into the committed
accumulator; the same for a single report (``wire.report_from_proto``). On the device: ``encoder_for``'s
per-report encode, and a sealed batch from journal rows (``_journal_rows.batch_from_rows``). These are the
paths the mechanism registry (issue 14) puts a lookup in front of (for a mechanism not yet registered too:
RAPPOR's single reports), so this benchmark compares a build before and after it: run it alternately from
both trees (``PYTHONPATH=<tree>``) and compare the figures.

Run: PYTHONPATH=. .venv/bin/python bench/bench_ingest_path.py [--seconds S]
Prints one line per path: reports per second, the best of several timed rounds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

import ldp_client
from ldp_aggregator.accumulators import accumulator_for, batch_delta
from ldp_client import _journal_rows, wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.params import BinaryRRParams, GRRParams, RapporParams
from ldp_client.reporter import encoder_for

GRR = GRRParams.from_epsilon(16, 2.0)
RR = BinaryRRParams.from_epsilon(1.0)
RAPPOR = RapporParams(k=128, h=2, m=64)
BATCH = 1_000


class _Report(NamedTuple):
    cohort: int
    bits: int


def _rate(run: Callable[[], None], reports: int, seconds: float) -> float:
    """Reports per second of the fastest round (rounds of ``reports`` reports for ``seconds`` in all)."""
    best = float("inf")
    stop = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() > stop:
            return reports / best


def _show(what: str, rate: float) -> None:
    print(f"{what}: {rate:,.0f} reports/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.6, help="time per path")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    print(f"tree: {ldp_client.__file__.rsplit('/', 2)[0]}")

    # Server: batches of 1,000 (decode, increment, merge), 100 batches per round.
    for name, params, columns in (
        ("grr", GRR, GRREncoder(GRR).encode_batch(rng.integers(0, 16, BATCH), rng)),
        ("rr", RR, rng.random(BATCH) < 0.5),
    ):
        blobs = [
            wire.batch_to_proto(
                campaign_id="c", batch_id=f"b{i}", params=params, columns=columns
            ).SerializeToString()
            for i in range(100)
        ]
        msgs = [reports_pb2.ReportBatch.FromString(b) for b in blobs]
        committed = accumulator_for(params)

        def ingest(
            msgs: list[reports_pb2.ReportBatch] = msgs, params: object = params, acc: object = committed
        ) -> None:
            for msg in msgs:
                cols = wire.batch_from_proto(msg, params, campaign_id="c")  # type: ignore[arg-type]
                acc += batch_delta(params, cols)  # type: ignore[arg-type, operator]

        _show(f"{name} batch ingest (1,000 per batch)", _rate(ingest, 100 * BATCH, args.seconds))

    # Server: single reports (SubmitReport), 2,000 per round.
    singles = [
        wire.report_to_proto(campaign_id="c", report_id=f"r{i}", params=GRR, report=i % 16)
        for i in range(2_000)
    ]
    committed = accumulator_for(GRR)

    def ingest_single() -> None:
        acc = committed
        for msg in singles:
            acc += batch_delta(GRR, wire.report_from_proto(msg, GRR, campaign_id="c"))

    _show("grr single-report ingest", _rate(ingest_single, len(singles), args.seconds))

    # A mechanism not yet registered pays the registry lookup in front of its older code: RAPPOR's single
    # reports are its most frequent call.
    rappor_singles = [
        wire.report_to_proto(
            campaign_id="c",
            report_id=f"r{i}",
            params=RAPPOR,
            report=_Report(i % 64, (i * 2654435761) % (1 << 128)),
        )
        for i in range(2_000)
    ]
    rappor_committed = accumulator_for(RAPPOR)

    def ingest_rappor_single() -> None:
        acc = rappor_committed
        for msg in rappor_singles:
            acc += batch_delta(RAPPOR, wire.report_from_proto(msg, RAPPOR, campaign_id="c"))

    _show("rappor single-report ingest", _rate(ingest_rappor_single, len(rappor_singles), args.seconds))

    # Device: per-report encode through encoder_for, and journal rows to a batch.
    encode = encoder_for(GRR, campaign_id="c")
    values = list(range(16)) * 1_000

    def encode_all() -> None:
        for v in values:
            encode(v)

    print(
        f"grr per-report encode (encoder_for): {_rate(encode_all, len(values), args.seconds):,.0f} reports/s"
    )
    pack = _journal_rows.row_packer(GRR)
    rows = b"".join(pack(v) for v in values[:BATCH])

    def seal() -> None:
        for i in range(100):
            _journal_rows.batch_from_rows(campaign_id="c", batch_id=f"b{i}", params=GRR, rows=rows)
            _journal_rows.row_packer(GRR)

    _show("grr journal rows -> batch (1,000 per batch)", _rate(seal, 100 * BATCH, args.seconds))


if __name__ == "__main__":
    main()
