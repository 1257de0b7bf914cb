"""Charts as inline SVG for the HTML report (no matplotlib, no script): line charts and the roofline.

Both share one plotting frame: linear or log axes, ticks at powers of 10 (or 2 on a base-2 axis),
labelled by a caller's formatter. Every text is escaped; every point carries a <title> tooltip.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Callable, Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22")
Formatter = Callable[[float], str]


def seconds(value: float) -> str:
    """Axis ticks in time units: 0.01 -> '10ms', 1e-4 -> '100µs'."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}s"


def short(value: float) -> str:
    """1e12 -> '1T', 2048 -> '2.05k', 0.5 -> '0.5' (axis ticks)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{prefix}"
    if value and abs(value) < 1e-3:
        for scale, unit in ((1e-6, "µ"), (1e-9, "n")):
            if abs(value) >= scale:
                return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


@dataclass
class Axis:
    lo: float
    hi: float
    log: bool
    start: float  # pixels
    end: float
    base: int = 10

    def __post_init__(self) -> None:
        if self.log:
            self.lo, self.hi = max(self.lo, 1e-300), max(self.hi, 1e-300)
        if self.hi <= self.lo:
            self.lo, self.hi = (self.lo / 2, self.lo * 2) if self.log else (self.lo - 1, self.hi + 1)

    def _t(self, v: float) -> float:
        return math.log(max(v, 1e-300), self.base) if self.log else v

    def __call__(self, v: float) -> float:
        lo, hi = self._t(self.lo), self._t(self.hi)
        return self.start + (self._t(v) - lo) / (hi - lo) * (self.end - self.start)

    def ticks(self) -> list[float]:
        if self.log:
            k0, k1 = math.floor(self._t(self.lo) + 1e-9), math.ceil(self._t(self.hi) - 1e-9)
            ks = list(range(k0, k1 + 1))
            step = max(1, math.ceil(len(ks) / 8))
            return [float(self.base) ** k for k in ks[::step] if self.lo * 0.999 <= self.base ** k <= self.hi * 1.001]
        span = self.hi - self.lo
        raw = span / 6
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
        first = math.ceil(self.lo / step) * step
        return [first + i * step for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def _padded(lo: float, hi: float, log: bool) -> tuple[float, float]:
    if log:
        return lo / 1.3, hi * 1.3
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return (0.0 if lo >= 0 and lo - pad < 0 else lo - pad), hi + pad


class Frame:
    """A plot area with axes, gridlines and labels; `x`, `y` map data to pixels."""

    def __init__(self, x: Axis, y: Axis, width: int, height: int):
        self.x, self.y, self.width, self.height = x, y, width, height
        self.parts: list[str] = []

    def axes(self, xlabel: str, ylabel: str, xfmt: Formatter, yfmt: Formatter, title: str) -> None:
        x0, x1, y0, y1 = self.x.start, self.x.end, self.y.start, self.y.end
        p = self.parts
        for t in self.x.ticks():
            px = self.x(t)
            p.append(f'<line class="grid" x1="{px:.1f}" y1="{y1:.1f}" x2="{px:.1f}" y2="{y0:.1f}"/>')
            p.append(f'<text class="tick" x="{px:.1f}" y="{y0 + 16:.1f}" text-anchor="middle">{escape(xfmt(t))}</text>')
        for t in self.y.ticks():
            py = self.y(t)
            p.append(f'<line class="grid" x1="{x0:.1f}" y1="{py:.1f}" x2="{x1:.1f}" y2="{py:.1f}"/>')
            p.append(f'<text class="tick" x="{x0 - 6:.1f}" y="{py + 4:.1f}" text-anchor="end">{escape(yfmt(t))}</text>')
        p.append(f'<rect class="frame" x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" height="{y0 - y1:.1f}"/>')
        p.append(f'<text class="label" x="{(x0 + x1) / 2:.1f}" y="{self.height - 6}" text-anchor="middle">'
                 f'{escape(xlabel)}</text>')
        p.append(f'<text class="label" transform="translate(14,{(y0 + y1) / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{escape(ylabel)}</text>')
        p.append(f'<text class="title" x="{(x0 + x1) / 2:.1f}" y="16" text-anchor="middle">{escape(title)}</text>')

    def clip(self, name: str) -> str:
        x0, x1, y0, y1 = self.x.start, self.x.end, self.y.start, self.y.end
        return (f'<clipPath id="{name}"><rect x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" '
                f'height="{y0 - y1:.1f}"/></clipPath>')

    def svg(self, cls: str, label: str) -> str:
        return (f'<svg class="{cls}" role="img" aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg" '
                f'viewBox="0 0 {self.width} {self.height}" width="{self.width}" height="{self.height}">'
                + "".join(self.parts) + "</svg>")


def line_chart(series: Sequence[tuple[str, Sequence[float], Sequence[float]]], xlabel: str, ylabel: str,
               title: str, xfmt: Formatter = short, yfmt: Formatter = short, logx: bool = False,
               logy: bool = False, width: int = 620, height: int = 360, legend_below: bool = False) -> str:
    """Lines with markers, one per (label, xs, ys); log axes as asked (base 2 on x for powers of two); the
    legend in the plot's upper left, or (`legend_below`) under the x axis's label, the chart taller by it."""
    xs = [x for _, sx, _ in series for x in sx]
    ys = [y for _, _, sy in series for y in sy if not logy or y > 0]
    if not xs or not ys:
        return ""
    base = 2 if logx and all(x > 0 and float(x).is_integer() and (int(x) & (int(x) - 1)) == 0 for x in xs) else 10
    xlo, xhi = (min(xs), max(xs)) if logx else _padded(min(xs), max(xs), False)
    ylo, yhi = _padded(min(ys), max(ys), logy)
    below = 16 * len([s for s in series if s[0]]) + 12 if legend_below else 0
    frame = Frame(Axis(xlo, xhi, logx, 64, width - 16, base), Axis(ylo, yhi, logy, height - 40, 28), width,
                  height + below)
    frame.height = height  # the axes' label sits where it would without the legend below
    frame.axes(xlabel, ylabel, xfmt, yfmt, title)
    p = frame.parts
    for i, (label, sx, sy) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = [(frame.x(x), frame.y(y)) for x, y in zip(sx, sy) if not logy or y > 0]
        p.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" points="'
                 + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        for (a, b), x, y in zip(pts, sx, sy):
            tip = f"{label + ': ' if label else ''}{xlabel}={xfmt(x)}, {ylabel}={yfmt(y)}"
            p.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.2" fill="{color}"><title>{escape(tip)}</title></circle>')
        if label:
            ly = height + 16 + 16 * i if legend_below else 40 + 16 * i
            p.append(f'<rect x="{72}" y="{ly - 9}" width="12" height="4" fill="{color}"/>'
                     f'<text class="legend" x="{90}" y="{ly - 3}">{escape(label)}</text>')
    frame.height = height + below
    return frame.svg("chart", title)


MEMORY_COLOR = "#7f7f7f"
ROOF_COLORS = ("#1f77b4", "#d62728", "#2ca02c")
BOUND_COLORS = {"TC": "#1f77b4", "CUDA": "#d62728", "memory": MEMORY_COLOR}


def _overlap(a: tuple, b: tuple) -> bool:
    return not (a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1])


def _legend(p: list[str], items: list[tuple[str, str]], frame: "Frame") -> tuple:
    """A legend in the lower right corner (empty on a roofline: the memory slope starts lower left)."""
    width = 16 + 6.2 * max(len(label) for label, _ in items)
    x0 = frame.x.end - width - 8
    y0 = frame.y.start - 8 - 16 * len(items)
    p.append(f'<rect x="{x0 - 6:.1f}" y="{y0 - 4:.1f}" width="{width + 8:.1f}" height="{16 * len(items) + 6}" '
             'fill="#fff" fill-opacity="0.85" stroke="#dde2ea"/>')
    for i, (label, color) in enumerate(items):
        y = y0 + 16 * i + 8
        p.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x0 + 12:.1f}" y2="{y:.1f}" stroke="{color}" stroke-width="2"/>'
                 f'<text class="legend" x="{x0 + 16:.1f}" y="{y + 4:.1f}">{escape(label)}</text>')
    return (x0 - 6, y0 - 4, x0 + width + 2, y0 + 16 * len(items) + 2)


@dataclass(frozen=True)
class RoofPoint:
    label: str
    intensity: float  # FLOP / byte
    flops_per_s: float  # achieved at the estimated time
    share: float  # of the total time, 0..1
    bound: str


def roofline_chart(points: Sequence[RoofPoint], roofs: Sequence[tuple[str, float]], bandwidth: float, title: str,
                   width: int = 760, height: int = 440, labelled: int = 8) -> str:
    """Log-log roofline: one flat roof per compute peak, the memory slope, one circle per layer
    (area by time share); the `labelled` largest by time are named."""
    if not points:
        return ""
    top = max(peak for _, peak in roofs)
    xlo = min(min(p.intensity for p in points), top / bandwidth) / 4
    xhi = max(max(p.intensity for p in points), top / bandwidth) * 4
    ylo = min(min(p.flops_per_s for p in points), bandwidth * xlo) / 2
    frame = Frame(Axis(xlo, xhi, True, 72, width - 16), Axis(ylo, top * 2.5, True, height - 40, 28), width, height)
    frame.axes("arithmetic intensity (FLOP / byte)", "FLOP/s", short, short, title)
    p = frame.parts
    p.append("<defs>" + frame.clip("roofclip") + "</defs>")
    p.append('<g clip-path="url(#roofclip)">')
    p.append(f'<polyline class="roof memory" fill="none" stroke="{MEMORY_COLOR}" stroke-width="2" '
             f'points="{frame.x(xlo):.1f},{frame.y(bandwidth * xlo):.1f} {frame.x(top / bandwidth):.1f},'
             f'{frame.y(top):.1f}"/>')
    legend = [(f"memory {short(bandwidth)}B/s", MEMORY_COLOR)]
    for i, (label, peak) in enumerate(roofs):
        color = ROOF_COLORS[i % len(ROOF_COLORS)]
        p.append(f'<polyline class="roof" fill="none" stroke="{color}" stroke-width="2" '
                 f'points="{frame.x(peak / bandwidth):.1f},{frame.y(peak):.1f} '
                 f'{frame.x(xhi):.1f},{frame.y(peak):.1f}"/>')
        legend.append((label, color))
    ranked = sorted(points, key=lambda q: -q.share)
    for q in reversed(ranked):
        r = 3 + 14 * math.sqrt(max(q.share, 0.0))
        color = BOUND_COLORS.get(q.bound.rstrip("*"), PALETTE[3])
        tip = (f"{q.label}: {short(q.intensity)} FLOP/B, {short(q.flops_per_s)}FLOP/s, {100 * q.share:.1f}% of time, "
               f"{q.bound}-bound")
        p.append(f'<circle class="layer" cx="{frame.x(q.intensity):.1f}" cy="{frame.y(q.flops_per_s):.1f}" '
                 f'r="{r:.1f}" fill="{color}" fill-opacity="0.45" stroke="{color}"><title>{escape(tip)}</title>'
                 "</circle>")
    p.append("</g>")
    taken = [_legend(p, legend, frame)]
    for q in ranked[:labelled]:
        cx, cy = frame.x(q.intensity), frame.y(q.flops_per_s)
        spot = place_label(cx, cy, LABEL_CHAR_WIDTH * len(q.label), taken, frame)
        if spot is not None:  # a label that fits nowhere is left out (the circle's tooltip still names it)
            x, y, w = spot
            # textLength: the text is drawn exactly as wide as the box it was placed in, whatever the font
            p.append(f'<text class="pointlabel" x="{x:.1f}" y="{y:.1f}" textLength="{w:.1f}" '
                     f'lengthAdjust="spacingAndGlyphs">{escape(q.label)}</text>')
    return frame.svg("chart roofline", title)


LABEL_CHAR_WIDTH = 5.6  # px per character of a point label (10.5 px sans-serif: about 5.4 on average)
LABEL_HEIGHT = 15.0  # px: the text's ascent and descent with a pixel and a half to spare on each side (scaled down
# to a phone's width, the browser rounds the glyph boxes to whole pixels)
# where a label may go relative to its circle (dx from the centre, or None: left of it; dy of the baseline)
LABEL_SPOTS = ((8, -8), (8, 14), (None, -8), (None, 14), (8, -24), (8, 30), (None, -24), (None, 30), (8, -40),
               (8, 46))


def place_label(cx: float, cy: float, width: float, taken: list[tuple], frame: "Frame") -> tuple | None:
    """The first spot beside (cx, cy) where a `width`-wide label stays inside the plot and clears every box
    in `taken` (which it joins): its (x, baseline y, width), or None where every spot collides."""
    for dx, dy in LABEL_SPOTS:
        x = cx - 8 - width if dx is None else cx + dx
        box = (x, cy + dy - LABEL_HEIGHT + 3, x + width, cy + dy + 3)
        inside = frame.x.start <= box[0] and box[2] <= frame.x.end and frame.y.end <= box[1] and box[3] <= frame.y.start
        if inside and not any(_overlap(box, b) for b in taken):
            taken.append(box)
            return x, cy + dy, width
    return None
