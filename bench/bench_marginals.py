"""Marginals (issue 18): CALM (``calm``) against the independent-attributes baseline, calibration, speed.

Three parts, each on users drawn fresh per repeat from a seeded joint with dependent attributes (a latent
class model: a hidden class of 3, each attribute drawn from a Dirichlet(ALPHA) distribution given it):

* ``compare``: on the same users, n and epsilon, every 2-way marginal estimated by
  - ``calm``: the campaign's chosen marginals (``--marginals``: ``all-pairs``, or a covering of the pairs
    by 3-way sets), consistent (:mod:`ldp_aggregator.marginals`), the 2-way one projected from a chosen set;
  - ``independent, split users``: the naive baseline CALM §3 argues against: the users split into d groups,
    group j reports attribute j at the full epsilon (the better of GRR and OLH for its c_j values), and a
    2-way cell is n f_a(x) f_b(y), the product of the 1-way estimates;
  - ``independent, split budget``: every user reports all d attributes, each with GRR at epsilon/d
    (sequential composition), the same product.
  The table gives the RMSE of the 2-way cells on the frequency scale (RMSE of counts / n) for each, and
  the share of the baselines' squared error that is bias (the independence assumption's).
* ``calibration``: calm's MSE / mean reported variance and 95% coverage over seeded repeats (2-way and
  1-way marginals).
* ``speed``: batch encoding and ingest (the spec's ``layout_batch``: a bincount per GRR group, local
  hashing's vectorised support test per OLH group) of 10^7 reports, and the estimate of every 2-way
  marginal, wall-clock seconds.

Every report is encoded by the batch encoders (no exact sum sampler for local hashing).

Run: .venv/bin/python bench/bench_marginals.py {compare,calibration,speed} [--sizes 2,2,...] [--users N]
     [--epsilon E] [--repeats R] [--marginals all-pairs|triples]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from types import SimpleNamespace

import numpy as np

from ldp_aggregator.marginals import answer_marginal, fit_marginals
from ldp_client._oracle_math import oracle_variance
from ldp_client.mechanisms.calm import SPEC, CalmParams
from ldp_client.mechanisms.grr import GRREncoder, GRRParams
from ldp_client.mechanisms.olh import LocalHashEncoder, OLHParams, local_hash_support


def _joint(sizes: tuple[int, ...], alpha: float, seed: int, classes: int = 3) -> np.ndarray:
    """A latent-class joint: a hidden class z (weights Dirichlet(1)), then each attribute drawn from its own
    Dirichlet(alpha) distribution given z, independently; attributes depend on each other through z (small
    alpha: strongly). Seeded; the exact joint is returned (row-major)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, math.prod(sizes)]))
    weights = rng.dirichlet(np.ones(classes))
    joint = np.zeros(sizes)
    for z in range(classes):
        table = np.ones(())
        for c in sizes:
            table = np.multiply.outer(table, rng.dirichlet(np.full(c, alpha)))
        joint += weights[z] * table
    return joint.reshape(-1) / joint.sum()


def _covering(d: int, kind: str) -> tuple[tuple[int, ...], ...]:
    """The chosen marginals: every pair, or 3-way sets covering every pair (greedy)."""
    pairs = list(itertools.combinations(range(d), 2))
    if kind == "all-pairs" or d < 3:
        return tuple(pairs)
    left, chosen = set(pairs), []
    while left:
        best = max(
            itertools.combinations(range(d), 3), key=lambda t: len(set(itertools.combinations(t, 2)) & left)
        )
        chosen.append(best)
        left -= set(itertools.combinations(best, 2))
    return tuple(chosen)


def _params(sizes: tuple[int, ...], marginals: str, epsilon: float) -> CalmParams:
    attrs = tuple((f"x{j}", c) for j, c in enumerate(sizes))
    return CalmParams.from_epsilon(attrs, _covering(len(sizes), marginals), epsilon)


def _pair_truth(joint_counts: np.ndarray, sizes: tuple[int, ...], a: int, b: int) -> np.ndarray:
    other = tuple(k for k in range(len(sizes)) if k not in (a, b))
    return joint_counts.reshape(sizes).sum(axis=other).reshape(-1)


def _oracle(c: int, epsilon: float) -> GRRParams | OLHParams:
    """The better of GRR and OLH for c values at epsilon."""
    grr = GRRParams.from_epsilon(c, epsilon)
    olh = OLHParams.from_epsilon(c, epsilon)
    return grr if oracle_variance(grr.p, grr.q) <= oracle_variance(olh.p_star, olh.q_star) else olh


def _one_way(values: np.ndarray, c: int, lp: GRRParams | OLHParams, rng: np.random.Generator) -> np.ndarray:
    """Debiased shares of one attribute from the users ``values`` (indices in [0, c))."""
    if isinstance(lp, GRRParams):
        y = GRREncoder(lp).encode_batch(values, rng)
        counts = np.bincount(y, minlength=c).astype(np.float64)
        p, q = lp.p, lp.q
    else:
        a, b, y = LocalHashEncoder(lp).encode_batch(values, rng)
        counts = local_hash_support(a, b, y, lp).astype(np.float64)
        p, q = lp.p_star, lp.q_star
    return (counts / max(values.size, 1) - q) / (p - q)


def _independent(
    records: np.ndarray, sizes: tuple[int, ...], epsilon: float, rng: np.random.Generator, split: str
) -> list[np.ndarray]:
    """Per attribute, its 1-way share estimate (split users: a group each at epsilon; split budget:
    everyone, GRR at epsilon / d)."""
    d = len(sizes)
    n = records.shape[0]
    if split == "users":
        group = rng.integers(0, d, size=n)
        return [_one_way(records[group == j, j], c, _oracle(c, epsilon), rng) for j, c in enumerate(sizes)]
    return [
        _one_way(records[:, j], c, GRRParams.from_epsilon(c, epsilon / d), rng) for j, c in enumerate(sizes)
    ]


def _records(values: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    return np.stack(np.unravel_index(values, sizes), axis=1)


def compare(args: argparse.Namespace) -> None:
    sizes = tuple(int(s) for s in args.sizes.split(","))
    params = _params(sizes, args.marginals, args.epsilon)
    probs = _joint(sizes, args.alpha, args.seed)
    rng = np.random.default_rng(args.seed)
    pairs = list(itertools.combinations(range(len(sizes)), 2))
    err = {"calm": [], "users": [], "budget": []}
    bias_num = {"users": [], "budget": []}
    for _ in range(args.repeats):
        values = rng.choice(params.joint_size, size=args.users, p=probs)
        joint = np.bincount(values, minlength=params.joint_size)
        cols = SPEC.encode_batch(params, values, rng, campaign_id="b", labels=())
        m, support = SPEC.layout_batch(params, cols)
        fit = fit_marginals(SPEC.marginal_tables(params, SimpleNamespace(n=m, support=support)))
        recs = _records(values, sizes)
        ind = {s: _independent(recs, sizes, args.epsilon, rng, s) for s in ("users", "budget")}
        for a, b in pairs:
            truth = _pair_truth(joint, sizes, a, b)
            calm = np.array([c.count for c in answer_marginal(fit, (a, b)).cells])
            err["calm"].append(calm - truth)
            for s in ("users", "budget"):
                prod = args.users * np.outer(ind[s][a], ind[s][b]).reshape(-1)
                err[s].append(prod - truth)
                # The product's limit (exact 1-way shares): what independence alone gets wrong.
                exact = np.outer(
                    truth.reshape(sizes[a], sizes[b]).sum(1), truth.reshape(sizes[a], sizes[b]).sum(0)
                )
                bias_num[s].append(exact.reshape(-1) / args.users - truth)
    n = args.users
    print(
        f"sizes {sizes}, {len(params.marginals)} chosen marginals ({args.marginals}; "
        f"GRR for {sum(params.grr)}), "
        f"epsilon {params.epsilon:.4g}, n {n}, {args.repeats} repeats, every 2-way marginal "
        f"({len(pairs)} pairs, {sum(sizes[a] * sizes[b] for a, b in pairs)} cells)"
    )
    print(f"{'method':32s} {'RMSE (share)':>13s} {'vs calm':>8s} {'bias share of MSE':>18s}")
    base = math.sqrt(np.mean(np.concatenate(err["calm"]) ** 2)) / n
    print(f"{'calm (consistent)':32s} {base:13.5f} {1.0:8.2f} {'-':>18s}")
    for s, name in (("users", "independent, split users"), ("budget", "independent, split budget")):
        mse = np.mean(np.concatenate(err[s]) ** 2)
        bias = np.mean(np.concatenate(bias_num[s]) ** 2)
        print(f"{name:32s} {math.sqrt(mse) / n:13.5f} {math.sqrt(mse) / n / base:8.2f} {bias / mse:18.2f}")


def calibration(args: argparse.Namespace) -> None:
    sizes = tuple(int(s) for s in args.sizes.split(","))
    params = _params(sizes, args.marginals, args.epsilon)
    probs = _joint(sizes, args.alpha, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    queries = [*itertools.combinations(range(len(sizes)), 2), *((j,) for j in range(len(sizes)))]
    rows: dict[int, list[np.ndarray]] = {1: [], 2: []}
    for _ in range(args.repeats):
        values = rng.choice(params.joint_size, size=args.users, p=probs)
        joint = np.bincount(values, minlength=params.joint_size).reshape(sizes)
        cols = SPEC.encode_batch(params, values, rng, campaign_id="b", labels=())
        m, support = SPEC.layout_batch(params, cols)
        fit = fit_marginals(SPEC.marginal_tables(params, SimpleNamespace(n=m, support=support)))
        for q in queries:
            other = tuple(k for k in range(len(sizes)) if k not in q)
            truth = joint.sum(axis=other).reshape(-1)
            a = answer_marginal(fit, q)
            est = np.array([c.count for c in a.cells])
            se = np.array([c.std_error for c in a.cells])
            rows[len(q)].append(np.stack([est - truth, se], axis=1))
    print(
        f"calm calibration: sizes {sizes}, {args.marginals}, epsilon {params.epsilon:.4g}, n {args.users}, "
        f"{args.repeats} repeats"
    )
    for k, r in rows.items():
        x = np.concatenate(r)
        ratio = float(np.mean(x[:, 0] ** 2) / np.mean(x[:, 1] ** 2))
        coverage = float(np.mean(np.abs(x[:, 0]) <= 1.959964 * x[:, 1]))
        print(f"  {k}-way ({x.shape[0]} cell answers): MSE/variance {ratio:.3f}, coverage {coverage:.3f}")


def speed(args: argparse.Namespace) -> None:
    sizes = tuple(int(s) for s in args.sizes.split(","))
    params = _params(sizes, args.marginals, args.epsilon)
    rng = np.random.default_rng(args.seed)
    n = args.users
    values = rng.integers(0, params.joint_size, size=n)
    t0 = time.perf_counter()
    cols = SPEC.encode_batch(params, values, rng, campaign_id="b", labels=())
    t1 = time.perf_counter()
    m, support = SPEC.layout_batch(params, cols)
    t2 = time.perf_counter()
    fit = fit_marginals(SPEC.marginal_tables(params, SimpleNamespace(n=m, support=support)))
    for q in itertools.combinations(range(len(sizes)), 2):
        answer_marginal(fit, q)
    t3 = time.perf_counter()
    cells = sum(params.cells(i) for i in range(len(params.marginals)))
    print(
        f"calm speed: sizes {sizes}, {len(params.marginals)} marginals ({cells} cells, GRR for "
        f"{sum(params.grr)}), epsilon {params.epsilon:.4g}, {n:,} reports: batch encode {t1 - t0:.2f} s, "
        f"ingest (layout_batch) {t2 - t1:.2f} s, estimate of every 2-way marginal {t3 - t2:.2f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=("compare", "calibration", "speed"))
    ap.add_argument("--sizes", default="3,2,2,4,2,3")
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--marginals", choices=("all-pairs", "triples"), default="all-pairs")
    args = ap.parse_args()
    {"compare": compare, "calibration": calibration, "speed": speed}[args.part](args)


if __name__ == "__main__":
    main()
