"""A stacked horizontal bar as inline SVG for the HTML report: one segment per part (e.g. the kinds of
device memory), an optional limit drawn as a vertical line across it (a GPU's capacity), and a legend
below the bar. Every text is escaped; every segment carries a <title> tooltip."""
from __future__ import annotations

from html import escape
from typing import Callable, Sequence

from costspec.export.svg import PALETTE, Axis

LEGEND_ROW = 18  # px per legend row
LEGEND_CHAR = 6.4  # px per character of a legend entry (11 px sans-serif, generous)


def stacked_bar(parts: Sequence[tuple[str, int]], title: str, fmt: Callable[[float], str],
                limit: tuple[str, int] | None = None, width: int = 620) -> str:
    """One bar of `parts` (label, size) stacked left to right on a linear axis from 0, ticks labelled by
    `fmt`; `limit` (label, value): a dashed vertical line at that value, the axis long enough to show it."""
    total = sum(size for _, size in parts)
    top = max(total, limit[1] if limit else 0) * 1.05 or 1.0
    x = Axis(0.0, top, False, 16, width - 16)
    bar_y, bar_h = 36, 34
    out = [f'<text class="title" x="{width / 2:.1f}" y="16" text-anchor="middle">{escape(title)}</text>']
    for t in x.ticks():
        px = x(t)
        out.append(f'<line class="grid" x1="{px:.1f}" y1="{bar_y - 4}" x2="{px:.1f}" y2="{bar_y + bar_h + 4}"/>'
                   f'<text class="tick" x="{px:.1f}" y="{bar_y + bar_h + 18}" text-anchor="middle">'
                   f"{escape(fmt(t))}</text>")
    start = 0
    for i, (label, size) in enumerate(parts):
        color = PALETTE[i % len(PALETTE)]
        share = size / total if total else 0.0
        wide = max(x(start + size) - x(start), 0.0)
        out.append(f'<rect class="segment" x="{x(start):.2f}" y="{bar_y}" width="{wide:.2f}"'
                   f' height="{bar_h}" fill="{color}"><title>{escape(f"{label}: {fmt(size)} ({100 * share:.1f}%)")}'
                   "</title></rect>")
        start += size
    out.append(f'<rect class="frame" x="{x(0):.1f}" y="{bar_y}" width="{x(total) - x(0):.1f}" height="{bar_h}"/>')
    if limit:
        px = x(limit[1])
        out.append(f'<line class="limit" x1="{px:.1f}" y1="{bar_y - 10}" x2="{px:.1f}" y2="{bar_y + bar_h + 6}" '
                   'stroke="#c62828" stroke-width="2" stroke-dasharray="5,3"/>'
                   f'<text class="limitlabel" x="{min(px, width - 16):.1f}" y="{bar_y - 12}" text-anchor="end" '
                   f'fill="#c62828">{escape(limit[0])}</text>')
    legend_top = bar_y + bar_h + 34
    cx, row = 16.0, 0
    for i, (label, size) in enumerate(parts):
        text = f"{label}: {fmt(size)}"
        w = 18 + LEGEND_CHAR * len(text)
        if cx + w > width - 16 and cx > 16:
            cx, row = 16.0, row + 1
        y = legend_top + LEGEND_ROW * row
        out.append(f'<rect x="{cx:.1f}" y="{y - 9}" width="12" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>'
                   f'<text class="legend" x="{cx + 16:.1f}" y="{y}">{escape(text)}</text>')
        cx += w + 10
    height = legend_top + LEGEND_ROW * row + 10
    return (f'<svg class="chart stacked" role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">' + "".join(out) + "</svg>")


__all__ = ["stacked_bar"]
