"""The analytic side of `ncu compare` / `ncu calibrate` / `eval --calibration`: per-slot terms.

A *slot* is the smallest unit a kernel can be attributed to, exactly as in `costspec validate`
(`costspec.tree.walk.slot_of`): an op without parts, a part that has its own torch submodule, or the op
module itself for its `own` parts (attention's SDPA). An NVTX range is a torch module path
(`blocks.3.attn.qkv`); `RangeResolver` maps it to its slot (`blocks.attn.qkv`). Every report row
sums the slots below it (`costspec.tree.walk.layout`), so per-layer numbers and totals always add up.

For each slot and phase (forward or backward), summed over all instances of the slot:

* `tc`, `cuda`: the analytic FLOPs routed to Tensor Cores / CUDA cores (as `costspec eval`).
* `matmul`: matmul-class FLOPs by class (gemm, conv, sdpa), whichever engine runs them.
* `pointwise`: elements per cost-table kind, and `pointwise_flops` priced with the spec's table.
* `gemm_outputs`: output elements of the slot's GEMM/conv kernels, the denominator of the split-K
  coefficient rho, as the op states them (`OpDef.gemm_outputs`): forward the elements each GEMM
  writes; backward dW (the weight) plus dX when the input needs a gradient.

torch is not imported here.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Iterator, Mapping

import sympy

from costspec.core.expr import evaluator
from costspec.core.vocab import Pass, Phase
from costspec.tree.nodes import Node
from costspec.tree.walk import MODEL_SLOT, RowLayout, is_leaf, layout, node_cost, node_of, op_of, slot_of, walk

if TYPE_CHECKING:
    from costspec.tree.network import Network

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


def _instance_outputs(node: Node, phase: Phase, input_grad: bool, ev) -> int | None:
    """GEMM/conv output elements of one instance of a leaf `node` (None: the op does not say)."""
    op = op_of(node)
    assert op is not None
    if phase == Phase.BACKWARD and not op.backward_parts(input_grad).get(node.local if node is not op else ""):
        return 0
    try:
        outputs = op.op.gemm_outputs(op.call, phase, input_grad)
    except NotImplementedError:
        return None
    part = "" if node is op else node.local
    return ev(op.canonical(outputs[part])) if part in outputs else 0


def _leaf_terms(node: Node, phase: Phase, mult, in_rg, values, table) -> SlotTerms:
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
    op = op_of(node)
    assert op is not None
    terms.tensor_cores = op.precision.tensor_cores
    if any(terms.matmul.get(c) for c in GEMM_OUTPUT_CLASSES):
        split = [(_instance_outputs(node, phase, rg if phase == Phase.BACKWARD else True, ev), ev(k))
                 for rg, k in in_rg.split(mult)]
        if any(outputs is None for outputs, _ in split):
            terms.notes.append(f"{terms.name}: no output-element count (its op has no gemm_outputs()); "
                               "the split-K term rho is not applied to it")
        else:
            terms.gemm_outputs = sum(int(outputs or 0) * k for outputs, k in split)
    return terms


def analytic_slots(model: "Network", values: Mapping, phase: Phase | str) -> dict[str, SlotTerms]:
    """slot -> its analytic terms for `phase` ("forward" or "backward"), at bound dim `values`."""
    phase = Phase.parse(phase, "phase")
    out: dict[str, SlotTerms] = {}
    for node, _, mult, in_rg in walk(model.root):
        if not is_leaf(node):
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

    def __init__(self, model: "Network"):
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
            node = node_of(self.model.root, name)
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


def iter_phases(pass_: Pass | str) -> Iterator[Phase]:
    yield from Pass.parse(pass_, "--pass").phases


def rows_layout(model: "Network") -> list[RowLayout]:
    """The rows of compare / calibration reports: own parts of an op merged (one module, one row)."""
    return layout(model.root, merge_own=True)


__all__ = ["MODEL_SLOT", "RangeResolver", "SlotTerms", "analytic_slots", "iter_phases", "rows_layout", "sum_slots"]
