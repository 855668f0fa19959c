"""Accuracy acceptance of the issue-6 frequency oracles: MSE against the theoretical variance, interval
coverage, and ``auto`` against the best mechanism.

Run: ``.venv/bin/python bench/accuracy_frequency_oracles.py`` (``--quick`` for a smoke run).

For every mechanism (oue, sue, olh, blh, ss, hr, set-valued, auto), d in {16, 128, 1024} and eps in
{0.5, 1, 2, 4}: a fixed population of N users (Zipf(1.1) over the d values; for set-valued every user
holds 2 distinct values and L = 4), R seeded repetitions of the real batch encoders -> ``add_columns`` ->
``estimate_frequencies`` (the aggregator's code). Per configuration:

* MSE / Var: mean over items and repetitions of (estimate - truth)^2, divided by the mean over items of
  the theoretical variance (n q*(1-q*) + c_v (p*-q*)(1-p*-q*))/(p*-q*)^2 at the true counts c_v
  (the item's own frequency term included). Acceptance: in [0.9, 1.1].
* coverage of the 95% intervals over items and repetitions. Acceptance: in [93%, 97%].
* auto: its n Var* at f -> 0 over the lowest n Var* among oue, sue, olh, blh, ss, hr and grr (the
  criterion it minimises), and its mean variance at this population over the lowest one among the
  mechanisms benchmarked here. Acceptance: within 5% (<= 1.05).

R = 400 (d = 16), 100 (d = 128), 50 (d = 1024): at least 50, and at least 6,400 (item, repetition)
samples per configuration, so the sampling error of the MSE ratio (about sqrt(2 / samples)) is <= 0.018.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.estimators import estimate_frequencies
from ldp_client.auto import AUTO_CANDIDATES, choose_mechanism
from ldp_client.errors import PrivacyQuantizationWarning
from ldp_client.mechanisms.sets import SetValuedEncoder, oracle_encoder
from ldp_client.params import GRRParams, SetValuedParams, make_params, oracle_rates

DOMAINS = (16, 128, 1024)
EPSILONS = (0.5, 1.0, 2.0, 4.0)
MECHANISMS = ("oue", "sue", "olh", "blh", "ss", "hr", "set-valued", "auto")
REPS = {16: 400, 128: 100, 1024: 50}
MAX_ITEMS = 4


def population(d: int, n: int) -> np.ndarray:
    w = 1.0 / np.arange(1, d + 1) ** 1.1
    c = np.floor(w / w.sum() * n).astype(np.int64)
    c[0] += n - c.sum()
    return np.repeat(np.arange(d), c)


def theoretical_variance(p_star: float, q_star: float, n: int, truth: np.ndarray) -> np.ndarray:
    delta = p_star - q_star
    return (n * q_star * (1 - q_star) + truth * delta * (1 - p_star - q_star)) / delta**2


def run_config(name: str, d: int, eps: float, n: int, reps: int, seed: int) -> dict[str, float | str]:
    values = population(d, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        if name == "set-valued":
            params = make_params(name, epsilon=eps, domain=d, fields={"max_items": MAX_ITEMS})
        else:
            params = make_params(name, epsilon=eps, domain=d)
    if isinstance(params, SetValuedParams):
        second = (values + 1 + (np.arange(n) % (d - 1))) % d  # a distinct second value per user
        sets = np.full((n, MAX_ITEMS), -1, dtype=np.int64)
        sets[:, 0], sets[:, 1] = values, second
        truth = np.bincount(values, minlength=d) + np.bincount(second, minlength=d)
        enc = SetValuedEncoder(params)
        batch = sets
    else:
        truth = np.bincount(values, minlength=d)
        enc = oracle_encoder(params)  # type: ignore[assignment, arg-type]
        batch = values
    rng = np.random.default_rng(seed)
    sq = np.zeros(d)
    covered = 0
    for _ in range(reps):
        acc = accumulator_for(params)
        add_columns(acc, params, enc.encode_batch(batch, rng))  # type: ignore[arg-type]
        est = estimate_frequencies(params, acc)
        count = np.array([it.count for it in est.items])
        lo = np.array([it.ci_low for it in est.items])
        hi = np.array([it.ci_high for it in est.items])
        sq += (count - truth) ** 2
        covered += int(((lo <= truth) & (truth <= hi)).sum())
    # auto may choose GRR (small d, large eps): its rates are p and (1-p)/(d-1).
    ps, qs = oracle_rates(params) if isinstance(params, GRRParams) else (params.p_star, params.q_star)  # type: ignore[union-attr]
    var = theoretical_variance(ps, qs, n, truth)
    return {
        "mechanism": params.name,
        "ratio": float(sq.mean() / reps / var.mean()),
        "coverage": covered / (reps * d),
        "mean_var": float(var.mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=20_000, help="users per repetition (N)")
    parser.add_argument("--quick", action="store_true", help="a few repetitions only (not the acceptance)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    failures: list[str] = []
    rows: list[str] = []
    seed = 20261121
    for d in DOMAINS:
        reps = 3 if args.quick else REPS[d]
        for eps in EPSILONS:
            results: dict[str, dict[str, float | str]] = {}
            for name in MECHANISMS:
                seed += 1
                results[name] = run_config(name, d, eps, args.users, reps, seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyQuantizationWarning)
                choice = choose_mechanism(d, eps)
                star = {}
                for m in AUTO_CANDIDATES:
                    ps, qs = oracle_rates(make_params(m, epsilon=eps, domain=d))  # type: ignore[arg-type]
                    star[m] = qs * (1 - qs) / (ps - qs) ** 2
            auto_star = choice.variance / min(star.values())
            single = [m for m in MECHANISMS if m not in ("auto", "set-valued")]
            auto_pop = float(results["auto"]["mean_var"]) / min(float(results[m]["mean_var"]) for m in single)
            for name, r in results.items():
                ratio, cov = float(r["ratio"]), float(r["coverage"])
                ok = 0.9 <= ratio <= 1.1 and 0.93 <= cov <= 0.97
                label = name if name != "auto" else f"auto={r['mechanism']}"
                verdict = "ok" if ok else "FAIL"
                rows.append(f"| {d} | {eps:g} | {label} | {reps} | {ratio:.3f} | {cov:.2%} | {verdict} |")
                if not ok:
                    failures.append(f"{name} d={d} eps={eps:g}: MSE/Var {ratio:.3f}, coverage {cov:.2%}")
            ok_auto = auto_star <= 1.05 and auto_pop <= 1.05
            rows.append(
                f"| {d} | {eps:g} | auto vs best | | Var* ratio {auto_star:.4f} | population-variance ratio "
                f"{auto_pop:.4f} | {'ok' if ok_auto else 'FAIL'} |"
            )
            if not ok_auto:
                failures.append(f"auto d={d} eps={eps:g}: {auto_star:.4f}, {auto_pop:.4f}")
            print(f"done d={d} eps={eps:g} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(
        f"\nN = {args.users:,} users per repetition; MSE/Var accepted in [0.9, 1.1], coverage in [93%, 97%]"
    )
    print("| d | eps | mechanism | reps | MSE / Var | 95% coverage | |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    print(f"\n{len(failures)} failures; elapsed {time.perf_counter() - t0:.0f} s")
    for f in failures:
        print("  FAIL:", f)


if __name__ == "__main__":
    main()
