"""`costspec validate`: the analytic costs against runtime counts of the torch module built from
the same spec.

Matmul-class FLOPs (Cost.matmul: GEMM, conv, SDPA, whichever engine the precision routes them
to) are compared with torch's FlopCounterMode; CUDA-core work (Cost.pointwise: elements per
cost-table kind) with the pointwise counter of `runtime_count`. Both are attributed to report
rows through the torch module paths (`blocks.2.attn.qkv` -> `blocks.attn.qkv`).

Comparison units ("slots") are the rows that own work: an op without parts, a part with its
own submodule, and the op module itself for its `own` parts (SDPA in attention; cls_token +
pos_embed in patch_embed, which share one slot). Scopes own nothing: anything measured in them
is reported. Every row of the report sums the slots below it.

Known differences between what costspec models and what the counters see are named rules
declared by the op (`OpDef.reconcile`), applied per slot and listed in the report with their
numbers: measured = analytic + delta. Nothing is adjusted silently.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import sympy

from .errors import MismatchError
from .model import GradState, node_cost
from .ops.base import layer_notes
from .text import for_terminal
from .tree import Node, OpNode, PartNode, RepeatNode, ResidualNode
from .torch_build import build_module, evaluator, import_torch, node_of

if TYPE_CHECKING:
    from .model import Model

PASS_PHASES = {"forward": ("forward",), "train": ("forward", "backward")}
MODEL_SLOT = "(model)"
OUTSIDE_SLOT = "(outside the model)"
OUTSIDE_REASON = "the loss out.float().sum() and its gradient seed run outside the model"


@dataclass
class RowCheck:
    """One report row for one phase: matmul-class FLOPs and pointwise elements by kind."""

    name: str
    label: str
    depth: int
    analytic: int
    measured: int
    reconciled: int  # measured minus the named reconciliations' deltas
    pointwise_analytic: dict[str, int]
    pointwise_reconciled: dict[str, int]

    @property
    def rel(self) -> float:
        if self.analytic == 0:
            return 0.0 if self.reconciled == 0 else float("inf")
        return abs(self.reconciled - self.analytic) / self.analytic

    def matmul_ok(self, rtol: float) -> bool:
        return self.rel <= rtol

    @property
    def pointwise_ok(self) -> bool:
        return self.pointwise_analytic == self.pointwise_reconciled

    def pointwise_diff(self) -> list[tuple[str, int, int]]:
        kinds = sorted(set(self.pointwise_analytic) | set(self.pointwise_reconciled))
        return [(k, self.pointwise_analytic.get(k, 0), self.pointwise_reconciled.get(k, 0)) for k in kinds
                if self.pointwise_analytic.get(k, 0) != self.pointwise_reconciled.get(k, 0)]


@dataclass
class Applied:
    """A reconciliation rule applied to one slot and phase, with its evaluated delta."""

    rule: str
    row: str
    phase: str
    text: str
    matmul: int
    pointwise: dict[str, int]


@dataclass
class Validation:
    """Result of `validate()`: rows per phase (the last one is the total) and everything named."""

    spec: str
    pass_: str
    device: str
    dims: dict[str, int]
    rtol: float
    rows: dict[str, list[RowCheck]]
    reconciliations: list[Applied]
    ignored: list[tuple[str, int, str]]  # (aten op, calls, reason)
    outside: list[tuple[str, int]]  # (aten op, calls) outside the model
    unknown: list[tuple[str, str, str, int]]  # (phase, row, aten op, elements)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # counting choices the ops made (OpDef.notes)

    def failures(self) -> list[str]:
        out = [f"{phase}: {row.name or 'total'}" for phase, rows in self.rows.items() for row in rows
               if not (row.matmul_ok(self.rtol) and row.pointwise_ok)]
        return out + [f"unknown aten op {op} in {row} ({phase})" for phase, row, op, _ in self.unknown] + self.problems

    @property
    def ok(self) -> bool:
        return not self.failures()

    def total(self, phase: str) -> RowCheck:
        return self.rows[phase][-1]


# ----------------------------------------------------------------------------------------------
# Slots
# ----------------------------------------------------------------------------------------------
def _part(node: PartNode):
    return next(p for p in node.owner.fwd_parts if p.name == node.local)


def _own_slot(op: OpNode) -> str:
    own = [p.name for p in op.fwd_parts if p.own]
    return f"{op.name}." + ("+".join(own) if own else "(own)")


def slot_of(node: Node) -> str:
    """The comparison unit holding the work measured in `node`'s torch module."""
    if isinstance(node, PartNode):
        return _own_slot(node.owner) if _part(node).own else node.name
    if isinstance(node, OpNode):
        return _own_slot(node) if node.children else node.name
    return node.name or MODEL_SLOT


def _slots_under(node: Node) -> set[str]:
    if isinstance(node, (OpNode, PartNode)):
        return {slot_of(node)} | {slot_of(p) for p in node.children}
    out = set() if node.transparent else {slot_of(node)}
    for child in node.children:
        out |= _slots_under(child)
    return out


class _Amount:
    """Matmul FLOPs and pointwise elements by kind (exact ints)."""

    def __init__(self):
        self.matmul = 0
        self.pointwise: Counter = Counter()

    def add(self, matmul: int, pointwise: Mapping[str, int]) -> None:
        self.matmul += matmul
        self.pointwise.update(pointwise)

    def __iadd__(self, other: "_Amount") -> "_Amount":
        self.add(other.matmul, other.pointwise)
        return self


def _ints(cost_matmul: Mapping, cost_pointwise: Mapping, values) -> tuple[int, dict[str, int]]:
    ev = evaluator(values)
    matmul = ev(sum(cost_matmul.values(), sympy.Integer(0)))
    return matmul, {k: ev(v) for k, v in cost_pointwise.items()}


def _nonzero(d: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in sorted(d.items()) if v}


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------
def validate(model: "Model", values: Mapping[sympy.Symbol, sympy.Integer], pass_: str = "forward",
             device: str = "meta", rtol: float = 0.0, force: bool = False) -> Validation:
    """Build `model`'s torch module at dims `values`, run it on `device` (meta or cpu) for `pass_`
    (forward or train), count it, and compare per row with the analytic costs. On a real device the
    memory it needs is estimated first and a run beyond the available memory refused (unless `force`)."""
    if pass_ not in PASS_PHASES:
        raise ValueError(f"pass must be one of {tuple(PASS_PHASES)}, got {pass_!r}")
    largest = max((int(v) for v in values.values()), default=0)
    if largest >= 2**62:
        from .errors import UsageError

        raise UsageError(f"validate builds real torch tensors, and a dim of {largest} is beyond 64-bit sizes; "
                         "use `costspec eval` for exact numbers at this size")
    from .budget import check_torch_build, check_validate_memory

    check_torch_build(model, values)  # before importing torch (seconds)
    if device != "meta" and not force:
        check_validate_memory(model, values, pass_)
    torch = import_torch("costspec validate")
    from .runtime_count import OUTSIDE, measure

    torch.manual_seed(0)
    with torch.device(device):
        module, make_input = build_module(model, values)
    measured = measure(module, make_input(device), train=pass_ == "train")
    phases = PASS_PHASES[pass_]
    path_slot, path_op = _path_slots(model, module, OUTSIDE)
    got = {phase: _by_slot(measured, phase, path_slot) for phase in phases}
    walk = list(walk_rows(model))
    deltas, applied = _reconciliations(walk, phases, _runtime_facts(measured, phases, path_op), device, values)
    rows = {phase: _rows(model, walk, phase, got[phase], deltas[phase], values) for phase in phases}
    return Validation(
        spec=model.name, pass_=pass_, device=device, dims={str(k): int(v) for k, v in values.items()}, rtol=rtol,
        rows=rows, reconciliations=applied,
        ignored=sorted(((op, n, why) for (op, why), n in measured.ignored.items()), key=lambda t: (-t[1], t[0])),
        outside=sorted(measured.outside.items()),
        unknown=[(u.phase, path_slot.get(u.module, u.module), u.op, u.elements) for u in measured.unknown],
        problems=measured.problems, notes=layer_notes(model.op_nodes()))


def _path_slots(model: "Model", module, outside: str) -> tuple[dict[str, str], dict[str, OpNode]]:
    """torch module path -> slot, and -> the op node whose module it is (or is inside)."""
    path_slot, path_op = {outside: OUTSIDE_SLOT}, {}
    for path, _ in module.named_modules():
        node = node_of(model, path)
        path_slot[path] = slot_of(node)
        op = node.owner if isinstance(node, PartNode) else node
        if isinstance(op, OpNode):
            path_op[path] = op
    return path_slot, path_op


def _by_slot(measured, phase: str, path_slot: dict[str, str]) -> dict[str, _Amount]:
    out: dict[str, _Amount] = {}
    for path, flops in measured.matmul[phase].items():
        out.setdefault(path_slot[path], _Amount()).add(flops, {})
    for path, kinds in measured.pointwise[phase].items():
        out.setdefault(path_slot[path], _Amount()).add(0, kinds)
    return out


def _runtime_facts(measured, phases, path_op: dict[str, OpNode]) -> dict[str, dict[int, dict]]:
    """phase -> id(op node) -> how its fused kernels ran, for its reconcile(): runtime["sdpa"] (an op
    with no SDPA op seen ran it "decomposed" into bmm / softmax / mul, as on meta)."""
    facts: dict[str, dict[int, dict]] = {phase: {} for phase in phases}
    for phase in phases:
        for path, calls in measured.sdpa[phase].items():
            how = "fused-uncounted" if calls.get("sdpa-uncounted") else "fused-counted"
            facts[phase].setdefault(id(path_op[path]), {})["sdpa"] = how
    return facts


def _reconciliations(walk, phases, runtime, device: str, values) -> tuple[dict[str, dict[str, _Amount]], list[Applied]]:
    """Every rule the ops declare, evaluated and summed per slot and phase."""
    ev = evaluator(values)
    deltas: dict[str, dict[str, _Amount]] = {p: {} for p in phases}
    applied: list[Applied] = []
    by_kind: dict[str, list[OpNode]] = {}
    for node, _, _, _ in walk:
        if isinstance(node, OpNode):
            by_kind.setdefault(node.op.name, []).append(node)
    for node, _, mult, in_rg in walk:
        if not isinstance(node, OpNode):
            continue
        for phase in phases:
            facts = {"device": device, **runtime[phase].get(id(node), {})}
            for slot, rule, text, amount in _reconcile(node, phase, mult, in_rg, facts, values, ev, by_kind):
                deltas[phase].setdefault(slot, _Amount()).add(amount.matmul, amount.pointwise)
                applied.append(Applied(rule, slot, phase, text, amount.matmul, _nonzero(amount.pointwise)))
    return deltas, applied


def walk_rows(model: "Model"):
    """The model's rows with their multiplicity and input-grad state (`Model.walk`)."""
    return model.walk()


def _reconcile(node: OpNode, phase: str, mult, in_rg: "GradState", facts: dict, values, ev, by_kind=None):
    """(slot, rule, text, amount) for each named rule the op declares, summed over its instances.
    A rule `measured_in` another op kind lands in the slot of that kind's single layer."""
    count = ev(mult)
    if count == 0:  # e.g. an `others` group that the variants leave empty at these dims
        return []
    first = node.op.reconcile(node.call, phase, in_rg.first, facts, ev) if (
        phase == "forward" or node.backward_parts(in_rg.first)) else []
    rest = node.op.reconcile(node.call, phase, in_rg.rest, facts, ev) if (
        count > 1 and (phase == "forward" or node.backward_parts(in_rg.rest))) else []
    out: dict[tuple[str, str], tuple[str, _Amount]] = {}
    for rules, k in ((first, 1), (rest, count - 1)):
        for r in rules:
            target = node
            if r.measured_in:
                others = (by_kind or {}).get(r.measured_in, [])
                if len(others) != 1:
                    raise AssertionError(f"{node.op.name} rule {r.rule} is measured in the {r.measured_in} layer, "
                                         f"but the model has {len(others)}")
                target = others[0]
            part = next((p for p in target.children if p.local == r.part), None) if r.part else None
            slot = slot_of(part) if part is not None else (_own_slot(target) if target.children else target.name)
            matmul, pointwise = _ints(r.delta.matmul, r.delta.pointwise, values)
            text, amount = out.setdefault((slot, r.rule), (r.text, _Amount()))
            amount.add(k * matmul, {kind: k * v for kind, v in pointwise.items()})
    return [(slot, rule, text, amount) for (slot, rule), (text, amount) in out.items()
            if amount.matmul or any(amount.pointwise.values())]


def _rows(model: "Model", walk, phase: str, got: dict[str, _Amount], deltas: dict[str, _Amount],
          values) -> list[RowCheck]:
    def measured_of(slots) -> tuple[int, int, dict[str, int]]:
        raw, rec, pw = 0, 0, Counter()
        for slot in slots:
            g, d = got.get(slot, _Amount()), deltas.get(slot, _Amount())
            raw += g.matmul
            rec += g.matmul - d.matmul
            pw.update(g.pointwise)
            pw.subtract(d.pointwise)
        return raw, rec, _nonzero(pw)

    rows: list[RowCheck] = []
    merged_own: set[int] = set()
    for node, depth, mult, in_rg in walk:
        cost = node_cost(node, phase, mult, in_rg)
        name, label, slots = node.name, node.label, _slots_under(node)
        if isinstance(node, PartNode) and _part(node).own:
            owner = node.owner
            own = [p for p in owner.children if _part(p).own]
            if len(own) > 1:  # own parts share the op module: one row for all of them
                if id(owner) in merged_own:
                    continue
                merged_own.add(id(owner))
                cost = sum((node_cost(p, phase, mult, in_rg) for p in own[1:]), cost)
                name, label = _own_slot(owner), "+".join(p.local for p in own)
        matmul, pointwise = _ints(cost.matmul, cost.pointwise, values)
        raw, rec, pw = measured_of(slots)
        rows.append(RowCheck(name, label, depth, matmul, raw, rec, _nonzero(pointwise), pw))
    for extra in (MODEL_SLOT, OUTSIDE_SLOT):  # work outside every layer: never expected
        raw, rec, pw = measured_of([extra])
        if raw or pw:
            rows.append(RowCheck(extra, extra, 0, 0, raw, rec, {}, pw))
    total = model.cost(phase)
    matmul, pointwise = _ints(total.matmul, total.pointwise, values)
    raw, rec, pw = measured_of(set(got) | set(deltas) | {OUTSIDE_SLOT})
    rows.append(RowCheck("", "total", 0, matmul, raw, rec, _nonzero(pointwise), pw))
    return rows


def check(result: Validation) -> None:
    """Raise MismatchError (exit 1) when anything did not match."""
    failures = result.failures()
    if failures:
        shown = "; ".join(failures[:5]) + (f"; and {len(failures) - 5} more" if len(failures) > 5 else "")
        raise MismatchError(f"{result.spec}: analytic and measured costs differ ({shown})")


# ----------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------
def _rel(row: RowCheck) -> str:
    return "inf" if row.rel == float("inf") else f"{row.rel:.2e}" if row.rel else "0"


def render_table(result: Validation) -> str:
    """Per phase, per row: analytic vs measured matmul-class FLOPs, and whether the pointwise
    kinds and element counts match; then every rule, ignored op and unknown op by name."""
    dims = " ".join(f"{k}={v}" for k, v in result.dims.items())
    lines = [f"{for_terminal(result.spec)} | validate {result.pass_} on {result.device} | {dims} | rtol {result.rtol:g}",
             "matmul = matmul-class FLOPs (GEMM, conv, SDPA) vs FlopCounterMode; pointwise = CUDA-core kinds and "
             "element counts vs the aten ops executed (exact)."]
    for phase, rows in result.rows.items():
        table = [["layer", "analytic", "measured", "reconciled", "rel.diff", "matmul", "pointwise"]]
        for row in rows:
            table.append(["  " * row.depth + row.label, f"{row.analytic:,}", f"{row.measured:,}",
                          f"{row.reconciled:,}", _rel(row), "PASS" if row.matmul_ok(result.rtol) else "FAIL",
                          "PASS" if row.pointwise_ok else "FAIL"])
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        lines += ["", f"[{phase}]"]
        for i, r in enumerate(table):
            lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))
            if i == 0 or i == len(table) - 2:
                lines.append("  ".join("-" * w for w in widths))
        for row in rows:
            for kind, a, m in row.pointwise_diff():
                lines.append(f"  pointwise mismatch: {row.name or 'total'}: {kind}: analytic {a:,} elements, "
                             f"measured {m:,}")
    lines += ["", "reconciliations (named rules, measured = analytic + delta):"]
    for a in result.reconciliations:
        amounts = ([f"matmul {a.matmul:+,}"] if a.matmul else []) + [f"{k} {v:+,}" for k, v in a.pointwise.items()]
        lines.append(f"  [{a.rule}] {a.row} ({a.phase}): {', '.join(amounts)} -- {a.text}")
    if not result.reconciliations:
        lines.append("  none")
    reasons: dict[str, list[str]] = {}
    for op, n, why in result.ignored:
        reasons.setdefault(why, []).append(f"{op} x{n}")
    lines.append("ignored on purpose: " + ("; ".join(f"{', '.join(ops)} ({why})" for why, ops in reasons.items())
                                           or "none"))
    lines.append(f"outside the model ({OUTSIDE_REASON}): "
                 + (", ".join(f"{op} x{n}" for op, n in result.outside) or "none"))
    lines.append("unknown aten ops: " + ("; ".join(f"{op} in {row} ({phase}, {n:,} elements)"
                                                  for phase, row, op, n in result.unknown) or "none"))
    lines += [f"note: {n}" for n in result.notes]
    lines += [f"problem: {p}" for p in result.problems]
    failures = result.failures()
    lines.append("result: PASS" if not failures else f"result: FAIL ({len(failures)} mismatches)")
    return "\n".join(lines)


def _row_json(row: RowCheck, rtol: float) -> dict:
    return {"name": row.name or "total", "label": row.label, "depth": row.depth,
            "matmul_analytic": row.analytic, "matmul_measured": row.measured, "matmul_reconciled": row.reconciled,
            "rel_diff": None if row.rel == float("inf") else row.rel, "matmul_ok": row.matmul_ok(rtol),
            "pointwise_analytic": row.pointwise_analytic, "pointwise_measured": row.pointwise_reconciled,
            "pointwise_ok": row.pointwise_ok}


def render_json(result: Validation) -> str:
    """Exact integers for every row and phase, and every rule / ignored / unknown op by name."""
    out = {
        "spec": result.spec, "pass": result.pass_, "device": result.device, "dims": result.dims, "rtol": result.rtol,
        "ok": result.ok, "failures": result.failures(),
        "phases": {phase: [_row_json(r, result.rtol) for r in rows] for phase, rows in result.rows.items()},
        "reconciliations": [a.__dict__ for a in result.reconciliations],
        "ignored": [{"op": op, "calls": n, "reason": why} for op, n, why in result.ignored],
        "outside_model": {"reason": OUTSIDE_REASON, "ops": dict(result.outside)},
        "unknown": [{"phase": p, "row": r, "op": op, "elements": n} for p, r, op, n in result.unknown],
        "problems": result.problems, "notes": result.notes,
    }
    return json.dumps(out, indent=2)


RENDERERS = {"table": render_table, "json": render_json}
