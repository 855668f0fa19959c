"""RAPPOR decoding: accuracy in the style of Google's regression suite, and scale.

Run:
    .venv/bin/python bench/bench_rappor_decode.py accuracy [--ks 8,16,32,64,128] [--repeats 3]
        [--dists unif,exp,gauss,zipf1,zipf1.5] [--correction bonferroni|bh] [--json FILE]
    .venv/bin/python bench/bench_rappor_decode.py scale [--candidates 10000,100000]
    .venv/bin/python bench/bench_rappor_decode.py oracle          # the exp target case, support known
    .venv/bin/python bench/bench_rappor_decode.py bound           # Bayes-oracle bound on its TV
    .venv/bin/python bench/bench_rappor_decode.py accuracy --decoder reference   # the reference's algorithm
    .venv/bin/python bench/bench_rappor_decode.py compare OURS.json REFERENCE.json  # case by case

**Accuracy** (``ldp_aggregator.rappor_decode.decode_rappor_counts``, the decoder Analyst.DecodeRappor runs),
cases as in google/rappor ``tests/regtest_spec.py``: 100 true values v1..v100 with the distributions of
its ``gen_counts.R`` (unif; exp: weights exp(-5 i/100); gauss: N(0, (100/6)^2) on -49..50; zipf1: 1/i;
zipf1.5: 1/i^1.5), N = 10^6 reports, h = 2, m = 128 cohorts, k in 8..128, (p, q, f) = (0.39, 0.61, 0.45)
(eps_1 = 1) and (0.225, 0.775, 0) (eps_1 = 5), and four candidate lists:

* ``exact``: the 100 true values;
* ``extra20``: the reference's "typical": every 10th value missing (v9, v19, ... v99) plus 20 false;
* ``missing10``: every 10th value missing, no false candidates;
* ``extra10x``: the reference's "over_x10": every 10th value missing plus 1,000 false candidates.

Bit counts are drawn exactly in distribution (``simulations.sampling.sample_rappor_counts``: per-cohort
binomials given the users' Bloom bits), with a fresh campaign id (hence fresh hashing) per repeat.
Figures per case, averaged over repeats: total variation distance between the true distribution and the
detected strings' proportions (undetected and missing strings count as 0, as the reference's
``compare_dist.R`` computes it) and, for reference, with every estimate (``tv_all``); false positives
(detected strings nobody holds); false negatives (true values not detected, missing ones included);
allocated mass (sum of detected proportions); RMSE of the proportions over the dictionary; interval
coverage of the detected strings (the reference's ``num_95CI / num_rappor``, pooled over repeats, which
continue up to 20 until 200 detected intervals are pooled) and of every true value in the dictionary;
seconds per decode.

**Scale**: k = 128, h = 2, m = 64, N = 10^6 and 10^9 reports (10^9: hundreds of strings detectable, so a
large selected set) from 1,000 zipf(1.1) strings, dictionaries of 10,000 and 100,000 candidates (the 1,000
true ones first). Each size runs in a fresh process, which reports its
wall time of the decode (design hashing included) and its peak RSS.

**Bound** (``bound``): the Bayes risk of the exp / extra20 / eps1 case: the mean total variation of an
oracle that knows everything but which candidate holds which value, from the same bit counts (docstring of
:func:`bound`); no decoder does better in expectation.

**Reference** (``--decoder reference``): the reference decoder's algorithm re-implemented
(``reference_style.py``) on the same bit counts, for a like-for-like comparison.

**Oracle**: the exp / extra20 case decoded with the true support only (NNLS refit, report z > 2), a
reference for what the bit counts allow whatever the selection.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
from reference_style import decode_reference_style

from ldp_aggregator.rappor_decode import decode_rappor_counts
from ldp_aggregator.rappor_estimates import rappor_design
from ldp_client.params import RapporParams
from simulations.sampling import sample_rappor_counts

PRIVACY = {"eps1": (0.39, 0.61, 0.45), "eps5": (0.225, 0.775, 0.0)}
LABELS = tuple(f"v{i}" for i in range(1, 101))
MISSING = frozenset(f"v{i}" for i in range(9, 101, 10))
N = 10**6
_MAX_REPEATS = 20


def pdf(name: str) -> np.ndarray:
    i = np.arange(1, 101, dtype=float)
    if name == "unif":
        w = np.ones(100)
    elif name == "exp":
        w = np.exp(-5 * i / 100)
    elif name == "gauss":
        x = np.arange(-49, 51, dtype=float)
        w = np.exp(-0.5 * (x / (100 / 6)) ** 2)
    elif name == "zipf1":
        w = 1 / i
    elif name == "zipf1.5":
        w = 1 / i**1.5
    else:
        raise SystemExit(f"unknown distribution {name!r}")
    return np.asarray(w / w.sum(), dtype=float)


def candidates(kind: str) -> tuple[str, ...]:
    if kind == "exact":
        return LABELS
    base = tuple(v for v in LABELS if v not in MISSING)
    extra = {"extra20": 20, "missing10": 0, "extra10x": 1000}[kind]
    return base + tuple(f"false{i}" for i in range(extra))


def run_case(
    dist: str,
    k: int,
    privacy: str,
    kind: str,
    repeats: int,
    correction: str,
    min_intervals: int = 0,
    alpha: float = 0.05,
    selection_z: float | None = None,
    decoder: str = "ours",
) -> dict[str, float]:
    p, q, f = PRIVACY[privacy]
    params = RapporParams(k=k, h=2, m=128, f=f, p=p, q=q)
    cands = candidates(kind)
    cand_set = set(cands)
    rng = np.random.default_rng([k, repeats, zlib.crc32(f"{dist}/{kind}/{privacy}".encode())])
    rows: dict[str, list[float]] = {key: [] for key in ("tv", "tv_all", "fp", "fn", "alloc", "rmse", "sec")}
    cov_det = [0, 0]
    cov_true = [0, 0]
    r = 0
    cap_violations = 0
    # At least ``repeats`` repeats, more (up to 20) until min_intervals detected intervals are pooled, so
    # a case's coverage is measured to about +/- 3 percentage points whatever its number of detections.
    while r < repeats or (cov_det[1] < min_intervals and r < _MAX_REPEATS):
        cid = f"bench-{dist}-{k}-{privacy}-{kind}-{r}"
        counts = rng.multinomial(N, pdf(dist))
        ones, reports = sample_rappor_counts(
            params, campaign_id=cid, labels=LABELS, true_counts=counts, rng=rng
        )
        t0 = time.perf_counter()
        if decoder == "reference":
            ref = decode_reference_style(
                params,
                campaign_id=cid,
                candidates=cands,
                cohort_reports=reports,
                ones=ones,
                rng=np.random.default_rng([r, 5]),  # its own stream: the same bit counts as for ours
            )
            if ref is None:
                return {}
            cap_violations += ref.cap_violations
            prop_all, det, ci_low, ci_high = ref.proportion, ref.detected, ref.ci_low, ref.ci_high
            alloc = float(ref.proportion.sum())
        else:
            res = decode_rappor_counts(
                params,
                campaign_id=cid,
                candidates=cands,
                cohort_reports=reports,
                ones=ones,
                correction="bh" if correction == "bh" else "bonferroni",
                alpha=alpha,
                selection_z=selection_z,
            )
            prop_all, det, ci_low, ci_high = res.proportion, res.detected, res.ci_low, res.ci_high
            alloc = res.allocated_mass
        rows["sec"].append(time.perf_counter() - t0)
        truth_of = dict(zip(LABELS, counts.tolist(), strict=True))
        truth = np.array([truth_of.get(c, 0) for c in cands], dtype=float)
        missing_mass = sum(c for v, c in truth_of.items() if v not in cand_set) / N
        rows["tv"].append(0.5 * (np.abs(np.where(det, prop_all, 0.0) - truth / N).sum() + missing_mass))
        rows["tv_all"].append(0.5 * (np.abs(prop_all - truth / N).sum() + missing_mass))
        rows["fp"].append(float((det & (truth == 0)).sum()))
        held = sum(1 for v, c in truth_of.items() if c > 0)
        rows["fn"].append(float(held - (det & (truth > 0)).sum()))
        rows["alloc"].append(alloc)
        rows["rmse"].append(math.sqrt(float(np.mean((prop_all - truth / N) ** 2))))
        hit = (ci_low <= truth) & (truth <= ci_high)
        cov_det[0] += int(hit[det].sum())
        cov_det[1] += int(det.sum())
        cov_true[0] += int(hit[truth > 0].sum())
        cov_true[1] += int((truth > 0).sum())
        r += 1
    out = {key: float(np.mean(v)) for key, v in rows.items()}
    out["cov_det"] = cov_det[0] / cov_det[1] if cov_det[1] else float("nan")
    out["n_det"] = cov_det[1] / r
    out["repeats"] = r
    out["cov_true"] = cov_true[0] / cov_true[1] if cov_true[1] else float("nan")
    out["cap_violations"] = cap_violations
    return out


def accuracy(args: argparse.Namespace) -> None:
    ks = [int(x) for x in args.ks.split(",")]
    dists = args.dists.split(",")
    kinds = args.kinds.split(",")
    results = []
    header = (
        f"{'privacy':7s} {'dist':7s} {'k':>3s} {'candidates':10s} {'TV':>6s} {'TV_all':>6s} {'FP':>5s} "
        f"{'FN':>5s} {'alloc':>6s} {'RMSE':>7s} {'cov_det':>7s} {'n_det':>6s} {'cov_true':>8s} "
        f"{'s/dec':>6s} reps"
    )
    print(
        f"N={N:,}, h=2, m=128, at least {args.repeats} repeat(s) per case (up to {_MAX_REPEATS} until "
        f"{args.min_intervals} detected intervals), correction={args.correction}, alpha={args.alpha}, "
        f"decoder={args.decoder}"
    )
    print(header)
    t_all = time.perf_counter()
    privacies = args.privacies.split(",")
    if not set(privacies) <= set(PRIVACY):
        raise SystemExit(f"--privacies {args.privacies!r}: allowed {', '.join(PRIVACY)}")
    for privacy in privacies:
        for dist in dists:
            for k in ks:
                for kind in kinds:
                    m = run_case(
                        dist,
                        k,
                        privacy,
                        kind,
                        args.repeats,
                        args.correction,
                        args.min_intervals,
                        args.alpha,
                        args.selection_z,
                        args.decoder,
                    )
                    if not m:
                        print(f"{privacy:7s} {dist:7s} {k:>3d} {kind:10s} n/a (reference's LASSO branch)")
                        continue
                    results.append({"privacy": privacy, "dist": dist, "k": k, "candidates": kind, **m})
                    print(
                        f"{privacy:7s} {dist:7s} {k:>3d} {kind:10s} {m['tv']:6.3f} {m['tv_all']:6.3f} "
                        f"{m['fp']:5.1f} {m['fn']:5.1f} {m['alloc']:6.3f} {m['rmse']:7.4f} "
                        f"{m['cov_det']:7.3f} {m['n_det']:6.1f} {m['cov_true']:8.3f} {m['sec']:6.2f} "
                        f"{m['repeats']:4.0f}",
                        flush=True,
                    )
    print(f"total {time.perf_counter() - t_all:.0f} s")
    if args.decoder == "reference":
        print(f"fits violating the reference's per-bit caps: {sum(r['cap_violations'] for r in results)}")
    cov = [r["cov_det"] for r in results if not math.isnan(r["cov_det"])]
    print(f"coverage of detected strings: min {min(cov):.3f}, mean {np.mean(cov):.3f} over {len(cov)} cases")
    for r in results:
        if r["dist"] == "exp" and r["candidates"] == "extra20" and r["privacy"] == "eps1":
            print(
                f"target exp/extra20/eps1 k={r['k']}: TV {r['tv']:.3f} (<= 0.15?), FP {r['fp']:.1f} (<= 2?)"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


def compare(args: argparse.Namespace) -> None:
    """Case by case, this decoder's ``accuracy --json`` results against the reference algorithm's."""
    ours, ref = (
        {(r["privacy"], r["dist"], r["k"], r["candidates"]): r for r in json.loads(Path(f).read_text())}
        for f in (args.ours, args.reference)
    )
    cases = sorted(set(ours) & set(ref))
    print(f"{len(cases)} cases decoded by both ({len(ours)} by ours, {len(ref)} by the reference algorithm)")
    print(
        f"{'metric':34s} {'ours better':>11s} {'tie':>5s} {'ref better':>10s} "
        f"{'ours mean':>9s} {'ref mean':>9s}"
    )
    # (metric, lower is better, tie tolerance)
    for key, lower, tol in (
        ("tv", True, 0.0005),
        ("fp", True, 0.05),
        ("rmse", True, 1e-5),
        ("cov_det", False, 0.0),
    ):
        a = np.array([ours[c][key] for c in cases], dtype=float)
        b = np.array([ref[c][key] for c in cases], dtype=float)
        ok = ~(np.isnan(a) | np.isnan(b))
        diff = (b - a) if lower else (a - b)
        better, worse = int((diff[ok] > tol).sum()), int((diff[ok] < -tol).sum())
        name = {"tv": "total variation", "fp": "false positives per decode", "rmse": "RMSE of proportions",
                "cov_det": "coverage of reported intervals"}[key]  # fmt: skip
        print(
            f"{name:34s} {better:11d} {int(ok.sum()) - better - worse:5d} {worse:10d} "
            f"{np.nanmean(a):9.4f} {np.nanmean(b):9.4f}"
        )
    cov_a = np.array([ours[c]["cov_det"] for c in cases], dtype=float)
    cov_b = np.array([ref[c]["cov_det"] for c in cases], dtype=float)
    print(
        f"coverage >= 0.90: ours in {int(np.sum(cov_a >= 0.9))} of {np.sum(~np.isnan(cov_a))} cases "
        f"(min {np.nanmin(cov_a):.3f}), reference in {int(np.sum(cov_b >= 0.9))} of "
        f"{np.sum(~np.isnan(cov_b))} "
        f"(min {np.nanmin(cov_b):.3f})"
    )
    worse_tv = [c for c in cases if ours[c]["tv"] > ref[c]["tv"] + 0.0005]
    for c in worse_tv:
        print(
            f"  TV higher than the reference: {'/'.join(map(str, c))}: "
            f"{ours[c]['tv']:.3f} vs {ref[c]['tv']:.3f}"
        )


def scale_one(m_cands: int, n_reports: int) -> None:
    params = RapporParams(k=128, h=2, m=64)
    rng = np.random.default_rng(1)
    labels = tuple(f"s{i}" for i in range(1000))
    w = 1.0 / np.arange(1, 1001) ** 1.1
    counts = rng.multinomial(n_reports, w / w.sum())
    ones, reports = sample_rappor_counts(
        params, campaign_id="scale", labels=labels, true_counts=counts, rng=rng
    )
    cands = labels + tuple(f"x{i}" for i in range(m_cands - len(labels)))
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    res = decode_rappor_counts(
        params, campaign_id="scale", candidates=cands, cohort_reports=reports, ones=ones
    )
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fp = int(res.detected[1000:].sum())
    print(
        f"M={m_cands:>7,}: decode {dt:6.1f} s, peak RSS {peak / 1024:7.0f} MiB "
        f"(before decode {base_rss / 1024:.0f} MiB), detected {res.n_detected} ({fp} false), "
        f"selected {res.n_selected}",
        flush=True,
    )


def scale(args: argparse.Namespace) -> None:
    for n in (int(float(x)) for x in args.reports.split(",")):
        print(f"k=128, h=2, m=64, N={n:.0e} reports of 1,000 zipf(1.1) strings; one fresh process per size")
        for m in (int(x) for x in args.candidates.split(",")):
            subprocess.run([sys.executable, __file__, "scale-one", str(m), str(n)], check=True)


def oracle(_: argparse.Namespace) -> None:
    """The exp / extra20 / eps1 case with the true support known: what the bit counts allow."""
    for k in (8, 32, 128):
        tvs = []
        p, q, f = PRIVACY["eps1"]
        params = RapporParams(k=k, h=2, m=128, f=f, p=p, q=q)
        rng = np.random.default_rng(k)
        support = tuple(v for v in LABELS if v not in MISSING)
        for r in range(5):
            cid = f"oracle-{k}-{r}"
            counts = rng.multinomial(N, pdf("exp"))
            ones, reports = sample_rappor_counts(
                params, campaign_id=cid, labels=LABELS, true_counts=counts, rng=rng
            )
            res = decode_rappor_counts(
                params,
                campaign_id=cid,
                candidates=support,
                cohort_reports=reports,
                ones=ones,
                selection_z=1e-9,
            )
            truth = dict(zip(LABELS, counts.tolist(), strict=True))
            t = np.array([truth[v] for v in support]) / N
            rep = res.z > 2
            missing = sum(c for v, c in truth.items() if v in MISSING) / N
            tvs.append(0.5 * (np.abs(np.where(rep, res.proportion, 0) - t).sum() + missing))
        print(f"oracle (true support, NNLS, report z > 2) exp/extra20/eps1 k={k}: TV {np.mean(tvs):.3f}")


def _swap_posterior(
    A: np.ndarray, y: np.ndarray, values: np.ndarray, start: np.ndarray, sweeps: int, seed: int
) -> np.ndarray:
    """Posterior draws of the columns' values when the values are a known multiset in unknown order.

    Model: y ~ N(A theta, I) with theta a permutation of ``values``, every permutation a priori equally
    likely. Metropolis chain on permutations, proposing the swap of two random columns' values: with
    c = A'(y - A theta) and G = A'A, swapping theta_i and theta_j (d = theta_j - theta_i) changes the log
    likelihood by d (c_i - c_j) - d^2 (G_ii + G_jj - 2 G_ij) / 2. The first fifth of the sweeps is burn-in;
    every fifth sweep after it is kept. Returns (draws, columns).
    """
    rng = np.random.default_rng(seed)
    P = values.size
    G = A.T @ A
    diag = np.diag(G).copy()
    theta = start.copy()
    c = A.T @ y - G @ theta
    kept = []
    for sweep in range(sweeps):
        pairs = rng.integers(0, P, (4 * P, 2)).tolist()
        log_u = np.log(rng.random(4 * P)).tolist()
        for (i, j), lu in zip(pairs, log_u, strict=True):
            d = theta[j] - theta[i]
            if d == 0.0:
                continue
            if lu < d * (c[i] - c[j]) - 0.5 * d * d * (diag[i] + diag[j] - 2.0 * G[i, j]):
                theta[i], theta[j] = theta[j], theta[i]
                c -= d * (G[:, i] - G[:, j])
        if sweep >= sweeps // 5 and sweep % 5 == 0:
            kept.append(theta.copy())
    return np.array(kept)


def bound(args: argparse.Namespace) -> None:
    """Bayes risk of the exp / extra20 / eps1 case: a lower bound on any decoder's mean total variation.

    The oracle knows everything but which candidate holds which value: the multiset of the candidates'
    true proportions (the 90 present ones and the 20 zeros), the counts and Bloom bits of the true strings
    missing from the dictionary, and the true per-bit variances. In the decoder's Gaussian model (debiased
    counts y_ij with variance N_j r_ij (1 - r_ij) / (q* - p*)^2), hashing makes every assignment of the
    values to candidates a priori equally likely; :func:`_swap_posterior` draws from the posterior over
    assignments. Total variation is (1/2) sum |estimate - truth| (+ the missing mass), so the rule that
    minimises its expectation reports every candidate at its posterior median: its mean is the Bayes
    risk, below which no decoder (knowing less) goes, whatever it reports.

    With false positives limited (on average at most ``--max-fp``): reporting candidate i at its median
    lowers the expected TV by g_i = (E[theta_i] - E|med_i - theta_i|)/2 and costs P(theta_i = 0) expected
    false positives. For any lambda >= 0, the rule "report i iff g_i > lambda P(theta_i = 0)" minimises
    E[TV] + lambda E[FP], so any decoder with E[FP] <= max_fp has E[TV] >= E[TV_lambda + lambda FP_lambda] -
    lambda max_fp (weak duality); the bound printed is the best over a grid of lambda. Expectations are
    posterior ones (the data are drawn from the very prior the oracle uses), averaged over repeats. Two
    chains per repeat (from a random start and from the truth) agree when the chain has mixed.
    """
    p, q, f = PRIVACY["eps1"]
    cands = candidates("extra20")
    absent = [v for v in LABELS if v not in set(cands)]
    lambdas = np.linspace(0.0, 0.01, 401)
    for k in (int(x) for x in args.ks.split(",")):
        params = RapporParams(k=k, h=2, m=128, f=f, p=p, q=q)
        ps, qs = params.prob_one_if_clear, params.prob_one_if_set
        rng = np.random.default_rng([k, 78])
        t0 = time.perf_counter()
        risk: list[float] = []  # posterior expected TV of the median rule
        realised: list[list[float]] = [[], []]  # its realised TV, chains from a random start / the truth
        lagrangian: list[np.ndarray] = []  # per repeat, E[TV_lambda + lambda FP_lambda | data] per lambda
        ours: list[float] = []
        ours_fp: list[float] = []
        for r in range(args.repeats):
            cid = f"bound-{k}-{r}"
            counts = rng.multinomial(N, pdf("exp"))
            ones, reports = sample_rappor_counts(
                params, campaign_id=cid, labels=LABELS, true_counts=counts, rng=rng
            )
            truth_of = dict(zip(LABELS, counts.tolist(), strict=True))
            theta = np.array([truth_of.get(c, 0) for c in cands], dtype=float) / N
            missing = sum(truth_of[v] for v in absent) / N
            # Dense 0/1 designs (rows cohort-major) of the candidates and of the strings outside the list.
            X, X_out = (_dense_design(params, cid, names) for names in (cands, tuple(absent)))
            share_out = X_out @ (np.array([truth_of[v] for v in absent], dtype=float) / N)
            n_row = np.repeat(np.asarray(reports, dtype=float), k)
            rate = ps + (qs - ps) * (X @ theta + share_out)
            sd = np.sqrt(n_row * rate * (1 - rate)) / (qs - ps)
            y = ((np.asarray(ones, dtype=float).ravel() - ps * n_row) / (qs - ps) - n_row * share_out) / sd
            A = X * (n_row / sd)[:, None]
            start = theta[np.random.default_rng([k, r]).permutation(theta.size)]
            draws = _swap_posterior(A, y, theta, start, args.sweeps, seed=r)
            draws_t = _swap_posterior(A, y, theta, theta, args.sweeps, seed=r + 10_000)
            for i, d in enumerate((draws, draws_t)):
                realised[i].append(0.5 * (np.abs(np.median(d, axis=0) - theta).sum() + missing))
            med = np.median(draws, axis=0)
            mean_theta = draws.mean(axis=0)
            gain = 0.5 * (mean_theta - np.abs(draws - med).mean(axis=0))
            p_zero = (draws == 0).mean(axis=0)
            none_reported = 0.5 * (mean_theta.sum() + missing)
            risk.append(none_reported - float(np.maximum(gain, 0).sum()))
            report = gain[None, :] > lambdas[:, None] * p_zero[None, :]
            lagrangian.append(none_reported - (report * (gain - lambdas[:, None] * p_zero)).sum(axis=1))
            res = decode_rappor_counts(
                params, campaign_id=cid, candidates=cands, cohort_reports=reports, ones=ones, correction="bh"
            )
            ours.append(0.5 * (np.abs(np.where(res.detected, res.proportion, 0.0) - theta).sum() + missing))
            ours_fp.append(float((res.detected & (theta == 0)).sum()))
        n_rep = args.repeats
        per_rep = np.array(lagrangian)
        dual = per_rep.mean(axis=0) - lambdas * args.max_fp
        best = int(np.argmax(dual))
        dual_se = float(per_rep[:, best].std(ddof=1) / math.sqrt(n_rep))
        print(
            f"k={k:>3d}: Bayes risk {np.mean(risk):.4f} (realised TV of the posterior medians "
            f"{np.mean(realised[0]):.4f} +- {np.std(realised[0], ddof=1) / math.sqrt(n_rep):.4f}; chain from "
            f"the truth {np.mean(realised[1]):.4f}); with E[FP] <= {args.max_fp:g}: >= {dual[best]:.4f} "
            f"+- {dual_se:.4f} (lambda {lambdas[best]:.5f}); this decoder (BH 0.05) on the same counts "
            f"{np.mean(ours):.4f}, "
            f"FP {np.mean(ours_fp):.2f}; {n_rep} repeats, {time.perf_counter() - t0:.0f} s",
            flush=True,
        )


def _dense_design(params: RapporParams, campaign_id: str, names: tuple[str, ...]) -> np.ndarray:
    """X[(j, i), v] = 1 iff string v sets bit i in cohort j (the decoder's design, dense)."""
    pos = rappor_design(params, campaign_id, names)  # (M, m, h)
    X = np.zeros((params.m * params.k, len(names)))
    rows = np.arange(params.m)[None, :, None] * params.k + pos
    X[rows.reshape(len(names), -1), np.arange(len(names))[:, None]] = 1.0
    return X


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--ks", default="8,16,32,64,128")
    a.add_argument("--dists", default="unif,exp,gauss,zipf1,zipf1.5")
    a.add_argument("--kinds", default="exact,extra20,missing10,extra10x")
    a.add_argument("--privacies", default=",".join(PRIVACY), help="eps1 and/or eps5")
    a.add_argument("--repeats", type=int, default=3)
    a.add_argument("--correction", default="bonferroni", choices=("bonferroni", "bh"))
    a.add_argument(
        "--alpha", type=float, default=0.05, help="family-wise error (Bonferroni) or FDR (BH) level"
    )
    a.add_argument("--min-intervals", type=int, default=200)
    a.add_argument(
        "--decoder",
        default="ours",
        choices=("ours", "reference"),
        help="ours: decode_rappor_counts; reference: the reference's algorithm (reference_style.py)",
    )
    a.add_argument(
        "--selection-z", type=float, default=None, help="LASSO penalty in z units (default: decoder's)"
    )
    a.add_argument("--json", default=None)
    s = sub.add_parser("scale")
    s.add_argument("--candidates", default="10000,100000")
    s.add_argument("--reports", default="1e6,1e9")
    one = sub.add_parser("scale-one")
    one.add_argument("m", type=int)
    one.add_argument("n", type=int)
    cmp = sub.add_parser("compare")
    cmp.add_argument("ours", help="accuracy --json output of this decoder")
    cmp.add_argument("reference", help="accuracy --json output with --decoder reference")
    sub.add_parser("oracle")
    b = sub.add_parser("bound")
    b.add_argument("--ks", default="8,16,32,64,128")
    b.add_argument("--repeats", type=int, default=12)
    b.add_argument("--sweeps", type=int, default=3000)
    b.add_argument("--max-fp", type=float, default=2.0, help="mean false positives allowed")
    args = ap.parse_args()
    if args.cmd == "accuracy":
        accuracy(args)
    elif args.cmd == "scale":
        scale(args)
    elif args.cmd == "scale-one":
        scale_one(args.m, args.n)
    elif args.cmd == "bound":
        bound(args)
    elif args.cmd == "compare":
        compare(args)
    else:
        oracle(args)


if __name__ == "__main__":
    main()
