"""Every registered mechanism in the web view (issue 19): a new mechanism cannot silently break it.

One campaign per spec of ``ldp_client.registry.SPECS`` (its first ``examples`` parameters; candidate
strings for mechanisms that estimate them), a few hundred reports encoded by the spec's batch encoder and
ingested through the Collector. Each campaign's JSON document must equal the Analyst service's answers
over gRPC (the estimate; the decode, association, ranges or marginals where the service answers them; a
refusal as the service words it), its privacy figures the spec's, and its HTML page must render (200, no
error page) with those numbers in it, each in its own section's table where it has one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, decode_pb2, estimates_pb2
from ldp_aggregator.analysis import estimate_to_dict
from ldp_aggregator.association import association_response_to_dict
from ldp_aggregator.auth import Role
from ldp_aggregator.rappor_decode import decode_response_to_dict, decodes
from ldp_aggregator.service import open_store
from ldp_aggregator.web.data import DEFAULT_QUANTILES, default_cdf_ranges
from ldp_client import registry, wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from ldp_client.spec import Kind, MechanismSpec
from tests.ldp_aggregator.web_server import WebServer, campaign_path, web_server

N_REPORTS = 300
SPEC_CASES = [pytest.param(spec, id=spec.name) for spec in registry.SPECS]


def _cid(spec: MechanismSpec[Any]) -> str:
    return f"every/{spec.name}"


def _fill_every_mechanism(s: WebServer) -> None:
    collector = collector_pb2_grpc.CollectorStub(s.channel)
    rng = np.random.default_rng(1919)
    for spec in registry.SPECS:
        params, cid = spec.examples()[0], _cid(spec)
        labels = [str(x) for x in spec.campaign_inputs(params, cid)]
        candidates = labels[:8] if spec.estimates_candidates else ()
        msg = wire.campaign_to_proto(campaign_id=cid, params=params, candidates=candidates)
        s.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), metadata=s.md(Role.ADMIN))
        values = rng.integers(0, len(labels), size=N_REPORTS)
        cols = spec.encode_batch(params, values, rng, campaign_id=cid, labels=labels)
        batch = wire.batch_to_proto(campaign_id=cid, batch_id="b1", params=params, columns=cols)
        collector.Submit(batch, metadata=s.md(Role.REPORTER))


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    with web_server(tmp_path_factory.mktemp("web-every"), fill=_fill_every_mechanism) as s:
        yield s


def _service(call: Any, request: Any, to_dict: Any, web: WebServer) -> dict[str, Any]:
    """The Analyst service's answer as the view words it: ``{"answer": ...}`` or its refusal."""
    try:
        return {"answer": to_dict(call(request, metadata=web.md()))}
    except grpc.RpcError as err:
        return {"error": {"code": err.code().name, "message": err.details()}}


def _answers_ranges(web: WebServer, cid: str) -> bool:
    """Whether the Analyst service answers range queries on ``cid`` (asked, not inferred from the spec)."""
    request = estimates_pb2.EstimateRequest(campaign_id=cid, ranges=[estimates_pb2.RangeQuery(lo=0, hi=0)])
    try:
        web.analyst.GetEstimate(request, metadata=web.md())
    except grpc.RpcError as err:
        if "a campaign of a range mechanism" in (err.details() or ""):
            return False
    return True


def _expected(web: WebServer, spec: MechanismSpec[Any]) -> dict[str, Any]:
    """The analyses of the campaign of ``spec``, from the Analyst service over gRPC."""
    cid, params = _cid(spec), spec.examples()[0]
    out = {
        "estimate": _service(
            web.analyst.GetEstimate, estimates_pb2.EstimateRequest(campaign_id=cid), estimate_to_dict, web
        )
    }
    if decodes(params):  # the servicer's own rule for DecodeRappor
        out["decode"] = _service(
            web.analyst.DecodeRappor,
            decode_pb2.DecodeRapporRequest(campaign_id=cid),
            decode_response_to_dict,
            web,
        )
    if spec.kind is Kind.PAIRED:
        out["association"] = _service(
            web.analyst.EstimateAssociation,
            decode_pb2.AssociationRequest(campaign_id=cid),
            association_response_to_dict,
            web,
        )
    if _answers_ranges(web, cid):
        request = estimates_pb2.EstimateRequest(
            campaign_id=cid,
            ranges=[
                estimates_pb2.RangeQuery(lo=lo, hi=hi)
                for lo, hi in default_cdf_ranges(len(spec.items(params)))
            ],
            quantiles=DEFAULT_QUANTILES,
        )

        def ranges_only(msg: estimates_pb2.EstimateResponse) -> dict[str, Any]:
            doc = estimate_to_dict(msg)
            return {"ranges": doc.get("ranges", []), "quantiles": doc.get("quantiles", [])}

        out["ranges"] = _service(web.analyst.GetEstimate, request, ranges_only, web)
    chosen = _chosen_marginals(web, spec, cid)
    if chosen is not None:  # by default the page shows every chosen marginal
        request = estimates_pb2.EstimateRequest(
            campaign_id=cid, marginals=[estimates_pb2.MarginalQuery(attributes=m) for m in chosen]
        )

        def marginals_only(msg: estimates_pb2.EstimateResponse) -> dict[str, Any]:
            return {"marginals": estimate_to_dict(msg).get("marginals", [])}

        out["marginals"] = _service(web.analyst.GetEstimate, request, marginals_only, web)
    return out


def _chosen_marginals(web: WebServer, spec: MechanismSpec[Any], cid: str) -> list[list[str]] | None:
    """The chosen marginals (attribute names) of a marginal mechanism's campaign, from its spec and the
    stored reports; None for the other mechanisms."""
    store = open_store(str(web.db), read_only=True)
    try:
        tables = spec.marginal_tables(spec.examples()[0], store.accumulator(cid))
    finally:
        store.close()
    return None if tables is None else [[tables.attributes[a] for a in m] for m in tables.marginals]


def _first_numbers(name: str, answer: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """A few numbers of an analysis that its HTML must show (as ``data-value``), each with the id of the
    table it must be in (None: anywhere on the page)."""
    if name == "estimate":
        found = [it["count"] for it in answer["items"][:1]] + [m["mean"] for m in answer.get("means", [])[:1]]
        found += [kv["mean"] for kv in answer.get("key_values", [])[:1]]
        found += [lv["kept"] for lv in answer.get("levels", [])[:1]]
        # An SVIM stage's ranking: in its own table (its numbers equal the items' when u(L) = 1).
        mining = answer.get("itemsets")
        ranked = [] if mining is None else mining["ranked"][:1]
        return [(None, x) for x in found] + [
            ("itemsets-ranked", r[k]) for r in ranked for k in ("estimate", "corrected", "ci_high")
        ]
    if name == "decode":
        return [(None, c["count"]) for c in answer["candidates"][:1]]
    if name == "association":
        return [(None, answer["joint"][0][0])]
    if name == "marginals":
        return [
            (f"marginal-{k}", m["cells"][0][key])
            for k, m in enumerate(answer["marginals"])
            for key in ("count", "std_error", "ci_low")
        ]
    return [(None, r["count"]) for r in answer["ranges"][:1]] + [
        (None, q["position"]) for q in answer["quantiles"][:1]
    ]


def _table(html: str, table_id: str | None) -> str:
    """The HTML of the table ``table_id`` (the whole page for None; "" when there is no such table)."""
    if table_id is None:
        return html
    start = html.find(f'<table id="{table_id}"')
    return "" if start < 0 else html[start : html.index("</table>", start)]


@pytest.mark.parametrize("spec", SPEC_CASES)
def test_every_mechanism_renders_and_is_the_analyst_services_answers(
    web: WebServer, spec: MechanismSpec[Any]
) -> None:
    cid, params = _cid(spec), spec.examples()[0]
    status, headers, body = web.get(campaign_path(cid, api=True))
    assert status == 200, body[:500]
    doc = json.loads(body)
    expected = _expected(web, spec)
    assert doc["analyses"] == list(expected)
    assert {name: doc[name] for name in expected} == expected
    assert "answer" in doc["estimate"], doc["estimate"]  # the example campaign has an estimate
    assert doc["n_reports"] == N_REPORTS
    privacy = doc["privacy"]
    eps_inf = spec.epsilon_inf(params)
    assert privacy["epsilon"] == doc["estimate"]["answer"]["epsilon"] == params.epsilon
    assert privacy["delta"] == spec.delta(params)
    assert privacy["epsilon_inf"] == (eps_inf if math.isfinite(eps_inf) else "inf")
    assert privacy["memoized"] == math.isfinite(eps_inf)
    assert privacy["reports_per_device"] == spec.reports_per_device

    status, headers, body = web.get(campaign_path(cid))  # the analyses are cached by now: none pending
    assert status == 200 and headers["content-type"].startswith("text/html"), body[:500]
    html = body.decode()
    assert "pending-" not in html and "Traceback" not in html
    assert f"data-value='{privacy['delta']!r}'" in html and f"data-value='{params.epsilon!r}'" in html
    for name in expected:
        section = doc[name]
        if "error" in section:
            assert "The Analyst service answers" in html
            continue
        for table_id, number in _first_numbers(name, section["answer"]):
            assert f'data-value="{number!r}"' in _table(html, table_id), (name, table_id, number)
