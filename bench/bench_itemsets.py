"""SVIM (issue 18): frequent itemsets against a naive baseline, calibration, encoder and ingest speed.

Three parts, on the planted set population of ``ldp-sim`` (:class:`simulations.set_population.SetPopulation`:
d items, five planted itemsets of size 2-3 with probabilities 0.30 ... 0.08, plus Zipf noise items):

* ``compare``: on the same users, n and epsilon, SVIM's two stages (half the users find the items, the other
  half report one of the candidate itemsets the server builds from the top 10 items; sizes 2..3, 20
  candidates; :func:`ldp_aggregator.itemsets.follow_up_params`) against the naive baseline: every user
  reports, by padding and sampling over the domain of all d(d-1)/2 pairs, one of the pairs its set
  contains (L = the 90th percentile of the users' pair counts, taken from the truth: generous to the
  baseline), and the top pairs are the estimated ones. Scored against the true top-10 itemsets of sizes 2..3
  among the 16 most frequent items: precision of the reported top 10 (tie-aware), NCR (Wang-Li-Jha's
  normalised cumulative rank) and the mean relative error of the reported top 10's frequencies.
* ``calibration``: the itemsets stage over fixed candidates (the true top 10 itemsets) with L' = 10 (no user
  exceeds it: PSFO is unbiased), and the items stage with L = the largest set; MSE / mean reported variance
  and 95% coverage pooled over the values and seeded repeats.
* ``speed``: the vectorised set encoder (10^6 users, both stages) and ingest of 10^7 reports (the spec's
  ``layout_batch``: a bincount for GRR, local hashing's support test over the m values for OLH).

Run: .venv/bin/python bench/bench_itemsets.py {compare,calibration,speed} [--users N] [--epsilon E]
     [--repeats R] [--domain D]
"""

from __future__ import annotations

import argparse
import itertools
import time
from types import SimpleNamespace

import numpy as np

from ldp_aggregator.estimators import estimate_support
from ldp_aggregator.itemsets import follow_up_params, mine
from ldp_client.mechanisms.svim.core import SLOTS, SVIMParams, element_matrix, encode_sets
from ldp_client.mechanisms.svim.spec import SPEC
from simulations.set_population import SetPopulation

TOP = 10


def _estimate(
    params: SVIMParams, sets: np.ndarray, rng: np.random.Generator, groups: np.ndarray | None = None
):
    cols = encode_sets(params, sets, rng, groups)
    n, support = SPEC.layout_batch(params, cols)
    acc = SimpleNamespace(n=n, support=support)
    return estimate_support(SPEC.support(params, acc), mechanism="svim", epsilon=params.epsilon)


def _truth(sets: np.ndarray, d: int) -> dict[tuple[int, ...], int]:
    """True counts of every itemset of size 2..3 of the 16 most frequent items."""
    held = np.zeros((sets.shape[0], d + 1), dtype=np.bool_)
    held[np.arange(sets.shape[0])[:, None], np.where(sets >= 0, sets, d)] = True
    top = np.argsort(-held[:, :d].sum(axis=0), kind="stable")[:16]
    out = {}
    for r in (2, 3):
        for x in itertools.combinations(sorted(int(i) for i in top), r):
            out[x] = int(held[:, list(x)].all(axis=1).sum())
    return out


def _score(
    reported: list[tuple[tuple[int, ...], float]], truth: dict[tuple[int, ...], int], n: int
) -> dict[str, float]:
    ranked = sorted(truth, key=lambda x: -truth[x])[:TOP]
    kth = truth[ranked[-1]]
    head = reported[:TOP]
    precision = sum(1 for x, _ in head if truth.get(x, 0) >= kth) / TOP
    score = {x: TOP - i for i, x in enumerate(ranked)}
    ncr = sum(score.get(x, 0) for x, _ in head) / (TOP * (TOP + 1) / 2)
    rel = [abs(f - truth[x] / n) / (truth[x] / n) for x, f in head if truth.get(x, 0) > 0]
    return {"precision": precision, "ncr": ncr, "rel_error": float(np.mean(rel)) if rel else float("nan")}


def _svim(
    sets: np.ndarray, d: int, eps: float, rng: np.random.Generator, max_items: int
) -> list[tuple[tuple[int, ...], float]]:
    slots = rng.integers(0, SLOTS, size=sets.shape[0])
    items = SVIMParams.from_epsilon(d, eps, max_items=max_items)
    rows = np.flatnonzero(slots < items.stage_hi)
    groups = (slots[rows] >= items.size_share).astype(np.int64)
    est = _estimate(items, sets[rows], rng, groups)
    follow = follow_up_params(
        items,
        [it.count for it in est.items],
        source_id="bench",
        epsilon=eps,
        top_items=10,
        n_candidates=20,
        max_size=3,
    )
    # L' as the paper picks it (the 90th percentile of the users' contained candidates; here from the
    # truth, as the baseline's L), then the estimates corrected by the size group's u(L').
    contained = element_matrix(follow, sets).sum(axis=1)
    L2 = max(1, int(np.percentile(contained[contained > 0], 90)))
    follow = follow_up_params(
        items, [it.count for it in est.items], source_id="bench", epsilon=eps, top_items=10, n_candidates=20,
        max_size=3, max_items=L2,
    )  # fmt: skip
    rows = np.flatnonzero(slots >= follow.stage_lo)
    groups = (slots[rows] >= follow.stage_lo + follow.size_share).astype(np.int64)
    cols = encode_sets(follow, sets[rows], rng, groups)
    m, support = SPEC.layout_batch(follow, cols)
    acc = SimpleNamespace(n=m, support=support)
    est2 = estimate_support(SPEC.support(follow, acc), mechanism="svim", epsilon=follow.epsilon)
    u = mine(follow, acc, est2).correction
    out = [(c, u * it.count / m) for c, it in zip(follow.candidates, est2.items, strict=True)]
    return sorted(out, key=lambda t: -t[1])


def _baseline(
    sets: np.ndarray, d: int, eps: float, rng: np.random.Generator
) -> list[tuple[tuple[int, ...], float]]:
    """Every user reports one of its pairs by PSFO over all d(d-1)/2 pairs (module docstring)."""
    from ldp_client.mechanisms.grr import GRREncoder, GRRParams
    from ldp_client.mechanisms.olh import LocalHashEncoder

    pairs = list(itertools.combinations(range(d), 2))
    n, w = sets.shape
    cols = []
    for a, b in itertools.combinations(range(w), 2):  # a loop over slot pairs, none over users
        x, y = np.minimum(sets[:, a], sets[:, b]), np.maximum(sets[:, a], sets[:, b])
        ok = (x >= 0) & (y >= 0)
        cols.append(np.where(ok, x * d - x * (x + 1) // 2 + (y - x - 1), -1))
    pair_sets = -np.sort(-np.stack(cols, axis=1), axis=1)
    k = (pair_sets >= 0).sum(axis=1)
    has = k > 0
    L = max(1, int(np.percentile(k[has], 90)))
    params = SVIMParams.from_epsilon(len(pairs), eps, max_items=L, stage_hi=SLOTS, size_share=0)
    with_pairs = encode_sets(params, pair_sets[has], rng, np.ones(int(has.sum()), dtype=np.int64))
    # Users holding no pair report a dummy (slot j uniform in [0, L)) through the same inner oracle.
    dummies = params.values + rng.integers(0, L, size=int((~has).sum()))
    if isinstance(params.inner, GRRParams):
        n0 = dummies.shape[0]
        without = (np.ones(n0, np.uint16), np.zeros(n0, np.uint64), np.zeros(n0, np.uint64),
                   GRREncoder(params.inner).encode_batch(dummies, rng).astype(np.uint32))  # fmt: skip
    else:
        a, b, y = LocalHashEncoder(params.inner).encode_batch(dummies, rng)
        without = (np.ones(dummies.shape[0], np.uint16), a, b, y)
    columns = tuple(np.concatenate([u, v]) for u, v in zip(with_pairs, without, strict=True))
    m, support = SPEC.layout_batch(params, columns)
    est = estimate_support(
        SPEC.support(params, SimpleNamespace(n=m, support=support)), mechanism="svim", epsilon=params.epsilon
    )
    out = [(pairs[i], it.count / n) for i, it in enumerate(est.items)]
    return sorted(out, key=lambda t: -t[1])


def compare(args: argparse.Namespace) -> None:
    print("| epsilon | n | method | precision@10 | NCR@10 | mean rel. error of top-10 frequencies |")
    print("|---:|---:|---|---:|---:|---:|")
    for eps in args.epsilon:
        rows: dict[str, list[dict[str, float]]] = {"svim": [], "baseline (all pairs, PSFO)": []}
        for r in range(args.repeats):
            rng = np.random.default_rng(1000 + r)
            sets = SetPopulation().sets(args.users, args.domain, rng)
            truth = _truth(sets, args.domain)
            rows["svim"].append(_score(_svim(sets, args.domain, eps, rng, 8), truth, sets.shape[0]))
            rows["baseline (all pairs, PSFO)"].append(
                _score(_baseline(sets, args.domain, eps, rng), truth, sets.shape[0])
            )
        for name, scores in rows.items():
            mean = {k: float(np.mean([s[k] for s in scores])) for k in scores[0]}
            print(
                f"| {eps:g} | {args.users:,} | {name} | {mean['precision']:.2f} | {mean['ncr']:.2f} |"
                f" {mean['rel_error']:.3f} |"
            )


def calibration(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(77)
    probe = SetPopulation().sets(200_000, args.domain, rng)
    truth = _truth(probe, args.domain)
    cands = tuple(sorted(truth, key=lambda x: -truth[x])[:TOP])
    eps = args.epsilon[0]
    cases = {
        "itemsets (10 fixed candidates, L'=10)": SVIMParams.from_epsilon(
            args.domain, eps, stage="itemsets", candidates=cands, max_items=TOP, stage_lo=0, size_share=100
        ),
    }
    print("| stage | inner | epsilon | n per repeat | repeats | MSE / variance | 95% coverage |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, params in cases.items():
        err, var, hit = [], [], []
        for _ in range(args.repeats):
            sets = SetPopulation().sets(args.users, args.domain, rng)
            t = element_matrix(params, sets).sum(axis=0)
            est = _estimate(params, sets, rng)
            for it, c in zip(est.items, t, strict=True):
                err.append((it.count - c) ** 2)
                var.append(it.std_error**2)
                hit.append(it.ci_low <= c <= it.ci_high)
        print(
            f"| {name} | {params.inner.name} | {eps:g} | {args.users:,} | {args.repeats} |"
            f" {np.mean(err) / np.mean(var):.3f} | {np.mean(hit):.3f} |"
        )
    # The items stage: L = the largest set, so no user exceeds it.
    sets = SetPopulation().sets(args.users, args.domain, rng)
    L = int((sets >= 0).sum(axis=1).max()) + 2
    params = SVIMParams.from_epsilon(args.domain, eps, max_items=L, stage_hi=SLOTS, size_share=100)
    err, var, hit = [], [], []
    for _ in range(args.repeats):
        sets = SetPopulation().sets(args.users, args.domain, rng)
        sets = sets[(sets >= 0).sum(axis=1) <= L]
        t = element_matrix(params, sets).sum(axis=0)
        est = _estimate(params, sets, rng)
        for it, c in zip(est.items, t, strict=True):
            err.append((it.count - c) ** 2)
            var.append(it.std_error**2)
            hit.append(it.ci_low <= c <= it.ci_high)
    print(
        f"| items (L={L}) | {params.inner.name} | {eps:g} | {args.users:,} | {args.repeats} |"
        f" {np.mean(err) / np.mean(var):.3f} | {np.mean(hit):.3f} |"
    )


def speed(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(5)
    eps = args.epsilon[0]
    sets = SetPopulation().sets(1_000_000, args.domain, rng)
    items = SVIMParams.from_epsilon(args.domain, eps, max_items=8)
    cands = tuple(itertools.combinations(range(8), 2))[:20]
    itemsets = SVIMParams.from_epsilon(args.domain, eps, stage="itemsets", candidates=cands, max_items=8)
    for name, params in (("items", items), ("itemsets (20 candidates)", itemsets)):
        t0 = time.perf_counter()
        encode_sets(params, sets, rng)
        dt = time.perf_counter() - t0
        print(f"encode {name}: 10^6 users in {dt:.2f} s ({1e6 / dt:,.0f} users/s), inner {params.inner.name}")
    n = 10_000_000
    for inner in ("grr", "olh"):
        params = SVIMParams.from_epsilon(args.domain, eps, max_items=8, inner=inner, stage_hi=SLOTS)
        part = encode_sets(params, sets, rng)
        cols = tuple(np.concatenate([c] * (n // 1_000_000)) for c in part)
        t0 = time.perf_counter()
        m, support = SPEC.layout_batch(params, cols)
        est = estimate_support(
            SPEC.support(params, SimpleNamespace(n=m, support=support)),
            mechanism="svim",
            epsilon=params.epsilon,
        )
        dt = time.perf_counter() - t0
        print(
            f"ingest + estimate, {inner} inner, m = {params.values} items: {n:,} reports in {dt:.2f} s"
            f" ({len(est.items)} items)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("compare", "calibration", "speed"))
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--epsilon", type=float, nargs="+", default=[2.0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--domain", type=int, default=64)
    args = parser.parse_args()
    {"compare": compare, "calibration": calibration, "speed": speed}[args.part](args)


if __name__ == "__main__":
    main()
