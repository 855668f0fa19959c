"""Discovery (issue 16): ldp-collect's pem and treehist against pure-ldp's PEM, TreeHist and SFP, on the same
users, plus treehist's encode rate, its server time at scale and the calibration of its estimates.

Populations (simulations.string_populations, labels from a fixed seed; the users drawn with ``--seed``):
``zipf`` = zipf-words:1.1,10000 (Zipf 1.1 over 10,000 random words of 3..6 letters), ``hosts`` =
url-hosts:100000 (hostnames of at most 16 bytes with a Zipf-Mandelbrot tail), ``heavy`` =
heavy-flat:20,0.4,50020 (20 words holding 40% over 50,000 words sharing 60%). Every implementation keeps
the top 32; scored by simulations.discovery.discovery_metrics (precision/recall of the top 16 and 32,
NCR, count MAE/RMSE of the discovered values users hold).

Ours run in this project's .venv: seeded batch encoding + ldp_aggregator.discovery (pem: from_epsilon's
defaults, start 8 bits, step 6; treehist: from_epsilon's defaults, step 8 bits, 20-bit digests, t from
epsilon). pure-ldp runs in its benchmark-only venv (``--pure-python``) as a subprocess given the same
users' strings, each algorithm with its Count Mean Sketch oracle (k = 128, m = 1024; its default local
hashing loops over the whole domain per report) over the population's alphabet plus a padding character
that short strings are padded with before they are given to it (so that they can be found at all):
PEM start_length 2, fragment_length 1 (words) or 2 (hosts); TreeHist and SFP fragment_length 2 (hosts,
words padded to 6). pure-ldp's TreeHist and SFP split epsilon in halves between the whole value and the
fragment, as their papers do. Time of pure-ldp: privatise + aggregate + find_heavy_hitters.

    .venv/bin/python bench/bench_discovery_compare.py --n 100000 --epsilon 2,4,8 \\
        --pure-python /work/wt/pureldp-venv/bin/python --json out.json
    .venv/bin/python bench/bench_discovery_compare.py --n 10000000 --epsilon 4 --impls treehist
    .venv/bin/python bench/bench_discovery_compare.py --encode-rate
    .venv/bin/python bench/bench_discovery_compare.py --calibration 200
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ldp_aggregator.discovery import DiscoveredItem, discover_columns  # noqa: E402
from ldp_client import registry  # noqa: E402
from ldp_client.mechanisms.pem import PEMEncoder, PEMParams  # noqa: E402
from ldp_client.mechanisms.treehist import TreeHistEncoder, TreeHistParams  # noqa: E402
from simulations.discovery import discovery_metrics  # noqa: E402
from simulations.populations import parse_categorical_population  # noqa: E402

POPULATIONS = {
    "zipf": "zipf-words:1.1,10000",
    "hosts": "url-hosts:100000",
    "heavy": "heavy-flat:20,0.4,50020",
}

_PURE = r"""
import json, sys, time
from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
from pure_ldp.heavy_hitters.treehistogram import TreeHistClient, TreeHistServer
from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer
cfg = json.load(open(sys.argv[1]))
words = open(cfg["words"]).read().split("\n")
eps, L, frag, algo = cfg["epsilon"], cfg["L"], cfg["frag"], cfg["algo"]
ident = lambda x: x
start, cpu = time.perf_counter(), time.process_time()
server_fo = CMSServer(epsilon=eps, k=128, m=1024)
client_fo = CMSClient(epsilon=eps, hash_funcs=server_fo.get_hash_funcs(), m=1024)
alphabet = list(cfg["alphabet"])
if algo == "pem":  # the padding is a letter of its alphabet (its own padding is never used: words are padded)
    a = alphabet + ["*"]
    client = PEMClient(epsilon=eps, start_length=cfg["start"], max_string_length=L, fragment_length=frag,
                       alphabet=a, index_mapper=ident, fo_client=client_fo, padding_char="#")
    server = PEMServer(epsilon=eps, start_length=cfg["start"], max_string_length=L, fragment_length=frag,
                       alphabet=a, index_mapper=ident, fo_server=server_fo, padding_char="#")
elif algo == "treehist":
    a = alphabet + ["*"]
    client = TreeHistClient(epsilon=eps, fragment_length=frag, max_string_length=L, alphabet=a,
                            index_mapper=ident, fo_client=client_fo, padding_char="#")
    server = TreeHistServer(epsilon=eps, fragment_length=frag, max_string_length=L, alphabet=a,
                            index_mapper=ident, fo_server=server_fo, padding_char="#")
else:
    client = SFPClient(epsilon=eps, fragment_length=frag, max_string_length=L, alphabet=set(alphabet),
                       index_mapper=ident, fo_client=client_fo, padding_char="*")
    server = SFPServer(epsilon=eps, fragment_length=frag, max_string_length=L, alphabet=set(alphabet),
                       index_mapper=ident, fo_server=server_fo, padding_char="*")
for w in words:
    server.aggregate(client.privatise(w + "*" * (L - len(w))))
hh, freqs = server.find_heavy_hitters(k=cfg["k"])
secs, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"items": [[h.split("*")[0].split("#")[0], float(f)] for h, f in zip(hh, freqs)],
                  "seconds": secs, "cpu_s": cpu}))
"""


def _params(impl: str, epsilon: float, words: tuple[str, ...], top_k: int = 32, verify: float = 0.0) -> Any:
    """``pem`` over bytes, ``pem-alphabet`` over the characters the population's words use (a declared
    alphabet: fewer bits per character, fewer levels), both with ``verify`` of the users verifying;
    ``treehist``."""
    if impl == "pem":
        length = max(len(w.encode()) for w in words)
        return PEMParams.from_epsilon(epsilon, max_length=length, top_k=top_k, verification_share=verify)
    if impl == "pem-alphabet":
        alphabet = "".join(sorted({c for w in words for c in w}))
        return PEMParams.from_epsilon(
            epsilon,
            max_length=max(len(w) for w in words),
            top_k=top_k,
            verification_share=verify,
            alphabet=alphabet,
        )
    if impl != "treehist":
        raise SystemExit(f"--impls: pem, pem-alphabet or treehist, not {impl!r}")
    return TreeHistParams.from_epsilon(epsilon, max_length=max(len(w.encode()) for w in words), top_k=top_k)


def run_ours(
    impl: str, words: tuple[str, ...], values: np.ndarray, epsilon: float, seed: int, verify: float = 0.0
) -> dict[str, Any]:
    params = _params(impl, epsilon, words, verify=verify)
    spec = registry.spec_for(params)
    rng = np.random.default_rng(seed)
    c0, t0 = time.process_time(), time.perf_counter()
    parts = [
        spec.encode_batch(params, values[i : i + 1_000_000], rng, campaign_id="bench", labels=words)
        for i in range(0, len(values), 1_000_000)
    ]
    columns = tuple(np.concatenate([p[i] for p in parts]) for i in range(len(parts[0])))
    c1, t1 = time.process_time(), time.perf_counter()
    res = discover_columns(params, columns, len(values))
    c2, t2 = time.process_time(), time.perf_counter()
    groups = spec.discovery_levels(params)
    # CPU seconds beside wall seconds: the machine is shared, and numpy runs these on one thread.
    return {
        "items": list(res.items),
        "encode_s": t1 - t0,
        "server_s": t2 - t1,
        "encode_cpu_s": c1 - c0,
        "server_cpu_s": c2 - c1,
        "groups": groups,
    }


def run_pure(
    algo: str, words: tuple[str, ...], values: np.ndarray, epsilon: float, args: argparse.Namespace
) -> dict[str, Any]:
    length = max(len(w) for w in words)
    alphabet = sorted({c for w in words for c in w})
    frag = 2 if algo != "pem" or length > 8 else 1
    width = -(-length // frag) * frag  # TreeHist and SFP need a multiple of the fragment length
    cfg = dict(epsilon=epsilon, L=width, frag=frag, start=2, k=32, algo=algo, alphabet="".join(alphabet))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "words.txt").write_text("\n".join(words[v] for v in values))
        (Path(tmp) / "cfg.json").write_text(json.dumps({**cfg, "words": str(Path(tmp) / "words.txt")}))
        (Path(tmp) / "run.py").write_text(_PURE)
        try:
            out = subprocess.run(
                [args.pure_python, "-W", "ignore", "run.py", "cfg.json"],
                capture_output=True,
                text=True,
                check=True,
                cwd=tmp,
                timeout=args.pure_timeout,
            )
        except subprocess.TimeoutExpired:
            return {"items": None, "seconds": float(args.pure_timeout)}
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    # pure-ldp returns counts (its estimates scaled to the population); a string listed twice (padded two
    # ways) counts once, at its best place.
    best: dict[str, float] = {}
    for w, f in sorted(doc["items"], key=lambda x: -x[1]):
        best.setdefault(w, float(f))
    nan = math.nan
    items = [
        DiscoveredItem(label=w, count=f, std_error=nan, ci_low=nan, ci_high=nan) for w, f in best.items()
    ]
    return {"items": items, "seconds": doc["seconds"], "cpu_s": doc["cpu_s"]}


def encode_rate(seconds: float = 2.0, rounds: int = 3) -> None:
    """Per-report encoding on the device (OS CSPRNG), max_length 16, at epsilon 4 (t = 6) and 8 (t = 8),
    alternated with pem's encoder on the same values (the machine is shared: the ratio is the steadier
    figure); then pem over bytes and over a declared a-z alphabet on lowercase words."""
    hosts = ["www.example.com", "a", "zz-top-16-bytes!", "news.site.co.uk"] * 250

    def rate(enc: Any, values: list[str] = hosts) -> float:
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for w in values:
                enc(w)
            count += len(values)
        return count / (time.perf_counter() - t0)

    for eps in (4.0, 8.0):
        params = TreeHistParams.from_epsilon(eps, max_length=16)
        pem = PEMParams.from_epsilon(eps, max_length=16)
        for _ in range(rounds):
            ours = [
                rate(TreeHistEncoder(params, group=g).encode) for g in (0, params.levels // 2, params.levels)
            ]
            base = rate(PEMEncoder(pem, group=pem.levels // 2).encode)
            print(
                f"eps {eps}, t={params.hadamard_bits}: treehist groups 0/mid/verify "
                + " / ".join(f"{r:,.0f}" for r in ours)
                + f" reports/s; pem {base:,.0f} reports/s; ratio {np.mean(ours) / base:.2f}"
            )
        # pem over a declared alphabet (lowercase words), alternated with pem over bytes on the same words.
        words = ["apple", "banana", "cherry", "kiwi", "lemon", "mango", "zebra", "quartz"] * 125
        over = PEMParams.from_epsilon(eps, max_length=16, alphabet="abcdefghijklmnopqrstuvwxyz")
        for _ in range(rounds):
            by_bytes = rate(PEMEncoder(pem, group=pem.levels // 2).encode, words)
            by_alphabet = rate(PEMEncoder(over, group=over.levels // 2).encode, words)
            print(f"eps {eps}: pem over bytes {by_bytes:,.0f}, over a-z {by_alphabet:,.0f} reports/s (words)")


def calibration(
    repeats: int, n: int, epsilon: float, impls: list[str] | None = None, verify: float = 0.0
) -> None:
    """Estimates given discovery over seeded repeats, for pem and treehist on the same users: every
    discovered value, scored against its true count (0 for a value nobody holds): MSE / mean variance,
    95% coverage, and the mean error / SE of the values near the threshold when discovered. Population
    (as the slow test of tests/ldp_client/mechanisms/test_treehist.py): 3 heavy words (20%, 12%, 8%),
    6 of 0.9% each and 150 of 0.1% to 0.6%; top_k 12, max_length 5."""
    mids = [f"mid{i}" for i in range(6)]
    labels = ["apple", "kiwi", "fig", *mids] + [f"t{i:03d}" for i in range(150)]
    probs = np.array([0.2, 0.12, 0.08] + [0.009] * 6 + list(np.linspace(0.001, 0.006, 150)))
    probs /= probs.sum()
    for impl in impls or ("treehist", "pem"):
        if impl == "treehist":
            params: Any = TreeHistParams.from_epsilon(epsilon, max_length=5, top_k=12, hash_bits=16)
        elif impl == "pem":
            params = PEMParams.from_epsilon(epsilon, max_length=5, top_k=12, verification_share=verify)
        else:
            raise SystemExit(f"--calibration runs treehist and pem, not {impl!r}")
        spec = registry.spec_for(params)
        sq, var, cov, cells, near, nobody = 0.0, 0.0, 0, 0, [], 0
        for seed in range(repeats):
            rng = np.random.default_rng(seed)
            values = rng.choice(len(labels), size=n, p=probs)
            truth = dict(zip(labels, np.bincount(values, minlength=len(labels)).tolist(), strict=True))
            columns = spec.encode_batch(params, values, rng, campaign_id="c", labels=labels)
            for it in discover_columns(params, columns, n).items:
                # A discovered value nobody holds (a prefix of a heavy value extended by noise) is scored
                # too: its true count is 0, and its interval should cover 0 as often as any other.
                c = truth.get(it.label, 0)
                nobody += c == 0
                err = it.count - c
                sq, var, cells = sq + err**2, var + it.std_error**2, cells + 1
                cov += it.ci_low <= c <= it.ci_high
                if it.label.startswith("mid"):
                    near.append(err / it.std_error)
        name = f"{impl} (verification_share {verify:g})" if impl == "pem" else impl
        print(
            f"{name}: {repeats} repeats, n={n}, eps={epsilon}, {cells} discovered values ({nobody} held by "
            "nobody): "
            f"MSE/variance {sq / var:.3f}, 95% coverage {cov / cells:.3f}; the 0.9% values, "
            f"{len(near)} times discovered: mean error/SE {np.mean(near):+.3f}"
        )


def table(paths: list[str]) -> None:
    """The rows of ``--json`` files (or of the JSON lines a run printed) as one markdown table."""
    print(
        "| population | n | eps | implementation | top-16 precision / recall | top-32 precision / recall "
        "| NCR 16 / 32 | count MAE / RMSE | listed 16 / 32 | seconds | CPU seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        text = Path(path).read_text()
        # A --json file, or the JSON lines a run prints (its log, while it runs).
        rows = (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        )
        for r in rows:
            head = f"| {r['population']} | {r['n']:,} | {r['epsilon']:g} | {r['impl']} |"
            if r.get("timeout"):
                print(f"{head} not finished | | | | | > {r['seconds']:.0f} | |")
                continue
            cpu = f"; server CPU {r['server_cpu_s']:.1f}" if "server_cpu_s" in r else ""
            secs = (
                f"{r['encode_s'] + r['server_s']:.1f} (encode {r['encode_s']:.1f} + server "
                f"{r['server_s']:.1f}{cpu}, {r['groups']} groups)"
                if "server_s" in r
                else f"{r['seconds']:.1f}"
            )
            mae = f"{r['count_mae']:,.0f} / {r['count_rmse']:,.0f}" if "count_mae" in r else "-"
            # CPU seconds (encoding and discovery, or pure-ldp's whole run): steadier than wall seconds on
            # a shared machine; numpy and pure-ldp both run on one thread here.
            cpu_s = r["encode_cpu_s"] + r["server_cpu_s"] if "server_cpu_s" in r else r.get("cpu_s")
            listed = f"{r['listed_top16']:.0f} / {r['listed_top32']:.0f}" if "listed_top16" in r else "-"
            print(
                f"{head} {r['precision_top16']:.2f} / {r['recall_top16']:.2f} | "
                f"{r['precision_top32']:.2f} / {r['recall_top32']:.2f} | {r['ncr_top16']:.2f} / "
                f"{r['ncr_top32']:.2f} | {mae} | {listed} | {secs} | "
                + (f"{cpu_s:.1f} |" if cpu_s is not None else "- |")
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--epsilon", default="4")
    ap.add_argument("--populations", default="zipf,hosts,heavy")
    ap.add_argument("--impls", default="pem,treehist", help="of pem, pem-alphabet, treehist")
    ap.add_argument(
        "--pem-verify", type=float, default=0.0, help="pem's verification_share (0: no verification group)"
    )
    ap.add_argument("--pure", default="pem,treehist,sfp", help="pure-ldp algorithms (with --pure-python)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--pure-python", default=None, help="python of the benchmark-only pure-ldp venv")
    ap.add_argument("--pure-timeout", type=float, default=1200.0)
    ap.add_argument("--encode-rate", action="store_true")
    ap.add_argument("--calibration", type=int, default=0, help="seeded repeats of the calibration run")
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", nargs="+", default=None, help="print --json files as a markdown table")
    args = ap.parse_args()
    if args.table:
        table(args.table)
        return
    if args.encode_rate:
        encode_rate()
        return
    if args.calibration:
        calibration(args.calibration, args.n, float(args.epsilon), args.impls.split(","), args.pem_verify)
        return
    rows = []
    for pop_name in args.populations.split(","):
        pop = parse_categorical_population(POPULATIONS[pop_name])
        d = pop.support_size
        words = pop.labels(d)
        rng = np.random.default_rng(args.seed)
        values = rng.choice(d, size=args.n, p=pop.probabilities(d))
        counts = np.bincount(values, minlength=d)
        truth = {words[i]: int(c) for i, c in enumerate(counts) if c}
        for eps in (float(e) for e in args.epsilon.split(",")):
            runs: list[tuple[str, dict[str, Any]]] = [
                (
                    f"ldp-collect {impl}"
                    + (f" v{args.pem_verify:g}" if impl.startswith("pem") and args.pem_verify else ""),
                    run_ours(impl, words, values, eps, args.seed + 1, args.pem_verify),
                )
                for impl in args.impls.split(",")
                if impl
            ]
            if args.pure_python:
                runs += [
                    (f"pure-ldp {a}", run_pure(a, words, values, eps, args))
                    for a in args.pure.split(",")
                    if a
                ]
            for name, run in runs:
                base = {"population": pop_name, "n": args.n, "epsilon": eps, "impl": name}
                if run["items"] is None:
                    row = {**base, "seconds": run["seconds"], "timeout": True}
                else:
                    row = {**base, **discovery_metrics(run["items"], truth)}
                    row.update({k: v for k, v in run.items() if k != "items"})
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
