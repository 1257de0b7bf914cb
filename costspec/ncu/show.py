"""`costspec ncu show`: what any Nsight Compute CSV export holds, one row per kernel launch.

No spec and no NVTX ranges are needed. Every figure comes from the counters of its own launch
(``kernels.flops_from_metrics``) and names them; a figure whose counters are absent from the
export is ``None`` (shown as ``-``), never 0:

* Tensor-Core FLOPs: the ``sm__ops_path_tensor_*.sum`` counters (Volta: 512 x tensor-pipe
  instructions). Where per-instruction counters (Hopper wgmma + mma.sync) break an aggregate
  down, the aggregate's figure is shown next to it as a cross-check.
* CUDA-core FLOPs by precision: FP32 = fadd + fmul + 2*ffma (+ 2*fadd2 + 2*fmul2 + 4*ffma2 on
  Blackwell), FP16 = 2*hadd + 2*hmul + 4*hfma, FP64 = dadd + dmul + 2*dfma.
* DRAM bytes: ``dram__bytes_read.sum`` + ``dram__bytes_write.sum``, else ``dram__bytes.sum``.
* Duration: ``gpu__time_duration.sum``, else the ``Duration`` label of the Speed Of Light section
  (a details page printed with labels).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from costspec.core.render import render
from costspec.core.results import Column, Result, Row, Table
from costspec.ncu.attribute import short_name
from costspec.ncu.kernels import classify, flops_from_metrics
from costspec.ncu.metrics import (
    DRAM_BYTES_READ,
    DRAM_BYTES_WRITE,
    DURATION,
    TENSOR_PIPE_INST,
    UnknownArchError,
    cuda_core_metric,
    normalize_cc,
)
from costspec.ncu.parse import LABEL_SEPARATOR, KernelRecord, parse_csv

DRAM_BYTES_TOTAL = "dram__bytes.sum"
_SOL_DURATION = LABEL_SEPARATOR.join(("GPU Speed Of Light Throughput", "Duration"))
_PRECISION_OPS = {
    "fp32": ("fadd", "fmul", "ffma", "fadd2", "fmul2", "ffma2"),
    "fp16": ("hadd", "hmul", "hfma"),
    "fp64": ("dadd", "dmul", "dfma"),
}
FIGURES = ("tensor", "tensor_aggregate", "cuda_fp32", "cuda_fp16", "cuda_fp64", "dram_bytes", "duration_s")


@dataclass(frozen=True)
class LaunchRow:
    """One kernel launch: its figures (``None`` = not in the export) and the counters behind each."""

    id: int
    kernel: str
    short: str
    kclass: str
    cc: str | None
    device: str | None
    line: int
    figures: dict[str, float | None]
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ShowReport:
    source: str
    rows: list[LaunchRow]
    totals: dict[str, float | None]
    notes: list[str]


def _known_cc(cc: str | None) -> str | None:
    if cc is None:
        return None
    try:
        return normalize_cc(cc)
    except UnknownArchError:
        return None


def _sum(metrics: Mapping[str, float], names: Sequence[str]) -> tuple[float | None, tuple[str, ...]]:
    present = tuple(n for n in names if n in metrics)
    return (float(sum(metrics[n] for n in present)) if present else None), present


def launch_row(record: KernelRecord) -> LaunchRow:
    """The figures of one launch, each with the counters it was read from."""
    metrics = record.metrics
    cc = _known_cc(record.cc)
    flops = flops_from_metrics(metrics, cc=cc)
    figures: dict[str, float | None] = {}
    sources: dict[str, tuple[str, ...]] = {}
    if flops["tensor_method"] == "ops_counters":
        figures["tensor"], sources["tensor"] = flops["tensor"], flops["tensor_counters"]
    elif flops["tensor_method"] == "volta_inst_x512":
        figures["tensor"], sources["tensor"] = flops["tensor"], (f"512 x {TENSOR_PIPE_INST}",)
    else:
        figures["tensor"] = None
    figures["tensor_aggregate"] = flops["tensor_aggregate"]
    if flops["tensor_aggregate_counters"]:
        sources["tensor_aggregate"] = flops["tensor_aggregate_counters"]
    by_precision = {"fp32": flops["cuda_fp32"], "fp16": flops["cuda_fp16"], "fp64": flops["cuda_fp64"]}
    for precision, ops in _PRECISION_OPS.items():
        present = tuple(cuda_core_metric(op) for op in ops if cuda_core_metric(op) in metrics)
        figures[f"cuda_{precision}"] = by_precision[precision] if present else None
        if present:
            sources[f"cuda_{precision}"] = present
    dram, dram_from = _sum(metrics, (DRAM_BYTES_READ, DRAM_BYTES_WRITE))
    if dram is None:
        dram, dram_from = _sum(metrics, (DRAM_BYTES_TOTAL,))
    figures["dram_bytes"] = dram
    if dram_from:
        sources["dram_bytes"] = dram_from
    duration = next((name for name in (DURATION, _SOL_DURATION)
                     if name in metrics and record.units.get(name) == "second"), None)
    figures["duration_s"] = metrics[duration] if duration else None
    if duration:
        sources["duration_s"] = (duration,)
    return LaunchRow(record.id, record.kernel_name, short_name(record.kernel_name), classify(record.kernel_name),
                     record.cc, record.device_name, record.line, figures, sources)


def show(csv_path: str) -> ShowReport:
    """Parse any ncu CSV export and sum its launches."""
    rows = [launch_row(record) for record in parse_csv(csv_path)]
    totals: dict[str, float | None] = {}
    notes: list[str] = []
    for name in FIGURES:
        values = [r.figures[name] for r in rows if r.figures[name] is not None]
        totals[name] = float(sum(v for v in values if v is not None)) if values else None
        if values and len(values) < len(rows) and name != "tensor_aggregate":
            notes.append(f"{name}: {len(rows) - len(values)} of {len(rows)} launches have no counter for it; "
                         "the total covers the others")
    if not rows:
        notes.append("the export holds no kernel launch")
    if all(r.figures["tensor"] is None and r.figures["cuda_fp32"] is None for r in rows) and rows:
        notes.append("no FLOP counter in this export (profile with `costspec ncu run` or add the "
                     "smsp__sass_thread_inst_executed_op_* and sm__ops_path_tensor_* metrics)")
    return ShowReport(csv_path, rows, totals, notes)


# -- the printed result ---------------------------------------------------------------------------

_HEAD = {"tensor": "TC FLOPs", "tensor_aggregate": "TC aggregate (check)", "cuda_fp32": "CUDA FP32",
         "cuda_fp16": "CUDA FP16", "cuda_fp64": "CUDA FP64", "dram_bytes": "DRAM bytes", "duration_s": "time"}
_NAME_WIDTH = 60  # the full name is in --format json


def _figure(name: str, value: float | None) -> float | int | None:
    if value is None or name == "duration_s":
        return value
    return round(value)


def to_result(report: ShowReport) -> Result:
    """The launches as the one result type: a row per launch, the counters behind each figure after it."""
    shown = [f for f in FIGURES if f != "tensor_aggregate" or any(r.figures[f] is not None for r in report.rows)]
    columns = [Column("kernel", "kernel", "text"), Column("class", "class", "text")]
    columns += [Column(f, _HEAD[f], "seconds" if f == "duration_s" else "count") for f in shown]
    columns += [Column("kernel_name", "full name", "text", hidden=True), Column("cc", "CC", "text", hidden=True),
                Column("device", "device", "text", hidden=True), Column("line", "line", hidden=True),
                Column("sources", "counters", "text", hidden=True)]
    rows = []
    for r in report.rows:
        short = r.short if len(r.short) <= _NAME_WIDTH else r.short[: _NAME_WIDTH - 3] + "..."
        rows.append(Row(str(r.id), str(r.id), 0, {
            "kernel": short, "class": r.kclass, **{f: _figure(f, r.figures[f]) for f in shown}, "kernel_name": r.kernel,
            "cc": r.cc, "device": r.device, "line": r.line, "sources": {k: list(v) for k, v in r.sources.items()}}))
    total = Row("", "total", 0, {f: _figure(f, report.totals[f]) for f in shown})
    counters = []
    for name in FIGURES:
        groups: dict[tuple[str, ...], list[str]] = {}
        for r in report.rows:
            if name in r.sources:
                groups.setdefault(r.sources[name], []).append(str(r.id))
        counters += [f"{_HEAD[name]} [{', '.join(ids)}]: {' + '.join(c)}" for c, ids in groups.items()]
    devices = sorted({f"{r.device + ', ' if r.device else ''}CC {r.cc or '?'}" for r in report.rows})
    header = f"{report.source} | ncu show | {len(report.rows)} kernel launches | {', '.join(devices) or '-'}"
    notes = [f"note: {n}" for n in report.notes] + [
        "- = not in the export. CUDA FP32 = fadd + fmul + 2*ffma (+ 2*fadd2 + 2*fmul2 + 4*ffma2), "
        "FP16 = 2*hadd + 2*hmul + 4*hfma, FP64 = dadd + dmul + 2*dfma; TC = ops counters as they are "
        "(1 op = 1 FLOP)"]
    return Result(header, [Table(columns, rows, total, label_title="ID")],
                  {"counters behind each figure (launch IDs)": counters}, notes,
                  {"csv": report.source, "totals": report.totals})


def render_table(report: ShowReport) -> str:
    return render(to_result(report), "table")


def render_json(report: ShowReport) -> str:
    return render(to_result(report), "json")
