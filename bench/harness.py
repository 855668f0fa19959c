"""Shared helpers of the service benchmarks (load.py, soak_fuzz.py, kill_loop.py): run an
``ldp-aggregator serve`` process on loopback, create tokens, scrape its metrics, summarise latencies.

Run scripts from the repository root (``.venv/bin/python bench/<name>.py``); this module puts the root on
``sys.path`` so they can import the project and the test helpers they reuse.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import IO, Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench_ingest import _rss_mib as rss_mib  # noqa: E402  (reused: /proc/PID/status VmRSS)

__all__ = [
    "ROOT",
    "create_token",
    "free_port",
    "histogram_quantiles",
    "integrity",
    "metric",
    "percentiles",
    "rss_mib",
    "scrape",
    "start_server",
    "stop_server",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def create_token(db: Path, role: str) -> str:
    """A new token of ``role`` in ``db`` (through the CLI, as an operator would)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ldp_aggregator",
            "token",
            "create",
            "--role",
            role,
            "--json",
            "--db",
            str(db),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return str(json.loads(out.stdout)["token"])


def start_server(db: Path, *args: str, log: IO[str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start ``ldp-aggregator serve --db DB --listen 127.0.0.1:0 ARGS``; returns (process, target)."""
    cmd = [sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(db), "--listen", "127.0.0.1:0", *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=log if log is not None else subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"ready on port (\d+)", line)
    if match is None:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, f"127.0.0.1:{match.group(1)}"


def stop_server(
    proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGTERM, timeout: float = 60
) -> int:
    """Send ``sig`` and wait; returns the exit code."""
    proc.send_signal(sig)
    code = proc.wait(timeout=timeout)
    if proc.stdout is not None:
        proc.stdout.close()
    return code


def integrity(db: Path) -> str:
    """SQLite ``PRAGMA integrity_check`` of the database file ("ok" when sound)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def scrape(port: int) -> str:
    """The Prometheus text of ``http://127.0.0.1:PORT/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample (exact label match; 0.0 if absent)."""
    want = {k: str(v) for k, v in labels.items()}
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        match = re.fullmatch(rf"{re.escape(name)}(?:\{{(.*)\}})? (\S+)", line)
        if match is None:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if got == want:
            return float(match.group(2))
    return 0.0


def histogram_quantiles(text: str, name: str, qs: tuple[float, ...]) -> dict[float, float]:
    """Quantiles of a Prometheus histogram by linear interpolation inside its buckets (as
    ``histogram_quantile`` does); the answer is only as fine as the buckets."""
    buckets: list[tuple[float, float]] = []
    for le, value in re.findall(
        rf'^{re.escape(name)}_bucket\{{le="([^"]+)"\}} (\S+)$', text, flags=re.MULTILINE
    ):
        buckets.append((float(le), float(value)))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    out: dict[float, float] = {}
    for q in qs:
        rank = q * total
        prev_le, prev_count = 0.0, 0.0
        out[q] = float("nan")
        for le, count in buckets:
            if count >= rank:
                if le == float("inf"):
                    out[q] = prev_le
                else:
                    frac = 0.0 if count == prev_count else (rank - prev_count) / (count - prev_count)
                    out[q] = prev_le + (le - prev_le) * frac
                break
            prev_le, prev_count = le, count
    return out


def percentiles(samples: Any, qs: tuple[float, ...]) -> dict[float, float]:
    """Exact sample quantiles."""
    arr = np.asarray(samples, dtype=np.float64)
    if arr.size == 0:
        return {q: float("nan") for q in qs}
    return {q: float(np.quantile(arr, q)) for q in qs}
