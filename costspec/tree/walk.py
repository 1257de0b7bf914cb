"""The one walk over the model tree: which rows exist, how many instances each stands for, which
instance sees a gradient, which parts run inside which row, and which torch module path is which row.

Everything that reports per layer (eval, roofline, formula, latex, validate, calibration, ncu
compare, timing) reads its rows from here, so they all agree on names, order and multiplicity:

* `walk(root)` yields `Step(node, depth, instances, grad)` in pre-order: a row per named node;
  transparent nodes (residuals, unnamed sequences) are looked through; a repeat's variant groups are
  rows of their own when it has several.
* `GradState` says whether a node's input requires grad at its first instance and at the others
  (they differ inside a repeat whose input needs no gradient), and `node_cost` is the cost of all
  instances of a node for a pass, backward included, from `Node.backward_terms`.
* *Slots* are the smallest units a runtime measurement can be attributed to: an op without parts, a
  part with its own torch submodule, or the op module itself for its `own` parts (SDPA inside
  attention; cls_token + pos_embed inside patch_embed share one slot). `layout(root, merge_own=True)`
  gives the rows validate, calibration and ncu compare use, each with the slots it sums.
* Module paths: `node_of(root, "blocks.3.attn.qkv")` is the tree node of a torch module path of the
  generated module (the repeat index dropped, or replaced by its variant group); `row_name` its row.

No torch, no I/O; the facade `costspec.model.Model` and every consumer import this module, never
the other way round.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

import sympy

from costspec.core.errors import SpecError
from costspec.core.vocab import Pass
from costspec.tree.cost import Cost
from costspec.tree.naming import scope_members
from costspec.tree.nodes import GroupNode, Node, OpNode, ParallelNode, PartNode, RepeatNode, ResidualNode

MODEL_SLOT = "(model)"  # work measured in the model's root module, outside every layer


@dataclass(frozen=True)
class GradState:
    """Whether a node's input requires grad at its leading instances in the model, and at the others.

    They differ inside a repeat whose input needs no gradient: its first instance sees none, the
    later ones see one only if an earlier instance had parameters. `leading` is how many of a row's
    instances see `first`: one, except inside repeats whose bodies have no parameters at all, where
    every instance of the body within the first instance of the enclosing repeat sees its input state.
    `recompute` is how many of the row's instances lie in a checkpointed block or repeat instance that
    re-runs its forward in backward (activation checkpointing; `Node.checkpoint`).
    """

    first: bool
    rest: bool
    leading: sympy.Expr = sympy.Integer(1)
    recompute: sympy.Expr = sympy.Integer(0)

    def then(self, makes_grad: bool) -> GradState:
        """The state after a node that has (or has not) parameters."""
        return GradState(self.first or makes_grad, self.rest or makes_grad, self.leading, self.recompute)

    def recomputed(self, count: sympy.Expr) -> GradState:
        """This state with `count` of the row's instances recomputed in backward."""
        return GradState(self.first, self.rest, self.leading, count)

    def split(self, instances: sympy.Expr) -> list[tuple[bool, sympy.Expr]]:
        """(input requires grad, how many) over `instances` instances of a row: leading ones, then the rest."""
        if instances == self.leading:
            return [(self.first, instances)]
        return [(self.first, self.leading), (self.rest, instances - self.leading)]


NO_GRAD = GradState(False, False)


def node_cost(node: Node, pass_: Pass | str, instances: sympy.Expr, grad: GradState) -> Cost:
    """Total cost of all `instances` of `node` for `pass_`, their inputs requiring grad as `grad` says."""
    pass_ = Pass.parse(pass_, "pass")
    if pass_ is Pass.FORWARD:
        return node.forward().scaled(instances)
    if pass_ is Pass.BACKWARD:
        total = None
        for rg, count in grad.split(instances):
            one = node.backward(rg).scaled(count)
            total = one if total is None else total + one
        assert total is not None
        if grad.recompute != 0:  # inside a checkpointed block or repeat instance: its forward again
            total = total + node.forward().without_params().scaled(grad.recompute)
        return total
    return node_cost(node, Pass.FORWARD, instances, grad) + node_cost(node, Pass.BACKWARD, instances,
                                                                      grad).without_params()


class Step(NamedTuple):
    """One row of the walk: a node, its depth in the report, its instances in the model, its grad state."""

    node: Node
    depth: int
    instances: sympy.Expr
    grad: GradState


def walk(root: Node) -> Iterator[Step]:
    """Every row of the model under `root`, pre-order (see the module docstring)."""
    yield from _walk(root, 0, sympy.Integer(1), NO_GRAD)


def _recomputed(node: Node, instances: sympy.Expr, grad: GradState) -> sympy.Expr:
    """How many of a checkpointed node's `instances` re-run their forward in backward (`Node.runs_recompute`)."""
    return sum((count for rg, count in grad.split(instances) if node.runs_recompute(rg)), sympy.Integer(0))


def _walk(node: Node, depth: int, mult: sympy.Expr, grad: GradState) -> Iterator[Step]:
    state = grad
    for child in node.children:
        if isinstance(node, ResidualNode) and child is node.children[-1]:
            state = grad  # the residual add's gradient sum exists iff the residual's input needs grad
        if isinstance(node, ParallelNode):
            state = grad  # every branch, and the join's gradient sum at the fork, see the fork's input
        if child.input_from is not None:  # `input:` a saved value or a model input
            state = GradState(child.input_from.rg, child.input_from.rg, state.leading, state.recompute)
        child_mult = mult * child.count
        state = state.recomputed(grad.recompute * child.count)  # a part of a recomputed node is recomputed
        inner = state.recomputed(_recomputed(child, child_mult, state)) if child.checkpoint else state
        if child.transparent:
            yield from _walk(child, depth, child_mult, state)
        elif isinstance(child, RepeatNode):
            yield Step(child, depth, child_mult, state)
            first = child.first_group()
            later = state.then(first.makes_grad)  # instances after the repeat's very first one
            runs = _recomputed(child, child_mult, state) if child.checkpoint else sympy.Integer(0)
            for group in child.children:
                assert isinstance(group, GroupNode)
                if not child.makes_grad:  # no parameters in any instance: each sees the repeat's own input state
                    group_state = GradState(state.first, state.rest, state.leading * group.count)
                elif group is first:
                    group_state = GradState(state.first, later.rest, state.leading)
                else:
                    group_state = GradState(later.first, later.rest, state.leading)
                group_state = group_state.recomputed(runs * child.checkpointed(group) if child.checkpoint
                                                     else state.recompute * group.count)
                if child.grouped:
                    yield Step(group, depth + 1, child_mult * group.count, group_state)
                    yield from _walk(group, depth + 2, child_mult * group.count, group_state)
                else:
                    yield from _walk(group, depth + 1, child_mult * group.count, group_state)
        else:
            yield Step(child, depth, child_mult, state)
            yield from _walk(child, depth + 1, child_mult, inner)
        state = state.then(child.makes_grad)


def matmul_engine(node: Node) -> str:
    """Where the matmul-class FLOPs of a row go: "TC(bf16)", "CUDA(fp32)", "mixed", or "" (none)."""
    if isinstance(node, PartNode):
        ops = [node.owner] if node.forward().matmul else []
    elif isinstance(node, OpNode):
        ops = [node] if node.forward().matmul else []
    else:
        ops = [op for op in node.op_nodes() if op.forward().matmul]
    engines = {f"{op.precision.engine}({op.precision.dtype})" for op in ops}
    return "mixed" if len(engines) > 1 else next(iter(engines), "")


# ----------------------------------------------------------------------------------------------
# Slots: what a runtime measurement can be attributed to
# ----------------------------------------------------------------------------------------------
def is_own(node: PartNode) -> bool:
    """True when the part runs in its op's own module (no submodule of its own)."""
    return next(p for p in node.owner.fwd_parts if p.name == node.local).own


def own_slot(op: OpNode) -> str:
    """The slot of the work an op module runs itself: `patch_embed.cls_token+pos_embed`, `attn.sdpa`."""
    own = [p.name for p in op.fwd_parts if p.own]
    return f"{op.name}." + ("+".join(own) if own else "(own)")


def slot_of(node: Node) -> str:
    """The comparison unit holding the work measured in `node`'s torch module."""
    if isinstance(node, PartNode):
        return own_slot(node.owner) if is_own(node) else node.name
    if isinstance(node, OpNode):
        return own_slot(node) if node.children else node.name
    return node.name or MODEL_SLOT


def slots_under(node: Node) -> set[str]:
    """Every slot whose work a row of `node` sums (the node's own slot included)."""
    if isinstance(node, (OpNode, PartNode)):
        return {slot_of(node)} | {slot_of(p) for p in node.children}
    out = set() if node.transparent else {slot_of(node)}
    for child in node.children:
        out |= slots_under(child)
    return out


def is_leaf(node: Node) -> bool:
    """A row that holds work itself (an op without parts, or a part)."""
    return isinstance(node, PartNode) or (isinstance(node, OpNode) and not node.children)


@dataclass(frozen=True)
class RowLayout:
    """One report row, the walk steps it stands for, and the slots whose work it sums."""

    name: str
    label: str
    depth: int
    kind: str
    slots: frozenset[str]
    steps: tuple[Step, ...]


def layout(root: Node, merge_own: bool = False) -> list[RowLayout]:
    """The report rows in walk order. With `merge_own`, the `own` parts of one op (which share one
    module, so no measurement can tell them apart) are one row named by their slot."""
    rows: list[RowLayout] = []
    merged: dict[str, int] = {}
    for step in walk(root):
        node = step.node
        if merge_own and isinstance(node, PartNode) and is_own(node):
            owner_parts = node.owner.children
            slot = slot_of(node)
            if slot in merged:
                prev = rows[merged[slot]]
                rows[merged[slot]] = RowLayout(prev.name, prev.label, prev.depth, prev.kind, prev.slots,
                                               prev.steps + (step,))
                continue
            merged[slot] = len(rows)
            own = [p.local for p in owner_parts if isinstance(p, PartNode) and is_own(p)]
            rows.append(RowLayout(slot, "+".join(own), step.depth, "part", frozenset({slot}), (step,)))
            continue
        rows.append(RowLayout(node.name, node.label, step.depth, node.kind, frozenset(slots_under(node)), (step,)))
    return rows


# ----------------------------------------------------------------------------------------------
# Module paths of the generated torch module
# ----------------------------------------------------------------------------------------------
def group_of(repeat: RepeatNode, index: int) -> GroupNode:
    """The variant group of `repeat` whose body instance `index` uses."""
    rest = None
    for group in repeat.children:
        assert isinstance(group, GroupNode)
        if group.indices is None:
            rest = group
        elif index in group.indices:
            return group
    if rest is None:
        raise SpecError(f"repeat '{repeat.name}' has no body for index {index}", repeat.loc)
    return rest


def node_of(root: Node, path: str) -> Node:
    """The deepest tree node of torch module `path` (a module inside an op module maps to the op
    or part holding it). The root path "" is the root itself. KeyError for a path with no layer."""
    node: Node = root
    for step in path.split(".") if path else ():
        if isinstance(node, RepeatNode):
            if not step.isdigit():
                raise KeyError(f"torch module path '{path}': '{step}' is not an instance index")
            node = group_of(node, int(step))
            continue
        if isinstance(node, PartNode):
            return node
        child = next((c for c in scope_members(node) if c.local == step), None)
        if child is None:
            if isinstance(node, OpNode):
                return node  # the op module's own internals
            raise KeyError(f"torch module path '{path}' has no layer '{step}' in the spec")
        node = child
    return node


def row_name(root: Node, path: str) -> str:
    """The report row of torch module `path`: `blocks.2.attn.qkv` -> `blocks.attn.qkv`
    (or `blocks[global].attn.qkv` when index 2 is in the variant group `global`)."""
    return node_of(root, path).name


def op_of(node: Node) -> OpNode | None:
    """The op a row belongs to (itself, or a part's owner); None for scopes."""
    if isinstance(node, PartNode):
        return node.owner
    return node if isinstance(node, OpNode) else None



__all__ = ["GradState", "MODEL_SLOT", "NO_GRAD", "RowLayout", "Step", "group_of", "is_leaf", "is_own", "layout",
           "matmul_engine", "node_cost", "node_of", "op_of", "own_slot", "row_name", "slot_of", "slots_under",
           "walk"]
