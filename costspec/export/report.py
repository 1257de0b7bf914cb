"""Render an evaluated `Report` as a table, JSON, CSV or Markdown."""
from __future__ import annotations

import csv
import io
import json

from ..conventions import FLOPS_PER_MAC
from ..model import Report, Row
from ..text import for_markdown, for_markdown_code, for_terminal
from . import units

CONVENTIONS = (f"1 FLOP = one scalar op; a multiply-add = {FLOPS_PER_MAC} FLOPs (FLOPs, not MACs). "
               "Matmul-class FLOPs go to Tensor Cores (TC) unless the layer runs in plain fp32, "
               "where they run on CUDA cores; pointwise FLOPs use the CUDA-core cost table.")


def visible(report: Report, depth: int | None) -> list[Row]:
    return [r for r in report.rows if depth is None or r.depth < depth]


def header(report: Report, escape=for_terminal) -> str:
    dims = " ".join(f"{k}={v}" for k, v in report.dims.items())
    return f"{escape(report.spec_name)} | pass: {report.pass_} | precision: {report.precision} | {dims}"


def _roof_rows(report: Report, roof) -> dict:
    return {} if roof is None else {r.name: r for r in roof.rows}


def render_table(report: Report, depth: int | None = None, roof=None) -> str:
    """A fixed-width table of the layer tree with human units (plus roofline columns with --gpu)."""
    rows = visible(report, depth)
    extra = _roof_rows(report, roof)
    names = ["  " * r.depth + for_terminal(r.label) + (f" x{r.count}" if r.count != 1 else "")
             + (f" (repeat x{r.repeat})" if r.repeat is not None else "") for r in rows]
    table = [["layer", "TC FLOPs", "CUDA FLOPs", "total", "params", "share", "matmul on"]
             + (["bytes", "FLOP/B", "bound", "est. time"] if roof else [])]
    for name, r in zip(names, rows):
        table.append([name, units.si(r.tc), units.si(r.cuda), units.si(r.total), units.params(r.params),
                      units.share(r.total, report.total), r.engine or "-"] + (_roof_cells(extra[r.name]) if roof else []))
    table.append(["total", units.si(report.tc), units.si(report.cuda), units.si(report.total),
                  units.params(report.params), "100.0%", ""]
                 + ([units.si(roof.bytes, "B"), "", "", units.seconds(roof.time_s)] if roof else []))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [header(report)]
    for i, row in enumerate(table):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
        if i == 0 or i == len(table) - 2:
            lines.append("  ".join("-" * w for w in widths))
    lines.extend(report.notes)
    if roof:
        mfu = f", MFU at that time {100 * roof.mfu:.1f}%" if roof.mfu is not None else ""
        lines.append(f"estimated end-to-end time {units.seconds(roof.time_s)}{mfu}")
        lines.extend(roof.notes)
    lines.append(CONVENTIONS)
    return "\n".join(lines)


def _roof_cells(r) -> list[str]:
    return [units.si(r.bytes, "B"), f"{r.intensity:.1f}" if r.intensity else "-", r.bound, units.seconds(r.time_s)]


def _row_dict(r: Row, roof_row=None) -> dict:
    extra = {} if roof_row is None else {"bytes": roof_row.bytes, "intensity": roof_row.intensity,
                                         "bound": roof_row.bound, "est_time_s": roof_row.time_s}
    return {**extra, "name": r.name, "label": r.label, "depth": r.depth, "kind": r.kind, "count": r.count,
            "tc_flops": r.tc, "cuda_flops": r.cuda, "total_flops": r.total, "params": r.params,
            "matmul_engine": r.engine, "repeat": r.repeat}


def render_json(report: Report, depth: int | None = None, roof=None) -> str:
    """Exact integers, every row, and the conventions used."""
    extra = _roof_rows(report, roof)
    out = {
        "spec": report.spec_name, "pass": report.pass_, "precision": report.precision, "dims": report.dims,
        "totals": {"tc_flops": report.tc, "cuda_flops": report.cuda, "total_flops": report.total,
                   "params": report.params},
        "rows": [_row_dict(r, extra.get(r.name)) for r in visible(report, depth)],
        "notes": report.notes + (roof.notes if roof else []), "conventions": CONVENTIONS,
    }
    if roof:
        out["roofline"] = {"gpu": roof.gpu.key, "fusion": roof.fusion, "bytes": roof.bytes,
                           "est_time_s": roof.time_s, "mfu": roof.mfu}
    return json.dumps(out, indent=2)


def render_csv(report: Report, depth: int | None = None, roof=None) -> str:
    buf = io.StringIO()
    extra = _roof_rows(report, roof)
    fields = ["name", "label", "depth", "kind", "count", "tc_flops", "cuda_flops", "total_flops", "params",
              "matmul_engine", "repeat"] + (["bytes", "intensity", "bound", "est_time_s"] if roof else [])
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in visible(report, depth):
        writer.writerow(_row_dict(r, extra.get(r.name)))
    writer.writerow({"name": "total", "label": "total", "depth": 0, "kind": "model", "count": 1,
                     "tc_flops": report.tc, "cuda_flops": report.cuda, "total_flops": report.total,
                     "params": report.params, "matmul_engine": ""})
    return buf.getvalue().rstrip("\n")


def render_markdown(report: Report, depth: int | None = None, roof=None) -> str:
    lines = [f"**{header(report, for_markdown)}**", "", "| layer | × | TC FLOPs | CUDA FLOPs | total | params | share | matmul on |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in visible(report, depth):
        name = "&nbsp;" * 2 * r.depth + for_markdown_code(r.name)
        lines.append(f"| {name} | {r.count} | {units.si(r.tc)} | {units.si(r.cuda)} | {units.si(r.total)} | "
                     f"{units.params(r.params)} | {units.share(r.total, report.total)} | {r.engine or '-'} |")
    lines.append(f"| **total** | | {units.si(report.tc)} | {units.si(report.cuda)} | {units.si(report.total)} | "
                 f"{units.params(report.params)} | 100.0% | |")
    return "\n".join(lines + ["", CONVENTIONS])


RENDERERS = {"table": render_table, "json": render_json, "csv": render_csv, "markdown": render_markdown}
