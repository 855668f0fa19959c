"""The Gaussian mechanism (issue 17): accuracy against laplace, piecewise and duchi, calibration, speed.

    .venv/bin/python bench/bench_gaussian.py compare [--repeats 300] [--users 10000]
    .venv/bin/python bench/bench_gaussian.py calibration [--repeats 2000] [--users 500]
    .venv/bin/python bench/bench_gaussian.py speed [--reports 20000] [--batch 1000000]
    .venv/bin/python bench/bench_gaussian.py vector [--repeats 100] [--users 10000]

* ``compare``: the MSE of the estimated mean of n users (values from Beta(2, 5) on [0, 1]) for each
  epsilon, for gaussian at delta 1e-6 and 1e-9 and for laplace, piecewise and duchi (pure epsilon), over
  seeded repeats with the batch encoders; printed as n * MSE (the per-user variance: data spread plus
  mechanism) and, beside it, the mechanism's own variance per user (n * MSE minus the data's variance).
* ``calibration``: gaussian's MSE / mean(SE^2) and the coverage of the 95% intervals of the mean over
  seeded repeats, per (epsilon, delta).
* ``speed``: per-report encode with the OS CSPRNG (``GaussianEncoder.encode`` in a Python loop; the exact
  CKS sampler), reports/s and microseconds per report, and the batch encoder (seeded numpy, simulation),
  reports/s, at epsilon 1, delta 1e-6 on [0, 1]; and the time of ``from_epsilon`` (calibration of sigma and
  the exact epsilon of the discrete Gaussian); the same for gaussian_vector at d = 10. Best of 3 runs.
* ``vector``: vectors of L2 norm <= 1 in d dimensions (each coordinate 0.5/sqrt(d) plus uniform noise of
  half-width 0.2/sqrt(d)): n * MSE per coordinate (averaged over coordinates) of gaussian_vector at
  delta 1e-6 against multidim (piecewise base, every coordinate declared in [-1, 1], its default k), at
  the same epsilon; and gaussian_vector's coverage of the 95% intervals over all coordinates and repeats.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.means import estimate_means
from ldp_client.mechanisms.numeric import numeric_encoder
from ldp_client.mechanisms.numeric.gaussian.mechanism import GaussianEncoder, GaussianParams
from ldp_client.params import make_params

EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
BETA_VAR = 2 * 5 / (49 * 8)  # Var of Beta(2, 5)


def _mechanisms(eps: float) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [
        (f"gaussian d={d:g}", GaussianParams.from_epsilon(0.0, 1.0, eps, delta=d)) for d in (1e-6, 1e-9)
    ]
    out += [
        (name, make_params(name, epsilon=eps, fields={"lo": 0, "hi": 1}))
        for name in ("laplace", "piecewise", "duchi")
    ]
    return out


def _run(params: Any, rng: np.random.Generator, users: int) -> Any:
    enc = numeric_encoder(params)
    acc = accumulator_for(params)
    add_columns(acc, params, enc.encode_batch(rng.beta(2, 5, users), rng))
    return estimate_means(params, acc).means[0]


def compare(args: argparse.Namespace) -> None:
    mu = 2 / 7
    print(
        f"n * MSE of the mean (n = {args.users:,}, {args.repeats} repeats, Beta(2,5) on [0,1], "
        f"Var x = {BETA_VAR:.4f})"
    )
    names = [n for n, _ in _mechanisms(1.0)]
    print(f"{'epsilon':>8} " + " ".join(f"{n:>17}" for n in names))
    for eps in EPSILONS:
        row = []
        for i, (_, params) in enumerate(_mechanisms(eps)):
            rng = np.random.default_rng(1000 + i)
            err = np.array([_run(params, rng, args.users).mean - mu for _ in range(args.repeats)])
            row.append(args.users * float(np.mean(err**2)))
        print(f"{eps:>8g} " + " ".join(f"{v:>17.4g}" for v in row))


def calibration(args: argparse.Namespace) -> None:
    mu = 2 / 7
    print(f"gaussian, {args.repeats} repeats x {args.users} users, Beta(2,5) on [0,1]")
    print(f"{'epsilon':>8} {'delta':>7} {'MSE/SE^2':>9} {'coverage':>9}")
    for eps, delta in ((0.25, 1e-6), (1.0, 1e-6), (1.0, 1e-9), (4.0, 1e-6), (8.0, 1e-9)):
        params = GaussianParams.from_epsilon(0.0, 1.0, eps, delta=delta)
        rng = np.random.default_rng(17)
        est = [_run(params, rng, args.users) for _ in range(args.repeats)]
        err = np.array([m.mean - mu for m in est])
        var = np.array([m.std_error**2 for m in est])
        cov = np.mean([m.ci_low <= mu <= m.ci_high for m in est])
        print(f"{eps:>8g} {delta:>7g} {float(np.mean(err**2) / np.mean(var)):>9.3f} {float(cov):>9.4f}")


def _best(fn: Any, runs: int) -> float:
    best = math.inf
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def speed(args: argparse.Namespace) -> None:
    t = time.perf_counter()
    params = GaussianParams.from_epsilon(0.0, 1.0, 1.0, delta=1e-6)
    print(
        f"from_epsilon(epsilon 1, delta 1e-6): {time.perf_counter() - t:.3f} s "
        f"(sigma {params.sigma:.1f} grid steps)"
    )
    enc = GaussianEncoder(params)
    xs = np.random.default_rng(1).random(args.reports).tolist()

    def single() -> None:
        for x in xs:
            enc.encode(x)

    s = _best(single, args.runs)
    print(
        f"per report (OS CSPRNG, exact sampler): {args.reports / s:,.0f} reports/s, "
        f"{1e6 * s / args.reports:.1f} us"
    )
    batch = np.random.default_rng(2).random(args.batch)
    rng = np.random.default_rng(3)
    b = _best(lambda: enc.encode_batch(batch, rng), args.runs)
    print(f"batch (seeded numpy, {args.batch:,}): {args.batch / b:,.0f} reports/s")
    from ldp_client.mechanisms.numeric.gaussian.vector import GaussianVectorEncoder, GaussianVectorParams

    vp = GaussianVectorParams.from_epsilon(10, 1.0, 1.0, delta=1e-6)
    venc = GaussianVectorEncoder(vp)
    vxs = (np.random.default_rng(4).random((args.reports // 10, 10)) * 0.3).tolist()

    def vsingle() -> None:
        for x in vxs:
            venc.encode(x)

    vs = _best(vsingle, args.runs)
    print(
        f"gaussian_vector d=10 per report (OS CSPRNG): {len(vxs) / vs:,.0f} reports/s, "
        f"{1e6 * vs / len(vxs):.1f} us"
    )
    vbatch = np.random.default_rng(5).random((args.batch // 10, 10)) * 0.3
    vb = _best(lambda: venc.encode_batch(vbatch, rng), args.runs)
    print(f"gaussian_vector d=10 batch ({args.batch // 10:,}): {args.batch // 10 / vb:,.0f} reports/s")


def vector(args: argparse.Namespace) -> None:
    from ldp_client.mechanisms.numeric.gaussian.vector import GaussianVectorEncoder, GaussianVectorParams

    print(f"n * MSE per coordinate (n = {args.users:,}, {args.repeats} repeats, vectors of norm <= 1)")
    print(f"{'d':>5} {'epsilon':>8} {'gaussian_vector':>16} {'multidim':>10} {'coverage':>9}")
    for d in (1, 10, 100):
        for eps in (1.0, 4.0):
            gv = GaussianVectorParams.from_epsilon(d, 1.0, eps, delta=1e-6)
            md = make_params(
                "multidim", epsilon=eps, domain=d, fields={"lo": -1, "hi": 1, "base": "piecewise"}
            )
            mu = np.full(d, 0.5 / math.sqrt(d))
            row, covered, total = [], 0, 0
            for i, params in enumerate((gv, md)):
                rng = np.random.default_rng(50 + i)
                enc = GaussianVectorEncoder(gv) if i == 0 else numeric_encoder(params)
                sq = 0.0
                for _ in range(args.repeats):
                    x = mu + rng.uniform(-0.2, 0.2, size=(args.users, d)) / math.sqrt(d)
                    acc = accumulator_for(params)
                    add_columns(acc, params, enc.encode_batch(x, rng))
                    means = estimate_means(params, acc).means
                    est = np.array([m.mean for m in means])
                    sq += float(np.mean((est - mu) ** 2))
                    if i == 0:
                        covered += sum(m.ci_low <= t <= m.ci_high for m, t in zip(means, mu, strict=True))
                        total += d
                row.append(args.users * sq / args.repeats)
            print(f"{d:>5} {eps:>8g} {row[0]:>16.4g} {row[1]:>10.4g} {covered / total:>9.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--repeats", type=int, default=300)
    c.add_argument("--users", type=int, default=10_000)
    k = sub.add_parser("calibration")
    k.add_argument("--repeats", type=int, default=2000)
    k.add_argument("--users", type=int, default=500)
    s = sub.add_parser("speed")
    s.add_argument("--reports", type=int, default=20_000)
    s.add_argument("--batch", type=int, default=1_000_000)
    s.add_argument("--runs", type=int, default=3)
    v = sub.add_parser("vector")
    v.add_argument("--repeats", type=int, default=100)
    v.add_argument("--users", type=int, default=10_000)
    args = parser.parse_args()
    {"compare": compare, "calibration": calibration, "speed": speed, "vector": vector}[args.what](args)


if __name__ == "__main__":
    main()
