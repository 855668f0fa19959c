"""RAPPOR decoding: accuracy in the style of Google's regression suite, and scale.

Run:
    .venv/bin/python bench/bench_rappor_decode.py accuracy [--ks 8,16,32,64,128] [--repeats 3]
        [--dists unif,exp,gauss,zipf1,zipf1.5] [--correction bonferroni|bh] [--json FILE]
    .venv/bin/python bench/bench_rappor_decode.py scale [--candidates 10000,100000]
    .venv/bin/python bench/bench_rappor_decode.py oracle          # the exp target case, support known
    .venv/bin/python bench/bench_rappor_decode.py bound           # Bayes-oracle bound on its TV
    .venv/bin/python bench/bench_rappor_decode.py accuracy --decoder reference   # the reference's algorithm

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

**Bound** (``bound``): the total variation a Bayes oracle reaches on the exp / extra20 / eps1 case from
estimates with this decoder's standard errors (docstring of :func:`bound`): no exchangeable estimator
does better in expectation.

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
    return w / w.sum()


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
                correction=correction,
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
    for privacy in PRIVACY:
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


def bound(_: argparse.Namespace) -> None:
    """A lower bound on the total variation of the exp / extra20 / eps1 case for any per-candidate rule.

    Each candidate's estimate is modelled as its true proportion plus independent N(0, s^2) noise, with s
    the standard error this decoder reports for the 20 largest true values at that k (measured on 5
    decodes). The Bayes rule for the L1 loss given the *true* multiset of proportions as prior (the 90
    present values and 20 zeros, i.e. an oracle that knows everything but which candidate holds which
    value) is the posterior median; its expected total variation (missing strings counted) bounds what any
    estimator that treats the candidates exchangeably can reach from estimates of that precision.
    """
    from scipy import stats

    p, q, f = PRIVACY["eps1"]
    cands = candidates("extra20")
    truth_all = pdf("exp")
    present = np.array([truth_all[LABELS.index(c)] if c in LABELS else 0.0 for c in cands])
    missing = float(sum(truth_all[LABELS.index(v)] for v in MISSING))
    order = np.argsort(present)
    for k in (8, 16, 32, 64, 128):
        params = RapporParams(k=k, h=2, m=128, f=f, p=p, q=q)
        rng = np.random.default_rng([k, 77])
        ses = []
        for r in range(5):
            cid = f"bound-{k}-{r}"
            counts = rng.multinomial(N, truth_all)
            ones, reports = sample_rappor_counts(
                params, campaign_id=cid, labels=LABELS, true_counts=counts, rng=rng
            )
            res = decode_rappor_counts(
                params, campaign_id=cid, candidates=cands, cohort_reports=reports, ones=ones
            )
            top = np.argsort(-present)[:20]
            ses.append(float(np.median(res.std_error[top])) / N)
        s = float(np.mean(ses))
        tvs = []
        for _ in range(400):
            x = present + s * rng.standard_normal(present.size)
            like = stats.norm.pdf((x[:, None] - present[None, order]) / s)
            cdf = np.cumsum(like / like.sum(axis=1, keepdims=True), axis=1)
            med = present[order][np.argmax(cdf >= 0.5, axis=1)]
            tvs.append(0.5 * (np.abs(med - present).sum() + missing))
        print(f"k={k:>3d}: standard error of the largest values {s:.4f}; Bayes-oracle TV {np.mean(tvs):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--ks", default="8,16,32,64,128")
    a.add_argument("--dists", default="unif,exp,gauss,zipf1,zipf1.5")
    a.add_argument("--kinds", default="exact,extra20,missing10,extra10x")
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
    sub.add_parser("oracle")
    sub.add_parser("bound")
    args = ap.parse_args()
    if args.cmd == "accuracy":
        accuracy(args)
    elif args.cmd == "scale":
        scale(args)
    elif args.cmd == "scale-one":
        scale_one(args.m, args.n)
    elif args.cmd == "bound":
        bound(args)
    else:
        oracle(args)


if __name__ == "__main__":
    main()
