"""The RAPPOR variants' and paired campaigns' hot paths, in one process, for before/after comparisons.

What the mechanism registry (issue 14) puts a lookup in front of, for string, basic and boolean RAPPOR and
paired campaigns: on the server, a Submit once its bytes are parsed (validate and decode the batch,
``wire.batch_from_proto``; make its increment, ``batch_delta``; merge it), the same for a single report,
and the estimates an analyst asks for; on the device, the per-report encode through ``encoder_for`` and a
sealed batch from journal rows; in the simulator, the sum runner (exact sampler of the sums) and the report
runner (batch encoder), end to end through ``simulations.runners.simulate``. Run it alternately from the
trees to compare (``PYTHONPATH=<tree>``): it uses only names both have.

Run: PYTHONPATH=. .venv/bin/python bench/bench_rappor_paired_paths.py [--seconds S] [--only NAME,...]
Prints one line per path: operations per second, the best of several timed rounds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, add_columns, batch_delta
from ldp_aggregator.association import associate_campaign
from ldp_aggregator.estimators import estimate_frequencies
from ldp_aggregator.rappor_estimates import estimate_rappor_candidates
from ldp_client import _journal_rows, wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.mechanisms.paired import encode_batch_paired
from ldp_client.mechanisms.rappor import encode_batch_rappor
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    GRRParams,
    PairedParams,
    RapporParams,
)
from ldp_client.reporter import encoder_for
from ldp_client.secret import ClientSecret
from simulations.runners import SimulationConfig, simulate

RAPPOR = RapporParams(k=128, h=2, m=64)
BASIC = BasicRapporParams(domain=32)
BOOLEAN = BooleanRapporParams()
PAIRED = PairedParams(first=BinaryRRParams.from_epsilon(1.0), second=GRRParams.from_epsilon(8, 2.0))
PAIRED_RAPPOR = PairedParams(first=RapporParams(k=32, h=2, m=16), second=BasicRapporParams(domain=4))
SECRET = ClientSecret.from_bytes(bytes(range(32)))
BATCH = 1_000
CAMPAIGN = "bench"
LABELS = [f"value-{i}" for i in range(100)]


def _rate(run: Callable[[], object], ops: int, seconds: float) -> float:
    """Operations per second of the fastest round (rounds of ``ops`` operations for ``seconds`` in all)."""
    best = float("inf")
    stop = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() > stop:
            return ops / best


def _reports(params: Any, values: list[Any], n: int) -> list[Any]:
    encode = encoder_for(params, campaign_id=CAMPAIGN, secret=SECRET)
    return [encode(values[i % len(values)]) for i in range(n)]


def _ingest(params: Any, reports: list[Any]) -> tuple[Callable[[], object], Callable[[], object]]:
    """(batch ingest of 1,000, single-report ingest of 1,000 one by one) for these reports."""
    columns = wire.batch_from_reports(params, reports)
    batch = wire.batch_to_proto(campaign_id=CAMPAIGN, batch_id="b", params=params, columns=columns)
    singles = [
        reports_pb2.Report.FromString(
            wire.report_to_proto(
                campaign_id=CAMPAIGN, report_id=f"r{i}", params=params, report=r
            ).SerializeToString()
        )
        for i, r in enumerate(reports)
    ]
    acc = accumulator_for(params)

    def batch_ingest() -> None:
        nonlocal acc
        decoded = wire.batch_from_proto(batch, params, campaign_id=CAMPAIGN)
        acc = acc + batch_delta(params, decoded)

    def single_ingest() -> None:
        nonlocal acc
        for msg in singles:
            acc = acc + batch_delta(params, wire.report_from_proto(msg, params, campaign_id=CAMPAIGN))

    return batch_ingest, single_ingest


def _encode(params: Any, values: list[Any], n: int) -> Callable[[], object]:
    encode = encoder_for(params, campaign_id=CAMPAIGN, secret=SECRET)
    chosen = [values[i % len(values)] for i in range(n)]
    return lambda: [encode(v) for v in chosen]


def _journal(params: Any, reports: list[Any]) -> Callable[[], object]:
    pack = _journal_rows.row_packer(params)
    rows = b"".join(pack(r) for r in reports)
    return lambda: _journal_rows.batch_from_rows(campaign_id=CAMPAIGN, batch_id="b", params=params, rows=rows)


def _accumulated(params: Any, reports: list[Any], times: int) -> Any:
    acc = accumulator_for(params)
    cols = wire.batch_from_reports(params, reports)
    for _ in range(times):
        add_columns(acc, params, cols)
    return acc


def _paths() -> dict[str, tuple[Callable[[], object], int]]:
    out: dict[str, tuple[Callable[[], object], int]] = {}
    cases = {
        "rappor": (RAPPOR, LABELS),
        "basic-rappor": (BASIC, list(range(32))),
        "boolean-rappor": (BOOLEAN, [False, True]),
        "paired rr x grr": (PAIRED, [(i % 2 == 0, i % 8) for i in range(16)]),
        "paired rappor x basic": (PAIRED_RAPPOR, [(LABELS[i], i % 4) for i in range(16)]),
    }
    for name, (params, values) in cases.items():
        reports = _reports(params, values, BATCH)
        batch_ingest, single_ingest = _ingest(params, reports)
        out[f"{name} batch ingest (decode, delta, merge; 1,000 per batch)"] = (batch_ingest, BATCH)
        out[f"{name} single-report ingest"] = (single_ingest, BATCH)
        out[f"{name} per-report encode (encoder_for)"] = (_encode(params, values, BATCH), BATCH)
        out[f"{name} journal rows -> batch (1,000 per batch)"] = (_journal(params, reports), BATCH)
    # Estimates, from accumulators of 100,000 reports (string RAPPOR: of as many simulated devices).
    rappor_acc = accumulator_for(RAPPOR)
    values = np.random.default_rng(1).integers(0, len(LABELS), size=100_000)
    cols = encode_batch_rappor(
        RAPPOR, campaign_id=CAMPAIGN, values=values, labels=LABELS, rng=np.random.default_rng(2)
    )
    add_columns(rappor_acc, RAPPOR, cols)
    out["rappor estimate (100 candidates, WLS)"] = (
        lambda: estimate_rappor_candidates(RAPPOR, rappor_acc, campaign_id=CAMPAIGN, candidates=LABELS),
        1,
    )
    for name, params, values in (
        ("basic-rappor", BASIC, list(range(32))),
        ("boolean-rappor", BOOLEAN, [True]),
    ):
        acc = _accumulated(params, _reports(params, values, BATCH), 100)
        out[f"{name} estimate_frequencies"] = (lambda p=params, a=acc: estimate_frequencies(p, a), 1)
    # The association of 100,000 simulated devices (seeded: EM's work depends on the reports).
    rng = np.random.default_rng(3)
    first = rng.integers(0, 2, size=100_000)
    paired_cols = encode_batch_paired(
        PAIRED, campaign_id=CAMPAIGN, first_values=first == 1, second_values=(first * 3) % 8, rng=rng
    )
    paired_acc = accumulator_for(PAIRED)
    add_columns(paired_acc, PAIRED, paired_cols)
    info = wire.CampaignInfo(campaign_id=CAMPAIGN, params=PAIRED)
    out["paired rr x grr association (EM)"] = (lambda: associate_campaign(info, paired_acc, None), 1)
    # The simulator, end to end (population, sums or reports, accumulator, estimate).
    for mech, fields, domain in (("rappor", {"k": 128, "h": 2, "m": 64}, 1000), ("basic-rappor", {}, 64)):
        for mode, users in (("sum", 10**9), ("report", 200_000)):
            config = SimulationConfig(
                mechanism=mech,
                population="zipf:1.1",
                n_users=users,
                domain=domain,
                params=tuple(fields.items()),
                mode=mode,  # type: ignore[arg-type]
                seed=5,
                repeats=3,
            )
            out[f"{mech} simulate --mode {mode} ({users:,} users, 3 repeats)"] = (
                lambda c=config: simulate(c),
                1,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.6, help="time per path")
    parser.add_argument("--only", default="", help="comma-separated substrings: run the matching paths")
    args = parser.parse_args()
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    for name, (run, ops) in _paths().items():
        if wanted and not any(w in name for w in wanted):
            continue
        run()  # warm: caches, first-call imports
        print(f"{name}: {_rate(run, ops, args.seconds):.6g} per s", flush=True)


if __name__ == "__main__":
    main()
