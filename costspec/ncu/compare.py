"""`costspec ncu compare`: analytic vs measured FLOPs per layer, from an ncu CSV (no GPU needed).

Per phase and per report row: analytic Tensor-Core / CUDA-core FLOPs (costspec's convention) vs
the FLOPs the hardware counters measured in the kernels attributed to the row
(`costspec.ncu.attribute`), the number of kernels, and the relative differences. Kernels the
model has no term for (split-K reduces, RNG, copies) are listed per layer; kernels outside every
layer (the loss, anything unattributed) are listed one by one; nothing is dropped, so the total
row holds every kernel of the phase. With a calibration, the predicted executed FLOPs
(`costspec.analysis.calibration`) and the residual measured - executed are shown too.

A measured figure whose counters were not collected (n/a, or a CUDA-core counter absent) in one of
the row's kernels is n/a, never the sum of the others; a note names the counters and a kernel.

Analytic and measured FLOPs differ by construction (epilogues, split-K, an activation's executed
instruction count); `compare` reports, it does not judge: its exit code is 0.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from costspec.analysis.calibration import Calibration, Executed, executed_slot
from costspec.analysis.slots import MODEL_SLOT, rows_layout, sum_slots
from costspec.core.render import render
from costspec.core.results import Column, Result, Row, Table
from costspec.ncu.attribute import CONVENTIONS, Kernel
from costspec.ncu.calibrate import bucket_phase
from costspec.ncu.eligibility import tensor_core_misses
from costspec.ncu.inputs import Measured

UNATTRIBUTED = "(unattributed)"


@dataclass
class NoTerm:
    phase: str
    layer: str
    kernel: str
    count: int
    flops: int | None  # None: a counter of one of the kernels was not collected
    reason: str


@dataclass
class Comparison:
    spec: str
    csvs: list[str]
    pass_: str
    dims: dict[str, int]
    has_tensor_counters: bool
    tables: dict[str, Table]  # phase -> a row per report row, and the total
    no_term: list[NoTerm]
    unattributed: list[NoTerm]
    calibration: str | None
    devices: list[dict]
    notes: list[str] = field(default_factory=list)
    csv_cc: str | None = None  # the compute capability the CSVs' own columns give (when a sidecar lacks it)
    csv_device: str | None = None  # the device name the CSVs' own columns give (when a sidecar lacks it)

    @property
    def rows(self) -> dict[str, list[Row]]:
        """phase -> rows, the last one the total."""
        return {phase: list(t.all_rows()) for phase, t in self.tables.items()}


def _measured_by_slot(kernels: list[Kernel]) -> dict[str, list[int]]:
    """slot -> [kernels, TC FLOPs, CUDA FLOPs, kernels with an unknown TC figure, ... unknown CUDA figure]."""
    out: dict[str, list[int]] = {}
    for k in kernels:
        key = k.slot if k.slot is not None else UNATTRIBUTED
        acc = out.setdefault(key, [0, 0, 0, 0, 0])
        acc[0] += 1
        acc[1] += k.tensor
        acc[2] += k.cuda
        acc[3] += bool(k.tensor_unknown)
        acc[4] += bool(k.cuda_unknown)
    return out


def _flops(kernels: list[Kernel]) -> int | None:
    """The FLOPs of these kernels; None when a figure of one of them is unknown."""
    if any(k.tensor_unknown or k.cuda_unknown for k in kernels):
        return None
    return sum(k.flops for k in kernels)


def unknown_notes(kernels: list[Kernel], phase: str) -> list[str]:
    """One note per counter that made a measured figure n/a: which figure, in how many kernels, the first one."""
    found: dict[tuple[str, str], list[Kernel]] = {}
    for k in kernels:
        for figure, names in (("Tensor-Core", k.tensor_unknown), ("CUDA-core", k.cuda_unknown)):
            for name in names:
                found.setdefault((figure, name), []).append(k)
    return [f"{phase}: measured {figure} FLOPs are n/a where {name} was not collected (n/a or absent) in "
            f"{len(ks)} kernel(s), first {ks[0].short} at {ks[0].where}" for (figure, name), ks in found.items()]


def compare(measured: Measured, calibration: Calibration | None = None) -> Comparison:
    """Compare every phase of `measured` per report row."""
    model = measured.model
    layout = rows_layout(model)
    tables: dict[str, Table] = {}
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
        no_term_by_slot: Counter[str] = Counter()
        grouped: dict[tuple, list] = {}
        for k in measured.attribution.of(phase):
            if k.slot is not None and k.role == "splitk":
                grouped.setdefault((k.slot, k.short, "split-K reduce: no analytic term (fitted as rho)"), []).append(k)
        for k, reason in buckets.no_term:
            grouped.setdefault((k.slot, k.short, reason), []).append(k)
        for (slot, short, reason), ks in sorted(grouped.items()):
            no_term.append(NoTerm(phase, slot, short, len(ks), _flops(ks), reason))
            no_term_by_slot[slot] += len(ks)
        outside: dict[tuple, list] = {}
        for k in buckets.outside:
            outside.setdefault((" / ".join(k.stack) or "no NVTX range", k.short), []).append(k)
        for (stack, short), ks in outside.items():
            unattributed.append(NoTerm(phase, stack, short, len(ks), _flops(ks),
                                       f"{ks[0].source}:{ks[0].line}: in no layer range of the spec"))

        def row(name, label, depth, names) -> Row:
            terms = sum_slots(slots, names)
            n = tc_sum = cuda_sum = tc_unknown = cuda_unknown = 0
            for slot in names:
                if slot in got:
                    n, tc_sum, cuda_sum = n + got[slot][0], tc_sum + got[slot][1], cuda_sum + got[slot][2]
                    tc_unknown, cuda_unknown = tc_unknown + got[slot][3], cuda_unknown + got[slot][4]
            tc = None if tc_unknown else tc_sum  # a counter not collected: n/a, not the sum of the rest
            cuda = None if cuda_unknown else cuda_sum
            total = None if tc is None or cuda is None else tc + cuda
            values: dict[str, object] = {"kernels": n, "no_term": sum(no_term_by_slot[s] for s in names),
                      "tc_analytic": terms.tc, "tc_measured": tc, "tc_rel_diff": rel(tc, terms.tc),
                      "cuda_analytic": terms.cuda, "cuda_measured": cuda, "cuda_rel_diff": rel(cuda, terms.cuda),
                      "analytic": terms.tc + terms.cuda, "measured": total}
            if calibration:
                done = Executed()
                for slot in names:
                    if slot in executed:
                        done += executed[slot]
                extra = [_no_term_flops(buckets, slot) for slot in names]
                executed_total = None if None in extra else done.total + sum(f for f in extra if f is not None)
                values["executed"] = executed_total
                values["residual"] = None if total is None or executed_total is None else total - executed_total
            return Row(name, label, depth, values)

        phase_rows = [row(r.name, r.label, r.depth, r.slots) for r in layout]
        if MODEL_SLOT in got:
            phase_rows.append(row(MODEL_SLOT, MODEL_SLOT, 0, {MODEL_SLOT}))
        if UNATTRIBUTED in got:
            phase_rows.append(row(UNATTRIBUTED, UNATTRIBUTED, 0, {UNATTRIBUTED}))
        every = set(slots) | set(got)
        kernels = measured.attribution.of(phase)
        cuda_counters = not kernels or not all(k.cuda_unknown for k in kernels)
        tables[phase] = Table(_columns(measured.attribution.has_tensor_counters, calibration is not None,
                                       cuda_counters),
                              phase_rows, row("", "total", 0, every), phase)
    if calibration:
        notes.append("executed = the calibration's prediction (epsilon, rho, kappa) plus the measured FLOPs of "
                     "kernels with no model term and of unattributed kernels; residual = measured - executed")
    for phase in measured.attribution.phases:
        notes += unknown_notes(measured.attribution.of(phase), phase)
    notes += tensor_core_misses(measured.attribution, model, measured.values)
    dims = {str(k): int(v) for k, v in measured.values.items()}
    return Comparison(model.name, list(measured.attribution.sources), measured.pass_, dims,
                      measured.attribution.has_tensor_counters, tables, no_term, unattributed,
                      calibration.source if calibration else None, measured.sidecars, notes,
                      csv_cc=measured.attribution.cc, csv_device=measured.attribution.device)


def _no_term_flops(buckets, slot: str) -> int | None:
    if slot == UNATTRIBUTED:
        return _flops(buckets.outside)
    return _flops([k for k, _ in buckets.no_term if k.slot == slot])


def _columns(tensor_counters: bool, calibrated: bool, cuda_counters: bool = True) -> list[Column]:
    na = not tensor_counters  # no sm__ops_path_tensor_* counter in the CSV
    cuda_na = not cuda_counters  # every kernel lacks a CUDA-core counter
    columns = [Column("kernels", "kernels"), Column("no_term", "no term"), Column("tc_analytic", "TC analytic"),
               Column("tc_measured", "TC measured", na=na), Column("tc_rel_diff", "TC diff", "diff", na=na),
               Column("cuda_analytic", "CUDA analytic"), Column("cuda_measured", "CUDA measured", na=cuda_na),
               Column("cuda_rel_diff", "CUDA diff", "diff", na=cuda_na), Column("analytic", "analytic", hidden=True),
               Column("measured", "measured", hidden=True)]
    if calibrated:
        columns += [Column("executed", "executed (cal.)"), Column("residual", "residual")]
    return columns


def rel(measured: float | None, analytic: float) -> float | None:
    """(measured - analytic) / analytic; None when the analytic value is 0 or the measured one unknown."""
    return None if analytic == 0 or measured is None else (measured - analytic) / analytic


def device_line(c: Comparison) -> str:
    """The GPU, compute capability and ncu version each CSV was measured with: from the sidecars, the
    compute capability from the CSV's own CC column where a sidecar lacks it."""
    return ", ".join(dict.fromkeys(
        f"{d.get('gpu') or c.csv_device or '?'} (CC {d.get('compute_capability') or c.csv_cc or '?'}, "
        f"ncu {d.get('ncu_version') or '?'})" for d in c.devices)) or (
        f"no sidecar; {c.csv_device + ', ' if c.csv_device else ''}CC {c.csv_cc} from the CSV" if c.csv_cc
        else "no sidecar")


def to_result(c: Comparison) -> Result:
    """The comparison as the one result type: a table per phase, then the kernels listed by name."""
    dims = " ".join(f"{k}={v}" for k, v in c.dims.items())
    header = f"{c.spec} | ncu compare {c.pass_} | {dims} | {', '.join(c.csvs)} | measured on: {device_line(c)}"
    sections = {
        "kernels with no model term (inside layers)": [
            f"{n.phase}: {n.layer}: {n.kernel} x{n.count}, {_shown(n.flops)} FLOPs -- {n.reason}" for n in c.no_term],
        "unattributed kernels (outside every layer; listed, never dropped)": [
            f"{n.phase}: [{n.layer}] {n.kernel} x{n.count}, {_shown(n.flops)} FLOPs ({n.reason})"
            for n in c.unattributed],
    }
    notes = c.notes + ["diff = (measured - analytic) / analytic; '-': no analytic term, or a measured figure "
                       "whose counters were not collected (the notes name them). " + CONVENTIONS]
    meta = {"spec": c.spec, "csv": c.csvs, "pass": str(c.pass_), "dims": c.dims, "devices": c.devices,
            "tensor_counters": c.has_tensor_counters, "calibration": c.calibration,
            "no_term": [n.__dict__ for n in c.no_term], "unattributed": [n.__dict__ for n in c.unattributed],
            "conventions": CONVENTIONS}
    return Result(header, list(c.tables.values()), sections, notes, meta)


def _shown(flops: int | None) -> str:
    return "n/a" if flops is None else f"{flops:,}"


def render_table(c: Comparison) -> str:
    return render(to_result(c), "table")


def render_json(c: Comparison) -> str:
    return render(to_result(c), "json")
