"""Interval plots as inline SVG, drawn on the server: no script, no plotting library, no network.

One row per item: a horizontal line from the interval's low to its high end and a dot at the estimate
(filled when the item is detected, hollow when not, a plain dot when detection does not apply), with the
item's label on the left, a zero line and five labelled ticks. Each row carries a ``<title>`` (the
browser's tooltip) with the exact numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

__all__ = ["PlotRow", "interval_plot", "nice_ticks"]

_ROW: Final = 18
_LABEL_W: Final = 190
_PLOT_W: Final = 520
_TOP: Final = 26
_BOTTOM: Final = 30
_MAX_LABEL: Final = 28


@dataclass(frozen=True, kw_only=True)
class PlotRow:
    """One item: its estimate and interval; ``detected`` None when detection does not apply."""

    label: str
    value: float
    low: float
    high: float
    detected: bool | None = None


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _short(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    if abs(x) >= 1e3:
        return f"{x / 1e3:g}k"
    return f"{x:.4g}"


def interval_plot(rows: Sequence[PlotRow], *, axis_label: str, caption: str = "") -> str:
    """An SVG element plotting ``rows`` top to bottom (module docstring); "" when there is nothing."""
    finite = [r for r in rows if all(math.isfinite(v) for v in (r.value, r.low, r.high))]
    if not finite:
        return ""
    lo = min(0.0, *(r.low for r in finite))
    hi = max(0.0, *(r.high for r in finite))
    if hi <= lo:
        hi = lo + 1.0
    pad = (hi - lo) * 0.03
    lo, hi = lo - pad, hi + pad
    height = _TOP + _ROW * len(finite) + _BOTTOM
    width = _LABEL_W + _PLOT_W + 20

    def x(v: float) -> float:
        return _LABEL_W + (v - lo) / (hi - lo) * _PLOT_W

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(caption or axis_label)}">',
        f'<text x="{_LABEL_W}" y="14" class="cap">{escape(caption)}</text>',
    ]
    bottom = _TOP + _ROW * len(finite)
    for t in nice_ticks(lo, hi):
        tx = x(t)
        out.append(f'<line x1="{tx:.1f}" y1="{_TOP - 4}" x2="{tx:.1f}" y2="{bottom}" class="grid"/>')
        out.append(f'<text x="{tx:.1f}" y="{bottom + 14}" class="tick">{_short(t)}</text>')
    zx = x(0.0)
    out.append(f'<line x1="{zx:.1f}" y1="{_TOP - 4}" x2="{zx:.1f}" y2="{bottom}" class="zero"/>')
    out.append(
        f'<text x="{_LABEL_W + _PLOT_W / 2:.0f}" y="{bottom + 28}" class="axis">{escape(axis_label)}</text>'
    )
    for i, r in enumerate(finite):
        cy = _TOP + _ROW * i + _ROW / 2
        label = r.label if len(r.label) <= _MAX_LABEL else r.label[: _MAX_LABEL - 1] + "…"
        state = "" if r.detected is None else (" detected" if r.detected else " not detected")
        tip = f"{r.label}: {r.value:.6g} [{r.low:.6g}, {r.high:.6g}]{state}"
        cls = "pt" if r.detected is None else ("det" if r.detected else "nodet")
        out.append(
            f'<g class="row"><title>{escape(tip)}</title>'
            f'<text x="{_LABEL_W - 6}" y="{cy + 4:.1f}" class="lab">{escape(label)}</text>'
            f'<line x1="{x(r.low):.1f}" y1="{cy:.1f}" x2="{x(r.high):.1f}" y2="{cy:.1f}" class="ci"/>'
            f'<circle cx="{x(r.value):.1f}" cy="{cy:.1f}" r="4" class="{cls}"/></g>'
        )
    out.append("</svg>")
    return "".join(out)
