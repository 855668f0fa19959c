"""How fast the web view's campaign page loads for a campaign with 10,000 candidates (issue 19).

An in-process aggregator (``BackgroundServer``, SQLite in a temporary directory) with its web view on a
free loopback port and an analyst token, and two campaigns:

* ``rappor-10k``: string RAPPOR (k=128, h=2, m=64) with 10,000 candidate strings, 1,000 of them reported
  by ``--reports`` zipf(1.1) users (encoded per user with the batch encoder, sent through the Collector);
* ``grr-10k``: k-ary randomized response over 10,000 labels, the same number of reports;
* ``hio-10k``: hierarchical intervals (branching 4, epsilon 4) over 10,000 ordered values, the same
  number of reports: its page also answers the quartiles and the CDF at 9 points (ranges and quantiles);
* ``calm-8x4``: CALM marginals (epsilon 2) of 8 attributes of 4 values each, all 28 pairs chosen (448
  cells), the same number of reports (records uniform over the 65,536 combinations): its page answers
  every chosen marginal (``Analyst.GetEstimate`` marginals).

For each it measures, over plain HTTP (``http.client``, one connection per request, as the server closes
each): the first (cold) HTML request, which starts the analyses and answers after at most
``HTML_WAIT_S`` with what is ready; the time until the JSON document is complete (the analyses done, e.g.
the decode of 10,000 candidates); then ``--repeats`` warm HTML requests (analyses cached). With
``--browser`` it also loads the warm page ``--repeats`` times in headless Chromium (Playwright, the
flags of docs/web.md) and reports the navigation's load time.

    .venv/bin/python bench/bench_web.py --reports 100000 --repeats 20 --browser
    .venv/bin/python bench/bench_web.py --reports 100000 --repeats 20 --only calm-8x4
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ldp_aggregator.auth import Role
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.web.app import HTML_WAIT_S
from ldp_client import registry, wire
from ldp_client.mechanisms.calm import CalmParams
from ldp_client.mechanisms.hio import HIOParams
from ldp_client.params import GRRParams, RapporParams
from tests.ldp_aggregator.web_server import WebServer, campaign_path

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip


CAMPAIGNS = ("rappor-10k", "grr-10k", "hio-10k", "calm-8x4")


def _fill(s: WebServer, n_reports: int, only: tuple[str, ...]) -> None:
    from ldp_aggregator._proto.ldp.v1 import analyst_pb2
    from ldp_client._proto.ldp.v1 import collector_pb2_grpc

    rng = np.random.default_rng(19)
    labels = tuple(f"site-{i:05d}.example" for i in range(10_000))
    w = np.zeros(10_000)
    w[:1000] = 1.0 / np.arange(1, 1001) ** 1.1
    attrs = tuple((f"q{i}", ("a", "b", "c", "d")) for i in range(8))
    campaigns = (
        ("rappor-10k", RapporParams(k=128, h=2, m=64), labels),
        ("grr-10k", GRRParams.from_epsilon(list(labels), 4.0), ()),
        ("hio-10k", HIOParams.from_epsilon(list(labels), 4.0, branching=4), ()),
        ("calm-8x4", CalmParams.from_epsilon(attrs, tuple(itertools.combinations(range(8), 2)), 2.0), ()),
    )
    collector = collector_pb2_grpc.CollectorStub(s.channel)
    for cid, params, cands in campaigns:
        if cid not in only:
            continue
        msg = wire.campaign_to_proto(campaign_id=cid, params=params, candidates=cands)
        s.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), metadata=s.md(Role.ADMIN))
        spec = registry.spec_for(params)
        inputs = spec.items(params) if cid == "calm-8x4" else labels
        for b in range(0, n_reports, 50_000):
            size = min(50_000, n_reports - b)
            if cid == "calm-8x4":
                values = rng.integers(0, len(inputs), size=size)
            else:
                values = rng.choice(10_000, size=size, p=w / w.sum())
            cols = spec.encode_batch(params, values, rng, campaign_id=cid, labels=inputs)
            batch = wire.batch_to_proto(campaign_id=cid, batch_id=f"b{b}", params=params, columns=cols)
            collector.Submit(batch, metadata=s.md(Role.REPORTER))


def _timed_get(s: WebServer, path: str) -> tuple[float, int, bytes]:
    t0 = time.perf_counter()
    status, _, body = s.get(path)
    return time.perf_counter() - t0, status, body


def _browser_loads(url: str, token: str, repeats: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
        ctx = b.new_context(extra_http_headers={"Authorization": f"Bearer {token}"})
        page = ctx.new_page()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            page.goto(url, wait_until="load")
            times.append(time.perf_counter() - t0)
        b.close()
    return times


def _summary(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:.0f} ms, max {max(xs) * 1000:.0f} ms (n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--browser", action="store_true", help="also load the warm page in headless Chromium")
    ap.add_argument("--only", nargs="+", choices=CAMPAIGNS, default=CAMPAIGNS, help="these campaigns only")
    args = ap.parse_args()
    import grpc

    from ldp_aggregator.auth import new_token_record
    from ldp_aggregator.service import open_store
    from ldp_aggregator.store import add_token

    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "web.sqlite3"
        open_store(str(db)).close()
        tokens: dict[Role, str] = {}
        for role in Role:
            tokens[role], record = new_token_record(role)
            add_token(db, record)
        config = ServerConfig(db=db, listen="127.0.0.1:0", web_port=0, max_message_bytes=1 << 28)
        with BackgroundServer(config) as server, grpc.insecure_channel(server.target) as channel:
            s = WebServer(server, db, tokens, channel)
            t0 = time.perf_counter()
            only = tuple(args.only)
            _fill(s, args.reports, only)
            filled = time.perf_counter() - t0
            print(f"{len(only)} campaigns x {args.reports:,} reports: {filled:.1f} s")
            for cid in only:
                path = campaign_path(cid)
                cold, status, body = _timed_get(s, path)
                pending = b"pending-" in body
                done, jstatus, jbody = _timed_get(s, campaign_path(cid, api=True))
                assert jstatus == 200, jbody[:300]
                warm = []
                for _ in range(args.repeats):
                    dt, st, body = _timed_get(s, path)
                    assert st == 200 and b"pending-" not in body
                    warm.append(dt)
                print(f"{cid}: cold HTML {cold * 1000:.0f} ms (status {status}, "
                      f"{'analyses still running: the page reloads itself' if pending else 'complete'}); "
                      f"JSON complete after a further {done:.2f} s ({len(jbody) / 1024:,.0f} KiB); "
                      f"warm HTML {_summary(warm)}, {len(body) / 1024:,.0f} KiB")  # fmt: skip
                if args.browser:
                    loads = _browser_loads(s.url.rstrip("/") + path, tokens[Role.ANALYST], args.repeats)
                    print(f"{cid}: warm page in headless Chromium (goto, load event): {_summary(loads)}")
    print(f"(HTML_WAIT_S = {HTML_WAIT_S} s)")


if __name__ == "__main__":
    main()
