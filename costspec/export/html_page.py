"""`costspec report`: one self-contained HTML page (inline CSS, JS, SVG and MathML; nothing fetched).

Sections: header (spec, doc, dims, precision, pass, phase, conventions), summary cards (a served model:
time per token and tokens/s), the collapsible layer tree (TC / CUDA FLOPs, params, share bars; with a GPU
bytes, intensity, bound, time), the closed forms typeset as MathML (totals and per layer, forward and
train), the roofline chart, the memory section and the prefill / decode panel
(`costspec.export.html_serving`), the sweep curves, and the validation / ncu comparison read from their
JSON outputs. Every string
that comes from a spec or a JSON file is escaped.
"""
from __future__ import annotations

from html import escape
from typing import Sequence

import sympy

from costspec.analysis.gpus import POINTWISE_DTYPE
from costspec.core import units
from costspec.core.version import __version__
from costspec.export.html_assets import CSS, JS
from costspec.export.html_report import PageData
from costspec.export.html_serving import decode_panel, memory_section
from costspec.export.json_html import json_sections
from costspec.export.mathml import mathml
from costspec.export.svg import RoofPoint, line_chart, roofline_chart, seconds
from costspec.export.sweep_plot import series, wants_log

OPEN_DEPTH = 2  # tree rows deeper than this start collapsed
# Closed forms longer than this many characters (about) are set on several lines, so that the formula
# tables fit a 1280 px page: the totals have one formula column, the per-layer table three.
TOTAL_WRAP, LAYER_WRAP = 90, 34


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _bar(part: float, whole: float, cls: str = "") -> str:
    frac = part / whole if whole else 0.0
    return (f'<span class="bar {cls}"><span style="width:{100 * max(0.0, min(frac, 1.0)):.1f}%"></span></span>'
            f"{100 * frac:.1f}%")


def _num(value: int, text: str) -> str:
    return f'<td title="{value:,}">{_e(text)}</td>'


def _header(d: PageData) -> str:
    m, r = d.model, d.report
    sources = m.source if isinstance(m.source, list) else ([m.source] if m.source else [])
    dims = "".join(f'<span class="chip" title="{_e(dim.doc)}"><b>{_e(k)}</b> = {v:,}</span>'
                   for k, v in r.dims.items() for dim in [m.dims.dims[k]] if k in m.dims.dims)
    chips = [f"<b>pass</b> {_e(r.pass_)}", f"<b>precision</b> {_e(r.precision)}"]
    if d.served:
        chips.append(f"<b>phase</b> {_e(d.served.phase)}")
    if d.gpu:
        chips.append(f"<b>GPU</b> {_e(d.gpu.name)}")
        chips.append(f"<b>fusion</b> {_e(d.roof.fusion if d.roof else '')}")
    return (f"<header><h1>{_e(m.name)}</h1>"
            + (f'<p class="doc">{_e(m.doc_line)}</p>' if m.doc_line else "")
            + "".join(f'<p class="source">source: {_e(s)}</p>' for s in sources)
            + '<div class="chips">' + "".join(f'<span class="chip">{c}</span>' for c in chips) + "</div>"
            + f'<div class="chips dims">{dims}</div>'
            + f'<p class="muted conventions">{_e(d.conventions)}</p></header>')


def _cards(d: PageData) -> str:
    r = d.report
    cards = [(units.si(r.total), f"total FLOPs ({r.pass_})"), (units.si(r.tc), "Tensor-Core FLOPs"),
             (units.si(r.cuda), "CUDA-core FLOPs"), (units.params(r.params), "parameters")]
    if r.sparse:  # 2:4 layers: the TC card is executed FLOPs; the dense-equivalent beside it
        cards[1:2] = [(units.si(r.tc), "Tensor-Core FLOPs executed (2:4 GEMMs at half)"),
                      (units.si(r.tc_dense), "Tensor-Core FLOPs dense-equivalent")]
    if d.roof:
        cards.append((units.seconds(d.roof.time_s), f"estimated time on {d.gpu.key if d.gpu else ''}"))
        cards.append((units.si(d.roof.bytes, "B"), "bytes moved"))
        if d.roof.mfu is not None:
            cards.append((f"{100 * d.roof.mfu:.1f}%", "MFU at that time"))
        if d.served and d.roof.time_s:
            per = "sequence" if d.served.phase == "decode" else "token"
            per_token = d.roof.time_s if per == "sequence" else d.roof.time_s / d.served.tokens
            cards.append((units.seconds(per_token), f"time per token (per {per})"))
            cards.append((f"{d.served.tokens / d.roof.time_s:,.0f}", f"tokens/s ({d.served.tokens:,} per step)"))
    return '<div class="cards">' + "".join(f'<div class="card"><div class="v">{_e(v)}</div>'
                                           f'<div class="k">{_e(k)}</div></div>' for v, k in cards) + "</div>"


def _has_children(rows: Sequence, i: int) -> bool:
    return i + 1 < len(rows) and rows[i + 1].depth > rows[i].depth


def _name_cell(rows: Sequence, i: int, label: str) -> str:
    r = rows[i]
    toggle = '<button class="tog" type="button">&#x25BC;</button>' if _has_children(rows, i) else \
        '<span class="leaf"></span>'
    return (f'<td class="name" style="padding-left:{0.3 + 1.2 * r.depth:.1f}em" title="{_e(r.name)}">'
            f"{toggle}{_e(label)}</td>")


def _controls() -> str:
    return ('<div class="controls"><button type="button" class="expand">expand all</button>'
            '<button type="button" class="collapse">collapse all</button></div>')


def _tree(d: PageData) -> str:
    r, roof = d.report, d.roof
    head = ["layer", "count", "TC FLOPs", "CUDA FLOPs", "total", "share", "params", "matmul on"]
    if roof:
        head += ["bytes", "FLOP/B", "bound", "est. time", "time share"]
    out = [_controls(), f'<div class="scroll"><table class="tree" data-open="{OPEN_DEPTH}"><thead><tr>'
           + "".join(f'<th class="{"name" if h == "layer" else ""}">{_e(h)}</th>' for h in head)
           + "</tr></thead><tbody>"]
    for i, row in enumerate(r.rows):
        v = row.values
        tc, cuda, total, params = v["tc_flops"], v["cuda_flops"], v["total_flops"], v["params"]
        label = row.label + (f" (repeat ×{v['repeat']})" if v.get("repeat") is not None else "")
        cells = [_name_cell(r.rows, i, label), f"<td>{v['count']:,}</td>", _num(tc, units.si(tc)),
                 _num(cuda, units.si(cuda)), _num(total, units.si(total)),
                 f"<td>{_bar(total, r.total)}</td>", _num(params, units.params(params)),
                 f"<td>{_e(v.get('matmul_engine') or '-')}</td>"]
        if roof:
            nbytes, intensity, bound, time_s = v["bytes"], v["intensity"], str(v["bound"]), v["est_time_s"]
            cells += [_num(nbytes, units.si(nbytes, "B")),
                      f"<td>{intensity:.1f}</td>" if intensity else "<td>-</td>",
                      f'<td class="bound-{_e(bound.rstrip("*"))}">{_e(bound)}</td>',
                      f"<td>{units.seconds(time_s)}</td>", f'<td>{_bar(time_s, roof.time_s, "time")}</td>']
        out.append(f'<tr data-depth="{row.depth}" data-name="{_e(row.name)}">' + "".join(cells) + "</tr>")
    total = ['<td class="name">total</td>', "<td></td>", _num(r.tc, units.si(r.tc)), _num(r.cuda, units.si(r.cuda)),
             _num(r.total, units.si(r.total)), f"<td>{_bar(r.total, r.total)}</td>",
             _num(r.params, units.params(r.params)), "<td></td>"]
    if roof:
        total += [_num(roof.bytes, units.si(roof.bytes, "B")), "<td></td>", "<td></td>",
                  f"<td>{units.seconds(roof.time_s)}</td>", "<td></td>"]
    out.append('</tbody><tfoot><tr class="total">' + "".join(total) + "</tr></tfoot></table></div>")
    return "".join(out)


def _forms(d: PageData) -> str:
    t = d.totals
    names = {"tc": "TC FLOPs", "cuda": "CUDA FLOPs", "total": "total FLOPs"}
    out = ['<div class="scroll"><table class="data totals"><thead><tr><th>quantity</th><th>pass</th><th>closed form'
           "</th></tr></thead><tbody>"]
    for p in t:  # forward, and train unless the model has no backward pass
        for key, title in names.items():
            out.append(f'<tr class="{p}"><td>{_e(title)}</td><td>{p}</td><td class="formula">'
                       f"{mathml(t[p][key], wrap=TOTAL_WRAP)}</td></tr>")
    out.append('<tr><td>parameters</td><td></td><td class="formula">'
               f'{mathml(t["forward"]["params"], wrap=TOTAL_WRAP)}</td></tr>')
    out.append("</tbody></table></div>")
    where = []
    for dim in d.symbols.dims:
        meaning = dim.doc or ""
        if dim.role in ("derived", "expanded") and dim.definition is not None:
            meaning += f" ({dim.name} = {sympy.sstr(dim.definition)})"
        value = d.report.dims.get(dim.name, dim.value)  # the page's value (--batch included)
        where.append(f"<tr><td>{_e(dim.name)}</td><td>{value:,}</td><td>{_e(dim.role)}</td>"
                     f"<td>{_e(meaning)}</td></tr>")
    out.append('<h3>where</h3><div class="scroll"><table class="data symbols"><thead><tr><th>symbol</th>'
               "<th>value</th><th>role</th><th>meaning</th></tr></thead><tbody>" + "".join(where)
               + "</tbody></table></div>")
    rows = d.report.rows
    out.append("<h3>per layer (all instances of the layer)</h3>" + _controls()
               + f'<div class="scroll"><table class="forms" data-open="{OPEN_DEPTH}"><thead><tr>'
               '<th class="name">layer</th><th>forward FLOPs</th>' + ("<th>train FLOPs</th>" if "train" in t else "")
               + "<th>parameters</th></tr></thead><tbody>")
    for i, row in enumerate(rows):
        f = d.row_forms[row.name]
        out.append(f'<tr data-depth="{row.depth}" data-name="{_e(row.name)}">{_name_cell(rows, i, row.label)}'
                   + "".join(f'<td class="formula">{mathml(form, wrap=LAYER_WRAP)}</td>'
                             for form in (f.forward, f.train, f.params) if form is not None) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _roofline(d: PageData) -> str:
    roof, gpu = d.roof, d.gpu
    if not roof or not gpu:
        return ""
    rows = d.report.rows
    points = []
    for i, row in enumerate(rows):
        v = row.values
        time_s, intensity, total = v.get("est_time_s"), v.get("intensity"), v["total_flops"]
        if _has_children(rows, i) or not time_s or not intensity or not total:
            continue
        points.append(RoofPoint(row.name, intensity, total / time_s, time_s / roof.time_s, str(v["bound"])))
    dtype = d.model.precision.dtype
    roofs = [(f"CUDA cores {POINTWISE_DTYPE} {gpu.cuda_peak(POINTWISE_DTYPE) / 1e12:g} TFLOP/s",
              gpu.cuda_peak(POINTWISE_DTYPE))]
    if d.model.precision.tensor_cores and dtype in gpu.tensor:
        roofs.insert(0, (f"Tensor Cores {dtype} {gpu.tensor_peak(dtype) / 1e12:g} TFLOP/s", gpu.tensor_peak(dtype)))
    svg = roofline_chart(points, roofs, gpu.bandwidth, f"{d.model.name} on {gpu.name} ({d.report.pass_})")
    return (f"<h2 id=\"roofline\">Roofline</h2><p class=\"muted\">One circle per kernel (leaf layer), area by its "
            f"share of the estimated time; memory roof {gpu.memory_bw_gbps:g} GB/s. Hover for numbers.</p>"
            f'<div class="scroll">{svg}</div>')


def _sweep(d: PageData) -> str:
    s = d.sweep
    if s is None:
        return ""
    import numpy as np

    grid = s.grid
    x = grid.names[0]
    xs = np.asarray(grid.columns[x]).tolist()
    columns = {n: np.asarray(grid.columns[n]).tolist() for n in grid.names}
    charts = []
    flops = series(grid, s.values["total_flops"])
    charts.append(line_chart(flops, x, f"total FLOPs ({d.report.pass_})", "FLOPs vs " + x,
                             logx=wants_log(xs), logy=wants_log(np.asarray(s.values["total_flops"]).tolist())))
    if s.times is not None:
        times = series(grid, s.times.time_s)
        charts.append(line_chart(times, x, "estimated time", "estimated time vs " + x, yfmt=seconds,
                                 logx=wants_log(xs), logy=wants_log(s.times.time_s.tolist())))
    head = grid.names + ["TC FLOPs", "CUDA FLOPs", "total FLOPs"]
    if s.times is not None:
        head += ["bytes", "est. time", "bound"]
    body = []
    for i in range(min(grid.size, 500)):
        cells = [f"{columns[n][i]:,}" for n in grid.names]
        cells += [units.si(int(s.values[k][i])) for k in ("tc_flops", "cuda_flops", "total_flops")]
        if s.times is not None:
            cells += [units.si(int(s.times.bytes[i]), "B"), units.seconds(float(s.times.time_s[i])),
                      str(s.times.bound[i])]
        body.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    table = ('<div class="scroll"><table class="data sweep"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
             + "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>")
    return (f'<h2 id="sweep">Sweep over {_e(", ".join(grid.names))}</h2><div class="charts">{"".join(charts)}</div>'
            + table)


def render_page(d: PageData) -> str:
    """The report as one HTML document."""
    parts = [_header(d), _cards(d), '<h2 id="layers">Layers</h2>', _tree(d),
             '<h2 id="formulas">Closed forms</h2><p class="muted">Exact in the spec\'s symbols (as '
             "<code>costspec formula</code> prints them); each layer's forms count all its instances.</p>",
             _forms(d), _roofline(d), memory_section(d.memory), decode_panel(d.curve, d.model.precision.dtype),
             _sweep(d)]
    if d.validation is not None:
        parts.append('<h2 id="validation">Validation against torch</h2>' + json_sections(d.validation))
    if d.compare is not None:
        parts.append('<h2 id="ncu">Nsight Compute comparison</h2>' + json_sections(d.compare))
    if d.notes:
        parts.append('<h2 id="notes">Notes</h2><ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in d.notes)
                     + "</ul>")
    parts.append(f'<footer>costspec {_e(__version__)} report. Self-contained: no network needed to view it.</footer>')
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(d.model.name)} | costspec report</title><style>{CSS}</style></head><body>"
            '<div id="js-errors"></div>' + "".join(parts) + f"<script>{JS}</script></body></html>")
