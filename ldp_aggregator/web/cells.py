"""Table cells, numbers for people and table pagers shared by the web view's pages
(:mod:`ldp_aggregator.web.pages`, :mod:`ldp_aggregator.web.sections`).

Every number in a table cell carries its exact value in ``data-value`` (``repr`` of the float, as in the
JSON) and shows a rounded form (:func:`fmt`); every text goes through :func:`html.escape`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from typing import Any, Final

__all__ = ["PAGE_SIZE", "PLOT_ROWS", "fmt", "num_cell", "pager", "text_cell"]

PAGE_SIZE: Final = 100
"""Rows of a long table per page (``?page=``)."""
PLOT_ROWS: Final = 40
"""Rows of a plot at most (the largest estimates)."""


def fmt(value: Any) -> str:
    """A number for people: thousands separated, about four significant digits; ``"inf"`` as ∞."""
    if isinstance(value, str):
        return {"inf": "∞", "-inf": "-∞"}.get(value, value)
    if isinstance(value, bool) or value is None:
        return "" if value is None else ("yes" if value else "no")
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "∞" if value > 0 else ("-∞" if value < 0 else "nan")
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def num_cell(value: Any) -> str:
    """A number's table cell: its exact value in ``data-value``, :func:`fmt` shown."""
    return f'<td class="n" data-value="{escape(repr(value))}">{escape(fmt(value))}</td>'


def text_cell(value: Any, cls: str = "") -> str:
    """A text's table cell (escaped), with an optional class."""
    return f"<td{f' class={cls!r}' if cls else ''}>{escape(str(value))}</td>"


def pager(total: int, page: int, link: Callable[[int], str]) -> str:
    """Links to the previous and next page of a table of ``total`` rows ("" when one page holds it)."""
    pages = max(1, math.ceil(total / PAGE_SIZE))
    if pages == 1:
        return ""
    parts = [f"rows {(page - 1) * PAGE_SIZE + 1:,}–{min(page * PAGE_SIZE, total):,} of {total:,}:"]
    if page > 1:
        parts.append(f'<a href="{escape(link(page - 1))}">previous</a>')
    if page < pages:
        parts.append(f'<a href="{escape(link(page + 1))}">next</a>')
    parts.append(f"page {page} of {pages}")
    return f'<nav class="pages">{" ".join(parts)}</nav>'
