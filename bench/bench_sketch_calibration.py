"""Calibration of the sketches' estimates (cms, hcms): MSE / mean reported variance and 95% coverage.

The estimator's variance includes the hash-collision term, which is a variance over the campaign's hash
keys (``ldp_client/mechanisms/sketch/base.py``). So every repeat is a fresh campaign id (fresh keys), a
fresh Zipf(s) population of N users over D possible strings and fresh reports (the exact sum sampler, the
same law as encoding every report); the candidates are the H most frequent strings and T others drawn
uniformly from the rest of the domain, so most of the mass and most strings lie outside the list. For
each (mechanism, epsilon, width) point it prints, over all candidates and repeats, MSE / mean(SE^2) and
the share of 95% intervals holding the truth, and the same for the head (the H listed frequent strings,
where collisions with other frequent strings dominate the error) and the tail; with the binomial 99%
band of the coverage for that many intervals (an approximation: items of one repeat share the hashes).

Run: .venv/bin/python bench/bench_sketch_calibration.py [--repeats R] [--users N] [--domain D]
"""

from __future__ import annotations

import argparse
import math
import time
from statistics import NormalDist

import numpy as np

from ldp_aggregator.accumulators import accumulator_from_sums
from ldp_aggregator.estimators import estimate_frequencies
from ldp_client.registry import spec_named
from simulations.populations import parse_categorical_population

POINTS = (("cms", 4.0, 1024), ("cms", 2.0, 256), ("hcms", 4.0, 1024), ("hcms", 2.0, 256))
ROWS = 64


def _row(label: str, err: np.ndarray, var: np.ndarray, covered: np.ndarray) -> str:
    ratio = float(np.mean(err**2) / np.mean(var))
    cov = float(np.mean(covered))
    return f"{label:>5} {ratio:7.3f} {cov:7.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--domain", type=int, default=1_000_000, help="possible strings D")
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--head", type=int, default=200, help="candidates: the H most frequent strings")
    parser.add_argument("--tail", type=int, default=1800, help="candidates: T other strings, uniformly")
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()

    population = parse_categorical_population(f"zipf:{args.zipf}")
    labels = tuple(f"string-{i}" for i in range(args.domain))
    pick = np.random.default_rng(args.seed)
    chosen = np.concatenate(
        [np.arange(args.head), pick.choice(np.arange(args.head, args.domain), args.tail, replace=False)]
    )
    candidates = [labels[i] for i in chosen]
    z = NormalDist().inv_cdf(0.975)
    print(
        f"Zipf({args.zipf}) over D={args.domain:,} strings, N={args.users:,} users, k={ROWS} rows, "
        f"{len(candidates):,} candidates ({args.head} most frequent + {args.tail} others), "
        f"{args.repeats} repeats (a fresh campaign id each), z={z:.3f}"
    )
    n_int = args.repeats * len(candidates)
    half = 2.576 * math.sqrt(0.95 * 0.05 / n_int)
    print(f"coverage 99% band for {n_int:,} intervals: [{0.95 - half:.4f}, {0.95 + half:.4f}]")
    print(f"{'mechanism':>9} {'eps':>4} {'m':>5} {'items':>5} {'MSE/var':>7} {'cover':>7}   seconds")
    for mech, eps, width in POINTS:
        spec = spec_named(mech)
        params = spec.make(epsilon=eps, domain=None, fields={"k": ROWS, "m": width})
        sampler = spec.sum_sampler(params)
        assert sampler is not None
        errs, variances, covered = [], [], []
        t0 = time.perf_counter()
        for r in range(args.repeats):
            rng = np.random.default_rng([args.seed, r, width, int(eps * 10), len(mech)])
            counts = population.sample_counts(args.users, args.domain, rng)
            campaign = f"calibration-{mech}-{eps}-{width}-{r}"
            acc = accumulator_from_sums(params, sampler(counts, rng, campaign_id=campaign, labels=labels))
            est = estimate_frequencies(params, acc, candidates=candidates, campaign_id=campaign)
            truth = counts[chosen].astype(np.float64)
            count = np.array([it.count for it in est.items])
            se = np.array([it.std_error for it in est.items])
            lo = np.array([it.ci_low for it in est.items])
            hi = np.array([it.ci_high for it in est.items])
            errs.append(count - truth)
            variances.append(se**2)
            covered.append((lo <= truth) & (truth <= hi))
        err, var, cov = np.stack(errs), np.stack(variances), np.stack(covered)
        seconds = time.perf_counter() - t0
        parts = (("all", slice(None)), ("head", slice(0, args.head)), ("tail", slice(args.head, None)))
        for label, cols in parts:
            line = _row(label, err[:, cols], var[:, cols], cov[:, cols])
            print(f"{mech:>9} {eps:>4g} {width:>5} {line}   {seconds:.0f}")


if __name__ == "__main__":
    main()
