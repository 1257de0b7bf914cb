"""Activations saved for backward: what autograd keeps between a training forward and its backward,
per op row and in total, as exact expressions of the dims.

Each op says what one instance keeps (`OpDef.saved`: its input, its output, tensors made inside it).
This walk follows the values in the order the generated module runs them (residual forks and adds,
parallel branches and their join, `save:` / `input:` values, repeat instances) and counts every tensor
ONCE, by identity, as autograd's storage does:

* an op's output is the next op's input: saved by both (a softmax keeps its output, the linear after it
  its input), it is one tensor, charged to the first layer that saves it;
* an op whose module returns a view of its input (`OpDef.aliases`: reshape, permute, ...) passes the
  same tensor on; a saved view keeps its whole storage alive, so it counts at the storage's size;
* an op records nothing unless some input or parameter needs a gradient (autograd builds no node).

A repeat's first instance is walked from the value before it, the later ones from the value an instance
leaves: its rows hold first + (n - 1) x later. `subtree` walks one node from a value, so a caller can
replace a subtree's bytes (an activation-checkpointed block keeps only its input).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count
from typing import Mapping

import sympy

from costspec.core.errors import UsageError
from costspec.ops.opdef import OUTPUT, Saved, input_tensor
from costspec.ops.work import numel
from costspec.tree.nodes import Node, OpNode, ParallelNode, RepeatNode, ResidualNode, ScopeNode

_ids = count()


@dataclass(frozen=True)
class Value:
    """A tensor of the forward: its identity, its storage bytes when known (None: the saver's own size),
    and whether it needs a gradient."""

    key: int
    storage: sympy.Expr | None
    rg: bool
    contiguous: sympy.Basic = sympy.true  # the dims at which it is a contiguous tensor (a view may be strided)
    alias: sympy.Basic = sympy.true  # the dims at which it is `key`'s tensor; elsewhere a copy (`copy_key`)
    copy_key: int = -1


def _fresh(rg: bool, storage: sympy.Expr | None = None) -> Value:
    return Value(next(_ids), storage, rg)


@dataclass
class _Walk:
    rows: dict[str, sympy.Expr] = field(default_factory=dict)
    counted: dict[int, sympy.Basic] = field(default_factory=dict)  # tensor -> the dims at which it is counted

    def charge(self, row: str, amount: sympy.Expr) -> None:
        self.rows[row] = self.rows.get(row, sympy.Integer(0)) + amount


def saved_bytes(root: ScopeNode) -> dict[str, sympy.Expr]:
    """Bytes saved for backward per op row (rows that save nothing left out), in walk order; the model
    inputs need no gradient. See the module docstring."""
    walk = _Walk()
    values = {name: _fresh(False) for name in getattr(root, "inputs", {})}
    _sequence(walk, root.children, _fresh(False), values)
    return {row: sympy.expand(amount) for row, amount in walk.rows.items() if sympy.expand(amount) != 0}


def subtree(walk: _Walk, node: Node, x: Value, values: dict) -> Value:
    """Walk `node` from the running value `x`; its saved bytes go into `walk.rows`; return its output."""
    if node.checkpoint and node.runs_recompute(x.rg):
        raise UsageError(f"layer '{node.name}' is activation-checkpointed: what a checkpointed part keeps for "
                         "backward (its inputs) is not modelled yet, so the activations a training step saves "
                         "cannot be counted")
    if isinstance(node, OpNode):
        return _op(walk, node, x, [values[r] for r in node.reads])
    if isinstance(node, ResidualNode):
        *body, add = node.children
        h = _sequence(walk, body, x, values)
        assert isinstance(add, OpNode)
        return _op(walk, add, x, [h])
    if isinstance(node, ParallelNode):
        *branches, join = node.children
        outs = [_sequence(walk, branch.children, x, values) for branch in branches]
        assert isinstance(join, OpNode)  # (its input gradient is the fork's, as the walk's GradState says)
        return _op(walk, join, outs[0], outs[1:], x.rg)
    if isinstance(node, RepeatNode):
        return _repeat(walk, node, x, values)
    assert isinstance(node, ScopeNode)
    return _sequence(walk, node.children, x, values)


def _sequence(walk: _Walk, nodes, x: Value, values: dict) -> Value:
    for node in nodes:
        if node.input_from is not None:
            x = values[node.input_from.name]
        x = subtree(walk, node, x, values)
        if node.saves is not None:
            values[node.saves] = x
    return x


def _repeat(walk: _Walk, node: RepeatNode, x: Value, values: dict) -> Value:
    """First instance from `x`; each later one from what an instance leaves (walked once per group and
    scaled: every instance of a group keeps the same bytes)."""
    first = node.first_group()
    out = x
    for group in node.children:
        n = group.count
        if group is first:
            out = _scaled(walk, group, x, values, sympy.Integer(1))
            if n != 1:
                out = _scaled(walk, group, out, values, n - 1)
        else:
            out = _scaled(walk, group, _fresh(out.rg or node.makes_grad, out.storage), values, n)
    return out


def _scaled(walk: _Walk, group: Node, x: Value, values: dict, times: sympy.Expr) -> Value:
    inner = _Walk(counted=dict(walk.counted))
    out = _sequence(inner, group.children, x, dict(values))
    for row, amount in inner.rows.items():
        walk.charge(row, times * amount)
    for key in (x.key, out.key, x.copy_key, out.copy_key):
        if key in inner.counted:
            walk.counted[key] = inner.counted[key]
    return out


def _op(walk: _Walk, node: OpNode, x: Value, extra: list[Value], input_grad: bool | None = None) -> Value:
    if node.weight_gemms:  # quantised or LoRA-adapted weights: frozen matrices need no input saved for a dW
        raise UsageError(f"layer '{node.name}' has frozen (quantised or LoRA-adapted) weight matrices, whose saved "
                         "tensors are not modelled yet, so the activations a training step saves cannot be counted")
    try:
        return _op_saves(walk, node, x, extra, x.rg if input_grad is None else input_grad)
    except NotImplementedError as e:
        raise UsageError(f"layer '{node.name}': {e}, so the activations a training step saves cannot be "
                         "counted") from None


def _op_saves(walk: _Walk, node: OpNode, x: Value, extra: list[Value], input_grad: bool) -> Value:
    op, call = node.op, node.call
    inputs = [x, *extra]
    needs = any(v.rg for v in inputs) or node.makes_grad
    out_rg = x.rg if op.pass_through else any(v.rg for v in inputs) or node.makes_grad
    layout = op.view(call, x.contiguous)
    copies = sympy.sympify(op.copies(call, x.contiguous)) if layout is not None else sympy.true
    if copies is sympy.true or (copies is not sympy.false and x.alias is not sympy.true):
        out = _fresh(out_rg)
    else:  # a view of its input, or one only at some dims (a reshape of a view strided elsewhere: a copy there)
        storage = x.storage if x.storage is not None else numel(call.in_shape) * node.precision.bytes_per_element
        out = Value(x.key, storage, out_rg, layout, x.alias, x.copy_key) if copies is sympy.false else \
            Value(x.key, storage, out_rg, layout, sympy.Not(copies), next(_ids))
    if not needs:
        return out
    tensors = {input_tensor(i): v for i, v in enumerate(inputs)}
    tensors[OUTPUT] = out
    own: set[str] = set()  # a tensor of its own kept by two of its aten ops is one tensor too
    for item in op.saved(call, input_grad):
        if item.tensor in tensors or item.tensor not in own:
            own.add(item.tensor)
            walk.charge(node.name, _charge(walk, node, item, tensors.get(item.tensor)))
    return out


def _charge(walk: _Walk, node: OpNode, item: Saved, value: Value | None) -> sympy.Expr:
    own = node.canonical(sympy.sympify(item.bytes))
    if value is None:
        return own
    if value.alias is sympy.true:
        return _charge_tensor(walk, node, item, value.key, value.storage, value.contiguous, sympy.true)
    view = _charge_tensor(walk, node, item, value.key, value.storage, value.contiguous, value.alias)
    copy = _charge_tensor(walk, node, item, value.copy_key, None, sympy.true, sympy.Not(value.alias))
    return sympy.Piecewise((view, value.alias), (copy, True))


def _charge_tensor(walk: _Walk, node: OpNode, item: Saved, key: int, storage, contiguous, where) -> sympy.Expr:
    """`item` saved from the tensor `key` (of `storage` bytes, None: the saver's size) at the dims `where` it
    is that tensor."""
    own = node.canonical(sympy.sympify(item.bytes))
    # where the saved tensor is the value itself (a strided input folded, or a reshape that copies: its own)
    shared = sympy.And(contiguous if item.folded else sympy.true, item.view)
    if shared is sympy.false:
        return own
    storage = node.canonical(sympy.sympify(storage if storage is not None else item.bytes))
    counted = walk.counted.get(key, sympy.false)
    walk.counted[key] = sympy.Or(counted, sympy.And(shared, where))
    first = storage if counted is sympy.false else sympy.Piecewise((0, counted), (storage, True))
    if shared is sympy.true:
        return first
    return sympy.Piecewise((first, shared), (own, True))


def saved_total(rows: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """All saved bytes of a training forward."""
    return sympy.expand(sum(rows.values(), sympy.Integer(0)))


__all__ = ["Value", "saved_bytes", "saved_total", "subtree"]
