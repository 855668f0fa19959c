"""What the device ledger adds to Reporter.report(): per-call cost of the charge, and the persist.

Per case, the app-thread path of ``report()`` without its list append: the campaign's per-report encoder
alone, and the same encoder behind the ledger's charge (``Reporter._charging``: cost reserved in memory,
memo key of a memoized value), alternated ``--rounds`` times over the same number of values; the fastest
round of each is shown (the least disturbed by other processes), and their difference is the ledger's
cost per report. A fresh report (grr) without a cap costs nothing there (the reporter's thread charges
the group it journals); with a cap, a counter and the check; a memoized repeat (100 values) a dictionary
lookup; a new memoized value one HMAC-SHA256 for its key. Separately: ``persist`` (append + fsync) of the
charges of ``--group`` fresh reports, the background thread's cost per drained group.

Run: .venv/bin/python bench/bench_ledger.py [--rounds N] [--n N] [--group N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ldp_client import wire
from ldp_client.params import GRRParams, MechanismParams, RapporParams
from ldp_client.reporter import Reporter, encoder_for
from ldp_client.reporter.ledger import DeviceLedger
from ldp_client.reporter.policy import BudgetPolicy, ReportCost
from ldp_client.secret import ClientSecret

GRR = GRRParams.from_epsilon([chr(97 + i) for i in range(16)], 2.0)
RAPPOR = RapporParams(k=128, h=2, m=64)
CAP = BudgetPolicy(lifetime_epsilon=1e9)
CASES: dict[str, tuple[MechanismParams, Callable[[int], Any], BudgetPolicy | None]] = {
    "grr d=16, no cap (charged by the thread)": (GRR, lambda i: chr(97 + i % 16), None),
    "grr d=16, lifetime cap (charged per report)": (GRR, lambda i: chr(97 + i % 16), CAP),
    "rappor k=128, 100 values (memoized repeats)": (RAPPOR, lambda i: f"v{i % 100}", None),
    "rappor k=128, all distinct (new memoized values)": (RAPPOR, lambda i: f"d{i}", None),
}


def per_call(
    state: Path,
    case: tuple[MechanismParams, Callable[[int], Any], BudgetPolicy | None],
    index: int,
    n: int,
    rounds: int,
) -> tuple[float, float]:
    params, value, budget = case
    secret = ClientSecret.generate()
    info = wire.CampaignInfo(campaign_id=f"case-{index}", params=params)
    # An unreachable collector: nothing is sent, and no report goes through report()'s queue here.
    cid = info.campaign_id
    r = Reporter(
        "127.0.0.1:9", cid, max_epsilon=100.0, state_dir=state, campaign=info, secret=secret, budget=budget
    )
    try:
        bare = encoder_for(params, campaign_id=info.campaign_id, secret=secret)
        charged = r._charging(params, encoder_for(params, campaign_id=info.campaign_id, secret=secret))
        best = {"bare": float("inf"), "charged": float("inf")}
        offset = 0
        for _ in range(rounds):
            for label, encode in (("bare", bare), ("charged", charged)):
                values = [value(offset + i) for i in range(n)]
                offset += n  # distinct values stay new in every round
                t = time.perf_counter()
                for v in values:
                    encode(v)
                best[label] = min(best[label], (time.perf_counter() - t) / n)
    finally:
        r.close(timeout=0)
    return best["bare"], best["charged"]


def persist_times(state: Path, group: int, rounds: int) -> list[float]:
    ledger = DeviceLedger.acquire(state)
    try:
        plan = ledger.plan("p", ReportCost(1.0, 0.0, float("inf"), "f" * 16), BudgetPolicy())
        out = []
        for _ in range(rounds):
            for _ in range(group):
                ledger.charge_fresh(plan)
            t = time.perf_counter()
            ledger.persist()
            out.append(time.perf_counter() - t)
        return out
    finally:
        ledger.release()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--group", type=int, default=100)
    args = ap.parse_args()
    print(
        f"Python {platform.python_version()}, {platform.machine()}, {args.n} values per round, "
        f"best of {args.rounds}"
    )
    print(f"{'case':50s} {'encode us':>10s} {'+ charge us':>12s} {'ledger us':>10s}")
    with tempfile.TemporaryDirectory() as d:
        for index, (name, case) in enumerate(CASES.items()):
            bare, charged = per_call(Path(d), case, index, args.n, args.rounds)
            print(f"{name:50s} {bare * 1e6:10.2f} {charged * 1e6:12.2f} {(charged - bare) * 1e6:10.2f}")
        times = persist_times(Path(d), args.group, 50)
    print(
        f"persist of {args.group} fresh charges (append + fsync), 50 runs: median "
        f"{statistics.median(times) * 1e3:.2f} ms, min {min(times) * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
