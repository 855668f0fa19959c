"""The web view over plain HTTP (issue 19): the same numbers as the Analyst service, access by token, clear
errors for bad requests, nothing stored changes; its configuration and TLS. The browser tests are in
test_web_browser.py."""

from __future__ import annotations

import json
import queue
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, decode_pb2, estimates_pb2
from ldp_aggregator.analysis import estimate_to_dict
from ldp_aggregator.association import association_response_to_dict
from ldp_aggregator.auth import Role
from ldp_aggregator.config import load_settings
from ldp_aggregator.export import campaign_to_dict
from ldp_aggregator.rappor_decode import decode_response_to_dict
from ldp_aggregator.ratelimit import Limits
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import open_store
from ldp_aggregator.store import list_tokens
from ldp_aggregator.web import app as web_app
from ldp_aggregator.web.app import resolve_marginals, resolve_ranges
from ldp_aggregator.web.data import (
    DEFAULT_QUANTILES,
    CampaignQuery,
    CampaignState,
    RateTracker,
    default_cdf_ranges,
)
from ldp_aggregator.web.http import HttpError
from ldp_client import wire
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.calm import CalmParams
from tests.ldp_aggregator.test_security import pki  # noqa: F401 (the test CA fixture)
from tests.ldp_aggregator.web_server import (
    CAMPAIGNS,
    HEALTH,
    MARGINAL_ID,
    RANGE_ID,
    RAPPOR_ID,
    SHUFFLER,
    WebServer,
    campaign_path,
    web_server,
)


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    with web_server(tmp_path_factory.mktemp("web")) as s:
        yield s


def _json(web: WebServer, path: str, **kw: Any) -> dict[str, Any]:
    status, headers, body = web.get(path, **kw)
    assert status == 200, body[:300]
    assert headers["content-type"].startswith("application/json")
    doc: dict[str, Any] = json.loads(body)
    return doc


def _without_rate(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "rate"}


# ------------------------------------------------------------------------- the Analyst service's numbers


def test_the_list_is_the_analyst_services_campaigns_with_reports(web: WebServer) -> None:
    doc = _json(web, "/api/campaigns")
    listed = web.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest(), metadata=web.md())
    assert [c["id"] for c in doc["campaigns"]] == [c.id for c in listed.campaigns] == list(CAMPAIGNS)
    for mine, msg in zip(doc["campaigns"], listed.campaigns, strict=True):
        expected = campaign_to_dict(msg)
        assert {k: mine[k] for k in expected} == expected
        est = web.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id=msg.id), metadata=web.md())
        assert mine["n_reports"] == est.n_reports
        assert mine["n_batches"] == (0 if msg.id == "empty" else 1)
        assert mine["rate"]["reports_per_s_since_created"] > 0 or msg.id == "empty"
    # The HTML list and ?format=json are the same view.
    same = _json(web, "/?format=json")
    assert [_without_rate(c) for c in same["campaigns"]] == [_without_rate(c) for c in doc["campaigns"]]


@pytest.mark.parametrize("query", ["", "?confidence=0.9&correction=bh&alpha=0.01"])
def test_each_campaign_is_the_analyst_services_answers(web: WebServer, query: str) -> None:
    confidence = 0.9 if query else 0.0
    for cid in CAMPAIGNS:
        doc = _json(web, campaign_path(cid, api=True) + query)
        assert doc["id"] == cid
        est = web.analyst.GetEstimate(
            estimates_pb2.EstimateRequest(campaign_id=cid, confidence=confidence), metadata=web.md()
        )
        assert doc["estimate"] == {"answer": estimate_to_dict(est)}
        assert doc["privacy"]["epsilon"] == est.epsilon
        assert doc["n_reports"] == est.n_reports
        if cid == RAPPOR_ID:
            dec = web.analyst.DecodeRappor(
                decode_pb2.DecodeRapporRequest(
                    campaign_id=cid,
                    confidence=confidence,
                    alpha=0.01 if query else 0.0,
                    correction=decode_pb2.MULTIPLE_TESTING_BENJAMINI_HOCHBERG if query else 0,
                ),
                metadata=web.md(),
            )
            assert doc["analyses"] == ["estimate", "decode"]
            assert doc["decode"] == {"answer": decode_response_to_dict(dec)}
            assert [c["detected"] for c in doc["decode"]["answer"]["candidates"]] == [
                True,
                True,
                False,
                False,
            ]
        elif cid == "pair":
            assoc = web.analyst.EstimateAssociation(
                decode_pb2.AssociationRequest(campaign_id=cid, confidence=confidence), metadata=web.md()
            )
            assert doc["analyses"] == ["estimate", "association"]
            assert doc["association"] == {"answer": association_response_to_dict(assoc)}
        elif cid == RANGE_ID:  # by default the quartiles and the CDF at about the tenths of the domain
            assert doc["analyses"] == ["estimate", "ranges"]
            wanted = default_cdf_ranges(100)
            assert [t for _, t in wanted] == [9, 19, 29, 39, 49, 59, 69, 79, 89]
            assert doc["view"]["range_query"] == {
                "ranges": [list(r) for r in wanted],
                "quantiles": [0.25, 0.5, 0.75],
                "default_ranges": True,
                "default_quantiles": True,
            }
            answer = _ranges_of(web, cid, wanted, DEFAULT_QUANTILES, confidence)
            assert doc["ranges"] == {"answer": answer}
            assert len(answer["ranges"]) == 9 and len(answer["quantiles"]) == 3
        elif cid == MARGINAL_ID:  # by default every chosen marginal of the campaign
            assert doc["analyses"] == ["estimate", "marginals"]
            chosen = [["sex", "age"], ["age", "smoker"]]
            assert doc["view"]["marginal_query"] == {
                "marginals": chosen,
                "non_negative": False,
                "default_marginals": True,
                "chosen_marginals": chosen,
            }
            answer = _marginals_of(web, cid, chosen, False, confidence)
            assert doc["marginals"] == {"answer": answer}
            assert [len(m["cells"]) for m in answer["marginals"]] == [6, 6]
        else:
            assert doc["analyses"] == ["estimate"]
        # /campaigns/ID?format=json is the same document.
        sep = "&" if query else "?"
        same = _json(web, campaign_path(cid) + query + sep + "format=json")
        assert _without_rate(same) == _without_rate(doc)


def _ranges_of(
    web: WebServer, cid: str, ranges: Any, quantiles: Any, confidence: float = 0.0
) -> dict[str, Any]:
    """The ranges and quantiles of ``Analyst.GetEstimate``'s answer (JSON), over gRPC."""
    est = web.analyst.GetEstimate(
        estimates_pb2.EstimateRequest(
            campaign_id=cid,
            confidence=confidence,
            ranges=[estimates_pb2.RangeQuery(lo=lo, hi=hi) for lo, hi in ranges],
            quantiles=quantiles,
        ),
        metadata=web.md(),
    )
    doc = estimate_to_dict(est)
    return {"ranges": doc.get("ranges", []), "quantiles": doc.get("quantiles", [])}


def test_ranges_and_quantiles_asked_for_are_the_analyst_services(web: WebServer) -> None:
    # Positions or labels of the domain (here the same: ages 0..99), repeatable, in request order.
    query = "?range=18:64&range=0:17&range=65:99&range=30:30&quantile=0.1&quantile=0.9&confidence=0.9"
    doc = _json(web, campaign_path(RANGE_ID, api=True) + query)
    wanted = [(18, 64), (0, 17), (65, 99), (30, 30)]
    assert doc["ranges"] == {"answer": _ranges_of(web, RANGE_ID, wanted, [0.1, 0.9], 0.9)}
    assert doc["view"]["range_query"]["default_ranges"] is False
    # The estimate beside them is still GetEstimate's without ranges.
    est = web.analyst.GetEstimate(
        estimates_pb2.EstimateRequest(campaign_id=RANGE_ID, confidence=0.9), metadata=web.md()
    )
    assert doc["estimate"] == {"answer": estimate_to_dict(est)}
    # Only quantiles: the default CDF points stay.
    doc = _json(web, campaign_path(RANGE_ID, api=True) + "?quantile=0.5")
    assert doc["ranges"] == {"answer": _ranges_of(web, RANGE_ID, default_cdf_ranges(100), [0.5])}
    # The HTML page shows the same numbers (exact values in data-value), a plot and the form.
    status, _, body = web.get(campaign_path(RANGE_ID) + query)
    assert status == 200
    html = body.decode()
    table = html[html.index('<table id="ranges">') :]
    table = table[: table.index("</table>")]
    for r in _ranges_of(web, RANGE_ID, wanted, [0.1, 0.9], 0.9)["ranges"]:
        for key in ("count", "std_error", "ci_low", "ci_high"):
            assert f'data-value="{r[key]!r}"' in table
    assert 'id="quantiles"' in html and 'id="range-form"' in html
    assert html.count("<svg") >= 2  # the items and the ranges
    # A blank range (a form's empty input) counts as absent.
    assert _json(web, campaign_path(RANGE_ID, api=True) + "?range=&quantile=")["view"]["range_query"][
        "default_ranges"
    ]


def test_bad_ranges_and_quantiles_are_a_clear_400_and_change_nothing(web: WebServer) -> None:
    before = _state(web.db)
    too_many = "&".join(["range=0:1"] * (web_app.MAX_RANGES + 1))
    cases = [
        (RANGE_ID, "range=5-10", "range='5-10'", "LO:HI with 0 <= LO <= HI <= 99"),
        (RANGE_ID, "range=0:100", "range='0:100'", "LO:HI with 0 <= LO <= HI <= 99"),
        (RANGE_ID, "range=10:5", "range='10:5'", "LO <= HI"),
        (RANGE_ID, "range=a:b", "range='a:b'", "labels of the domain"),
        (RANGE_ID, too_many, "range='0:1'", f"at most {web_app.MAX_RANGES} range fields"),
        (RANGE_ID, "quantile=1.5", "quantile='1.5'", "a number in (0, 1)"),
        (RANGE_ID, "quantile=0", "quantile='0'", "a number in (0, 1)"),
        ("browser", "range=0:1", "range='0:1'", "only on campaigns of a range mechanism (hio, haar)"),
        ("browser", "quantile=0.5", "quantile='0.5'", "this campaign's mechanism is grr"),
    ]
    for cid, query, names, allowed in cases:
        for api in (False, True):
            status, _, body = web.get(campaign_path(cid, api=api) + "?" + query)
            assert status == 400, (query, body[:300])
            text = json.loads(body)["error"]["message"] if api else body.decode()
            if not api:
                text = text.replace("&#x27;", "'").replace("&lt;", "<").replace("&gt;", ">")
            assert f"query {names} is invalid: allowed" in text and allowed in text, (query, text[:400])
    assert _state(web.db) == before


def _marginals_of(
    web: WebServer, cid: str, queries: Any, non_negative: bool, confidence: float = 0.0
) -> dict[str, Any]:
    """The marginals of ``Analyst.GetEstimate``'s answer (JSON), over gRPC."""
    est = web.analyst.GetEstimate(
        estimates_pb2.EstimateRequest(
            campaign_id=cid,
            confidence=confidence,
            marginals=[estimates_pb2.MarginalQuery(attributes=q, non_negative=non_negative) for q in queries],
        ),
        metadata=web.md(),
    )
    return {"marginals": estimate_to_dict(est)["marginals"]}


def test_marginals_asked_for_are_the_analyst_services(web: WebServer) -> None:
    # Attributes in any order (the cells are listed in that order), each covered by a chosen marginal.
    query = "?marginal=age,sex&marginal=smoker&marginal=age&non_negative=1&confidence=0.9"
    doc = _json(web, campaign_path(MARGINAL_ID, api=True) + query)
    wanted = [["age", "sex"], ["smoker"], ["age"]]
    answer = _marginals_of(web, MARGINAL_ID, wanted, True, 0.9)
    assert doc["marginals"] == {"answer": answer}
    assert doc["view"]["marginal_query"]["marginals"] == wanted
    assert doc["view"]["marginal_query"]["non_negative"] is True
    assert answer["marginals"][0]["cells"][1]["labels"] == ["young", "m"]  # age, then sex
    assert all("non_negative_count" in c for m in answer["marginals"] for c in m["cells"])
    # The estimate beside them is still GetEstimate's without marginals (no item table: a note says so).
    est = web.analyst.GetEstimate(
        estimates_pb2.EstimateRequest(campaign_id=MARGINAL_ID, confidence=0.9), metadata=web.md()
    )
    assert doc["estimate"] == {"answer": estimate_to_dict(est)}
    assert "ask for marginals" in est.note
    # The HTML page shows the same numbers (exact values in data-value), a plot each and the form.
    status, _, body = web.get(campaign_path(MARGINAL_ID) + query)
    assert status == 200
    html = body.decode()
    for k, m in enumerate(answer["marginals"]):
        table = html[html.index(f'<table id="marginal-{k}"') :]
        table = table[: table.index("</table>")]
        assert f'data-attributes="{",".join(m["attributes"])}"' in table
        assert "<th>non-negative count</th>" in table
        for c in m["cells"]:
            row = table[table.index("<td>" + "</td><td>".join(c["labels"]) + "</td>") :]
            row = row[: row.index("</tr>")]
            for key in ("count", "frequency", "std_error", "ci_low", "ci_high", "non_negative_count"):
                assert f'data-value="{c[key]!r}"' in row, (m["attributes"], c["labels"], key)
    assert html.count("<svg") == 3 and 'id="marginal-form"' in html
    assert 'name="non_negative" value="1" checked' in html
    assert html.index("<h2>Marginals") < html.index("<h2>Estimate")  # the headline first
    # Without non_negative: no such column; a blank marginal (a form's empty input) counts as absent.
    doc = _json(web, campaign_path(MARGINAL_ID, api=True) + "?marginal=&marginal=sex")
    assert doc["marginals"] == {"answer": _marginals_of(web, MARGINAL_ID, [["sex"]], False)}
    assert "non_negative_count" not in doc["marginals"]["answer"]["marginals"][0]["cells"][0]
    html = web.get(campaign_path(MARGINAL_ID) + "?marginal=sex")[2].decode()
    assert "non-negative count" not in html and 'id="marginal-1"' not in html


def test_bad_marginals_are_a_clear_400_and_change_nothing(web: WebServer) -> None:
    before = _state(web.db)
    too_many = "&".join(["marginal=sex"] * (web_app.MAX_MARGINALS + 1))
    covered = "covered by one chosen marginal (sex,age; age,smoker)"
    not_calm = "only on campaigns of a marginal mechanism (calm); this campaign's mechanism is grr"
    cases = [
        (MARGINAL_ID, "marginal=sex,weight", "marginal='sex,weight'", "among sex, age, smoker"),
        (MARGINAL_ID, "marginal=sex,smoker", "marginal='sex,smoker'", covered),
        (MARGINAL_ID, "marginal=sex,age,smoker", "marginal='sex,age,smoker'", covered),
        (MARGINAL_ID, "marginal=sex,sex", "marginal='sex,sex'", "each once"),
        (MARGINAL_ID, "marginal=,", "marginal=','", "attribute names joined by ','"),
        (MARGINAL_ID, too_many, "marginal='sex'", f"at most {web_app.MAX_MARGINALS} marginal fields"),
        (MARGINAL_ID, "non_negative=yes", "non_negative='yes'", "0 or 1"),
        (MARGINAL_ID, "non_negative=1&non_negative=1", "non_negative='1'", "the field once"),
        (MARGINAL_ID, "range=0:1", "range='0:1'", "only on campaigns of a range mechanism"),
        ("browser", "marginal=sex", "marginal='sex'", not_calm),
        ("browser", "non_negative=1", "non_negative='1'", not_calm),
        ("browser", "non_negative=0", "non_negative='0'", not_calm),
    ]
    for cid, query, names, allowed in cases:
        for api in (False, True):
            status, _, body = web.get(campaign_path(cid, api=api) + "?" + query)
            assert status == 400, (query, body[:300])
            text = json.loads(body)["error"]["message"] if api else body.decode()
            if not api:
                text = text.replace("&#x27;", "'").replace("&lt;", "<").replace("&gt;", ">")
            assert f"query {names} is invalid: allowed" in text and allowed in text, (query, text[:400])
    assert _state(web.db) == before


def test_a_marginal_is_attribute_names_covered_by_a_chosen_marginal() -> None:
    state = CampaignState(
        doc={"mechanism": "calm"},
        info=None,
        version=(1, 9, False),
        range_labels=None,
        marginal_attributes=("a", "b", "c"),
        chosen_marginals=(("a", "b"), ("b", "c")),
    )
    query = resolve_marginals(CampaignQuery(), {}, {"marginal": ["b,a", " c ", "b , c"]}, state)
    assert query.marginals == (("b", "a"), ("c",), ("b", "c"))
    assert resolve_marginals(CampaignQuery(), {}, {}, state).marginals is None  # every chosen one
    assert CampaignQuery().marginal_options(state.chosen_marginals or ())["queries"] == (
        ("a", "b"),
        ("b", "c"),
    )
    for bad in ("a,c", "a,b,c", "d", "a,a", ""):
        with pytest.raises(
            HttpError, match=r"among a, b, c, each once, covered by one chosen marginal \(a,b; b,c\)"
        ):
            resolve_marginals(CampaignQuery(), {}, {"marginal": [bad]}, state)


def test_a_range_is_values_of_the_domain_or_positions() -> None:
    state = CampaignState(
        doc={"mechanism": "hio"}, info=None, version=(1, 9, False), range_labels=("low", "mid", "high")
    )
    query = resolve_ranges(CampaignQuery(), {"range": ["low:mid", "1:2", "mid : high", "0:0"]}, state)
    assert query.ranges == ((0, 1), (1, 2), (1, 2), (0, 0))
    assert resolve_ranges(CampaignQuery(), {}, state).ranges is None  # the defaults:
    assert default_cdf_ranges(3) == ((0, 0), (0, 1))  # never the last value (its CDF is 1)
    assert default_cdf_ranges(2) == ((0, 0),)
    assert default_cdf_ranges(1000)[-1] == (0, 899)
    for bad in ("high:low", "2:1", "low:3", "low", "low:mid:high", "-1:2"):
        with pytest.raises(
            HttpError, match=r"allowed LO:HI with 0 <= LO <= HI <= 2, .*\('low' \.\.\. 'high'\)"
        ):
            resolve_ranges(CampaignQuery(), {"range": [bad]}, state)


def test_the_privacy_block(web: WebServer) -> None:
    # A declared shuffler: the central (epsilon, delta) of a shuffled batch, as GetEstimate gives it.
    doc = _json(web, campaign_path(RANGE_ID, api=True))
    est = web.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id=RANGE_ID), metadata=web.md())
    shuffle = estimate_to_dict(est)["shuffle"]
    assert doc["estimate"]["answer"]["shuffle"] == shuffle
    assert shuffle["batch_reports"] == SHUFFLER.batch_reports and shuffle["delta"] == SHUFFLER.delta
    assert shuffle["epsilon_numerical"] < est.epsilon
    _, _, body = web.get(campaign_path(RANGE_ID))
    block = body.decode().split("<dl id='privacy'>", 1)[1].split("</dl>", 1)[0]
    for key in ("batch_reports", "delta", "epsilon_numerical", "epsilon_closed_form"):
        assert f"data-value='{shuffle[key]!r}'" in block, key
    assert "id='privacy-shuffle'" in block
    assert "privacy-shuffle" not in _html_text(web, "browser")  # no shuffler declared
    # Pure epsilon-LDP: delta 0; discovery: one report per device; RAPPOR: memoized, epsilon_inf finite.
    privacy = {cid: _json(web, campaign_path(cid, api=True))["privacy"] for cid in CAMPAIGNS}
    assert {cid: p["delta"] for cid, p in privacy.items()} == dict.fromkeys(CAMPAIGNS, 0.0)
    assert {cid: p["reports_per_device"] for cid, p in privacy.items()} == {
        cid: (1 if cid == "words" else None) for cid in CAMPAIGNS
    }
    assert {cid for cid, p in privacy.items() if p["memoized"]} == {RAPPOR_ID}
    assert privacy[RAPPOR_ID]["epsilon_inf"] != "inf" and "epsilon_inf" in privacy[RAPPOR_ID]["device_spend"]
    assert "at most 1 report" in privacy["words"]["device_spend"]
    for p in privacy.values():
        assert "privacy ledger" in p["device_spend"] and "no device identifier" in p["device_spend"]
    assert "at most 1 report" in _html_text(web, "words")


def _html_text(web: WebServer, cid: str) -> str:
    status, _, body = web.get(campaign_path(cid))
    assert status == 200
    return body.decode()


def test_the_discovery_detected_flag_is_a_view_level_field(web: WebServer) -> None:
    doc = _json(web, campaign_path("words", api=True))
    items = doc["estimate"]["answer"]["items"]
    assert doc["view"]["discovery_detected"] == [it["ci_low"] > 0 for it in items]
    assert any(doc["view"]["discovery_detected"])
    assert "view" not in _json(web, campaign_path("browser", api=True))


def test_a_refusal_is_shown_as_the_service_answers_it(web: WebServer) -> None:
    # A numeric population size on a frequency campaign: GetEstimate answers INVALID_ARGUMENT.
    doc = _json(web, campaign_path("browser", api=True) + "?population_size=10")
    assert doc["estimate"]["error"]["code"] == "INVALID_ARGUMENT"
    assert "population_size" in doc["estimate"]["error"]["message"]
    status, _, body = web.get(campaign_path("browser") + "?population_size=10")
    assert status == 200 and b"INVALID_ARGUMENT" in body


def _marginal_campaign_without_reports(s: WebServer) -> None:
    params = CalmParams.from_epsilon(HEALTH, ((0, 1), (1, 2)), 2.0)
    msg = wire.campaign_to_proto(campaign_id=MARGINAL_ID, params=params)
    s.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg), metadata=s.md(Role.ADMIN))


def test_a_marginal_refusal_is_shown_as_the_service_answers_it(tmp_path: Path) -> None:
    # No report yet: GetEstimate refuses the marginals (a group without reports); the estimate stays shown.
    with web_server(tmp_path, fill=_marginal_campaign_without_reports) as s:
        doc = _json(s, campaign_path(MARGINAL_ID, api=True) + "?marginal=sex")
        with pytest.raises(grpc.RpcError) as refused:
            _marginals_of(s, MARGINAL_ID, [["sex"]], False)
        error = {"code": refused.value.code().name, "message": refused.value.details()}
        assert doc["marginals"] == {"error": error} and "group 1 has none" in error["message"]
        assert "answer" in doc["estimate"]
        status, _, body = s.get(campaign_path(MARGINAL_ID) + "?marginal=sex")
        html = body.decode().replace("&#x27;", "'")
        assert status == 200 and f"answers {error['code']}: {error['message']}" in html
        assert "<h2>Marginals</h2>" in html


def test_an_html_page_shows_what_is_ready_and_reloads_until_the_rest_is(
    web: WebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_app, "HTML_WAIT_S", 0.0)
    status, _, body = web.get(campaign_path(RAPPOR_ID) + "?confidence=0.8")  # options not computed yet
    assert status == 200
    assert b'<meta http-equiv="refresh" content="2">' in body and b'id="pending-decode"' in body
    doc = _json(web, campaign_path(RAPPOR_ID, api=True) + "?confidence=0.8")  # JSON waits for all
    assert doc["decode"]["answer"]["confidence"] == 0.8
    status, _, body = web.get(campaign_path(RAPPOR_ID) + "?confidence=0.8")  # now from the cache
    assert b"pending-" not in body and b'http-equiv="refresh"' not in body
    # They ran on the view's own threads, not on those the gRPC servicers estimate and commit on.
    assert any(t.name.startswith("ldp-web") for t in threading.enumerate())


def test_rates_from_the_views_own_samples() -> None:
    now = [100.0]
    rates = RateTracker(clock=lambda: now[0])
    assert rates.observe("c", 10) == (None, None)  # one sample: no rate yet
    now[0] = 100.5
    assert rates.observe("c", 20) == (None, None)  # under a second apart: not a new sample
    now[0] = 110.0
    assert rates.observe("c", 110) == (10.0, 10.0)
    now[0] = 500.0  # the old samples leave the window
    assert rates.observe("c", 200) == (None, None)
    # Loads less than a second apart take no sample: a burst of reloads cannot push out the oldest one.
    for i in range(1, 200):
        now[0] = 500.0 + i / 1000
        rates.observe("c", 200 + i)
    now[0] = 510.0
    assert rates.observe("c", 1200) == (100.0, 10.0)


# ------------------------------------------------------------------------------------------------ access


def test_missing_wrong_and_reporter_tokens_are_refused(web: WebServer) -> None:
    for path in ("/", "/api/campaigns", campaign_path("browser"), campaign_path(RAPPOR_ID, api=True)):
        status, headers, body = web.get(path, role=None)
        assert status == 401, path
        assert headers["www-authenticate"].startswith("Bearer")
        assert b"browser" not in body.replace(b"/campaigns/browser", b"")  # nothing of the campaign
        status, _, _ = web.get(path, role=None, headers={"Authorization": "Bearer ldp_wrong"})
        assert status == 401
        status, _, body = web.get(path, role=Role.REPORTER)
        assert status == 403 and b"reporter" in body
        for role in (Role.ANALYST, Role.ADMIN):
            assert web.get(path, role=role)[0] == 200
    status, _, body = web.get("/", role=None)
    assert b'action="/login"' in body  # the sign-in form
    status, _, body = web.get("/api/campaigns", role=None)
    assert json.loads(body)["error"]["status"] == 401


def test_login_sets_a_cookie_that_opens_the_pages(web: WebServer) -> None:
    token = web.tokens[Role.ANALYST]
    status, headers, _ = web.get(f"/login?token={token}&next=/campaigns/browser", role=None)
    assert status == 303 and headers["location"] == "/campaigns/browser"
    cookie = headers["set-cookie"]
    assert (
        cookie.startswith(f"{web_app.COOKIE}={token};")
        and "HttpOnly" in cookie
        and "SameSite=Strict" in cookie
    )
    assert web.get("/campaigns/browser", role=None, headers={"Cookie": f"{web_app.COOKIE}={token}"})[0] == 200
    assert web.get("/", role=None, headers={"Cookie": f"{web_app.COOKIE}=ldp_nope"})[0] == 401
    # Wrong tokens, a reporter's, a token that would break the header, a redirect off the site.
    assert web.get("/login?token=ldp_nope", role=None)[0] == 401
    assert web.get(f"/login?token={web.tokens[Role.REPORTER]}", role=None)[0] == 403
    status, headers, _ = web.get("/login?token=a%0d%0aSet-Cookie:%20x=1", role=None)
    assert status == 401 and "set-cookie" not in headers
    assert web.get(f"/login?token={token}&next=//evil.example/", role=None)[0] == 400
    status, headers, _ = web.get("/logout", role=None)
    assert status == 303 and "Max-Age=0" in headers["set-cookie"]


def test_requests_without_a_valid_token_share_the_grpc_ports_budget_per_address(tmp_path: Path) -> None:
    limits = Limits(failed_auth_per_s=0.01, failed_auth_burst=3)
    with web_server(tmp_path, limits=limits) as s:
        assert [s.get("/", role=None)[0] for _ in range(3)] == [401, 401, 401]
        status, headers, body = s.get("/login?token=ldp_wrong", role=None)
        assert status == 429 and int(headers["retry-after"]) >= 1 and b"too many calls" in body
        assert s.get("/")[0] == 200  # a valid token is never counted


# ------------------------------------------------------------------------------------------- bad input


def _raw(web: WebServer, request: bytes) -> tuple[int, bytes]:
    """Send raw bytes; (status, whole response)."""
    port = int(web.url.rsplit(":", 1)[1].strip("/"))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    data = b"".join(chunks)
    return int(data.split(b" ", 2)[1]), data


def _state(db: Path) -> tuple[Any, ...]:
    store = open_store(str(db), read_only=True)
    try:
        campaigns = [
            (r, store.accumulator(r.campaign_id).to_bytes(), store.batch_count(r.campaign_id))
            for r in store.list_campaigns()
        ]
        return (*campaigns, tuple(list_tokens(db)))
    finally:
        store.close()


def test_bad_requests_get_clear_errors_and_change_nothing(web: WebServer) -> None:
    before = _state(web.db)
    auth = f"Authorization: Bearer {web.tokens[Role.ADMIN]}\r\n".encode()
    cases: list[tuple[bytes, int, bytes]] = [
        (b"GET /campaigns/nope HTTP/1.1\r\n" + auth + b"\r\n", 404, b"no campaign &#x27;nope&#x27;"),
        (b"GET /api/campaigns/nope HTTP/1.1\r\n" + auth + b"\r\n", 404, b'"status":404'),
        (b"GET /nothing/here HTTP/1.1\r\n" + auth + b"\r\n", 404, b"no page at"),
        (b"GET /?colour=red HTTP/1.1\r\n" + auth + b"\r\n", 400, b"allowed one of format"),
        (b"GET /campaigns/browser?confidence=2 HTTP/1.1\r\n" + auth + b"\r\n", 400, b"a number in (0, 1)"),
        (b"GET /campaigns/browser?page=0 HTTP/1.1\r\n" + auth + b"\r\n", 400, b"page"),
        (b"GET /campaigns/browser?page=1&page=2 HTTP/1.1\r\n" + auth + b"\r\n", 400, b"once"),
        (b"GET /campaigns/browser?correction=holm HTTP/1.1\r\n" + auth + b"\r\n", 400, b"bonferroni or bh"),
        (b"GET /campaigns/browser?format=xml HTTP/1.1\r\n" + auth + b"\r\n", 400, b"html or json"),
        (b"GET /campaigns/browser?confidence HTTP/1.1\r\n" + auth + b"\r\n", 400, b"malformed query"),
        (b"GET /api/campaigns?%ff=1 HTTP/1.1\r\n" + auth + b"\r\n", 400, b"malformed query"),
        (b"GET /campaigns/%ff HTTP/1.1\r\n" + auth + b"\r\n", 400, b"campaign id"),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414, b"request line"),
        (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431, b"headers"),
        (b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 70 + b"\r\n", 431, b"headers"),
        (b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 413, b"request body"),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 413, b"request body"),
        (b"POST /api/campaigns HTTP/1.1\r\n" + auth + b"Content-Length: 2\r\n\r\n{}", 405, b"read-only"),
        (b"DELETE /campaigns/browser HTTP/1.1\r\n" + auth + b"\r\n", 405, b"read-only"),
        (b"PUT /campaigns/browser HTTP/1.1\r\n" + auth + b"\r\n", 405, b"read-only"),
        (b"GET / HTTP/2.0\r\n\r\n", 505, b"HTTP/1.x"),
        (b"GET http://x/ HTTP/1.1\r\n\r\n", 400, b"a path from"),
        (b"\x16\x03\x01garbage\r\n\r\n", 400, b"request line"),
        (b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n", 400, b"ASCII"),
        (b"GET /\r\n\r\n", 400, b"request line"),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400, b"header line"),
        (b"GET / HTTP/1.1\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n", 400, b"sent 2 times"),
    ]
    for request, status, says in cases:
        got, data = _raw(web, request)
        assert (got, says in data) == (status, True), (request[:60], data[:400])
        assert b"Traceback" not in data and b'File "' not in data
        if status == 405:
            assert b"\r\nAllow: GET, HEAD\r\n" in data
    # HEAD: the headers of GET, no body.
    got, data = _raw(web, b"HEAD /api/campaigns HTTP/1.1\r\n" + auth + b"\r\n")
    assert got == 200 and data.endswith(b"\r\n\r\n") and b"Content-Length: " in data
    assert _state(web.db) == before


# ------------------------------------------------------------------------------ configuration and TLS


def test_the_web_view_is_off_by_default_and_its_settings_are_checked(tmp_path: Path) -> None:
    with BackgroundServer(ServerConfig(db=tmp_path / "a.sqlite3", listen="127.0.0.1:0")) as server:
        assert server.web_url is None
    for bad in (
        {"web_port": -1},
        {"web_port": 70000},
        {"web_port": True},
        {"web_host": "a b"},
        {"web_host": ""},
    ):
        with pytest.raises(InvalidParameterError, match=next(iter(bad))):
            ServerConfig(**bad)  # type: ignore[arg-type]
    assert ServerConfig(web_host="::1").web_host == "::1"
    # Without any access token, only loopback (as for the gRPC port).
    config = ServerConfig(db=tmp_path / "b.sqlite3", listen="127.0.0.1:0", web_port=0, web_host="0.0.0.0")
    with pytest.raises(InvalidParameterError, match="web_host"):
        BackgroundServer(config).start()
    settings = tmp_path / "s.toml"
    settings.write_text('web_port = 0\nweb_host = "localhost"\n', encoding="utf-8")
    server_config = load_settings(settings).server
    assert (server_config.web_port, server_config.web_host) == (0, "localhost")


def test_web_view_over_tls_with_the_grpc_certificate(tmp_path: Path, pki: Any) -> None:  # noqa: F811
    creds = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    with web_server(tmp_path, creds, tls_cert=pki.server_cert, tls_key=pki.server_key) as s:
        assert s.url.startswith("https://127.0.0.1:")
        port = int(s.url.rsplit(":", 1)[1].strip("/"))
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            token = s.tokens[Role.ANALYST]
            tls.sendall(f"GET /api/campaigns HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 200 ") and b'"browser"' in data
        # Plain HTTP to the TLS port gets nothing.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
            plain.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert not plain.recv(65536).startswith(b"HTTP/1.1 200")


def test_web_view_over_mutual_tls_needs_a_client_certificate(tmp_path: Path, pki: Any) -> None:  # noqa: F811
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=pki.client_key.read_bytes(),
        certificate_chain=pki.client_cert.read_bytes(),
    )
    with web_server(
        tmp_path, creds, tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca
    ) as s:
        port = int(s.url.rsplit(":", 1)[1].strip("/"))
        request = f"GET /api/campaigns HTTP/1.1\r\nAuthorization: Bearer {s.tokens[Role.ANALYST]}\r\n\r\n"

        def fetch(ctx: ssl.SSLContext) -> bytes:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
                ctx.wrap_socket(raw, server_hostname="localhost") as tls,
            ):
                tls.sendall(request.encode())
                data = b""
                while chunk := tls.recv(65536):
                    data += chunk
            return data

        with_cert = ssl.create_default_context(cafile=str(pki.ca))
        with_cert.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        assert fetch(with_cert).startswith(b"HTTP/1.1 200 ")
        # Without a client certificate, or with one of another CA, the server ends the handshake (under
        # TLS 1.3 the client sees it at its first read: an alert, or the connection closed); nothing is
        # served.
        intruder = ssl.create_default_context(cafile=str(pki.ca))
        intruder.load_cert_chain(str(pki.other_client_cert), str(pki.other_client_key))
        for ctx in (ssl.create_default_context(cafile=str(pki.ca)), intruder):
            try:
                got = fetch(ctx)
            except (ssl.SSLError, ConnectionError) as exc:
                got = repr(exc).encode()
            assert b"HTTP/1.1" not in got and b"browser" not in got, got[:200]


def _lines(stream: Any) -> queue.Queue[str]:
    """A child's output lines, read by a thread (a missing line must fail the test, not hang it)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        with stream:  # closed here, at the end of the output, not under the reading thread's feet
            for line in stream:
                lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _line(lines: queue.Queue[str], timeout_s: float = 60.0) -> str:
    try:
        return lines.get(timeout=timeout_s)
    except queue.Empty:
        return ""


def test_serve_prints_the_web_address(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "ldp_aggregator", "serve", "--db", str(tmp_path / "s.sqlite3"),
           "--listen", "127.0.0.1:0", "--web-port", "0"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        lines = _lines(proc.stdout)
        assert _line(lines).startswith("ready on port ")
        line = _line(lines).strip()
        assert line.startswith("web view on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1].strip("/"))
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /api/campaigns HTTP/1.1\r\n\r\n")  # no token in the database: open
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        # Authentication off accepts any token at /login, but never one that would break the header.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /login?token=a%0d%0aSet-Cookie:%20x=1 HTTP/1.1\r\n\r\n")
            head = sock.recv(65536).partition(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 401 ") and b"x=1" not in head
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
    assert code == 0
