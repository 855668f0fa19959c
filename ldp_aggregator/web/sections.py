"""HTML sections of the issue-18 analyses: a marginal campaign's marginals (``calm``) and an SVIM stage's
sizes, correction and ranking (``svim``).

Both show the Analyst service's answers only (``EstimateResponse.marginals`` and ``.itemsets`` in their
JSON form: ``marginals.marginal_answer_dict``, ``itemsets.mining_to_dict``); the formulas are in
:mod:`ldp_aggregator.marginals` (CALM: Zhang, Wang, Li, He, Chen, CCS 2018) and
:mod:`ldp_aggregator.itemsets` (SVIM: Wang, Li, Jha, IEEE S&P 2018). Long tables share the page's
``?page=`` (:data:`~ldp_aggregator.web.cells.PAGE_SIZE` rows each), as the item tables do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from typing import Any, Final
from urllib.parse import parse_qsl

from ldp_aggregator.web.cells import PAGE_SIZE, PLOT_ROWS, fmt, num_cell, pager, text_cell
from ldp_aggregator.web.svg import PlotRow, interval_plot

__all__ = ["itemsets_html", "marginal_cell_label", "marginals_html"]

_CELL_COLUMNS: Final = (
    ("count", "count"),
    ("share", "frequency"),
    ("std error", "std_error"),
    ("interval low", "ci_low"),
    ("interval high", "ci_high"),
)
_RANKED_COLUMNS: Final = (
    ("estimate", "estimate"),
    ("std error", "std_error"),
    ("interval low", "ci_low"),
    ("interval high", "ci_high"),
    ("corrected", "corrected"),
    ("corrected std error", "corrected_std_error"),
)


def marginal_cell_label(cell: dict[str, Any]) -> str:
    """A marginal cell's labels, in the query's attribute order, as one text (``a × b``)."""
    return " × ".join(cell["labels"])


def _page_of(rows: Sequence[Any], page: int) -> Sequence[Any]:
    return rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]


def _marginal_html(k: int, m: dict[str, Any], conf: str, page: int, link: Callable[[int], str]) -> str:
    """One answered marginal: a plot of its cells with intervals (in cell order, or the
    :data:`PLOT_ROWS` largest of a bigger table) and one page of the table of its cells, in the service's
    row-major order (the last attribute fastest)."""
    cells = m["cells"]
    attrs = m["attributes"]
    name = " × ".join(attrs)
    plotted = cells if len(cells) <= PLOT_ROWS else sorted(cells, key=lambda c: -c["count"])[:PLOT_ROWS]
    plot = interval_plot(
        [
            PlotRow(label=marginal_cell_label(c), value=c["count"], low=c["ci_low"], high=c["ci_high"])
            for c in plotted
        ],
        axis_label="estimated users in the cell",
        caption=f"marginal {name}: "
        + (
            f"{len(cells):,} cells"
            if plotted is cells
            else f"the {PLOT_ROWS} largest of {len(cells):,} cells"
        )
        + f", {conf} intervals",
    )
    columns = list(_CELL_COLUMNS) + (
        [("non-negative count", "non_negative_count")] if m["non_negative"] else []
    )
    head = "".join(f"<th>{escape(a)}</th>" for a in attrs) + "".join(f"<th>{h}</th>" for h, _ in columns)
    body = "".join(
        "<tr>"
        + "".join(text_cell(label) for label in c["labels"])
        + "".join(num_cell(c[key]) for _, key in columns)
        + "</tr>"
        for c in _page_of(cells, page)
    )
    nav = pager(len(cells), page, link)
    return (
        f"<h3>Marginal {escape(name)} <span class='muted'>({len(cells):,} cells)</span></h3>{plot}{nav}"
        f'<table id="marginal-{k}" class="marginal" data-attributes="{escape(",".join(attrs))}">'
        f"<tr>{head}</tr>{body}</table>{nav}"
    )


def marginals_html(ans: dict[str, Any], doc: dict[str, Any], page: int, link: Callable[[int], str]) -> str:
    """Marginal mechanisms (issue 18, calm): each marginal asked (by default every chosen marginal of the
    campaign) as a plot and a table of its cells, with the non-negative version beside when asked; a form
    to ask for others."""
    mq = doc.get("view", {}).get("marginal_query", {})
    conf_value = (doc.get("estimate") or {}).get("answer", {}).get("confidence")
    conf = f"{conf_value:.0%}" if isinstance(conf_value, float) else "the page's"
    chosen = "; ".join(",".join(m) for m in mq.get("chosen_marginals", []))
    parts = [
        "<h2>Marginals <span class='muted'>(Analyst.GetEstimate with marginals"
        + (f", {conf} intervals" if isinstance(conf_value, float) else "")
        + ")</span></h2>",
        "<p class='muted'>"
        + ("Every chosen marginal of the campaign" if mq.get("default_marginals") else "The marginals asked")
        + f" (chosen: {escape(chosen)}): consistent estimates of the share of users in each cell, unbiased, "
        "with standard errors (CALM, Zhang et al., CCS 2018)"
        + (
            "; the non-negative counts (Norm-Sub and consistency, biased) are beside them"
            if mq.get("non_negative")
            else ""
        )
        + ".</p>",
    ]
    for k, m in enumerate(ans["marginals"]):
        parts.append(_marginal_html(k, m, conf, page, link))
    # Others by a plain GET form (no script): the page's other options ride along as hidden fields.
    here = link(1)
    keep = "".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
        for k, v in parse_qsl(here.partition("?")[2])
        if k not in ("marginal", "non_negative")
    )
    checked = " checked" if mq.get("non_negative") else ""
    parts.append(
        f'<form method="get" action="{escape(here.partition("?")[0])}" id="marginal-form">{keep}'
        '<label>marginal <input name="marginal" placeholder="A,B" size="24"></label> '
        f'<label><input type="checkbox" name="non_negative" value="1"{checked}> non-negative</label> '
        '<button type="submit">Estimate</button> <span class="muted">(attribute names covered by one '
        "chosen marginal; in the address, marginal= repeats)</span></form>"
    )
    return "".join(parts)


def _size_label(s: int, last: bool) -> str:
    return f"{s} or more" if last else str(s)


def itemsets_html(mining: dict[str, Any], conf: str, page: int, link: Callable[[int], str]) -> str:
    """An SVIM stage (issue 18): its stage, the users' set sizes, the correction u(L) for users with more
    than L elements and the suggested L, then the ranked items or itemsets with their estimates and
    corrected estimates (one page of the table; ``?page=`` as the item table; no plot of its own: the
    estimate's plot above shows the same values largest first)."""
    u = mining["correction"]
    sizes = mining["size_shares"]
    ranked = mining["ranked"]
    summary = (
        f"<dl id='itemsets-summary'><dt>stage</dt><dd id='itemsets-stage'>{escape(mining['stage'])}</dd>"
        f"<dt>reports</dt><dd>{fmt(mining['size_reports'])} in the size group, {fmt(mining['ps_reports'])}"
        " in the padding-and-sampling group</dd>"
        f"<dt>correction u(L)</dt><dd id='itemsets-correction' data-value='{escape(repr(u))}'>{fmt(u)}"
        " <span class='muted'>(sum_s s psi_s / sum_s min(s, L) psi_s: users with more than L elements "
        "report each one less often; the corrected columns multiply by it, the ranking is the same)</span>"
        f"</dd><dt>suggested L</dt><dd id='itemsets-suggested' data-value='{mining['suggested_max_items']}'>"
        f"{mining['suggested_max_items']:,} <span class='muted'>(the smallest L with at least 90% of the "
        "users at most L elements: for the next campaign)</span></dd></dl>"
    )
    size_rows = "".join(
        "<tr>" + text_cell(_size_label(s, s == len(sizes) - 1)) + num_cell(share) + "</tr>"
        for s, share in enumerate(sizes)
    )
    size_table = (
        '<table id="itemset-sizes"><tr><th>elements per user</th><th>share of users</th></tr>'
        f"{size_rows}</table>"
        if sizes
        else '<p class="muted">No size group: the correction is 1.</p>'
    )
    head = "<tr><th>rank</th><th>" + escape(mining["stage"].rstrip("s")) + "</th>"
    head += "".join(f"<th>{h}</th>" for h, _ in _RANKED_COLUMNS) + "</tr>"
    body = "".join(
        "<tr>"
        + num_cell(r["rank"])
        + text_cell(r["label"])
        + "".join(num_cell(r[key]) for _, key in _RANKED_COLUMNS)
        + "</tr>"
        for r in _page_of(ranked, page)
    )
    nav = pager(len(ranked), page, link)
    return (
        f"<h3>Itemset mining <span class='muted'>(SVIM, {escape(mining['stage'])} stage)</span></h3>"
        f"{summary}<h4>Set sizes</h4>{size_table}<h4>Ranking</h4>{nav}"
        f'<table id="itemsets-ranked">{head}{body}</table>{nav}'
    )
