"""Range queries (issue 18): hierarchical intervals (hio) and Haar wavelets (haar) against a flat oracle,
calibration, ingest speed.

Three parts, each on data drawn fresh per repeat from a seeded generator:

* ``compare``: on the same users (a discretised normal over D ordered values, or Zipf), the same n and
  epsilon, the range answers of ``hio`` (consistent hierarchy, :mod:`ldp_aggregator.ranges`) and of the
  naive baseline the papers compare with: OLH over the D values, each item estimated by the one
  estimator and summed over the range (variance: the items' variances summed). Ranges of lengths 1, D/64,
  D/16, D/4 and D/2, placed uniformly; the table gives the MSE of the counts per length (frequency scale,
  as RMSE / n) for both, and their ratio; then the same for ``haar`` (Haar coefficients with Hadamard
  randomized response, :mod:`ldp_aggregator.haar_ranges`) on the same users and ranges.
* ``calibration``: hio's (``--mechanism haar``: haar's) MSE / mean reported variance and 95% coverage over
  seeded repeats, per length.
* ``speed``: ingest of 10^7 hio reports (the spec's ``layout_batch``: one vectorised support test per level)
  and the range estimate itself, wall-clock seconds; then the same for haar (one bincount per level).

Every report is encoded by the batch encoders (no exact sum sampler for local hashing).

Run: .venv/bin/python bench/bench_ranges.py {compare,calibration,speed} [--domain D] [--users N]
     [--epsilon E] [--repeats R]
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np

from ldp_aggregator.estimators import pure_oracle_arrays
from ldp_aggregator.ranges import answer_ranges, campaign_ranges, fit_tree
from ldp_client.mechanisms.haar import SPEC as HAAR
from ldp_client.mechanisms.haar import HaarParams
from ldp_client.mechanisms.hio import SPEC as HIO
from ldp_client.mechanisms.hio import HIOParams
from ldp_client.mechanisms.olh import LocalHashEncoder, OLHParams, local_hash_support

LENGTH_DIVISORS = (0, 64, 16, 4, 2)  # 0: single values


def _population(d: int, kind: str) -> np.ndarray:
    if kind == "normal":
        x = np.arange(d)
        p = np.exp(-0.5 * ((x - 0.4 * d) / (0.15 * d)) ** 2)
    else:
        p = 1.0 / np.arange(1, d + 1) ** 1.1
    return p / p.sum()


def _ranges(d: int, rng: np.random.Generator, per_length: int) -> list[tuple[int, int]]:
    out = []
    for div in LENGTH_DIVISORS:
        length = 1 if div == 0 else max(1, d // div)
        for _ in range(per_length):
            lo = int(rng.integers(0, d - length + 1))
            out.append((lo, lo + length - 1))
    return out


def _hio_answers(
    params: HIOParams, values: np.ndarray, rng: np.random.Generator, ranges: list[tuple[int, int]]
) -> np.ndarray:
    labels = [str(i) for i in range(params.domain.size)]
    cols = HIO.encode_batch(params, values, rng, campaign_id="bench", labels=labels)
    n, support = HIO.layout_batch(params, cols)
    tree = fit_tree(HIO.range_levels(params, SimpleNamespace(n=n, support=support)))
    return np.array([[a.count, a.std_error] for a in answer_ranges(tree, ranges)])


def _haar_answers(
    params: HaarParams, values: np.ndarray, rng: np.random.Generator, ranges: list[tuple[int, int]]
) -> np.ndarray:
    cols = HAAR.encode_batch(params, values, rng, campaign_id="bench", labels=())
    n, support = HAAR.layout_batch(params, cols)
    answers, _ = campaign_ranges(params, SimpleNamespace(n=n, support=support), ranges)
    return np.array([[a.count, a.std_error] for a in answers])


def _flat_answers(
    params: OLHParams, values: np.ndarray, rng: np.random.Generator, ranges: list[tuple[int, int]]
) -> np.ndarray:
    a, b, y = LocalHashEncoder(params).encode_batch(values, rng)
    support = local_hash_support(a, b, y, params)
    res = pure_oracle_arrays(support, values.size, params.p_star, params.q_star)
    cum = np.concatenate([[0.0], np.cumsum(res.count)])
    cvar = np.concatenate([[0.0], np.cumsum(res.std_error**2)])
    return np.array([[cum[hi + 1] - cum[lo], np.sqrt(cvar[hi + 1] - cvar[lo])] for lo, hi in ranges])


def _truth(values: np.ndarray, d: int, ranges: list[tuple[int, int]]) -> np.ndarray:
    cum = np.concatenate([[0], np.cumsum(np.bincount(values, minlength=d))])
    return np.array([cum[hi + 1] - cum[lo] for lo, hi in ranges], dtype=np.float64)


def _lengths(d: int) -> list[int]:
    return [1 if div == 0 else max(1, d // div) for div in LENGTH_DIVISORS]


def compare(args: argparse.Namespace) -> None:
    d, n = args.domain, args.users
    rng = np.random.default_rng(args.seed)
    probs = _population(d, args.population)
    print(f"D={d} n={n} population={args.population} repeats={args.repeats} branching={args.branching}")
    print(
        f"{'eps':>4} {'length':>6} {'hio rmse/n':>11} {'haar rmse/n':>12} {'flat rmse/n':>12} "
        f"{'flat/hio MSE':>12} {'flat/haar MSE':>13}"
    )
    for eps in args.epsilon:
        hio = HIOParams.from_epsilon(d, eps, branching=args.branching)
        flat = OLHParams.from_epsilon(d, eps)
        haar = HaarParams.from_epsilon(d, eps)
        err_h, err_w, err_f = [], [], []
        for _ in range(args.repeats):
            values = rng.choice(d, size=n, p=probs)
            ranges = _ranges(d, rng, args.per_length)
            truth = _truth(values, d, ranges)
            err_h.append((_hio_answers(hio, values, rng, ranges)[:, 0] - truth) ** 2)
            err_w.append((_haar_answers(haar, values, rng, ranges)[:, 0] - truth) ** 2)
            err_f.append((_flat_answers(flat, values, rng, ranges)[:, 0] - truth) ** 2)
        shape = (args.repeats, len(LENGTH_DIVISORS), args.per_length)
        eh, ew, ef = (np.array(e).reshape(shape) for e in (err_h, err_w, err_f))
        for j, length in enumerate(_lengths(d)):
            mh, mw, mf = float(eh[:, j].mean()), float(ew[:, j].mean()), float(ef[:, j].mean())
            rh, rw, rf = (float(np.sqrt(m)) / n for m in (mh, mw, mf))
            print(f"{eps:4g} {length:6d} {rh:11.5f} {rw:12.5f} {rf:12.5f} {mf / mh:12.2f} {mf / mw:13.2f}")


def calibration(args: argparse.Namespace) -> None:
    d, n = args.domain, args.users
    rng = np.random.default_rng(args.seed)
    probs = _population(d, args.population)
    print(f"D={d} n={n} population={args.population} repeats={args.repeats} branching={args.branching}")
    print(f"mechanism={args.mechanism}")
    print(f"{'eps':>4} {'length':>6} {'MSE/var':>8} {'coverage':>9}")
    for eps in args.epsilon:
        hio = HIOParams.from_epsilon(d, eps, branching=args.branching)
        haar = HaarParams.from_epsilon(d, eps)
        err, var, hit = [], [], []
        for _ in range(args.repeats):
            values = rng.choice(d, size=n, p=probs)
            ranges = _ranges(d, rng, args.per_length)
            truth = _truth(values, d, ranges)
            if args.mechanism == "haar":
                ans = _haar_answers(haar, values, rng, ranges)
            else:
                ans = _hio_answers(hio, values, rng, ranges)
            err.append((ans[:, 0] - truth) ** 2)
            var.append(ans[:, 1] ** 2)
            hit.append(np.abs(ans[:, 0] - truth) <= 1.959964 * ans[:, 1])
        shape = (args.repeats, len(LENGTH_DIVISORS), args.per_length)
        e, v, h = (np.array(x).reshape(shape) for x in (err, var, hit))
        for j, length in enumerate(_lengths(d)):
            print(f"{eps:4g} {length:6d} {e[:, j].mean() / v[:, j].mean():8.3f} {h[:, j].mean():9.4f}")
        print(f"{eps:4g} {'all':>6} {e.mean() / v.mean():8.3f} {h.mean():9.4f}")


def speed(args: argparse.Namespace) -> None:
    d, n = args.domain, args.users
    rng = np.random.default_rng(args.seed)
    hio = HIOParams.from_epsilon(d, args.epsilon[0], branching=args.branching)
    values = rng.choice(d, size=n, p=_population(d, args.population))
    labels = [str(i) for i in range(d)]
    t0 = time.perf_counter()
    cols = HIO.encode_batch(hio, values, rng, campaign_id="bench", labels=labels)
    t1 = time.perf_counter()
    m, support = HIO.layout_batch(hio, cols)
    t2 = time.perf_counter()
    tree = fit_tree(HIO.range_levels(hio, SimpleNamespace(n=m, support=support)))
    answers = answer_ranges(tree, _ranges(d, rng, 20))
    t3 = time.perf_counter()
    print(
        f"hio D={d} B={args.branching} h={hio.levels} g={hio.g} n={n:,}: batch encode {t1 - t0:.2f} s, "
        f"ingest (support counts) {t2 - t1:.2f} s, fit + {len(answers)} ranges {t3 - t2:.3f} s"
    )
    haar = HaarParams.from_epsilon(d, args.epsilon[0])
    t0 = time.perf_counter()
    cols = HAAR.encode_batch(haar, values, rng, campaign_id="bench", labels=labels)
    t1 = time.perf_counter()
    m, support = HAAR.layout_batch(haar, cols)
    t2 = time.perf_counter()
    answers, _ = campaign_ranges(haar, SimpleNamespace(n=m, support=support), _ranges(d, rng, 20))
    t3 = time.perf_counter()
    print(
        f"haar D={d} h={haar.levels} n={n:,}: batch encode {t1 - t0:.2f} s, "
        f"ingest (row counts) {t2 - t1:.2f} s, fit + {len(answers)} ranges {t3 - t2:.3f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("compare", "calibration", "speed"))
    parser.add_argument("--domain", type=int, default=1024)
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--branching", type=int, default=4)
    parser.add_argument("--mechanism", choices=("hio", "haar"), default="hio")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--per-length", type=int, default=10)
    parser.add_argument("--population", choices=("normal", "zipf"), default="normal")
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    {"compare": compare, "calibration": calibration, "speed": speed}[args.part](args)


if __name__ == "__main__":
    main()
