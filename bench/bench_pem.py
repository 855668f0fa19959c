"""Prefix extension (pem, issue 16) against pure-ldp's PEM: accuracy and time on the same populations.

Two populations of lowercase words (so that pure-ldp's character alphabet holds them), drawn once per seed
and given to both implementations: ``zipf`` (Zipf s = 1.1 over 10,000 random words of 3..6 letters) and
``heavy`` (20 heavy hitters holding 40% of the users over a flat tail of 50,000 random words). Both report
the top 32; scored with simulations.discovery.discovery_metrics (precision/recall/NCR of the top 16 and 32,
count MAE and RMSE of the discovered values users hold).

Ours runs in this project's .venv (seeded batch encoder + ldp_aggregator.discovery). pure-ldp runs in a
separate benchmark-only venv (``--pure-python /work/wt/pureldp-venv/bin/python``, with pure-ldp,
scikit-learn, statsmodels, ``xxhash<4``) as a subprocess given the same users' words: its PEMClient /
PEMServer over the alphabet a-z with its Count Mean Sketch oracle (k = 128, m = 1024, as its paper
experiments) -- its default local hashing loops over the whole domain per report and does not finish on
words. Timing of pure-ldp covers privatise + aggregate + find_heavy_hitters.

    .venv/bin/python bench/bench_pem.py --n 100000 --epsilon 2,4,8 \
        --pure-python /work/wt/pureldp-venv/bin/python
    .venv/bin/python bench/bench_pem.py --n 10000000 --epsilon 4 --populations zipf     # ours only, scale
    .venv/bin/python bench/bench_pem.py --encode-rate                                      # per-report CSPRNG
"""

from __future__ import annotations

import argparse
import json
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ldp_aggregator.discovery import DiscoveredItem, discover_columns  # noqa: E402
from ldp_client.mechanisms.pem import SPEC, PEMEncoder, PEMParams  # noqa: E402
from simulations.discovery import discovery_metrics  # noqa: E402

_PURE = r"""
import json, sys, time
from collections import Counter
from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
cfg = json.load(open(sys.argv[1]))
words = open(cfg["words"]).read().split("\n")
alphabet = list("abcdefghijklmnopqrstuvwxyz*")  # the padding too: short words can be found
ident = lambda x: x
start = time.perf_counter()
server_fo = CMSServer(epsilon=cfg["epsilon"], k=128, m=1024)
client_fo = CMSClient(epsilon=cfg["epsilon"], hash_funcs=server_fo.get_hash_funcs(), m=1024)
client = PEMClient(epsilon=cfg["epsilon"], start_length=cfg["start"], max_string_length=cfg["L"],
                   fragment_length=cfg["frag"], alphabet=alphabet, index_mapper=ident, fo_client=client_fo)
server = PEMServer(epsilon=cfg["epsilon"], start_length=cfg["start"], max_string_length=cfg["L"],
                   fragment_length=cfg["frag"], alphabet=alphabet, index_mapper=ident, fo_server=server_fo)
for w in words:
    server.aggregate(client.privatise(w))
hh, freqs = server.find_heavy_hitters(k=cfg["k"])
secs = time.perf_counter() - start
print(json.dumps({"items": [[h.split("*")[0], float(f)] for h, f in zip(hh, freqs)], "seconds": secs}))
"""


def _random_words(count: int, rng: np.random.Generator, lo: int = 3, hi: int = 6) -> list[str]:
    letters = np.array(list(string.ascii_lowercase))
    out: set[str] = set()
    while len(out) < count:
        length = int(rng.integers(lo, hi + 1))
        out.add("".join(rng.choice(letters, size=length)))
    return sorted(out)


def population(name: str, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    if name == "zipf":
        words = _random_words(10_000, rng)
        rng.shuffle(words)
        ranks = np.arange(1, len(words) + 1, dtype=np.float64)
        probs = ranks**-1.1
    elif name == "heavy":
        words = _random_words(50_020, rng)
        rng.shuffle(words)
        probs = np.concatenate([np.full(20, 0.4 / 20), np.full(50_000, 0.6 / 50_000)])
    else:
        raise SystemExit(f"unknown population {name!r}")
    return words, probs / probs.sum()


def run_ours(words: list[str], values: np.ndarray, epsilon: float, args: argparse.Namespace) -> dict:
    params = PEMParams.from_epsilon(
        epsilon, max_length=6, top_k=32, start_bits=args.start_bits, step_bits=args.step_bits
    )
    rng = np.random.default_rng(args.seed + 1)
    t0 = time.perf_counter()
    parts = [
        SPEC.encode_batch(params, values[i : i + 1_000_000], rng, campaign_id="bench", labels=words)
        for i in range(0, len(values), 1_000_000)
    ]
    columns = tuple(np.concatenate([p[i] for p in parts]) for i in range(4))
    t1 = time.perf_counter()
    res = discover_columns(params, columns, len(values))
    t2 = time.perf_counter()
    return {"items": list(res.items), "encode_s": t1 - t0, "server_s": t2 - t1, "levels": params.levels}


def run_pure(words: list[str], values: np.ndarray, epsilon: float, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wpath = Path(tmp) / "words.txt"
        wpath.write_text("\n".join(words[v] for v in values))
        cpath = Path(tmp) / "cfg.json"
        cpath.write_text(
            json.dumps(
                dict(words=str(wpath), epsilon=epsilon, start=args.pure_start, frag=args.pure_frag, L=6, k=32)
            )
        )
        spath = Path(tmp) / "run.py"
        spath.write_text(_PURE)
        out = subprocess.run(
            [args.pure_python, "-W", "ignore", str(spath), str(cpath)],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp,
        )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    n = len(values)
    # pure-ldp returns frequencies scaled by g over n (its estimate_all of one group times g): counts.
    # Its labels without padding; a word it lists twice (padded two ways) counts once, at its first place.
    best: dict[str, float] = {}
    for w, f in sorted(doc["items"], key=lambda x: -x[1]):
        best.setdefault(w, float(f))
    nan = float("nan")
    items = [
        DiscoveredItem(label=w, count=f, std_error=nan, ci_low=nan, ci_high=nan) for w, f in best.items()
    ]
    return {"items": items, "seconds": doc["seconds"], "n": n}


def encode_rate(seconds: float = 3.0) -> None:
    params = PEMParams.from_epsilon(4.0, max_length=16)
    words = ["hello", "example.com", "a", "zz-top-16-bytes!"]
    for group in (0, params.levels // 2, params.levels - 1):
        enc = PEMEncoder(params, group=group).encode
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for w in words * 250:
                enc(w)
            count += 1000
        rate = count / (time.perf_counter() - t0)
        print(f"per-report encode (OS CSPRNG), max_length 16, level {group}: {rate:,.0f} reports/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--epsilon", default="4")
    ap.add_argument("--populations", default="zipf,heavy")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--start-bits", type=int, default=10)
    ap.add_argument("--step-bits", type=int, default=10)
    ap.add_argument("--pure-python", default=None, help="python of the benchmark-only pure-ldp venv")
    ap.add_argument("--pure-start", type=int, default=2)
    ap.add_argument("--pure-frag", type=int, default=1)
    ap.add_argument("--encode-rate", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.encode_rate:
        encode_rate()
        return
    rows = []
    for pop in args.populations.split(","):
        rng = np.random.default_rng(args.seed)
        words, probs = population(pop, rng)
        values = rng.choice(len(words), size=args.n, p=probs)
        counts = np.bincount(values, minlength=len(words))
        truth = {words[i]: int(c) for i, c in enumerate(counts) if c}
        for eps in (float(e) for e in args.epsilon.split(",")):
            ours = run_ours(words, values, eps, args)
            m = discovery_metrics(ours["items"], truth)
            row = {"population": pop, "n": args.n, "epsilon": eps, "impl": "ldp-collect pem", **m}
            row.update(encode_s=ours["encode_s"], server_s=ours["server_s"], levels=ours["levels"])
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.pure_python:
                pure = run_pure(words, values, eps, args)
                m = discovery_metrics(pure["items"], truth)
                m.pop("rmse_over_se", None)
                m.pop("coverage", None)
                row = {"population": pop, "n": args.n, "epsilon": eps, "impl": "pure-ldp PEM (CMS)", **m}
                row.update(seconds=pure["seconds"])
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
