"""The web view in a real browser (issue 19): Debian's Chromium, headless, driven by Playwright.

One browser for the module. The pages load, show the numbers the Analyst service answers over gRPC in the
same test, refuse a missing or wrong token (and sign in through the form), and a screenshot is taken and
checked. Without Chromium (``/usr/bin/chromium``, or ``LDP_CHROMIUM``) or the ``playwright`` package the
tests are skipped with the reason, except under CI (``CI=true``), where they fail: ``make test`` installs
Chromium as root when it is missing.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ldp_aggregator._proto.ldp.v1 import decode_pb2, estimates_pb2
from ldp_aggregator.auth import Role
from ldp_aggregator.web.data import DEFAULT_QUANTILES, default_cdf_ranges
from tests.ldp_aggregator.web_server import (
    BROWSERS,
    CAMPAIGNS,
    MARGINAL_ID,
    RANGE_ID,
    RAPPOR_ID,
    WebServer,
    campaign_path,
    web_server,
)

CHROMIUM = Path(os.environ.get("LDP_CHROMIUM", "/usr/bin/chromium"))
#: The flags a sandboxed, offline machine needs (docs/web.md); Playwright adds --headless and a fresh,
#: temporary --user-data-dir of its own at every launch.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests must run under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    with web_server(tmp_path_factory.mktemp("web-browser")) as s:
        yield s


@pytest.fixture
def page(browser: Any, web: WebServer) -> Iterator[Any]:
    """A page whose requests carry an analyst token (Authorization: Bearer)."""
    context = browser.new_context(
        extra_http_headers={"Authorization": f"Bearer {web.tokens[Role.ANALYST]}"},
        viewport={"width": 1200, "height": 900},
    )
    try:
        yield context.new_page()
    finally:
        context.close()


def _rows(page: Any, table: str) -> dict[str, list[tuple[float, str]]]:
    """Rows of a table by their first cell's text: each number cell's exact value and shown text."""
    out: dict[str, list[tuple[float, str]]] = {}
    for row in page.locator(f"table#{table} tr").all()[1:]:
        cells = row.locator("td").all()
        label = cells[0].inner_text()
        out[label] = [
            (float(c.get_attribute("data-value")), c.inner_text())
            for c in cells[1:]
            if c.get_attribute("class") == "n"
        ]
    return out


def _ready(page: Any, selector: str) -> None:
    """Wait until the page shows ``selector``: a page whose analyses are still being computed reloads
    itself every 2 s until they are ready."""
    page.locator(selector).wait_for(timeout=60_000)


def _shown_matches(text: str, value: float) -> bool:
    """The rounded text a person reads is the exact value to the shown precision."""
    number = float(text.replace(",", "").replace("∞", "inf"))
    return abs(number - value) <= max(0.5, abs(value) * 1e-3)


def test_pages_load_and_show_the_analyst_services_numbers(page: Any, web: WebServer) -> None:
    response = page.goto(web.url)
    assert response.status == 200
    assert page.title().startswith("campaigns")
    assert page.locator("table#campaigns tr").count() == 1 + len(CAMPAIGNS)
    # Follow the list's link, as a person would.
    page.get_by_role("link", name="browser", exact=True).click()
    page.wait_for_url("**/campaigns/browser")
    est = web.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="browser"), metadata=web.md())
    rows = _rows(page, "estimate-items")
    assert sorted(rows) == sorted(BROWSERS)
    for i, item in enumerate(est.items):
        cells = rows[item.label]
        expected = [item.count, item.frequency, item.std_error, item.ci_low, item.ci_high]
        # ... and beside them the post-processed counts (Norm-Sub, clipped), one column per method.
        expected += [pp.counts[i] for pp in est.postprocessed]
        assert [v for v, _ in cells] == expected
        assert all(_shown_matches(text, v) for v, text in cells)
    assert len(est.postprocessed) == 2
    assert float(page.locator("#privacy dd").first.get_attribute("data-value")) == est.epsilon
    assert page.locator("svg.plot circle").count() == len(BROWSERS)

    # RAPPOR: decoded counts, detected or not, in the table and the plot.
    assert page.goto(web.url.rstrip("/") + campaign_path(RAPPOR_ID)).status == 200
    _ready(page, "table#decode-candidates")
    dec = web.analyst.DecodeRappor(decode_pb2.DecodeRapporRequest(campaign_id=RAPPOR_ID), metadata=web.md())
    rows = _rows(page, "decode-candidates")
    for c in dec.candidates:
        expected = [c.count, c.proportion, c.std_error, c.ci_low, c.ci_high, c.z, c.p_value]
        assert [v for v, _ in rows[c.label]] == expected
    detected = {
        r.locator("td").first.inner_text(): r.locator("td").last.get_attribute("data-value")
        for r in page.locator("table#decode-candidates tr").all()[1:]
    }
    assert detected == {c.label: str(c.detected).lower() for c in dec.candidates}
    assert page.locator("svg.plot circle.det").count() == dec.n_detected == 2

    # Paired: the joint distribution of the association.
    assert page.goto(web.url.rstrip("/") + campaign_path("pair")).status == 200
    _ready(page, "table#joint")
    assoc = web.analyst.EstimateAssociation(
        decode_pb2.AssociationRequest(campaign_id="pair"), metadata=web.md()
    )
    shown = [float(v) for v in page.locator("table#joint td").evaluate_all(
        "cells => cells.map(c => c.dataset.value)")]  # fmt: skip
    assert shown == [c.proportion for c in assoc.cells]

    # Discovery: the values found, "detected" when the interval lies above zero, and the levels.
    assert page.goto(web.url.rstrip("/") + campaign_path("words")).status == 200
    found = web.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="words"), metadata=web.md())
    rows = _rows(page, "estimate-items")
    assert {label: [v for v, _ in cells] for label, cells in rows.items()} == {
        it.label: [it.count, it.frequency, it.std_error, it.ci_low, it.ci_high] for it in found.items
    }
    flags = page.locator("table#estimate-items td:last-child").evaluate_all(
        "cells => cells.map(c => c.dataset.value)"
    )
    assert flags == [str(it.ci_low > 0).lower() for it in sorted(found.items, key=lambda it: -it.count)]
    assert {"cat", "dog", "owl"} <= set(rows)
    levels = page.locator("table#levels td").evaluate_all("cells => cells.map(c => c.dataset.value)")
    assert [float(v) for v in levels] == [
        float(x)
        for lv in found.discovery_levels
        for x in (lv.level, lv.reports, lv.tested, lv.kept, lv.threshold)
    ]


def _range_answers(web: WebServer, ranges: Any, quantiles: Any) -> estimates_pb2.EstimateResponse:
    request = estimates_pb2.EstimateRequest(
        campaign_id=RANGE_ID,
        ranges=[estimates_pb2.RangeQuery(lo=lo, hi=hi) for lo, hi in ranges],
        quantiles=quantiles,
    )
    response: estimates_pb2.EstimateResponse = web.analyst.GetEstimate(request, metadata=web.md())
    return response


def _check_ranges(page: Any, est: estimates_pb2.EstimateResponse) -> None:
    """The page's ranges and quantiles tables hold the Analyst service's numbers, exactly and as shown."""
    rows = page.locator("table#ranges tr").all()[1:]
    assert len(rows) == len(est.ranges)
    for row, r in zip(rows, est.ranges, strict=True):
        cells = row.locator("td.n").all()
        values = [float(c.get_attribute("data-value")) for c in cells]
        assert values == [r.lo, r.hi, r.count, r.frequency, r.std_error, r.ci_low, r.ci_high]
        assert all(_shown_matches(c.inner_text(), v) for c, v in zip(cells, values, strict=True))
    quantiles = _rows(page, "quantiles")  # by the q shown: (position,)
    assert len(quantiles) == len(est.quantiles)
    shown = {float(r.locator("td").first.get_attribute("data-value")): r for r in
             page.locator("table#quantiles tr").all()[1:]}  # fmt: skip
    for q in est.quantiles:
        cells = shown[q.q].locator("td").all()
        assert int(cells[1].get_attribute("data-value")) == q.position and cells[2].inner_text() == q.label


def test_a_range_campaigns_quantiles_and_cdf(page: Any, web: WebServer) -> None:
    # By default: the quartiles and the CDF at about the tenths of the domain, plotted with intervals.
    assert page.goto(web.url.rstrip("/") + campaign_path(RANGE_ID)).status == 200
    # The estimate's first computation of the shuffled batch's numerical epsilon takes seconds: the page
    # reloads itself until it is there, and then no more.
    _ready(page, "#privacy-shuffle")
    _ready(page, "table#ranges")
    assert page.locator("[id^=pending-]").count() == 0
    est = _range_answers(web, default_cdf_ranges(100), DEFAULT_QUANTILES)
    _check_ranges(page, est)
    assert [r.hi for r in est.ranges] == [9, 19, 29, 39, 49, 59, 69, 79, 89]
    plot = page.locator("svg.plot").filter(has_text="CDF at a few points")
    assert plot.locator("circle").count() == len(est.ranges)
    assert plot.locator("line.ci").count() == len(est.ranges)
    # The declared shuffler's central epsilon, as the estimate gives it.
    shuffle = web.analyst.GetEstimate(
        estimates_pb2.EstimateRequest(campaign_id=RANGE_ID), metadata=web.md()
    ).shuffle
    spans = page.locator("#privacy-shuffle span").evaluate_all("s => s.map(e => e.dataset.value)")
    assert [float(v) for v in spans] == [
        shuffle.batch_reports,
        shuffle.delta,
        shuffle.epsilon_numerical,
        shuffle.epsilon_closed_form,
    ]
    # Asking for others through the page's form (a plain GET: no script), then in the address.
    page.fill("#range-form input[name=range]", "18:64")
    page.fill("#range-form input[name=quantile]", "0.9")
    with page.expect_navigation():
        page.click("#range-form button[type=submit]")
    assert "range=18%3A64" in page.url and "quantile=0.9" in page.url
    _ready(page, "table#ranges")
    _check_ranges(page, _range_answers(web, [(18, 64)], [0.9]))
    path = campaign_path(RANGE_ID) + "?range=0:17&range=65:99&quantile=0.1&quantile=0.99"
    assert page.goto(web.url.rstrip("/") + path).status == 200
    _ready(page, "table#ranges")
    _check_ranges(page, _range_answers(web, [(0, 17), (65, 99)], [0.1, 0.99]))
    # A bad range: 400 naming it.
    response = page.goto(web.url.rstrip("/") + campaign_path(RANGE_ID) + "?range=0:100")
    assert response.status == 400 and "range='0:100'" in page.locator("p.err").inner_text()


def _marginal_answers(web: WebServer, queries: Any, non_negative: bool) -> estimates_pb2.EstimateResponse:
    request = estimates_pb2.EstimateRequest(
        campaign_id=MARGINAL_ID,
        marginals=[estimates_pb2.MarginalQuery(attributes=q, non_negative=non_negative) for q in queries],
    )
    response: estimates_pb2.EstimateResponse = web.analyst.GetEstimate(request, metadata=web.md())
    return response


def _check_marginals(page: Any, est: estimates_pb2.EstimateResponse) -> None:
    """Each marginal's table holds the Analyst service's cells in its order, exactly and as shown, and its
    plot a row per cell."""
    assert page.locator("table.marginal").count() == len(est.marginals)
    for k, m in enumerate(est.marginals):
        table = page.locator(f"table#marginal-{k}")
        assert table.get_attribute("data-attributes") == ",".join(m.attributes)
        rows = table.locator("tr").all()[1:]
        assert len(rows) == len(m.cells)
        for row, c in zip(rows, m.cells, strict=True):
            labels = [td.inner_text() for td in row.locator("td:not(.n)").all()]
            cells = row.locator("td.n").all()
            values = [float(td.get_attribute("data-value")) for td in cells]
            expected = [c.count, c.frequency, c.std_error, c.ci_low, c.ci_high]
            assert labels == list(c.labels)
            assert values == expected + ([c.non_negative_count] if m.non_negative else [])
            assert all(_shown_matches(td.inner_text(), v) for td, v in zip(cells, values, strict=True))
        plot = page.locator("svg.plot").filter(has_text=f"marginal {' × '.join(m.attributes)}:")
        assert plot.locator("circle").count() == len(m.cells)


def test_a_marginal_campaigns_marginals(page: Any, web: WebServer) -> None:
    # By default: every chosen marginal of the campaign, each a plot and a table of its cells.
    assert page.goto(web.url.rstrip("/") + campaign_path(MARGINAL_ID)).status == 200
    _ready(page, "table#marginal-1")
    _check_marginals(page, _marginal_answers(web, [("sex", "age"), ("age", "smoker")], False))
    # Asking for another through the page's form (a plain GET: no script), with the non-negative counts.
    page.fill("#marginal-form input[name=marginal]", "smoker,age")
    page.check("#marginal-form input[name=non_negative]")
    with page.expect_navigation():
        page.click("#marginal-form button[type=submit]")
    assert "marginal=smoker%2Cage" in page.url and "non_negative=1" in page.url
    _ready(page, "table#marginal-0")
    _check_marginals(page, _marginal_answers(web, [("smoker", "age")], True))
    # A marginal no chosen one covers: 400 naming it and the chosen ones.
    response = page.goto(web.url.rstrip("/") + campaign_path(MARGINAL_ID) + "?marginal=sex,smoker")
    text = page.locator("p.err").inner_text()
    assert response.status == 400 and "marginal='sex,smoker'" in text and "(sex,age; age,smoker)" in text


def test_a_missing_or_wrong_token_is_refused_and_the_form_signs_in(browser: Any, web: WebServer) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(web.url.rstrip("/") + campaign_path("browser"))
        assert response.status == 401
        assert page.locator("h1").inner_text() == "Sign in"
        assert page.locator("table").count() == 0  # nothing of the campaign
        for token, status, says in (
            ("ldp_wrong", 401, "invalid or revoked"),
            (web.tokens[Role.REPORTER], 403, "reporter"),
        ):
            page.fill("input[name=token]", token)
            with page.expect_navigation() as nav:
                page.click("button[type=submit]")
            assert nav.value.status == status
            assert says in page.locator("p.err").inner_text()
        page.fill("input[name=token]", web.tokens[Role.ANALYST])
        with page.expect_navigation():
            page.click("button[type=submit]")
        assert page.url.endswith("/campaigns/browser")  # back where it was refused, signed in
        assert page.locator("table#estimate-items").count() == 1
    finally:
        context.close()
    wrong = browser.new_context(extra_http_headers={"Authorization": "Bearer ldp_wrong"})
    try:
        assert wrong.new_page().goto(web.url).status == 401
    finally:
        wrong.close()


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_a_screenshot_of_a_campaign_page(page: Any, web: WebServer, tmp_path: Path) -> None:
    assert page.goto(web.url.rstrip("/") + campaign_path(RAPPOR_ID)).status == 200
    _ready(page, "table#decode-candidates")
    path = tmp_path / "rappor.png"
    data = page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes() == data
    width, height = _png_size(data)
    # The whole page: the viewport's width, taller than the viewport (two plots and tables), and not
    # blank (a blank page of this size compresses to a few kB).
    assert width == 1200 and height > 900
    assert len(data) > 40_000
