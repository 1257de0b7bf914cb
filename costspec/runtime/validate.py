"""`costspec validate`: the analytic costs against runtime counts of the torch module built from
the same spec. This proves the engine self-consistent (formulas = what the generated module runs);
it does not prove that the spec describes *your* model: that is `validate --against`.

Matmul-class FLOPs (Cost.matmul: GEMM, conv, SDPA, whichever engine the precision routes them
to) are compared with torch's FlopCounterMode; CUDA-core work (Cost.pointwise: elements per
cost-table kind) with the pointwise counter of `runtime_count`. Both are attributed to report
rows through the torch module paths (`blocks.2.attn.qkv` -> `blocks.attn.qkv`, `costspec.tree.walk`).

Comparison units are the walk's slots (`costspec.tree.walk.slot_of`): an op without parts, a part with
its own submodule, and the op module itself for its `own` parts. Scopes own nothing: anything
measured in them is reported. Every row sums the slots below it (`walk.layout(merge_own=True)`).

Known differences between what costspec models and what the counters see are named rules
declared by the op (`OpDef.reconcile`), applied per slot and listed in the report with their
numbers: measured = analytic + delta. Nothing is adjusted silently.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import sympy

from costspec.core.errors import MismatchError, UsageError
from costspec.core.render import render
from costspec.core.results import Column, Result, Row, Table
from costspec.core.vocab import RUNNABLE_PASSES, Device, Pass, Phase
from costspec.ops.opdef import layer_notes
from costspec.runtime.reconcile import Amount, Applied, ints, nonzero, reconciliations, runtime_facts
from costspec.runtime.saved_bytes import SavedComparison, compare_saved
from costspec.runtime.torch_build import build_module, import_torch
from costspec.tree.nodes import OpNode
from costspec.tree.walk import (
    MODEL_SLOT,
    RowLayout,
    layout,
    node_cost,
    node_of,
    op_of,
    slot_of,
    walk,
)

if TYPE_CHECKING:
    from costspec.tree.network import Network

OUTSIDE_SLOT = "(outside the model)"
OUTSIDE_REASON = "the loss out.float().sum() and its gradient seed run outside the model"
COLUMNS = (
    Column("matmul_analytic", "analytic"),
    Column("matmul_measured", "measured"),
    Column("matmul_reconciled", "reconciled"),
    Column("rel_diff", "rel.diff", "rel"),
    Column("matmul", "matmul", "text"),
    Column("pointwise", "pointwise", "text"),
    Column("pointwise_analytic", "pointwise analytic", "text", hidden=True),
    Column("pointwise_measured", "pointwise measured", "text", hidden=True),
)


@dataclass
class Validation:
    """Result of `validate()`: a table per phase (rows = report rows) and everything named."""

    spec: str
    pass_: Pass
    device: Device
    dims: dict[str, int]
    rtol: float
    tables: dict[Phase, Table]
    reconciliations: list[Applied]
    ignored: list[tuple[str, int, str]]  # (aten op, calls, reason)
    outside: list[tuple[str, int]]  # (aten op, calls) outside the model
    unknown: list[tuple[str, str, str, int]]  # (phase, row, aten op, elements)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # counting choices the ops made (OpDef.notes)
    saved: SavedComparison | None = None  # train: saved-for-backward bytes against autograd's

    @property
    def rows(self) -> dict[Phase, list[Row]]:
        """phase -> rows, the last one the total."""
        return {phase: list(t.all_rows()) for phase, t in self.tables.items()}

    def total(self, phase: str) -> Row:
        total = self.tables[Phase.parse(phase, "phase")].total
        assert total is not None
        return total

    def failures(self) -> list[str]:
        out = [f"{phase}: {row.name or 'total'}" for phase, table in self.tables.items() for row in table.all_rows()
               if row.values["matmul"] != "PASS" or row.values["pointwise"] != "PASS"]
        saved = self.saved.failures() if self.saved is not None else []
        return (out + [f"unknown aten op {op} in {row} ({phase})" for phase, row, op, _ in self.unknown]
                + saved + self.problems)

    @property
    def ok(self) -> bool:
        return not self.failures()


def pointwise_diff(row: Row) -> list[tuple[str, int, int]]:
    """(kind, analytic, measured) for every cost-table kind whose element counts differ in `row`."""
    a, m = row.values["pointwise_analytic"], row.values["pointwise_measured"]
    return [(k, a.get(k, 0), m.get(k, 0)) for k in sorted(set(a) | set(m)) if a.get(k, 0) != m.get(k, 0)]


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------
def shares_a_table(model: Network) -> bool:
    """Whether two lookups share one table (an embedding tied to another): torch's backward scope of a layer
    whose input needs no gradient is left when its parameters' gradients are ready, which a shared table's
    are only after its last lookup's backward; backward work is then attributed by autograd node
    (`runtime.attribution.ScopeTracker`), as validate --against does."""
    return any(node.op.tied_to(node.call) == node.op.name for node in model.op_nodes())


def validate(model: Network, values: Mapping[sympy.Symbol, sympy.Integer], pass_: Pass | str = Pass.FORWARD,
             device: Device | str = Device.META, rtol: float = 0.0, force: bool = False,
             saved: bool = False) -> Validation:
    """Build `model`'s torch module at dims `values`, run it on `device` (meta or cpu) for `pass_`
    (forward or train), count it, and compare per row with the analytic costs. On a real device the
    memory it needs is estimated first and a run beyond the available memory refused (unless `force`).
    `saved` (train): also compare the bytes saved for backward with what autograd saves
    (`runtime.saved_bytes`)."""
    pass_ = Pass.parse(pass_, "--pass", RUNNABLE_PASSES)
    device = Device.parse(device, "--device")
    largest = max((int(v) for v in values.values()), default=0)
    if largest >= 2**62:
        raise UsageError(f"validate builds real torch tensors, and a dim of {largest} is beyond 64-bit sizes; "
                         "use `costspec eval` for exact numbers at this size")
    from costspec.runtime.torch_budget import check_torch_build, check_validate_memory

    check_torch_build(model, values)  # before importing torch (seconds)
    if device is not Device.META and not force:
        check_validate_memory(model, values, pass_)
    torch = import_torch("costspec validate")
    from costspec.runtime.runtime_count import OUTSIDE, measure

    torch.manual_seed(0)
    with torch.device(device.value):
        module, make_input = build_module(model, values)
    measured = measure(module, make_input(device.value), train=pass_ is Pass.TRAIN, by_node=shares_a_table(model))
    path_slot, path_op = _path_slots(model, module, OUTSIDE)
    steps = list(walk(model.root))
    runtime = runtime_facts(measured, pass_.phases, path_op)
    deltas, applied = reconciliations(steps, pass_.phases, runtime, device, values)
    rows = layout(model.root, merge_own=True)
    tables = {phase: _table(model, rows, phase, _by_slot(measured, phase, path_slot), deltas[phase], values, rtol)
              for phase in pass_.phases}
    compared, saved_note = _saved(model, values, pass_) if saved else (None, [])
    return Validation(
        spec=model.name, pass_=pass_, device=device, dims={str(k): int(v) for k, v in values.items()}, rtol=rtol,
        tables=tables, reconciliations=applied,
        ignored=sorted(((op, n, why) for (op, why), n in measured.ignored.items()), key=lambda t: (-t[1], t[0])),
        outside=sorted(measured.outside.items()),
        unknown=[(u.phase, path_slot.get(u.module, u.module), u.op, u.elements) for u in measured.unknown],
        problems=measured.problems, notes=layer_notes(model.op_nodes()) + _sparse_note(model) + saved_note,
        saved=compared)


def _saved(model: Network, values, pass_: Pass) -> tuple[SavedComparison | None, list[str]]:
    """train: the saved-for-backward bytes compared (`runtime.saved_bytes`), or why they are not."""
    if pass_ is not Pass.TRAIN:
        return None, []
    try:
        return compare_saved(model, values), []
    except UsageError as e:  # a layer whose saved tensors are not modelled: the FLOPs are still checked
        return None, [f"saved activations not compared: {e}"]


def _sparse_note(model: Network) -> list[str]:
    """2:4 layers run dense in the generated module, so the comparison is on dense-equivalent matmul FLOPs."""
    from costspec.tree.cost import runs_sparse

    sparse = sorted({op.name for op in model.op_nodes()
                     if any(runs_sparse(op.precision, p.name, p.params) for p in op.fwd_parts)})
    if not sparse:
        return []
    shown = ", ".join(sparse[:4]) + (f" and {len(sparse) - 4} more" if len(sparse) > 4 else "")
    return [f"2:4 sparse layers ({shown}): the generated module runs their weights dense and FlopCounterMode counts "
            "dense FLOPs, so matmul is compared on the dense-equivalent FLOPs; the executed Tensor-Core FLOPs "
            "(half of their forward weight GEMMs, `eval`) are not measured here"]


def _path_slots(model: Network, module, outside: str) -> tuple[dict[str, str], dict[str, OpNode]]:
    """torch module path -> slot, and -> the op node whose module it is (or is inside)."""
    path_slot, path_op = {outside: OUTSIDE_SLOT}, {}
    for path, _ in module.named_modules():
        node = node_of(model.root, path)
        path_slot[path] = slot_of(node)
        op = op_of(node)
        if op is not None:
            path_op[path] = op
    return path_slot, path_op


def _by_slot(measured, phase: str, path_slot: dict[str, str]) -> dict[str, Amount]:
    out: dict[str, Amount] = {}
    for path, flops in measured.matmul[phase].items():
        out.setdefault(path_slot[path], Amount()).add(flops, {})
    for path, kinds in measured.pointwise[phase].items():
        out.setdefault(path_slot[path], Amount()).add(0, kinds)
    return out


def _check_row(name: str, label: str, depth: int, analytic: int, pointwise: dict[str, int], raw: int, rec: int,
               measured_pw: dict[str, int], rtol: float) -> Row:
    rel = (0.0 if rec == 0 else float("inf")) if analytic == 0 else abs(rec - analytic) / analytic
    return Row(name, label, depth, {
        "matmul_analytic": analytic, "matmul_measured": raw, "matmul_reconciled": rec, "rel_diff": rel,
        "matmul": "PASS" if rel <= rtol else "FAIL", "pointwise": "PASS" if pointwise == measured_pw else "FAIL",
        "pointwise_analytic": pointwise, "pointwise_measured": measured_pw})


def _table(model: Network, rows: list[RowLayout], phase: str, got: dict[str, Amount], deltas: dict[str, Amount],
           values, rtol: float) -> Table:
    def measured_of(slots) -> tuple[int, int, dict[str, int]]:
        raw, rec, pw = 0, 0, Counter[str]()
        for slot in slots:
            g, d = got.get(slot, Amount()), deltas.get(slot, Amount())
            raw += g.matmul
            rec += g.matmul - d.matmul
            pw.update(g.pointwise)
            pw.subtract(d.pointwise)
        return raw, rec, nonzero(pw)

    out: list[Row] = []
    for r in rows:
        cost = None
        for step in r.steps:
            one = node_cost(step.node, phase, step.instances, step.grad)
            cost = one if cost is None else cost + one
        assert cost is not None
        matmul, pointwise = ints(cost.matmul, cost.pointwise, values)
        out.append(_check_row(r.name, r.label, r.depth, matmul, nonzero(pointwise), *measured_of(r.slots), rtol))
    for extra in (MODEL_SLOT, OUTSIDE_SLOT):  # work outside every layer: never expected
        raw, rec, pw = measured_of([extra])
        if raw or pw:
            out.append(_check_row(extra, extra, 0, 0, {}, raw, rec, pw, rtol))
    total = model.cost(phase)
    matmul, pointwise = ints(total.matmul, total.pointwise, values)
    raw, rec, pw = measured_of(set(got) | set(deltas) | {OUTSIDE_SLOT})
    return Table(list(COLUMNS), out, _check_row("", "total", 0, matmul, nonzero(pointwise), raw, rec, pw, rtol),
                 str(phase))


def check(result: Validation) -> None:
    """Raise MismatchError (exit 1) when anything did not match."""
    failures = result.failures()
    if failures:
        shown = "; ".join(failures[:5]) + (f"; and {len(failures) - 5} more" if len(failures) > 5 else "")
        raise MismatchError(f"{result.spec}: analytic and measured costs differ ({shown})")


# ----------------------------------------------------------------------------------------------
# The printed result
# ----------------------------------------------------------------------------------------------
WHAT_IT_PROVES = ("checked against: the torch module costspec generates from this spec (the engine's "
                  "self-consistency), not your model; use --against to check the spec against your model")


def to_result(v: Validation) -> Result:
    """The validation as the one result type: a table per phase, then every rule and op by name."""
    dims = " ".join(f"{k}={val}" for k, val in v.dims.items())
    mismatches = [f"{row.name or 'total'}: {kind}: analytic {a:,} elements, measured {m:,}"
                  for table in v.tables.values() for row in table.all_rows() for kind, a, m in pointwise_diff(row)]
    rules = [f"[{a.rule}] {a.row} ({a.phase}): "
             + ", ".join(([f"matmul {a.matmul:+,}"] if a.matmul else []) + [f"{k} {n:+,}" for k, n in
                                                                             a.pointwise.items()])
             + f" -- {a.text}" for a in v.reconciliations]
    reasons: dict[str, list[str]] = {}
    for op, n, why in v.ignored:
        reasons.setdefault(why, []).append(f"{op} x{n}")
    failures = v.failures()
    sections = {
        "pointwise mismatches": mismatches,
        "reconciliations (named rules, measured = analytic + delta)": rules,
        "ignored on purpose": [f"{', '.join(ops)} ({why})" for why, ops in reasons.items()],
        f"outside the model ({OUTSIDE_REASON})": [f"{op} x{n}" for op, n in v.outside],
        "unknown aten ops": [f"{op} in {row} ({phase}, {n:,} elements)" for phase, row, op, n in v.unknown],
    }
    notes = [f"note: {n}" for n in v.notes] + [f"problem: {p}" for p in v.problems] + [
        "matmul = matmul-class FLOPs (GEMM, conv, SDPA) vs FlopCounterMode; pointwise = CUDA-core kinds and element "
        "counts vs the aten ops executed (exact).",
        "result: PASS" if not failures else f"result: FAIL ({len(failures)} mismatches)"]
    meta = {"spec": v.spec, "pass": str(v.pass_), "device": str(v.device), "dims": v.dims, "rtol": v.rtol,
            "checked_against": "the torch module costspec generates from this spec (self-consistency, not your model)",
            "ok": v.ok,
            "failures": failures,
            "reconciliations": [a.__dict__ for a in v.reconciliations],
            "ignored": [{"op": op, "calls": n, "reason": why} for op, n, why in v.ignored],
            "outside_model": {"reason": OUTSIDE_REASON, "ops": dict(v.outside)},
            "unknown": [{"phase": p, "row": r, "op": op, "elements": n} for p, r, op, n in v.unknown],
            "problems": v.problems}
    header = f"{WHAT_IT_PROVES}\n{v.spec} | validate {v.pass_} on {v.device} | {dims} | rtol {v.rtol:g}"
    if v.saved is not None:
        meta["saved_for_backward"] = [{"row": r, "analytic": a, "measured": m} for r, a, m in v.saved.rows]
    tables = list(v.tables.values()) + ([v.saved.table()] if v.saved is not None else [])
    return Result(header, tables, sections, notes, meta)


def render_table(v: Validation) -> str:
    return render(to_result(v), "table")


def render_json(v: Validation) -> str:
    return render(to_result(v), "json")
