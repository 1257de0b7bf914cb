"""Named reconciliation rules, evaluated: what the counters see beyond (or short of) the analytic
cost, per slot and phase, as the ops declare it (`OpDef.reconcile`). Shared by `validate` (the spec
vs its own module) and `validate --against` (the spec vs the real model); nothing here imports torch.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import sympy

from costspec.core.expr import evaluator
from costspec.core.vocab import Device, FusedRun, Phase
from costspec.ops.attention.ran import EAGER
from costspec.ops.opdef import Reconcile
from costspec.ops.work import Work
from costspec.tree.nodes import OpNode
from costspec.tree.walk import GradState, Step, own_slot, slot_of
from costspec.tree.weights import dequantise


@dataclass
class Applied:
    """A reconciliation rule applied to one slot and phase, with its evaluated delta."""

    rule: str
    row: str
    phase: str
    text: str
    matmul: int
    pointwise: dict[str, int]


class Amount:
    """Matmul FLOPs and pointwise elements by kind (exact ints)."""

    def __init__(self) -> None:
        self.matmul = 0
        self.pointwise: Counter = Counter()

    def add(self, matmul: int, pointwise: Mapping[str, int]) -> None:
        self.matmul += matmul
        self.pointwise.update(pointwise)

    def __iadd__(self, other: Amount) -> Amount:
        self.add(other.matmul, other.pointwise)
        return self


def ints(cost_matmul: Mapping, cost_pointwise: Mapping, values) -> tuple[int, dict[str, int]]:
    ev = evaluator(values)
    matmul = ev(sum(cost_matmul.values(), sympy.Integer(0)))
    return matmul, {k: ev(v) for k, v in cost_pointwise.items()}


def nonzero(d: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in sorted(d.items()) if v}


def runtime_facts(measured, phases, path_op: dict[str, OpNode]) -> dict[str, dict[int, dict[str, Any]]]:
    """phase -> id(op node) -> fused-kernel key (the op's `Runtime.fused`) -> how it ran, and "ran":
    the attention computations recorded in its modules (`ran_facts`). An op that declares a fused
    kernel none of whose aten ops ran ran it decomposed (as on meta)."""
    facts: dict[str, dict[int, dict[str, Any]]] = {phase: {} for phase in phases}
    for phase in phases:
        for path, keys in measured.fused[phase].items():
            for key, calls in keys.items():
                how = FusedRun.UNCOUNTED if calls.get(FusedRun.UNCOUNTED) else FusedRun.COUNTED
                facts[phase].setdefault(id(path_op[path]), {})[key] = how
    for op, runs in ran_facts(measured.regions, path_op.get).items():
        for phase in phases:
            facts[phase].setdefault(op, {})["ran"] = runs
    return facts


def ran_facts(regions, node_of: Callable[[str], OpNode | None]) -> dict[int, tuple]:
    """id(op node) -> the attention runs (`ops.attention.ran.Ran`) of its module instances, in forward
    order: the SDPA calls made in its modules, or, where they made none, their eager attention (a layer
    that calls SDPA after matmuls of its own, as relative positions' einsums, ran no eager attention).
    Only attention ops (those declaring the fused "sdpa" kernel) take them."""
    found: dict[int, list] = {}
    for region in regions:
        node = node_of(region.path)
        if node is not None and "sdpa" in node.op.runtime.fused:
            found.setdefault(id(node), []).append(region)
    out: dict[int, tuple] = {}
    for key, runs in found.items():
        calls = [r for r in runs if r.opened_by != EAGER] or runs
        out[key] = tuple(r.ran() for r in calls)
    return out


ORDER = ""  # the key of `by_kind` under which every layer is listed, in the layers' order


def reconciliations(steps: list[Step], phases: tuple[Phase, ...], runtime, device: Device | str,
                     values) -> tuple[dict[str, dict[str, Amount]], list[Applied]]:
    """Every rule the ops declare, evaluated and summed per slot and phase."""
    device = Device.parse(device, "--device")
    ev = evaluator(values)
    deltas: dict[str, dict[str, Amount]] = {p: {} for p in phases}
    applied: list[Applied] = []
    by_kind: dict[str, list[OpNode]] = {ORDER: []}
    for step in steps:
        if isinstance(step.node, OpNode):
            by_kind.setdefault(step.node.op.name, []).append(step.node)
            by_kind[ORDER].append(step.node)
    for step in steps:
        node = step.node
        if not isinstance(node, OpNode):
            continue
        for phase in phases:
            facts: dict[str, Any] = {"device": device.value, **{k: FusedRun.DECOMPOSED for k in node.op.runtime.fused},
                                     **runtime[phase].get(id(node), {})}
            for slot, rule, text, amount in reconcile_node(node, phase, step.instances, step.grad, facts, values, ev,
                                                       by_kind):
                deltas[phase].setdefault(slot, Amount()).add(amount.matmul, amount.pointwise)
                applied.append(Applied(rule, slot, phase, text, amount.matmul, nonzero(amount.pointwise)))
            if phase == Phase.BACKWARD and step.grad.recompute != 0:  # checkpointed: its forward ran again
                facts = {"device": device.value, **{k: FusedRun.DECOMPOSED for k in node.op.runtime.fused},
                         **runtime.get(Phase.FORWARD, {}).get(id(node), {})}
                for slot, rule, text, amount in reconcile_node(node, Phase.FORWARD, step.grad.recompute,
                                                               GradState(False, False), facts, values, ev, by_kind):
                    deltas[phase].setdefault(slot, Amount()).add(amount.matmul, amount.pointwise)
                    applied.append(Applied(rule, slot, phase, f"{text}; in the forward a checkpointed part re-runs in "
                                           "backward", amount.matmul, nonzero(amount.pointwise)))
    return deltas, applied


def weight_rules(node: OpNode, phase: Phase, rg: bool) -> list[Reconcile]:
    """The rules of a layer whose precision adds work to its weight GEMMs (costspec.tree.weights): the module
    costspec builds, like a real model built on meta, holds its weights at the compute dtype (frozen where the
    spec freezes them); costspec's module runs the LoRA adapters (torch_build), a real model has none."""
    precision, out = node.precision, []
    for part, gemms in node.weight_gemms.items():
        if precision.quantised and (phase == Phase.FORWARD or node.part_input_grad(part, rg)):
            work = sum((dequantise(precision, g) for g in gemms), Work())
            out.append(Reconcile("quantised-weights-run-unquantised", part, work.scaled(-1),
                                 f"the module holds its {precision.weights} weights at {precision.dtype}: the "
                                 "dequantisation of each weight value per use (the spec's "
                                 f"{', '.join(sorted(work.pointwise))}) does not run"))
    return out


def reconcile_node(node: OpNode, phase: Phase, mult, grad: GradState, facts: dict, values, ev, by_kind):
    """(slot, rule, text, amount) for each named rule the op declares, summed over its instances.
    A rule `measured_in` an op kind lands in the slot of that kind's single layer, or, where the model has
    several, of the last of them before this layer (a table shared by several lookups: autograd adds each
    gradient when the next one arrives, in the backward of the use before it)."""
    count = ev(mult)
    if count == 0:  # e.g. an `others` group that the variants leave empty at these dims
        return []
    classes = []
    for rg, instances in grad.split(mult):
        k = ev(instances)
        if k and (phase == Phase.FORWARD or node.backward_parts(rg)):
            classes.append((node.op.reconcile(node.call, phase, rg, facts, ev) + weight_rules(node, phase, rg), k))
    out: dict[tuple[str, str], tuple[str, Amount]] = {}
    for rules, k in classes:
        for r in rules:
            target = node
            if r.measured_in:
                others = by_kind.get(r.measured_in, [])
                if len(others) > 1:  # the last of them before this layer
                    position = {id(o): i for i, o in enumerate(by_kind.get(ORDER, []))}
                    others = [o for o in others if position.get(id(o), -1) < position.get(id(node), -1)][-1:]
                if len(others) != 1:
                    raise AssertionError(f"{node.op.name} rule {r.rule} is measured in the {r.measured_in} layer, "
                                         f"but the model has {len(others)}")
                target = others[0]
            part = next((p for p in target.children if p.local == r.part), None) if r.part else None
            slot = slot_of(part) if part is not None else (own_slot(target) if target.children else target.name)
            matmul, pointwise = ints(r.delta.matmul, r.delta.pointwise, values)
            text, amount = out.setdefault((slot, r.rule), (r.text, Amount()))
            amount.add(k * matmul, {kind: k * v for kind, v in pointwise.items()})
    return [(slot, rule, text, amount) for (slot, rule), (text, amount) in out.items()
            if amount.matmul or any(amount.pointwise.values())]
