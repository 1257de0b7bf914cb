"""`costspec eval`'s output as the one result type: the evaluation table (and the roofline columns
attached to it), shown down to a depth, with the header and notes."""
from __future__ import annotations

from costspec.analysis.reporting import Report
from costspec.core import units
from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.results import Result, Row, Table

CONVENTIONS = (f"1 FLOP = one scalar op; a multiply-add = {FLOPS_PER_MAC} FLOPs (FLOPs, not MACs). "
               "Matmul-class FLOPs go to Tensor Cores (TC) unless the layer runs in plain fp32, "
               "where they run on CUDA cores; pointwise FLOPs use the CUDA-core cost table.")


def header(report: Report) -> str:
    dims = " ".join(f"{k}={v}" for k, v in report.dims.items())
    return f"{report.spec_name} | pass: {report.pass_} | precision: {report.precision} | {dims}"


def _shown(row: Row) -> Row:
    """The row as the table shows it: `x12` after a layer that runs 12 times, `(repeat x12)` on a repeat."""
    count, repeat = row.values.get("count"), row.values.get("repeat")
    label = row.label + (f" x{count}" if count not in (None, 1) else "") + (
        f" (repeat x{repeat})" if repeat is not None else "")
    return Row(row.name, label, row.depth, row.values)


def eval_result(report: Report, depth: int | None = None, roof=None) -> Result:
    """The evaluated rows down to `depth` (all when None), with the roofline's columns when given."""
    table = report.table
    rows = [_shown(r) for r in table.rows if depth is None or r.depth < depth]
    meta: dict = {"spec": report.spec_name, "pass": str(report.pass_), "precision": report.precision,
                  "dims": report.dims, "totals": {"tc_flops": report.tc, "cuda_flops": report.cuda,
                                                  "total_flops": report.total, "params": report.params},
                  "conventions": CONVENTIONS}
    if report.sparse:  # tc_flops is what the Tensor Cores execute; the dense-equivalent counts 2:4 GEMMs dense
        meta["totals"].update({"tc_flops_dense_equivalent": report.tc_dense, "sparse_tc_flops": report.sparse_tc})
    notes = list(report.notes)
    if roof is not None:
        meta["roofline"] = {"gpu": roof.gpu.key, "fusion": str(roof.fusion), "bytes": roof.bytes,
                            "est_time_s": roof.time_s, "mfu": roof.mfu}
        mfu = f", MFU at that time {100 * roof.mfu:.1f}%" if roof.mfu is not None else ""
        notes.append(f"estimated end-to-end time {units.seconds(roof.time_s)}{mfu}")
        notes.extend(roof.notes)
    notes.append(CONVENTIONS)
    return Result(header(report), [Table(table.columns, rows, table.total)], {}, notes, meta)
