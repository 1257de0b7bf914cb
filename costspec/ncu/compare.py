"""`costspec ncu compare`: analytic vs measured FLOPs per layer, from an ncu CSV (no GPU needed).

Per phase and per report row: analytic Tensor-Core / CUDA-core FLOPs (costspec's convention) vs
the FLOPs the hardware counters measured in the kernels attributed to the row
(`costspec.ncu.attribute`), the number of kernels, and the relative differences. Kernels the
model has no term for (split-K reduces, RNG, copies) are listed per layer; kernels outside every
layer (the loss, anything unattributed) are listed one by one; nothing is dropped, so the total
row holds every kernel of the phase. With a calibration, the predicted executed FLOPs
(`costspec.calibration`) and the residual measured - executed are shown too.

Analytic and measured FLOPs differ by construction (epilogues, split-K, an activation's executed
instruction count); `compare` reports, it does not judge: its exit code is 0.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

from ..calibration import Calibration, Executed, executed_slot
from .attribute import CONVENTIONS, Kernel
from .calibrate import bucket_phase
from .inputs import Measured
from .slots import MODEL_SLOT, layout, sum_slots

UNATTRIBUTED = "(unattributed)"


@dataclass
class CompareRow:
    name: str
    label: str
    depth: int
    kernels: int
    tc_analytic: int
    tc_measured: int
    cuda_analytic: int
    cuda_measured: int
    executed: Fraction | None = None
    no_term: int = 0  # kernels in this row the model has no term for (split-K included)

    @property
    def analytic(self) -> int:
        return self.tc_analytic + self.cuda_analytic

    @property
    def measured(self) -> int:
        return self.tc_measured + self.cuda_measured


@dataclass
class NoTerm:
    phase: str
    layer: str
    kernel: str
    count: int
    flops: int
    reason: str


@dataclass
class Comparison:
    spec: str
    csvs: list[str]
    pass_: str
    dims: dict[str, int]
    has_tensor_counters: bool
    rows: dict[str, list[CompareRow]]  # phase -> rows, the last one is the total
    no_term: list[NoTerm]
    unattributed: list[NoTerm]
    calibration: str | None
    devices: list[dict]
    notes: list[str] = field(default_factory=list)


def _measured_by_slot(kernels: list[Kernel]) -> dict[str, tuple[int, int, int]]:
    out: dict[str, list[int]] = {}
    for k in kernels:
        key = k.slot if k.slot is not None else UNATTRIBUTED
        acc = out.setdefault(key, [0, 0, 0])
        acc[0] += 1
        acc[1] += k.tensor
        acc[2] += k.cuda
    return {s: tuple(v) for s, v in out.items()}


def compare(measured: Measured, calibration: Calibration | None = None) -> Comparison:
    """Compare every phase of `measured` per report row."""
    model = measured.model
    rows_layout = layout(model)
    rows: dict[str, list[CompareRow]] = {}
    no_term: list[NoTerm] = []
    unattributed: list[NoTerm] = []
    notes = list(measured.notes)
    for phase in measured.attribution.phases:
        buckets = bucket_phase(measured, phase)
        slots = buckets.slots
        got = _measured_by_slot(measured.attribution.of(phase))
        coeffs = calibration.phases.get(phase) if calibration else None
        if calibration and coeffs is None:
            notes.append(f"{calibration.source} has no {phase} coefficients: {phase} residuals are uncalibrated")
        executed = {name: executed_slot(t, coeffs) for name, t in slots.items()} if calibration else {}
        no_term_by_slot = Counter()
        grouped: dict[tuple, list] = {}
        for k in measured.attribution.of(phase):
            if k.slot is not None and k.role == "splitk":
                grouped.setdefault((k.slot, k.short, "split-K reduce: no analytic term (fitted as rho)"), []).append(k)
        for k, reason in buckets.no_term:
            grouped.setdefault((k.slot, k.short, reason), []).append(k)
        for (slot, short, reason), ks in sorted(grouped.items()):
            no_term.append(NoTerm(phase, slot, short, len(ks), sum(k.flops for k in ks), reason))
            no_term_by_slot[slot] += len(ks)
        outside: dict[tuple, list] = {}
        for k in buckets.outside:
            outside.setdefault((" / ".join(k.stack) or "no NVTX range", k.short), []).append(k)
        for (stack, short), ks in outside.items():
            unattributed.append(NoTerm(phase, stack, short, len(ks), sum(k.flops for k in ks),
                                       f"{ks[0].source}:{ks[0].line}: in no layer range of the spec"))

        def row(name, label, depth, names) -> CompareRow:
            terms = sum_slots(slots, names)
            n = tc = cuda = 0
            for slot in names:
                if slot in got:
                    n, tc, cuda = n + got[slot][0], tc + got[slot][1], cuda + got[slot][2]
            done = None
            if calibration:
                done = Executed()
                for slot in names:
                    if slot in executed:
                        done += executed[slot]
                done = done.total + sum(_no_term_flops(buckets, slot) for slot in names)
            return CompareRow(name, label, depth, n, terms.tc, tc, terms.cuda, cuda, done,
                              sum(no_term_by_slot[s] for s in names))

        phase_rows = [row(r.name, r.label, r.depth, r.slots) for r in rows_layout]
        if MODEL_SLOT in got:
            phase_rows.append(row(MODEL_SLOT, MODEL_SLOT, 0, {MODEL_SLOT}))
        if UNATTRIBUTED in got:
            phase_rows.append(row(UNATTRIBUTED, UNATTRIBUTED, 0, {UNATTRIBUTED}))
        every = set(slots) | set(got)
        phase_rows.append(row("", "total", 0, every))
        rows[phase] = phase_rows
    if calibration:
        notes.append("executed = the calibration's prediction (epsilon, rho, kappa) plus the measured FLOPs of "
                     "kernels with no model term and of unattributed kernels; residual = measured - executed")
    from ..alignment import tensor_core_misses  # issue 19: DLProf's "eligible for Tensor Cores, not using them"

    notes += tensor_core_misses(measured.attribution, model, measured.values)
    dims = {str(k): int(v) for k, v in measured.values.items()}
    return Comparison(model.name, list(measured.attribution.sources), measured.pass_, dims,
                      measured.attribution.has_tensor_counters, rows, no_term, unattributed,
                      calibration.source if calibration else None, measured.sidecars, notes)


def _no_term_flops(buckets, slot: str) -> int:
    if slot == UNATTRIBUTED:
        return sum(k.flops for k in buckets.outside)
    return sum(k.flops for k, _ in buckets.no_term if k.slot == slot)


# ----------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------
def rel(measured: float, analytic: float) -> float | None:
    """(measured - analytic) / analytic; None when the analytic value is 0."""
    return None if analytic == 0 else (measured - analytic) / analytic


def _pct(measured: float, analytic: float) -> str:
    r = rel(measured, analytic)
    if r is None:
        return "" if measured == 0 else "no term"
    return f"{100 * r:+.2f}%"


def _int(value) -> str:
    return f"{round(value):,}"


def render_table(c: Comparison) -> str:
    dims = " ".join(f"{k}={v}" for k, v in c.dims.items())
    device = ", ".join(dict.fromkeys(
        f"{d.get('gpu', '?')} (CC {d.get('compute_capability', '?')}, ncu {d.get('ncu_version') or '?'})"
        for d in c.devices)) or "no sidecar"
    lines = [f"{c.spec} | ncu compare {c.pass_} | {dims} | {', '.join(c.csvs)}", f"measured on: {device}"]
    for phase, rows in c.rows.items():
        head = ["layer", "kernels", "TC analytic", "TC measured", "TC diff", "CUDA analytic", "CUDA measured",
                "CUDA diff"] + (["executed (cal.)", "residual"] if c.calibration else [])
        table = [head]
        for r in rows:
            tc_m = _int(r.tc_measured) if c.has_tensor_counters else "n/a"
            tc_d = _pct(r.tc_measured, r.tc_analytic) if c.has_tensor_counters else ""
            cells = ["  " * r.depth + r.label, f"{r.kernels}" + (f" ({r.no_term} no term)" if r.no_term else ""),
                     _int(r.tc_analytic), tc_m, tc_d, _int(r.cuda_analytic), _int(r.cuda_measured),
                     _pct(r.cuda_measured, r.cuda_analytic)]
            if c.calibration:
                cells += [_int(r.executed), f"{round(r.measured - r.executed):+,}"]
            table.append(cells)
        widths = [max(len(row[i]) for row in table) for i in range(len(head))]
        lines += ["", f"[{phase}]"]
        for i, row in enumerate(table):
            lines.append("  ".join([row[0].ljust(widths[0])] + [x.rjust(w) for x, w in zip(row[1:], widths[1:])]))
            if i == 0 or i == len(table) - 2:
                lines.append("  ".join("-" * w for w in widths))
    lines += ["", "kernels with no model term (inside layers):"]
    lines += [f"  {n.phase}: {n.layer}: {n.kernel} x{n.count}, {n.flops:,} FLOPs -- {n.reason}" for n in c.no_term] \
        or ["  none"]
    lines.append("unattributed kernels (outside every layer; listed, never dropped):")
    lines += [f"  {n.phase}: [{n.layer}] {n.kernel} x{n.count}, {n.flops:,} FLOPs ({n.reason})"
              for n in c.unattributed] or ["  none"]
    lines += c.notes
    lines.append("diff = (measured - analytic) / analytic. " + CONVENTIONS)
    return "\n".join(lines)


def _row_json(r: CompareRow) -> dict:
    out = {"name": r.name or "total", "label": r.label, "depth": r.depth, "kernels": r.kernels,
           "no_term_kernels": r.no_term, "tc_analytic": r.tc_analytic, "tc_measured": r.tc_measured,
           "tc_rel_diff": rel(r.tc_measured, r.tc_analytic), "cuda_analytic": r.cuda_analytic,
           "cuda_measured": r.cuda_measured, "cuda_rel_diff": rel(r.cuda_measured, r.cuda_analytic),
           "total_analytic": r.analytic, "total_measured": r.measured}
    if r.executed is not None:
        out["executed"] = float(r.executed)
        out["residual"] = float(r.measured - r.executed)
    return out


def render_json(c: Comparison) -> str:
    out = {
        "spec": c.spec, "csv": c.csvs, "pass": c.pass_, "dims": c.dims, "devices": c.devices,
        "tensor_counters": c.has_tensor_counters, "calibration": c.calibration,
        "phases": {phase: [_row_json(r) for r in rows] for phase, rows in c.rows.items()},
        "no_term": [n.__dict__ for n in c.no_term],
        "unattributed": [n.__dict__ for n in c.unattributed],
        "notes": c.notes, "conventions": CONVENTIONS,
    }
    return json.dumps(out, indent=2)


RENDERERS = {"table": render_table, "json": render_json}
