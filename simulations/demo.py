"""The main job (``make demo``): a real aggregator, three campaigns, simulated users reporting over gRPC.

1. Starts ``ldp-aggregator serve`` on a database of its own (``demo-output/demo.sqlite3``, deleted and made
   afresh at every run; never the operator's ``ldp-data/ldp.sqlite3``, whose tokens would lock it out) on a
   free loopback port.
2. Creates three campaigns through the Analyst service: a yes/no question with randomized response, a
   category with k-ary randomized response, and a string with RAPPOR and a candidate list (with decoys).
3. Simulates users in worker processes: each encodes its value on the "device" and reports over gRPC in
   batches; the aggregator commits every batch durably before acknowledging it.
4. Reads the estimates back, prints them with their 95% intervals next to the truth, writes a plot, and
   stops the server with SIGTERM (graceful: drain, commit, exit 0).

The aggregator's read-only web view (``docs/web.md``) is on while it runs, at the address printed after
"web view"; ``--keep-web`` (``make demo KEEP_WEB=1``) keeps the aggregator and its view up after the
demo, until Ctrl-C.

Run ``python -m simulations.demo --help`` for the options.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from ldp_aggregator.cli_common import print_error
from ldp_client.errors import LdpError
from simulations.report import items_table, metrics_table
from simulations.runners import SimulationConfig, SimulationResult, simulate

# Wide enough for the estimate tables when the output is piped (rich falls back to 80 columns).
console = Console(width=None if sys.stdout.isatty() else 120)

BROWSERS = {
    "chrome": 45, "safari": 20, "edge": 12, "firefox": 9, "samsung": 5, "opera": 4, "brave": 3, "other": 2,
}  # fmt: skip
SITES = [
    "news.example", "mail.example", "search.example", "video.example", "shop.example", "maps.example",
    "social.example", "wiki.example", "bank.example", "weather.example", "sports.example", "music.example",
    "photos.example", "games.example", "travel.example", "recipes.example", "jobs.example", "forum.example",
    "blog.example", "docs.example",
]  # fmt: skip
DECOYS = ["never-1.example", "never-2.example", "never-3.example", "never-4.example", "never-5.example"]


def _write_population(path: Path, counts: dict[str, int]) -> str:
    path.write_text("value,count\n" + "".join(f"{k},{v}\n" for k, v in counts.items()), encoding="utf-8")
    return f"empirical:{path}"


def _fresh_database(db: Path) -> None:
    """Delete the demo's database and its companions (WAL, shared memory, lock) from an earlier run.

    The demo always starts from an empty database of its own: no campaigns or tokens left from before (a
    token would switch authentication on and lock the demo out).
    """
    db.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal", ".lock"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _start_server(db: Path, log: Path, web_port: int) -> tuple[subprocess.Popen[str], str, str]:
    """The aggregator with its web view (docs/web.md) on ``web_port`` (0: a free port); (process, gRPC
    target, web view URL)."""
    cmd = [sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(db), "--listen", "127.0.0.1:0",
           "--web-port", str(web_port)]  # fmt: skip
    with log.open("w", encoding="utf-8") as log_file:  # the server's log lines, for when it fails
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, text=True)
    if proc.stdout is None:  # unreachable: stdout is a pipe
        raise SystemExit("the aggregator did not start: no stdout pipe")
    line = proc.stdout.readline()
    match = re.search(r"ready on port (\d+)", line)
    web = re.search(r"web view on (\S+)", proc.stdout.readline() if match else "")
    if match is None or web is None:
        proc.kill()
        proc.wait()
        lines = log.read_text(encoding="utf-8").strip().splitlines()
        raise SystemExit(f"the aggregator did not start: {lines[-1] if lines else line!r} (log: {log})")
    return proc, f"127.0.0.1:{match.group(1)}", web.group(1)


def _plot(results: list[tuple[str, SimulationResult]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.8))
    for ax, (title, res) in zip(np.atleast_1d(axes), results, strict=True):
        n = res.config.n_users
        truth = res.truth[0] / n
        order = np.argsort(-truth, kind="stable")
        est = res.estimates[0, order] / n
        lo = res.ci_low[0, order] / n
        hi = res.ci_high[0, order] / n
        x = np.arange(order.size)
        ax.errorbar(x, est, yerr=[est - lo, hi - est], fmt="o", ms=4, capsize=2, label="estimate, 95% CI")
        ax.scatter(x, truth[order], marker="_", s=200, color="black", zorder=3, label="truth")
        ax.set_xticks(x, [res.labels[i] for i in order], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("frequency")
        ax.set_title(f"{title}\n{res.config.mechanism}, eps={res.epsilon:.3g}, n={n:,}", fontsize=10)
        ax.axhline(0, color="grey", lw=0.5)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _keep_web(server: subprocess.Popen[str], web: str) -> None:
    """Wait, the web view up, until Ctrl-C (or the aggregator stops by itself)."""
    console.print(f"the web view stays up at {web} : Ctrl-C stops the aggregator", soft_wrap=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the aggregator too (same process group): it drains and stops by itself.
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=100_000, help="users per campaign (default 100,000)")
    ap.add_argument(
        "--db",
        type=Path,
        default=None,
        help="the demo's own database, DELETED and made afresh at start (default: OUT/demo.sqlite3)",
    )
    ap.add_argument("--out", type=Path, default=Path("demo-output"), help="where the plot and inputs go")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument(
        "--web-port", type=int, default=0, help="port of the read-only web view (default: a free port)"
    )
    ap.add_argument(
        "--keep-web",
        action="store_true",
        help="keep the aggregator and its web view up after the demo, until Ctrl-C (make demo KEEP_WEB=1)",
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    db: Path = args.db if args.db is not None else args.out / "demo.sqlite3"
    _fresh_database(db)
    run = time.strftime("%Y%m%d-%H%M%S")

    t0 = time.monotonic()
    site_counts = {s: round(10_000 / (i + 1) ** 1.1) for i, s in enumerate(SITES)}
    campaigns = [
        ("Do you use a password manager?", SimulationConfig(
            mechanism="rr", epsilon=1.0, n_users=args.users,
            population=_write_population(args.out / "password-manager.csv", {"no": 62, "yes": 38}),
        )),
        ("Which browser do you use most?", SimulationConfig(
            mechanism="grr", epsilon=2.0, n_users=args.users,
            population=_write_population(args.out / "browsers.csv", BROWSERS),
        )),
        ("What is your home page? (RAPPOR, candidates incl. 5 decoys)", SimulationConfig(
            mechanism="rappor", n_users=args.users,
            params={"k": 128, "h": 2, "m": 64, "f": 0.5, "p": 0.5, "q": 0.75},
            population=_write_population(args.out / "home-pages.csv", site_counts),
            candidates=[*SITES, *DECOYS],
        )),
    ]  # fmt: skip
    results: list[tuple[str, SimulationResult]] = []
    failed = False
    server, target, web = _start_server(db, args.out / "aggregator.log", args.web_port)
    console.print(f"[bold]aggregator[/bold] started on {target}, database {db} (pid {server.pid})")
    console.print(f"[bold]web view[/bold] (read-only, docs/web.md): {web}", soft_wrap=True)
    try:
        for i, (question, base) in enumerate(campaigns):
            config = base.with_changes(
                mode="grpc",
                server=target,
                seed=args.seed + i,
                campaign_id=f"demo-{run}-{base.mechanism}",
                workers=2,
            )
            try:
                res = simulate(config)
            except LdpError as exc:  # e.g. a refused batch: one line, then the server is stopped
                print_error(f"campaign {config.campaign_id}: {exc}")
                failed = True
                break
            results.append((question, res))
            console.rule(f"[bold]{question}[/bold]")
            console.print(
                f"campaign {config.campaign_id}…: {res.n_reports[0]:,} reports over gRPC "
                f"in {res.elapsed_s:.1f} s, epsilon per report {res.epsilon:.4g}"
            )
            console.print(items_table(res, max_rows=25))
            console.print(metrics_table(res))
        if not failed:
            plot = args.out / "demo.png"
            _plot(results, plot)
            console.rule()
            console.print(f"plot written to [bold]{plot}[/bold]")
            if args.keep_web:
                _keep_web(server, web)
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
        if server.stdout is not None:
            server.stdout.close()
    if failed:
        return 1
    how = "SIGINT (Ctrl-C)" if args.keep_web else "SIGTERM"
    console.print(
        f"aggregator stopped with {how}: exit code {code} ({'clean' if code == 0 else 'NOT clean'}); "
        f"total {time.monotonic() - t0:.1f} s"
    )
    return 0 if code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
