"""Discovery (issue 16): pem's adaptive rounds (``rounds=adaptive``) against one-round pem on the same users.

Both run the same parameters (from_epsilon's defaults: start 8 bits, step 6, top_k 32, max_length the
population's longest value) on the same users (drawn with ``--seed`` + repeat); the rounds split the users
uniformly into the G rounds as one round splits them into G groups, so every level has the same number of
reports in both. What differs is only what round r's devices know: the candidates published after round
r - 1, so they answer with GRR over them and "none" where its variance is lower
(:mod:`ldp_client.mechanisms.pem.rounds`), and local hashing otherwise, as one round always does.
Scored by simulations.discovery.discovery_metrics: precision/recall of the top 16 and 32, count MAE and
RMSE of the discovered values users hold, and the 95% intervals' coverage; averaged over ``--repeats``.

Populations (simulations.string_populations): ``zipf`` = zipf-words:1.1,10000, ``hosts`` = url-hosts:100000.

    .venv/bin/python bench/bench_discovery_rounds.py --n 100000,1000000 --epsilon 2,4 --repeats 3
    .venv/bin/python bench/bench_discovery_rounds.py --n 100000 --epsilon 2,4,8 --populations zipf --alphabet
    .venv/bin/python bench/bench_discovery_rounds.py --server-step --n 1000000 --epsilon 4,8

``--alphabet``: both modes over the characters the population's values use (pem's ``alphabet``: fewer bits
per character, so fewer levels or rounds; from_epsilon's defaults over an alphabet, start 2 characters,
one character per level).

``--server-step`` times the operator's round step on a real store (``Aggregator.next_round`` on SQLite,
raw reports retained): each round's users submitted in batches of 10,000, then the step, which reads every
raw report of the campaign and runs the closed rounds' discovery.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ldp_aggregator.discovery import discover_columns  # noqa: E402
from ldp_aggregator.discovery_rounds import discover_published  # noqa: E402
from ldp_client.mechanisms.pem import SPEC, PEMParams  # noqa: E402
from ldp_client.mechanisms.pem.rounds import encode_round_batch, round_plan  # noqa: E402
from simulations.discovery import discovery_metrics  # noqa: E402
from simulations.populations import parse_categorical_population  # noqa: E402

POPULATIONS = {"zipf": "zipf-words:1.1,10000", "hosts": "url-hosts:100000"}
METRICS = ("precision_top16", "recall_top16", "precision_top32", "recall_top32", "count_mae", "count_rmse")


def one_round(params: PEMParams, words: tuple[str, ...], values: np.ndarray, rng: Any) -> tuple[Any, str]:
    columns = SPEC.encode_batch(params, values, rng, campaign_id="bench", labels=words)
    return discover_columns(params, columns, len(values)), ""


def in_rounds(params: PEMParams, words: tuple[str, ...], values: np.ndarray, rng: Any) -> tuple[Any, str]:
    adaptive = dataclasses.replace(params, adaptive=True)
    rounds = rng.integers(0, adaptive.levels, size=len(values))
    published: list[Any] = []
    parts: list[Any] = []
    cache: dict[Any, Any] = {}
    oracles = []
    result = None
    for r in range(adaptive.levels):
        plan = round_plan(adaptive, r, published[-1] if r else ())
        oracles.append("G" if plan.grr else "H")
        parts.append(encode_round_batch(plan, values[rounds == r], words, rng))
        columns = tuple(np.concatenate([p[i] for p in parts]) for i in range(4))
        result = discover_published(adaptive, published, columns, int(columns[0].size), r + 1, cache=cache)
        published.append(result.kept)
    return result, "".join(oracles)


def server_step(n: int, eps: float, seed: int) -> None:
    import asyncio
    import tempfile

    from ldp_aggregator.service import Aggregator, open_store
    from ldp_client import wire

    pop = parse_categorical_population(POPULATIONS["zipf"])
    d = pop.support_size
    words = tuple(pop.labels(d))
    rng = np.random.default_rng(seed)
    values = rng.choice(d, size=n, p=pop.probabilities(d))
    params = PEMParams.from_epsilon(eps, max_length=max(len(w) for w in words), top_k=32, adaptive=True)
    rounds = rng.integers(0, params.levels, size=n)
    with tempfile.TemporaryDirectory() as tmp:
        agg = Aggregator(open_store(str(Path(tmp) / "ldp.sqlite3")))
        try:
            agg.create_campaign(wire.campaign_to_proto(campaign_id="w", params=params))
            steps = []
            for r in range(params.levels):
                info = wire.campaign_from_proto(agg.get_campaign("w"))
                published = [k.kept for k in info.discovery_rounds]
                plan = round_plan(params, r, published[r - 1] if r else ())
                mine = values[rounds == r]
                for j in range(0, len(mine), 10_000):
                    cols = encode_round_batch(plan, mine[j : j + 10_000], words, rng)
                    msg = wire.batch_to_proto(
                        campaign_id="w", batch_id=f"{r}-{j}", params=params, columns=cols
                    )
                    asyncio.run(agg.submit_batch(msg))
                start = time.perf_counter()
                agg.next_round("w", r)
                steps.append(time.perf_counter() - start)
            print(
                f"server step, n={n:,} eps={eps:g} G={params.levels}: per round "
                + ", ".join(f"{x:.1f}" for x in steps)
                + f" s; the last (every report read) {steps[-1]:.1f} s, all {sum(steps):.1f} s",
                flush=True,
            )
        finally:
            agg.store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="100000")
    ap.add_argument("--epsilon", default="2,4")
    ap.add_argument("--populations", default="zipf,hosts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--server-step", action="store_true", help="time Aggregator.next_round instead")
    ap.add_argument("--alphabet", action="store_true", help="over the population's characters")
    args = ap.parse_args()
    if args.server_step:
        for n in (int(x) for x in args.n.split(",")):
            for eps in (float(e) for e in args.epsilon.split(",")):
                server_step(n, eps, args.seed)
        return
    rows: list[dict[str, Any]] = []
    for pop_name in args.populations.split(","):
        pop = parse_categorical_population(POPULATIONS[pop_name])
        d = pop.support_size
        words = tuple(pop.labels(d))
        alphabet = "".join(sorted({c for w in words for c in w})) if args.alphabet else ""
        max_length = max(len(w) if alphabet else len(w.encode()) for w in words)
        for n in (int(x) for x in args.n.split(",")):
            for eps in (float(e) for e in args.epsilon.split(",")):
                params = PEMParams.from_epsilon(eps, max_length=max_length, top_k=32, alphabet=alphabet)
                for name, run in (("one round", one_round), ("adaptive", in_rounds)):
                    sums: dict[str, float] = {}
                    seconds = 0.0
                    oracles = ""
                    for rep in range(args.repeats):
                        rng = np.random.default_rng([args.seed, rep])
                        values = rng.choice(d, size=n, p=pop.probabilities(d))
                        counts = np.bincount(values, minlength=d)
                        truth = {words[i]: int(c) for i, c in enumerate(counts) if c}
                        start = time.perf_counter()
                        result, oracles = run(
                            params, words, values, np.random.default_rng([args.seed, rep, 7])
                        )
                        seconds += time.perf_counter() - start
                        for k, v in discovery_metrics(result.items, truth).items():
                            sums[k] = sums.get(k, 0.0) + v
                    row = {
                        "population": pop_name,
                        "n": n,
                        "epsilon": eps,
                        "mode": name + (" (alphabet)" if alphabet else ""),
                        "levels": params.levels,
                        "oracles": oracles,
                        "seconds": seconds / args.repeats,
                        **{k: v / args.repeats for k, v in sums.items()},
                    }
                    rows.append(row)
                    print(
                        f"{pop_name:5} n={n:>9,} eps={eps:g} {name:9} "
                        + " ".join(f"{k}={row.get(k, float('nan')):.3f}" for k in (*METRICS, "coverage"))
                        + f" {oracles} {row['seconds']:.1f}s",
                        flush=True,
                    )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
