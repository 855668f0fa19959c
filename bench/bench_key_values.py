"""Key-value data (issue 18): PCKV-GRR against split-budget baselines, calibration, speed.

Three parts, on users drawn fresh per repeat from the seeded key-value population of
:mod:`simulations.key_values` (1..K Zipf keys per user, Beta values with known means per key):

* ``compare``: on the same users, n and epsilon, the MSE of each key's frequency and mean (declared
  units) of
  - ``pckv``: PCKV-GRR at epsilon with the budget split of ``PCKVParams.from_epsilon`` (tight composition
    max(eps2, eps1 + ln 2b) = epsilon);
  - ``split-indep``: the naive baseline "key and value reported with split budgets": the same padding and
    sampling and stochastic rounding, the key by GRR over the d + l keys at epsilon/2 and the sampled
    value's sign by binary randomized response at epsilon/2, independently (sequential composition). A
    faked key then carries the sign of the user's real pair, so the per-key sign sums are debiased through
    the all-report sign sum: S_k = (l T_k / (2b - 1) - q S_all) / (a - q), S_all = l T_all / (2b - 1);
  - ``split-corr``: PCKV's correlated perturbation with eps1 = eps2 = epsilon/2 as sequential composition
    would allot them (its tight epsilon is then below epsilon: the gain of the tight bound alone).
  Frequencies are averaged over all keys; means over the keys held by at least 10% of the users (a ratio
  estimator of a rare key is dominated by its count's noise, for every mechanism alike; a key whose
  estimated count is not positive has no mean and is counted in the "no mean" column).
* ``calibration``: PCKV's MSE / mean reported variance and 95% coverage over seeded repeats, for the
  frequencies and the means, at two within-key value spreads (kappa 4 and 20: the mean's variance bound is
  conservative by the within-key spread, docs/key-values.md).
* ``speed``: the vectorised batch encoder (reports/s), and aggregation of 10^7 reports (ingest into the
  ``counts`` accumulator as the server's ``add_columns`` does, then the estimates), wall-clock seconds.

Run: .venv/bin/python bench/bench_key_values.py {compare,calibration,speed} [--keys D] [--padding L]
     [--users N] [--epsilon E ...] [--repeats R]
"""

from __future__ import annotations

import argparse
import math
import time
from types import SimpleNamespace

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.key_values import campaign_key_values
from ldp_client.mechanisms.pckv import PCKVEncoder, PCKVParams
from simulations.key_values import KeyValuePopulation, simulate_key_values


def _pckv_estimates(
    params: PCKVParams, keys: np.ndarray, values: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(frequency, mean) per key of PCKV reports of the users."""
    acc = accumulator_for(params)
    add_columns(acc, params, PCKVEncoder(params).encode_batch(keys, values, rng))
    est = campaign_key_values(params, acc)
    assert est is not None
    return np.array([k.frequency for k in est.items]), np.array([k.mean for k in est.items])


def _split_indep(
    d: int,
    pad: int,
    eps: float,
    lo: float,
    hi: float,
    keys: np.ndarray,
    values: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The split-budget baseline (module docstring): GRR key at eps/2, RR sign at eps/2, independently."""
    n = keys.shape[0]
    m = d + pad
    e = math.exp(eps / 2)
    a, b = e / (e + m - 1), e / (e + 1)
    q = (1 - a) / (m - 1)
    rows = np.arange(n)
    slot = rng.integers(0, pad, size=n)
    key = keys[rows, slot]
    v = np.where(key >= 0, (values[rows, slot] - lo) / (hi - lo) * 2 - 1, 0.0)
    key = np.where(key >= 0, key, d + slot)
    sign = np.where(rng.random(n) < (1 + v) / 2, 1, -1)
    sign = np.where(rng.random(n) < b, sign, -sign)
    other = rng.integers(0, m - 1, size=n)
    other += other >= key
    rep = np.where(rng.random(n) < a, key, other)
    c = np.bincount(rep, minlength=m)[:d].astype(np.float64)
    t = np.bincount(rep, weights=sign, minlength=m)[:d]
    freq_count = pad * (c - n * q) / (a - q)
    s_all = pad * sign.sum() / (2 * b - 1)
    s_k = (pad * t / (2 * b - 1) - q * s_all) / (a - q)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(freq_count > 0, s_k / freq_count, np.nan)
    return freq_count / n, lo + (mean + 1) * (hi - lo) / 2


def compare(args: argparse.Namespace) -> None:
    d, pad, n = args.keys, args.padding, args.users
    lo, hi = 1.0, 5.0
    pop = KeyValuePopulation(d=d, s=1.0, max_keys=min(pad, d), lo=lo, hi=hi)
    print(f"d = {d} keys, padding l = {pad}, n = {n:,}, {args.repeats} repeats, values in [{lo}, {hi}]")
    print(
        "| epsilon | mechanism | epsilon used | MSE frequency | MSE mean (keys >= 10%) | no mean "
        "| vs pckv (freq / mean) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for eps in args.epsilon:
        pckv = PCKVParams.from_epsilon(d, eps, padding=pad, lo=lo, hi=hi)
        corr = PCKVParams.from_epsilon(d, eps, padding=pad, lo=lo, hi=hi, value_epsilon=eps / 2)
        # eps1 = eps/2 exactly as sequential composition allots it (not eps - ln 2b).
        e1 = math.exp(eps / 2)
        a_half = round(e1 / (e1 + d + pad - 1) * 2**32) / 2**32
        corr = PCKVParams(domain=d, padding=pad, key_probability=a_half,
                          value_probability=corr.value_probability, lo=lo, hi=hi)  # fmt: skip
        err = {name: [[], [], []] for name in ("pckv", "split-indep", "split-corr")}
        for r in range(args.repeats):
            rng = np.random.default_rng([args.seed, r])
            keys, values = pop.sample(n, pad, rng)
            counts, sums = pop.truth(keys, values)
            f_true, m_true = counts / n, sums / np.maximum(counts, 1)
            big = f_true >= 0.10
            for name, (f, m) in (
                ("pckv", _pckv_estimates(pckv, keys, values, rng)),
                ("split-indep", _split_indep(d, pad, eps, lo, hi, keys, values, rng)),
                ("split-corr", _pckv_estimates(corr, keys, values, rng)),
            ):
                err[name][0].append(np.mean((f - f_true) ** 2))
                e2 = (m[big] - m_true[big]) ** 2
                err[name][1].extend(e2[np.isfinite(e2)].tolist())
                err[name][2].append(int(np.count_nonzero(~np.isfinite(e2))))
        base = (np.mean(err["pckv"][0]), np.mean(err["pckv"][1]))
        for name, used in (("pckv", pckv.epsilon), ("split-indep", eps), ("split-corr", corr.epsilon)):
            mf, mm, undefined = np.mean(err[name][0]), np.mean(err[name][1]), sum(err[name][2])
            ratio = f"{mf / base[0]:.2f} / {mm / base[1]:.2f}"
            print(f"| {eps:g} | {name} | {used:.3f} | {mf:.3e} | {mm:.3e} | {undefined} | {ratio} |")


def calibration(args: argparse.Namespace) -> None:
    d, pad, n = args.keys, args.padding, args.users
    print(
        f"d = {d} keys, padding l = {pad}, n = {n:,}, {args.repeats} repeats "
        f"(Zipf 0.5, <= {min(pad, d)} keys per user)"
    )
    print("| epsilon | kappa | freq MSE / variance | freq coverage | mean MSE / variance | mean coverage |")
    print("| --- | --- | --- | --- | --- | --- |")
    for eps in args.epsilon:
        params = PCKVParams.from_epsilon(d, eps, padding=pad, lo=1.0, hi=5.0)
        for kappa in (4.0, 20.0):
            pop = KeyValuePopulation(d=d, s=0.5, max_keys=min(pad, d), kappa=kappa, lo=1.0, hi=5.0)
            doc = simulate_key_values(
                params, pop, n_users=n, repeats=args.repeats, seed=args.seed, mode="sum"
            )
            f, m = doc["frequency_metrics"], doc["mean_metrics"]
            print(
                f"| {eps:g} | {kappa:g} | {f['mse_over_variance']:.3f} | {f['coverage']:.3f} "
                f"| {m['mse_over_variance']:.3f} | {m['coverage']:.3f} |"
            )


def speed(args: argparse.Namespace) -> None:
    d, pad, n = args.keys, args.padding, args.users
    params = PCKVParams.from_epsilon(d, args.epsilon[0], padding=pad)
    pop = KeyValuePopulation(d=d, s=1.0, max_keys=min(pad, d))
    rng = np.random.default_rng(args.seed)
    chunk = 1_000_000
    keys, values = pop.sample(chunk, pad, rng)
    enc = PCKVEncoder(params)
    acc = accumulator_for(params)
    t_enc = t_ing = 0.0
    for _ in range(n // chunk):
        t0 = time.perf_counter()
        cols = enc.encode_batch(keys, values, rng)
        t1 = time.perf_counter()
        add_columns(acc, params, cols)
        t_ing += time.perf_counter() - t1
        t_enc += t1 - t0
    t0 = time.perf_counter()
    est = campaign_key_values(params, SimpleNamespace(counts=acc.counts, n=acc.n))
    t_est = time.perf_counter() - t0
    assert est is not None and acc.n == n // chunk * chunk
    print(f"d = {d}, l = {pad}, epsilon = {params.epsilon:.3g}: {acc.n:,} reports")
    rate = acc.n / t_enc / 1e6
    print(
        f"batch encode {t_enc:.2f} s ({rate:.1f} M reports/s), ingest {t_ing:.2f} s, "
        f"estimate {t_est * 1e3:.1f} ms"
    )
    print(f"aggregation (ingest + estimate) of {acc.n:,} reports: {t_ing + t_est:.2f} s")
    m = 20_000
    dev = PCKVEncoder(params)
    mapping = {0: 0.5, 1: -0.25}
    t0 = time.perf_counter()
    for _ in range(m):
        dev.encode(mapping)
    print(
        f"device encoder (OS CSPRNG, pure Python): {(time.perf_counter() - t0) / m * 1e6:.1f} us per report"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("compare", "calibration", "speed"))
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--padding", type=int, default=3)
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2020)
    args = parser.parse_args()
    {"compare": compare, "calibration": calibration, "speed": speed}[args.part](args)


if __name__ == "__main__":
    main()
