"""Server-rendered HTML of the web view: the campaigns list, a campaign, login and error pages.

Plain HTML with one inline style sheet and inline SVG plots (:mod:`ldp_aggregator.web.svg`); no script
(the pages' Content-Security-Policy forbids any). Every text from the store goes through
:func:`html.escape`. Every number in a table cell carries its exact value in ``data-value`` (``repr`` of
the float, as in the JSON), and shows a rounded form; long tables are split into pages of
:data:`PAGE_SIZE` rows, the plots show the :data:`PLOT_ROWS` largest estimates (both, the cells and the
number format are in :mod:`ldp_aggregator.web.cells`; a calm campaign's marginals and an SVIM stage's
itemsets are drawn by :mod:`ldp_aggregator.web.sections`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from html import escape
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode

from ldp_aggregator.web.cells import PAGE_SIZE, PLOT_ROWS, fmt
from ldp_aggregator.web.cells import num_cell as _num
from ldp_aggregator.web.cells import pager as _pager
from ldp_aggregator.web.cells import text_cell as _txt
from ldp_aggregator.web.data import discovery_detected
from ldp_aggregator.web.sections import itemsets_html, marginals_html
from ldp_aggregator.web.svg import PlotRow, interval_plot

__all__ = ["PAGE_SIZE", "PLOT_ROWS", "campaign_page", "campaigns_page", "error_page", "fmt", "login_page"]

_CSS: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:.6em 1.2em}header a{color:#fff;text-decoration:none}
main{padding:1em 1.2em;max-width:1100px}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;background:#fff;margin:.5em 0}
th,td{padding:.25em .6em;border:1px solid #d5d9e0}
th{background:#eef0f4;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4em .8em}
.err{background:#fdecea;border-left:4px solid #c62828;padding:.4em .8em}
.muted{color:#5b6575}.yes{color:#1b5e20;font-weight:600}.no{color:#8a8f98}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:600}
svg.plot{background:#fff;border:1px solid #d5d9e0}svg text{font:11px system-ui,sans-serif;fill:#1d2430}
svg .lab{text-anchor:end}svg .tick,svg .axis{text-anchor:middle;fill:#5b6575}
svg .grid{stroke:#eef0f4}svg .zero{stroke:#8a8f98}svg .ci{stroke:#3b6ea8;stroke-width:2}
svg .pt,svg .det{fill:#3b6ea8}svg .nodet{fill:#fff;stroke:#3b6ea8;stroke-width:1.5}
nav.pages a{margin-right:.6em}
"""


def layout(title: str, body: str, *, refresh_s: int | None = None) -> str:
    """A complete page."""
    meta = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">{meta}'
        f"<title>{escape(title)} · ldp-aggregator</title><style>{_CSS}</style></head><body>"
        '<header><a href="/">ldp-aggregator</a> · read-only view</header>'
        f"<main>{body}</main></body></html>"
    )


def campaign_href(campaign_id: str) -> str:
    return "/campaigns/" + quote(campaign_id, safe="")


def campaigns_page(doc: dict[str, Any]) -> str:
    """The list: mechanism, epsilon, reports received and rates of every campaign."""
    rows = []
    for c in doc["campaigns"]:
        rate = c["rate"]
        recent = rate["reports_per_s_recent"]
        rows.append(
            "<tr>"
            f'<td><a href="{campaign_href(c["id"])}">{escape(c["id"])}</a>'
            f'<div class="muted">{escape(c["description"])}</div></td>'
            + _txt(c["mechanism"])
            + _num(c["epsilon"])
            + _num(c["epsilon_inf"])
            + _num(c["n_reports"])
            + _num(c["n_batches"])
            + (_num(recent) if recent is not None else '<td class="muted">after the next load</td>')
            + _num(rate["reports_per_s_since_created"])
            + _txt("closed" if c["closed"] else "collecting")
            + _txt(time.strftime("%Y-%m-%d %H:%M", time.gmtime(c["created_unix_ms"] / 1000)) + " UTC")
            + "</tr>"
        )
    table = (
        '<table id="campaigns"><tr><th>campaign</th><th>mechanism</th><th>ε per report</th><th>ε∞</th>'
        "<th>reports</th><th>batches</th><th>reports/s (recent)</th><th>reports/s (since created)</th>"
        "<th>status</th><th>created</th></tr>" + "".join(rows) + "</table>"
        if rows
        else '<p class="note">No campaigns yet.</p>'
    )
    body = (
        f"<h1>Campaigns ({len(doc['campaigns'])})</h1>{table}"
        '<p class="muted">Recent rate: over this view\'s own samples of the last 5 minutes (the page '
        'reloads every 15 s). JSON: <a href="/api/campaigns">/api/campaigns</a>.</p>'
    )
    return layout("campaigns", body, refresh_s=15)


def _by_count(items: Sequence[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return sorted(items, key=lambda it: -it[key] if isinstance(it[key], int | float) else 0.0)


def _items_section(
    title: str,
    items: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, str]],
    *,
    value: str,
    detected: Callable[[dict[str, Any]], bool] | None,
    page: int,
    link: Callable[[int], str],
    table_id: str,
    axis_label: str,
) -> str:
    """A plot of the largest ``PLOT_ROWS`` items and one page of the table of all, largest first."""
    ranked = _by_count(items, value)
    plot = interval_plot(
        [
            PlotRow(
                label=it["label"],
                value=float(it[value]),
                low=float(it["ci_low"]),
                high=float(it["ci_high"]),
                detected=None if detected is None else detected(it),
            )
            for it in ranked[:PLOT_ROWS]
        ],
        axis_label=axis_label,
        caption=f"{title}: the {min(PLOT_ROWS, len(ranked))} largest of {len(ranked):,}, with intervals"
        + ("; filled = detected" if detected is not None else ""),
    )
    shown = ranked[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    head = "".join(f"<th>{escape(h)}</th>" for h, _ in columns)
    if detected is not None:
        head += "<th>detected</th>"
    rows = []
    for it in shown:
        cells = "".join(_txt(it[k]) if k == "label" else _num(it[k]) for _, k in columns)
        if detected is not None:
            d = detected(it)
            cells += f'<td class="{"yes" if d else "no"}" data-value="{str(d).lower()}">{fmt(d)}</td>'
        rows.append(f"<tr>{cells}</tr>")
    pager = _pager(len(ranked), page, link)
    return (
        f"{plot}{pager}<table id={table_id!r}><tr>{head}</tr>{''.join(rows)}</table>{pager}"
        if rows
        else '<p class="muted">No items.</p>'
    )


def _error(section: dict[str, Any]) -> str:
    e = section["error"]
    return f'<p class="err">The Analyst service answers {escape(e["code"])}: {escape(e["message"])}</p>'


_ITEM_COLUMNS: Final = (
    ("item", "label"),
    ("count", "count"),
    ("frequency", "frequency"),
    ("std error", "std_error"),
    ("interval low", "ci_low"),
    ("interval high", "ci_high"),
)


def _estimate_html(est: dict[str, Any], page: int, link: Callable[[int], str]) -> str:
    conf = f"{est['confidence']:.0%}"
    parts = [f"<h2>Estimate <span class='muted'>(Analyst.GetEstimate, {conf} intervals)</span></h2>"]
    if est.get("note"):
        parts.append(f'<p class="note">{escape(est["note"])}</p>')
    if est["n_reports"] == 0:
        parts.append('<p class="note">No reports yet.</p>')
    elif not any(est.get(k) for k in ("items", "means", "levels", "rappor_bits", "key_values", "note")):
        parts.append('<p class="muted">No per-item estimate for this mechanism: see below.</p>')
    if est["items"]:
        # Discovery (issue 16): the values found are the items; each is "detected" when its interval
        # lies above zero (the level loop ranks, it does not test): the JSON's view.discovery_detected.
        flags = discovery_detected(est)
        items, columns = _with_postprocessed(est)
        if flags is not None:
            for it, flag in zip(items, flags, strict=True):
                it["detected"] = flag
        parts.append(
            _items_section(
                "estimates",
                items,
                columns,
                value="count",
                detected=(lambda it: bool(it["detected"])) if flags is not None else None,
                page=page,
                link=link,
                table_id="estimate-items",
                axis_label="estimated count",
            )
        )
    if est.get("means"):
        rows = [
            PlotRow(label=m["label"], value=m["mean"], low=m["ci_low"], high=m["ci_high"])
            for m in est["means"]
            if all(isinstance(m[k], float | int) for k in ("mean", "ci_low", "ci_high"))
        ]
        parts.append(interval_plot(rows, axis_label="mean", caption=f"means with {conf} intervals"))
        cols = (
            "mean",
            "std_error",
            "ci_low",
            "ci_high",
            "sum",
            "sum_std_error",
            "sum_ci_low",
            "sum_ci_high",
            "n",
        )
        head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in ("attribute", *cols))
        body = "".join(
            "<tr>" + _txt(m["label"]) + "".join(_num(m[c]) for c in cols) + "</tr>" for m in est["means"]
        )
        parts.append(f'<table id="means"><tr>{head}</tr>{body}</table>')
    if est.get("itemsets"):  # issue 18: an SVIM stage's sizes, correction and ranking
        parts.append(itemsets_html(est["itemsets"], conf, page, link))
    if est.get("key_values"):
        parts.append(_key_values_html(est["key_values"], conf))
    if "levels" in est:
        head = "<tr><th>level</th><th>reports</th><th>tested</th><th>kept</th><th>threshold</th></tr>"
        body = "".join(
            "<tr>"
            + "".join(_num(lv[k]) for k in ("level", "reports", "tested", "kept", "threshold"))
            + "</tr>"
            for lv in est["levels"]
        )
        parts.append(f'<h3>Discovery levels</h3><table id="levels">{head}{body}</table>')
    if "rappor_bits" in est:
        b = est["rappor_bits"]
        with_reports = sum(1 for r in b["cohort_reports"] if r > 0)
        parts.append(
            f"<p>Debiased Bloom-filter bit counts: {b['m']:,} cohorts × {b['k']:,} bits, {with_reports:,} "
            "cohorts with reports (all of them in the JSON).</p>"
        )
    if est.get("postprocessed") and est["items"]:
        methods = ", ".join(pp["method"] for pp in est["postprocessed"])
        parts.append(
            f'<p class="muted">Post-processed columns ({escape(methods)}): consistent counts (non-negative,'
            " summing to the total), biased, without intervals; beside the unbiased estimate.</p>"
        )
    return "".join(parts)


def _key_values_html(rows: Sequence[dict[str, Any]], conf: str) -> str:
    """A key-value campaign's keys (issue 18, pckv): each key's mean value as a plot with its intervals,
    then every key's frequency and mean with their standard errors and intervals (None: no estimate)."""
    plot_rows = [
        PlotRow(label=r["key"], value=r["mean"], low=r["mean_ci_low"], high=r["mean_ci_high"])
        for r in rows
        if all(isinstance(r[k], float | int) for k in ("mean", "mean_ci_low", "mean_ci_high"))
    ]
    cols = (
        "frequency",
        "frequency_std_error",
        "frequency_ci_low",
        "frequency_ci_high",
        "count",
        "mean",
        "mean_std_error",
        "mean_ci_low",
        "mean_ci_high",
        "mean_clipped",
    )
    head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in ("key", *cols))
    body = "".join("<tr>" + _txt(r["key"]) + "".join(_num(r[c]) for c in cols) + "</tr>" for r in rows)
    return (
        "<h3>Keys: frequency and mean value</h3>"
        + interval_plot(
            plot_rows, axis_label="mean value", caption=f"mean value per key with {conf} intervals"
        )
        + f'<table id="key-values"><tr>{head}</tr>{body}</table>'
    )


def _with_postprocessed(est: dict[str, Any]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The items with their post-processed counts (issue 6) as more columns, one per method, so that they
    share the table's pages."""
    items = [dict(it) for it in est["items"]]
    columns = list(_ITEM_COLUMNS)
    for pp in est.get("postprocessed", []):
        if len(pp["counts"]) != len(items):
            continue
        key = f"postprocessed:{pp['method']}"
        for it, count in zip(items, pp["counts"], strict=True):
            it[key] = count
        columns.append((f"{pp['method']} count", key))
    return items, columns


_DECODE_COLUMNS: Final = (
    ("candidate", "label"),
    ("count", "count"),
    ("proportion", "proportion"),
    ("std error", "std_error"),
    ("interval low", "ci_low"),
    ("interval high", "ci_high"),
    ("z", "z"),
    ("p-value", "p_value"),
)


def _decode_html(dec: dict[str, Any], page: int, link: Callable[[int], str]) -> str:
    th = dec["threshold"]
    summary = (
        f"<dl><dt>method</dt><dd>{escape(dec['method'])}</dd>"
        f"<dt>detected</dt><dd>{dec['n_detected']:,} of {len(dec['candidates']):,} candidates "
        f"({escape(dec['correction'])}, alpha {fmt(dec['alpha'])}); {dec['n_selected']:,} selected</dd>"
        f"<dt>detection threshold</dt><dd>count {fmt(th['count'])} (z {fmt(th['z'])})</dd>"
        f"<dt>explained mass</dt><dd>{fmt(dec['explained_mass'])} (unexplained {fmt(dec['unexplained_mass'])}"
        f" ± {fmt(dec['unexplained_mass_se'])})</dd></dl>"
    )
    warnings = "".join(f'<p class="note">{escape(w)}</p>' for w in dec["warnings"])
    table = _items_section(
        "decoded counts",
        dec["candidates"],
        _DECODE_COLUMNS,
        value="count",
        detected=lambda c: bool(c["detected"]),
        page=page,
        link=link,
        table_id="decode-candidates",
        axis_label="estimated count",
    )
    return f"<h2>Decode <span class='muted'>(Analyst.DecodeRappor)</span></h2>{summary}{warnings}{table}"


def _association_html(a: dict[str, Any]) -> str:
    cols = a["col_labels"]
    head = "<tr><th></th>" + "".join(f"<th>{escape(c)}</th>" for c in cols) + "</tr>"
    top = max((p for row in a["joint"] for p in row), default=0.0) or 1.0
    rows = []
    for label, row, ses in zip(a["row_labels"], a["joint"], a["joint_std_error"], strict=True):
        cells = "".join(
            f'<td class="n" data-value="{p!r}" title="± {se:.4g}" '
            f'style="background:rgba(59,110,168,{max(p, 0) / top * 0.6:.3f})">{fmt(p)}</td>'
            for p, se in zip(row, ses, strict=True)
        )
        rows.append(f"<tr><th>{escape(label)}</th>{cells}</tr>")
    ind = a["independence"]
    margs = "".join(
        interval_plot(
            [
                PlotRow(label=m["label"], value=m["proportion"], low=m["ci_low"], high=m["ci_high"])
                for m in ms
            ],
            axis_label="proportion",
            caption=f"{name} variable ({mech})",
        )
        for name, ms, mech in (
            ("first", a["first"], a["first_mechanism"]),
            ("second", a["second"], a["second_mechanism"]),
        )
    )
    warnings = "".join(f'<p class="note">{escape(w)}</p>' for w in a["warnings"])
    return (
        "<h2>Association <span class='muted'>(Analyst.EstimateAssociation)</span></h2>"
        f'<p>Joint proportions (rows: first variable, columns: second):</p><table id="joint">{head}'
        f"{''.join(rows)}</table><p>Independence: likelihood-ratio statistic {fmt(ind['lr_statistic'])}, "
        f"df {ind['df']}, p-value {fmt(ind['p_value'])}; EM {a['iterations']} iterations"
        f"{'' if a['converged'] else ' (not converged)'}.</p>{warnings}{margs}"
    )


def _dd(id_: str, value: Any, note: str = "") -> str:
    """A definition whose exact value is in ``data-value`` (``repr``, as in the JSON), with a note."""
    muted = f" <span class='muted'>{escape(note)}</span>" if note else ""
    return f"<dd id={id_!r} data-value='{escape(repr(value))}'>{escape(fmt(value))}{muted}</dd>"


def _span(value: Any) -> str:
    return f"<span data-value='{escape(repr(value))}'>{escape(fmt(value))}</span>"


def _privacy_html(p: dict[str, Any], doc: dict[str, Any]) -> str:
    """The privacy block: per-report (epsilon, delta), epsilon_inf, reports per device, the central
    (epsilon, delta) of a shuffled batch (the estimate's ``shuffle``), then what a device's spend is."""
    per_device = p["reports_per_device"]
    rows = [
        f"<dt>ε per report</dt>{_dd('privacy-epsilon', p['epsilon'])}",
        f"<dt>δ per report</dt>{_dd('privacy-delta', p['delta'], '' if p['delta'] > 0 else 'pure ε-LDP')}",
        "<dt>ε∞ (longitudinal)</dt>"
        + _dd(
            "privacy-epsilon-inf",
            p["epsilon_inf"],
            "memoized: any number of reports of one value"
            if p["memoized"]
            else "fresh noise in every report",
        ),
        "<dt>reports per device</dt>"
        + (
            _dd("privacy-reports-per-device", per_device, "the device's ledger refuses more")
            if per_device is not None
            else "<dd id='privacy-reports-per-device' class='muted'>no limit (the device's caps apply)</dd>"
        ),
    ]
    est = doc.get("estimate")
    if doc.get("shuffler"):
        if est and "answer" in est and "shuffle" in est["answer"]:
            sh = est["answer"]["shuffle"]
            outside = "" if sh["closed_form_applies"] else ", outside its condition: the local ε"
            rows.append(
                "<dt>shuffled batch (central)</dt>"
                f"<dd id='privacy-shuffle'>batches of {_span(sh['batch_reports'])} reports, δ "
                f"{_span(sh['delta'])}: ε {_span(sh['epsilon_numerical'])} (numerical), ε "
                f"{_span(sh['epsilon_closed_form'])} (closed form{outside}; Feldman, McMillan, Talwar, "
                "FOCS 2021)</dd>"
            )
        else:
            rows.append("<dt>shuffled batch (central)</dt><dd class='muted'>with the estimate (below)</dd>")
    return (
        "<h2>Privacy</h2><dl id='privacy'>"
        + "".join(rows)
        + f"</dl><p id='privacy-device-spend'><b>A device's spend.</b> {escape(p['device_spend'])}</p>"
    )


_RANGE_COLUMNS: Final = (
    ("count", "count"),
    ("share", "frequency"),
    ("std error", "std_error"),
    ("interval low", "ci_low"),
    ("interval high", "ci_high"),
)


def _range_label(r: dict[str, Any]) -> str:
    if r["lo"] == 0:
        return f"≤ {r['hi_label']}"
    return f"{r['lo_label']} … {r['hi_label']}" if r["lo"] != r["hi"] else r["lo_label"]


def _ranges_html(ans: dict[str, Any], doc: dict[str, Any], link: Callable[[int], str]) -> str:
    """Range mechanisms (issue 18): the quantiles, then the ranges (by default the CDF at a few points)
    as a plot with intervals and a table; a form to ask for others."""
    rq = doc.get("view", {}).get("range_query", {})
    conf = (doc.get("estimate") or {}).get("answer", {}).get("confidence")
    title = "CDF at a few points" if rq.get("default_ranges") else "Ranges"
    parts = [
        "<h2>Ranges and quantiles <span class='muted'>(Analyst.GetEstimate with ranges and quantiles"
        + (f", {conf:.0%} intervals" if isinstance(conf, float) else "")
        + ")</span></h2>"
    ]
    if ans["quantiles"]:
        body = "".join(
            "<tr>" + _num(q["q"]) + _num(q["position"]) + _txt(q["label"]) + "</tr>" for q in ans["quantiles"]
        )
        parts.append(
            f'<table id="quantiles"><tr><th>quantile</th><th>position</th><th>value</th></tr>{body}</table>'
        )
    rows = ans["ranges"]
    if rows:
        parts.append(
            interval_plot(
                [
                    PlotRow(label=_range_label(r), value=r["count"], low=r["ci_low"], high=r["ci_high"])
                    for r in rows[:PLOT_ROWS]
                ],
                axis_label="estimated users in the range",
                caption=f"{title}: estimated users with intervals",
            )
        )
        head = "<tr><th>range</th><th>lo</th><th>hi</th>" + "".join(
            f"<th>{h}</th>" for h, _ in _RANGE_COLUMNS
        )
        body = "".join(
            "<tr>"
            + _txt(_range_label(r))
            + _num(r["lo"])
            + _num(r["hi"])
            + "".join(_num(r[k]) for _, k in _RANGE_COLUMNS)
            + "</tr>"
            for r in rows
        )
        parts.append(f'<table id="ranges">{head}</tr>{body}</table>')
    # Others by a plain GET form (no script): the page's other options ride along as hidden fields.
    here = link(1)
    keep = "".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
        for k, v in parse_qsl(here.partition("?")[2])
        if k not in ("range", "quantile")
    )
    parts.append(
        f'<form method="get" action="{escape(here.partition("?")[0])}" id="range-form">{keep}'
        '<label>range <input name="range" placeholder="LO:HI" size="14"></label> '
        '<label>quantile <input name="quantile" placeholder="0.9" size="6"></label> '
        '<button type="submit">Estimate</button> <span class="muted">(LO and HI: positions from 0 or '
        "values of the domain; in the address, range= and quantile= repeat)</span></form>"
    )
    return "".join(parts)


def campaign_page(doc: dict[str, Any], pending: Sequence[str], page: int, link: Callable[[int], str]) -> str:
    """One campaign: reports, rates, privacy, then each analysis (or "being computed")."""
    rate = doc["rate"]
    recent = rate["reports_per_s_recent"]
    p = doc["privacy"]
    head = (
        f"<h1>{escape(doc['id'])}</h1>"
        + (f"<p>{escape(doc['description'])}</p>" if doc["description"] else "")
        + f"<dl id='summary'><dt>mechanism</dt><dd>{escape(doc['mechanism'])}</dd>"
        f"<dt>status</dt><dd>{'closed' if doc['closed'] else 'collecting'}</dd>"
        f"<dt>reports received</dt><dd data-value='{doc['n_reports']}'>{doc['n_reports']:,} in "
        f"{doc['n_batches']:,} batch{'' if doc['n_batches'] == 1 else 'es'}</dd>"
        f"<dt>rate</dt><dd>{fmt(rate['reports_per_s_since_created'])} reports/s since created"
        + (
            f"; {fmt(recent)} reports/s over the last {rate['recent_window_s']:.0f} s"
            if recent is not None
            else ""
        )
        + "</dd></dl>"
        + _privacy_html(p, doc)
    )
    parts = [head]
    # A range campaign's headline is its quantiles and CDF, a marginal campaign's its marginals: they come
    # before the per-value estimates.
    for name in sorted(doc["analyses"], key=lambda n: n not in ("ranges", "marginals")):
        section = doc[name]
        if name in pending:
            parts.append(
                f'<h2>{name.capitalize()}</h2><p class="note" id="pending-{name}">Being computed (for '
                f"{doc['n_reports']:,} reports); this page reloads itself every 2 s until it is ready.</p>"
            )
        elif "error" in section:
            parts.append(f"<h2>{name.capitalize()}</h2>{_error(section)}")
        elif name == "estimate":
            parts.append(_estimate_html(section["answer"], page, link))
        elif name == "decode":
            parts.append(_decode_html(section["answer"], page, link))
        elif name == "ranges":
            parts.append(_ranges_html(section["answer"], doc, link))
        elif name == "marginals":
            parts.append(marginals_html(section["answer"], doc, page, link))
        else:
            parts.append(_association_html(section["answer"]))
    here = link(page)
    json_link = here.replace("?", "?format=json&", 1) if "?" in here else here + "?format=json"
    parts.append(
        f'<p class="muted">The same numbers as JSON: <a href="{escape(json_link)}">format=json</a>.</p>'
    )
    return layout(doc["id"], "".join(parts), refresh_s=2 if pending else None)


def page_link(
    path: str, params: dict[str, str], multi: dict[str, list[str]] | None = None
) -> Callable[[int], str]:
    """Links to the pages of a table: the same options (repeated fields too), another ``page``."""

    def link(page: int) -> str:
        q: list[tuple[str, str]] = [(k, v) for k, v in params.items() if k not in ("page", "format")]
        q += [(k, v) for k, values in (multi or {}).items() for v in values]
        if page > 1:
            q.append(("page", str(page)))
        return path + ("?" + urlencode(q) if q else "")

    return link


def login_page(next_path: str, message: str = "") -> str:
    """A form that sends a token to ``/login`` (GET: this view accepts no other method)."""
    err = f'<p class="err">{escape(message)}</p>' if message else ""
    body = (
        f"<h1>Sign in</h1>{err}<p>An analyst or admin token of this aggregator "
        "(<code>ldp-aggregator token create --role analyst</code>). It is kept in a cookie for this site "
        'only.</p><form method="get" action="/login"><input type="password" name="token" size="50" '
        f'autocomplete="off" required><input type="hidden" name="next" value="{escape(next_path)}"> '
        '<button type="submit">Sign in</button></form>'
    )
    return layout("sign in", body)


def error_page(status: int, phrase: str, message: str) -> str:
    return layout(
        f"{status} {phrase}",
        f'<h1>{status} {escape(phrase)}</h1><p class="err">{escape(message)}</p>'
        '<p><a href="/">All campaigns</a></p>',
    )
