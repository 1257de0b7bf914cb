"""The analytic side of `ncu compare` / `ncu calibrate` / `eval --calibration`: per-slot terms.

A *slot* is the smallest unit a kernel can be attributed to, exactly as in `costspec validate`
(`costspec.validate.slot_of`): an op without parts, a part that has its own torch submodule, or
the op module itself for its `own` parts (attention's SDPA). An NVTX range is a torch module path
(`blocks.3.attn.qkv`); `slot_of_range` maps it to its slot (`blocks.attn.qkv`). Every report row
sums the slots below it, so per-layer numbers and totals always add up.

For each slot and phase (forward or backward), summed over all instances of the slot:

* `tc`, `cuda`: the analytic FLOPs routed to Tensor Cores / CUDA cores (as `costspec eval`).
* `matmul`: matmul-class FLOPs by class (gemm, conv, sdpa), whichever engine runs them.
* `pointwise`: elements per cost-table kind, and `pointwise_flops` priced with the spec's table.
* `gemm_outputs`: output elements of the slot's GEMM/conv work, the denominator of the split-K
  coefficient rho. Forward: the elements the op writes (the op's output). Backward: dW = the
  parameter count of the weight (the bias excluded) plus dX = the elements of the input when the
  input needs a gradient. Both come from the op's own `traffic()` and parameters, with no
  op-specific code: forward = writes W_f; backward = weight + (writes W_b - params P), where
  weight = P*k/(k+1) when the op has a bias (P = k*n + n, with k = GEMM FLOPs / (2*W_f) the
  reduction length), else P.

torch is not imported here.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Iterator, Mapping

import sympy

from ..model import node_cost
from ..torch_build import evaluator, node_of
from ..tree import Node, OpNode, PartNode
from ..validate import MODEL_SLOT, slot_of, walk_rows

if TYPE_CHECKING:
    from ..model import Model

PHASES_OF_PASS = {"forward": ("forward",), "backward": ("backward",), "train": ("forward", "backward")}
GEMM_OUTPUT_CLASSES = ("gemm", "conv")  # matmul classes whose kernels cuBLAS/cuDNN may split over K


@dataclass
class SlotTerms:
    """Analytic work of one slot in one phase (all instances), as exact numbers."""

    name: str
    tc: int = 0
    cuda: int = 0
    matmul: Counter = field(default_factory=Counter)  # class -> FLOPs
    pointwise: Counter = field(default_factory=Counter)  # kind -> elements
    pointwise_flops: dict[str, Fraction] = field(default_factory=dict)  # kind -> FLOPs (cost table)
    gemm_outputs: int = 0
    tensor_cores: bool = False  # its matmul-class work is routed to Tensor Cores
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.tc + self.cuda

    def add(self, other: "SlotTerms") -> None:
        self.tc += other.tc
        self.cuda += other.cuda
        self.matmul.update(other.matmul)
        self.pointwise.update(other.pointwise)
        for kind, flops in other.pointwise_flops.items():
            self.pointwise_flops[kind] = self.pointwise_flops.get(kind, Fraction(0)) + flops
        self.gemm_outputs += other.gemm_outputs
        self.tensor_cores = self.tensor_cores or other.tensor_cores
        self.notes.extend(other.notes)


@dataclass(frozen=True)
class RowLayout:
    """One report row and the slots whose work it sums."""

    name: str
    label: str
    depth: int
    kind: str
    slots: frozenset[str]


def _own(node: PartNode) -> bool:
    return next(p for p in node.owner.fwd_parts if p.name == node.local).own


def _is_leaf(node: Node) -> bool:
    return isinstance(node, PartNode) or (isinstance(node, OpNode) and not node.children)


def slots_under(node: Node) -> set[str]:
    """Every slot whose work a row of `node` sums (the node's own slot included)."""
    if isinstance(node, (OpNode, PartNode)):
        return {slot_of(node)} | {slot_of(p) for p in node.children}
    out = set() if node.transparent else {slot_of(node)}
    for child in node.children:
        out |= slots_under(child)
    return out


def layout(model: "Model") -> list[RowLayout]:
    """The report rows in walk order. Several `own` parts of one op share one slot and one row."""
    rows: list[RowLayout] = []
    seen_own: set[str] = set()
    for node, depth, _, _ in walk_rows(model):
        if isinstance(node, PartNode) and _own(node):
            slot = slot_of(node)
            if slot in seen_own:
                continue
            seen_own.add(slot)
            own = [p.local for p in node.owner.children if _own(p)]
            rows.append(RowLayout(slot, "+".join(own), depth, "part", frozenset({slot})))
            continue
        rows.append(RowLayout(node.name, node.label, depth, node.kind, frozenset(slots_under(node))))
    return rows


def _owner_and_part(node: Node) -> tuple[OpNode, str]:
    return (node.owner, node.local) if isinstance(node, PartNode) else (node, "")


def _writes(op: OpNode, part: str, pass_: str, in_rg: bool) -> sympy.Expr | None:
    if pass_ == "backward" and not op.runs_backward(in_rg):
        return sympy.Integer(0)
    try:
        traffic = op.op.traffic(op.call, pass_, in_rg, "default")
    except NotImplementedError:
        return None
    return next((t.writes for t in traffic if t.part == part), sympy.Integer(0))


def _instance_outputs(node: Node, pass_: str, in_rg: bool, ev) -> int | None:
    """GEMM/conv output elements of one instance of a leaf `node` (see the module docstring)."""
    op, part_name = _owner_and_part(node)
    fwd_part = next(p for p in op.fwd_parts if p.name == part_name)
    mm_fwd = sum((v for c, v in fwd_part.work.matmul.items() if c in GEMM_OUTPUT_CLASSES), sympy.Integer(0))
    if mm_fwd == 0:
        return 0
    w_f = _writes(op, part_name, "forward", True)
    if w_f is None:
        return None
    if pass_ == "forward":
        return ev(w_f)
    if not op.backward_parts(in_rg).get(part_name):
        return 0
    w_b = _writes(op, part_name, "backward", in_rg)
    if w_b is None:
        return None
    params = sympy.sympify(fwd_part.params)
    weight = params
    if fwd_part.work.pointwise.get("bias_add"):
        k = sympy.sympify(mm_fwd) / (2 * w_f)
        weight = sympy.simplify(params * k / (k + 1))
    return ev(weight) + ev(w_b - params)


def _leaf_terms(node: Node, phase: str, mult, in_rg, values, table) -> SlotTerms:
    ev = evaluator(values)
    cost = node_cost(node, phase, mult, in_rg)
    terms = SlotTerms(slot_of(node), ev(cost.tc), ev(cost.cuda))
    terms.matmul.update({c: ev(v) for c, v in cost.matmul.items() if ev(v)})
    for kind, elements in cost.pointwise.items():
        n = ev(elements)
        if n:
            terms.pointwise[kind] += n
            price = sympy.Rational(table[kind])
            terms.pointwise_flops[kind] = Fraction(n) * Fraction(int(price.p), int(price.q))
    op, _ = _owner_and_part(node)
    terms.tensor_cores = op.precision.tensor_cores
    if any(terms.matmul.get(c) for c in GEMM_OUTPUT_CLASSES):
        count = ev(mult)
        first = _instance_outputs(node, phase, in_rg.first, ev)
        rest = _instance_outputs(node, phase, in_rg.rest, ev) if phase == "backward" and count > 1 else first
        if first is None or rest is None:
            terms.notes.append(f"{terms.name}: no output-element count (the op has no traffic() for its part); "
                               "the split-K term rho is not applied to it")
        else:
            terms.gemm_outputs = first + (count - 1) * rest
    return terms


def analytic_slots(model: "Model", values: Mapping, phase: str) -> dict[str, SlotTerms]:
    """slot -> its analytic terms for `phase` ("forward" or "backward"), at bound dim `values`."""
    if phase not in ("forward", "backward"):
        raise ValueError(f"phase must be forward or backward, not {phase!r}")
    out: dict[str, SlotTerms] = {}
    for node, _, mult, in_rg in walk_rows(model):
        if not _is_leaf(node):
            continue
        terms = _leaf_terms(node, phase, mult, in_rg, values, model.table)
        if terms.name in out:
            out[terms.name].add(terms)
        else:
            out[terms.name] = terms
    return out


def sum_slots(slots: Mapping[str, SlotTerms], names) -> SlotTerms:
    """The terms of several slots added (for a row, or the total)."""
    total = SlotTerms("")
    for name in names:
        if name in slots:
            total.add(slots[name])
    return total


# ----------------------------------------------------------------------------------------------
# NVTX range name (torch module path) -> slot
# ----------------------------------------------------------------------------------------------
class RangeResolver:
    """Maps NVTX range names to slots of `model` (cached; names that are no layer path give None)."""

    def __init__(self, model: "Model"):
        self.model = model
        self._cache: dict[str, str | None] = {}

    def slot(self, range_name: str) -> str | None:
        if range_name not in self._cache:
            self._cache[range_name] = self._resolve(range_name)
        return self._cache[range_name]

    def _resolve(self, name: str) -> str | None:
        if not name or any(ch in name for ch in " :/[]"):
            return None
        try:
            node = node_of(self.model, name)
        except (KeyError, ValueError, IndexError):
            return None
        if node is self.model.root:
            return None
        return slot_of(node)

    def innermost(self, stack: tuple[str, ...]) -> tuple[str | None, str | None]:
        """(innermost layer range, its slot) of a push/pop stack (outermost first)."""
        for name in reversed(stack):
            slot = self.slot(name)
            if slot is not None:
                return name, slot
        return None, None


def iter_phases(pass_: str) -> Iterator[str]:
    if pass_ not in PHASES_OF_PASS:
        raise ValueError(f"pass must be one of {tuple(PHASES_OF_PASS)}, not {pass_!r}")
    yield from PHASES_OF_PASS[pass_]


__all__ = ["SlotTerms", "RowLayout", "layout", "analytic_slots", "sum_slots", "slots_under", "RangeResolver",
           "MODEL_SLOT", "PHASES_OF_PASS", "iter_phases"]
