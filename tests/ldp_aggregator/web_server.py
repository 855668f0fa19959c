"""A real aggregator with its web view on, tokens of every role and campaigns with reports, for the web
view's tests (tests/ldp_aggregator/test_web*.py)."""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import grpc
import numpy as np

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_aggregator.auth import Role, new_token_record
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import open_store
from ldp_aggregator.store import add_token
from ldp_client import registry, wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from ldp_client.accounting.shuffle import ShufflerDeclaration
from ldp_client.mechanisms.calm import CalmParams
from ldp_client.mechanisms.hio import HIOParams
from ldp_client.mechanisms.numeric import numeric_encoder
from ldp_client.mechanisms.paired import encode_batch_paired
from ldp_client.mechanisms.pem import PEMParams
from ldp_client.numeric_params import PiecewiseParams
from ldp_client.params import BinaryRRParams, GRRParams, PairedParams, RapporParams

BROWSERS = ("chrome", "safari", "edge", "firefox", "other")
SITES = ("news.example", "mail.example", "never-1.example", "never-2.example")
RAPPOR_ID = "home/page é"  # a slash and non-ASCII: the id must survive percent-encoding in URLs
WORDS = ("cat", "dog", "owl")
RANGE_ID = "ages"
MARGINAL_ID = "health"
HEALTH = (("sex", ("f", "m")), ("age", ("young", "middle", "old")), ("smoker", ("no", "yes")))
"""The calm campaign's attributes; it chose the marginals (sex, age) and (age, smoker), not all three."""
CAMPAIGNS = ("browser", RAPPOR_ID, "temperature", "pair", "words", RANGE_ID, MARGINAL_ID, "empty")
SHUFFLER = ShufflerDeclaration(batch_reports=10_000, delta=1e-6)


@dataclass
class WebServer:
    server: BackgroundServer
    db: Path
    tokens: dict[Role, str]
    channel: grpc.Channel

    @property
    def url(self) -> str:
        assert self.server.web_url is not None
        return self.server.web_url

    @property
    def analyst(self) -> analyst_pb2_grpc.AnalystStub:
        return analyst_pb2_grpc.AnalystStub(self.channel)

    def md(self, role: Role = Role.ANALYST) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.tokens[role]}"),)

    def get(
        self, path: str, *, role: Role | None = Role.ANALYST, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """GET ``path`` (already percent-encoded) with the role's token; (status, headers, body)."""
        u = urlsplit(self.url)
        conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=60)
        h = dict(headers or {})
        if role is not None:
            h["Authorization"] = f"Bearer {self.tokens[role]}"
        try:
            conn.request("GET", path, headers=h)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()


def campaign_path(campaign_id: str, api: bool = False) -> str:
    return ("/api/campaigns/" if api else "/campaigns/") + quote(campaign_id, safe="")


def _submit(collector: Any, campaign_id: str, params: Any, columns: Any, md: Any) -> None:
    batch = wire.batch_to_proto(campaign_id=campaign_id, batch_id="b1", params=params, columns=columns)
    collector.Submit(batch, metadata=md)


def fill_campaigns(s: WebServer) -> None:
    """Eight campaigns: GRR, string RAPPOR with candidates (two decoys), a numeric mean, a paired
    campaign (association), a discovery (pem), ranges over 100 ages (hio, declaring a shuffler),
    marginals of three attributes (calm, two chosen marginals) and one without reports; each reported to
    through the Collector."""
    admin, reporter = s.md(Role.ADMIN), s.md(Role.REPORTER)
    collector = collector_pb2_grpc.CollectorStub(s.channel)
    rng = np.random.default_rng(19)
    grr = GRRParams.from_epsilon(list(BROWSERS), 2.0)
    rappor = RapporParams(k=32, h=2, m=8, f=0.25, p=0.25, q=0.75)
    temp = PiecewiseParams.from_epsilon(-20.0, 50.0, 2.0)
    pair = PairedParams(first=BinaryRRParams.from_epsilon(1.5), second=BinaryRRParams.from_epsilon(1.0))
    pem = PEMParams.from_epsilon(4.0, max_length=4, top_k=4)
    hio = HIOParams.from_epsilon(100, 2.0, branching=4)
    calm = CalmParams.from_epsilon(HEALTH, ((0, 1), (1, 2)), 2.0)
    made = (
        ("browser", grr, (), "Which browser do you use most?"),
        (RAPPOR_ID, rappor, SITES, "What is your home page?"),
        ("temperature", temp, (), ""),
        ("pair", pair, (), "two yes/no questions"),
        ("words", pem, (), "values nobody listed (discovery)"),
        (RANGE_ID, hio, (), "age in years (ranges and quantiles)"),
        (MARGINAL_ID, calm, (), "sex, age group, smoker (marginals)"),
        ("empty", grr, (), ""),
    )
    for cid, params, cands, description in made:
        s.analyst.CreateCampaign(
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(
                    campaign_id=cid,
                    params=params,
                    candidates=cands,
                    description=description,
                    shuffler=SHUFFLER if cid == RANGE_ID else None,
                )
            ),
            metadata=admin,
        )
    spec = registry.spec_for(grr)
    values = rng.choice(len(BROWSERS), size=20_000, p=[0.5, 0.2, 0.15, 0.1, 0.05])
    cols = spec.encode_batch(grr, values, rng, campaign_id="browser", labels=BROWSERS)
    _submit(collector, "browser", grr, cols, reporter)
    values = rng.choice(len(SITES), size=20_000, p=[0.6, 0.4, 0.0, 0.0])
    spec = registry.spec_for(rappor)
    cols = spec.encode_batch(rappor, values, rng, campaign_id=RAPPOR_ID, labels=SITES)
    _submit(collector, RAPPOR_ID, rappor, cols, reporter)
    cols = numeric_encoder(temp).encode_batch(rng.normal(21.0, 5.0, 5_000).clip(-20.0, 50.0), rng)
    _submit(collector, "temperature", temp, cols, reporter)
    x = rng.integers(0, 2, size=4_000)
    y = np.where(rng.random(4_000) < 0.8, x, 1 - x)
    cols = encode_batch_paired(pair, campaign_id="pair", first_values=x, second_values=y, rng=rng)
    _submit(collector, "pair", pair, cols, reporter)
    spec = registry.spec_for(pem)
    values = rng.choice(len(WORDS), size=20_000, p=[0.6, 0.3, 0.1])
    _submit(
        collector,
        "words",
        pem,
        spec.encode_batch(pem, values, rng, campaign_id="words", labels=WORDS),
        reporter,
    )
    spec = registry.spec_for(hio)
    ages = rng.binomial(99, 0.4, size=20_000)
    labels = [str(a) for a in range(100)]
    _submit(
        collector,
        RANGE_ID,
        hio,
        spec.encode_batch(hio, ages, rng, campaign_id=RANGE_ID, labels=labels),
        reporter,
    )
    spec = registry.spec_for(calm)
    records = rng.choice(len(spec.items(calm)), size=20_000, p=_health_shares())
    _submit(
        collector,
        MARGINAL_ID,
        calm,
        spec.encode_batch(calm, records, rng, campaign_id=MARGINAL_ID, labels=spec.items(calm)),
        reporter,
    )


@contextlib.contextmanager
def web_server(
    tmp_path: Path,
    credentials: grpc.ChannelCredentials | None = None,
    *,
    fill: Callable[[WebServer], None] = fill_campaigns,
    **config: Any,
) -> Iterator[WebServer]:
    """A server on a database with a token of every role (authentication on) and the campaigns ``fill``
    makes (by default :func:`fill_campaigns`), its web view on a free loopback port."""
    db = tmp_path / "web.sqlite3"
    open_store(str(db)).close()
    tokens: dict[Role, str] = {}
    for role in Role:
        tokens[role], record = new_token_record(role, name=f"web {role.value}")
        add_token(db, record)
    cfg = ServerConfig(db=db, listen="127.0.0.1:0", web_port=0, token_refresh_s=0.05, **config)
    with (
        BackgroundServer(cfg) as server,
        (
            grpc.insecure_channel(server.target)
            if credentials is None
            else grpc.secure_channel(server.target, credentials)
        ) as channel,
    ):
        s = WebServer(server, db, tokens, channel)
        fill(s)
        yield s


def _health_shares() -> np.ndarray:
    """The calm campaign's records' shares, row-major over (sex, age, smoker): smoking depends on age."""
    smokes = {"young": 0.3, "middle": 0.2, "old": 0.1}
    ages = {"young": 0.3, "middle": 0.45, "old": 0.25}
    return np.array(
        [
            0.5 * ages[a] * (smokes[a] if smoker == "yes" else 1 - smokes[a])
            for _sex in HEALTH[0][1]
            for a in HEALTH[1][1]
            for smoker in HEALTH[2][1]
        ]
    )
