"""Inline SVG charts, rendered on the server. Labels (tool names, agent keys, rule groups) are hostile text: every
one goes through `escape` (html.escape: & < > " ' all replaced), and only numbers computed here go in unescaped."""
from __future__ import annotations

import html
from datetime import datetime
from typing import Iterable

from django.utils.safestring import SafeString, mark_safe


def escape(text) -> str:
    return html.escape(str(text), quote=True)


# One colour per status, the same in every chart and in the legend.
STATUS_COLOURS = {
    "ok": "#3a9d5d", "error": "#d64545", "denied": "#e08a1e", "rate_limited": "#8e5bd1", "timeout": "#8c5a2b",
    "invalid_arguments": "#8a8f98", "pending_approval": "#3b7dd8",
}
OTHER_COLOUR = "#555"
_ORDER = {status: i for i, status in enumerate(STATUS_COLOURS)}


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def duration_label(ms: float | None) -> str:
    if ms is None:
        return "–"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2f} ms"


def legend() -> SafeString:
    items = "".join(f'<span class="goclaw-legend-item"><i style="background:{c}"></i>{escape(s)}</span>'
                    for s, c in STATUS_COLOURS.items())
    return mark_safe(f'<div class="goclaw-legend">{items}</div>')


def stacked_bars(bins: list[dict[str, int]], hours: list[datetime], label: str, width: int = 480,
                 height: int = 80) -> SafeString:
    """One bar per hour, stacked by status; each bar's tooltip names its hour and the count of every status."""
    peak = max((sum(b.values()) for b in bins), default=0) or 1
    step = width / max(len(bins), 1)
    bar = _num(max(step - 2, 1))
    parts = []
    for i, counts in enumerate(bins):
        if not counts:
            continue
        y = float(height)
        ordered = sorted(counts, key=lambda s: _ORDER.get(s, 99))
        tip = f"{hours[i]:%H}:00 UTC · " + ", ".join(f"{s} {counts[s]}" for s in ordered)
        rects = []
        for status in ordered:
            h = counts[status] / peak * (height - 2)
            y -= h
            rects.append(f'<rect x="{_num(i * step)}" y="{_num(y)}" width="{bar}" height="{_num(h)}" '
                         f'fill="{STATUS_COLOURS.get(status, OTHER_COLOUR)}"></rect>')
        parts.append(f"<g><title>{escape(tip)}</title>{''.join(rects)}</g>")
    return mark_safe(f'<svg class="goclaw-chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
                     f'height="{height}" aria-label="{escape(label)}"><title>{escape(label)}</title>'
                     + "".join(parts) + "</svg>")


def hbars(items: Iterable[tuple[str, float, str]], label: str, width: int = 480, colour: str = "#3b7dd8",
          second: Iterable[float | None] | None = None, second_colour: str = "#a9c4ee") -> SafeString:
    """Horizontal bars: (label, value, value text) per row. `second` draws a lighter bar behind each row (p95 behind
    p50). The label is written as SVG text, escaped."""
    items = list(items)
    behind = list(second) if second is not None else [None] * len(items)
    peak = max([v for _, v, _ in items] + [b or 0 for b in behind] + [0]) or 1
    row, text_w, value_w = 22, 170, 90
    plot = width - text_w - value_w
    height = row * len(items) + 4
    parts = []
    for i, ((name, value, shown), back) in enumerate(zip(items, behind)):
        y = i * row + 2
        short = name if len(name) <= 26 else name[:25] + "…"
        parts.append(f'<text x="{text_w - 6}" y="{y + 15}" text-anchor="end">{escape(short)}<title>{escape(name)}'
                     "</title></text>")
        if back:
            parts.append(f'<rect x="{text_w}" y="{y + 3}" width="{_num(back / peak * plot)}" height="{row - 6}" '
                         f'fill="{second_colour}"></rect>')
        parts.append(f'<rect x="{text_w}" y="{y + 3}" width="{_num(max(value, 0) / peak * plot)}" height="{row - 6}" '
                     f'fill="{colour}"><title>{escape(name)}: {escape(shown)}</title></rect>')
        parts.append(f'<text x="{width - value_w + 6}" y="{y + 15}">{escape(shown)}</text>')
    return mark_safe(f'<svg class="goclaw-chart goclaw-hbars" role="img" viewBox="0 0 {width} {height}" '
                     f'width="{width}" height="{height}" aria-label="{escape(label)}"><title>{escape(label)}</title>'
                     + "".join(parts) + "</svg>")
