"""Accuracy acceptance of the numeric (mean) mechanisms: calibration of the estimator and its intervals.

    .venv/bin/python bench/accuracy_numeric.py [--reps 4000] [--users 1000] [--seed 2026]

For every mechanism (laplace, duchi, piecewise, hybrid, sr, and multidim over each of its bases), two data
sets in the declared range (uniform, and right-skewed Beta(2, 5) scaled to the range) and epsilon in
{0.5, 1, 2, 4} (multidim also at 8, where k = 3 attributes are reported), R seeded repetitions of n users
each go through the real path: ``encode_batch`` (seeded) -> ``add_columns`` into a ``MeanAccumulator`` ->
``estimate_means``. Users are drawn afresh in every repetition; the estimand is the population mean.

Columns:
    mse/theory  empirical MSE of the mean divided by the theoretical variance Var(z)/n, with
                Var(z) = (D/k)(E[Var(x_hat | x)] + E[x^2]) - mu^2 (D/k = 1 in one dimension), E[.] over
                the data distribution (exact moments; E[Var(x_hat | x)] by a 100,000-point quantile grid of
                the mechanism's exact per-value variance ``params.variance_s``). Acceptance: [0.9, 1.1].
    mse/se2     MSE divided by the mean of the estimator's own SE^2 (the reported standard error).
    cover       coverage of the reported 95% interval (SE = s_z / sqrt(n)) of the population mean.
                Acceptance: [93%, 97%].
    plug-in     coverage with the analytic alternative, the mechanism's Var(t) at the estimated mean
                (``plugin_std_error``): why it is not the one reported.
    finite      coverage of the mean of the n users actually drawn (a fixed finite population) by the
                reported interval: conservative, as documented.

With R = 4000 the MSE ratio has a sampling s.d. of about sqrt(2/R) = 0.022 and coverage of 0.34%, so the
acceptance bands are 4.5 and 5.9 standard deviations wide. Exit status 1 if any row fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.means import MeanAccumulator, estimate_means, plugin_std_error
from ldp_client.mechanisms.numeric import numeric_encoder
from ldp_client.numeric_params import MultidimParams
from ldp_client.params import make_params

EPSILONS = (0.5, 1.0, 2.0, 4.0)
ONE_DIM = ("laplace", "duchi", "piecewise", "hybrid", "sr")
BASES = ("piecewise", "hybrid", "duchi")
RANGE = (-2.0, 8.0)
MD_RANGES = ((0.0, 1.0), (-5.0, 5.0), (10.0, 20.0), (-1.0, 3.0))
GRID = 100_000


@dataclass(frozen=True)
class Data:
    """A distribution on [0, 1] (scaled to each range): name, sampler, quantile function, moments."""

    name: str
    a: float  # Beta(a, b); (1, 1) is uniform
    b: float

    def sample(self, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
        return rng.beta(self.a, self.b, size)

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    @property
    def var(self) -> float:
        a, b = self.a, self.b
        return a * b / ((a + b) ** 2 * (a + b + 1))

    def grid(self) -> np.ndarray:
        q = (np.arange(GRID) + 0.5) / GRID
        return np.asarray(stats.beta.ppf(q, self.a, self.b))


DATA = (Data("uniform", 1.0, 1.0), Data("skewed", 2.0, 5.0))


@dataclass
class Row:
    mechanism: str
    data: str
    eps: float
    eps_eff: float
    k: int
    mse_theory: float
    mse_se2: float
    cover: float
    plugin: float
    finite: float

    @property
    def ok(self) -> bool:
        return 0.9 <= self.mse_theory <= 1.1 and 0.93 <= self.cover <= 0.97


def _theory(params: object, data: Data, ranges: tuple[tuple[float, float], ...], n: int) -> np.ndarray:
    """Var(estimate) per attribute (module docstring)."""
    base = params.base if isinstance(params, MultidimParams) else params
    scale = params.d / params.k if isinstance(params, MultidimParams) else 1.0
    s = data.grid()
    mech_s = float(np.mean(base.variance_s(s)))  # type: ignore[attr-defined]
    out = []
    for lo, hi in ranges:
        span = hi - lo
        mu = lo + span * data.mean
        ex2 = span * span * data.var + mu * mu
        out.append((scale * (span * span * mech_s + ex2) - mu * mu) / n)
    return np.array(out)


def run(mechanism: str, base: str | None, data: Data, eps: float, reps: int, n: int, seed: int) -> Row:
    if base is None:
        params = make_params(mechanism, epsilon=eps, fields={"lo": RANGE[0], "hi": RANGE[1]})
        ranges: tuple[tuple[float, float], ...] = (RANGE,)
    else:
        spec = ",".join(f"{lo}:{hi}" for lo, hi in MD_RANGES)
        params = make_params("multidim", epsilon=eps, fields={"ranges": spec, "base": base})
        ranges = MD_RANGES
    d = len(ranges)
    lo = np.array([r[0] for r in ranges])
    span = np.array([r[1] - r[0] for r in ranges])
    truth = lo + span * data.mean
    theory = _theory(params, data, ranges, n)
    rng = np.random.default_rng([seed, int(eps * 100), ONE_DIM.index(mechanism) if base is None else 9, d])
    enc = numeric_encoder(params)  # type: ignore[arg-type]
    x = lo + span * data.sample(rng, (reps, n, d))
    flat = x.reshape(-1) if base is None else x.reshape(-1, d)
    cols = enc.encode_batch(flat, rng)  # type: ignore[arg-type]
    sq = np.zeros(d)
    se2 = np.zeros(d)
    cover = np.zeros(d)
    plug = np.zeros(d)
    finite = np.zeros(d)
    for r in range(reps):
        acc = accumulator_for(params)  # type: ignore[arg-type]
        sl = slice(r * n, (r + 1) * n)
        part = (cols[0][sl], cols[1][sl]) if isinstance(cols, tuple) else cols[sl]
        add_columns(acc, params, part)  # type: ignore[arg-type]
        assert isinstance(acc, MeanAccumulator)
        est = estimate_means(params, acc)  # type: ignore[arg-type]
        mean = np.array([m.mean for m in est.means])
        se = np.array([m.std_error for m in est.means])
        lo_ci = np.array([m.ci_low for m in est.means])
        hi_ci = np.array([m.ci_high for m in est.means])
        sq += (mean - truth) ** 2
        se2 += se**2
        cover += (lo_ci <= truth) & (truth <= hi_ci)
        p = np.array(plugin_std_error(params, est))  # type: ignore[arg-type]
        plug += np.abs(mean - truth) <= 1.959963984540054 * p
        sample = x[r].mean(axis=0)
        finite += (lo_ci <= sample) & (sample <= hi_ci)
    mse = sq / reps
    return Row(
        mechanism=mechanism if base is None else f"multidim/{base}",
        data=data.name,
        eps=eps,
        eps_eff=float(params.epsilon),
        k=params.k if isinstance(params, MultidimParams) else 1,
        # Pooled over attributes: mean of MSE_a / theory_a and of coverage_a.
        mse_theory=float(np.mean(mse / theory)),
        mse_se2=float(np.mean(mse / (se2 / reps))),
        cover=float(np.mean(cover / reps)),
        plugin=float(np.mean(plug / reps)),
        finite=float(np.mean(finite / reps)),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--only", default=None, help="run only this mechanism (e.g. piecewise, multidim)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    print(f"# numeric accuracy: R={args.reps} repetitions x n={args.users} users, seed {args.seed}")
    print(f"# one-dimensional range {RANGE}; multidim ranges {MD_RANGES}")
    head = (
        f"{'mechanism':<19} {'data':<8} {'eps':>4} {'eps_eff':>11} {'k':>2} {'mse/theory':>10} "
        f"{'mse/se2':>8} {'cover':>7} {'plug-in':>8} {'finite':>7}  ok"
    )
    print(head)
    rows: list[Row] = []
    jobs: list[tuple[str, str | None, float]] = [(m, None, e) for m in ONE_DIM for e in EPSILONS]
    jobs += [("multidim", b, e) for b in BASES for e in (*EPSILONS, 8.0)]
    for mech, base, eps in jobs:
        if args.only and args.only not in (mech, f"{mech}/{base}"):
            continue
        for data in DATA:
            row = run(mech, base, data, eps, args.reps, args.users, args.seed)
            rows.append(row)
            print(
                f"{row.mechanism:<19} {row.data:<8} {row.eps:>4g} {row.eps_eff:>11.9f} {row.k:>2} "
                f"{row.mse_theory:>10.4f} {row.mse_se2:>8.4f} {row.cover:>7.2%} {row.plugin:>8.2%} "
                f"{row.finite:>7.2%}  {'PASS' if row.ok else 'FAIL'}",
                flush=True,
            )
    fails = [r for r in rows if not r.ok]
    mt = [r.mse_theory for r in rows]
    cv = [r.cover for r in rows]
    print(
        f"# {len(rows)} rows, {len(fails)} failing; mse/theory in [{min(mt):.4f}, {max(mt):.4f}], "
        f"coverage in [{min(cv):.2%}, {max(cv):.2%}]; {time.perf_counter() - t0:.0f} s"
    )
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
