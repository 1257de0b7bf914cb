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
* an op records nothing unless some input or parameter needs a gradient (autograd builds no node);
* a tensor one layer makes for several later ones (`OpDef.makes`, DeBERTa's normalised relative-position table),
  which each keeps (a `SHARED` name), is charged to the first; where no layer made it (a parameter), to none.

A repeat's first instance is walked from the value before it, the later ones from the value an instance
leaves: its rows hold first + (n - 1) x later. `subtree` walks one node from a value.

An activation-checkpointed part (a block use, or the instances 0, N, 2N, ... of a repeat) runs under
torch.utils.checkpoint: it keeps its input only (saved whatever its gradient state), charged to its entry op;
its internals are saved again while backward re-runs it (`recomputed_bytes`, for memory's peak). Frozen weight
matrices (quantised, or under LoRA adapters) keep no input for a weight gradient; an adapter keeps its own
(`frozen_saved`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count
from typing import Mapping

import sympy

from costspec.core.errors import UsageError
from costspec.ops.opdef import INPUT, OUTPUT, SHARED, Saved, input_tensor
from costspec.ops.work import numel
from costspec.tree.nodes import GroupNode, Node, OpNode, ParallelNode, RepeatNode, ResidualNode, ScopeNode

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
    shared: dict[str, Value] = field(default_factory=dict)  # the SHARED tensors met so far, by name

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
    if node.checkpoint and isinstance(node, RepeatNode):
        return _checkpointed_repeat(walk, node, x, values)
    if node.checkpoint:
        return _checkpointed(walk, node, x, values)
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


def entry_op(node: Node) -> OpNode:
    """The first op a part runs on its input: the row a checkpointed part's saved input is charged to."""
    op = next(node.op_nodes(), None)
    if op is None:
        raise UsageError(f"layer '{node.name}' is activation-checkpointed but holds no layer")
    return op


def input_bytes(node: Node, x: Value) -> sympy.Expr:
    """The storage bytes of `x`, the input of part `node` (its entry op's input at that op's precision)."""
    if x.storage is not None:
        return x.storage
    op = entry_op(node)
    return op.canonical(numel(op.call.in_shape) * op.precision.bytes_per_element)


def _keep_input(walk: _Walk, node: Node, x: Value) -> None:
    """A checkpointed instance keeps its input (torch.utils.checkpoint saves its arguments, whatever their
    grad state), charged to its entry op unless already counted."""
    op = entry_op(node)
    walk.charge(op.name, _charge(walk, op, Saved(OUTPUT, numel(op.call.in_shape), op.precision.bytes_per_element), x))


def _checkpointed(walk: _Walk, node: Node, x: Value, values: dict) -> Value:
    """A checkpointed block use: its input only; its own saves happen in the recompute, in backward."""
    _keep_input(walk, node, x)
    inner = _Walk(counted=dict(walk.counted), shared=walk.shared)
    out = _plain(inner, node, x, values)
    return out if out.key != x.key else _fresh(out.rg, out.storage)


def _plain(walk: _Walk, node: Node, x: Value, values: dict) -> Value:
    """`node` walked as if not checkpointed (the recompute: what it saves in backward)."""
    if isinstance(node, RepeatNode):
        return _repeat(walk, node, x, values)
    assert not isinstance(node, (OpNode, ResidualNode, ParallelNode))  # (a block use's scope)
    return _sequence(walk, node.children, x, values)


def _checkpointed_repeat(walk: _Walk, node: RepeatNode, x: Value, values: dict) -> Value:
    """Instances 0, N, 2N, ... checkpointed (each keeps its input), the others walked as usual. Instance 0 is
    always checkpointed. An instance's input is the previous one's output: counted already only when that
    one is plain and saves its own output (a relu at the end); then the next instance saves nothing new for
    it. Variant groups with such an output under every:N (N > 1) are refused."""
    first = node.first_group()
    rg = x.rg or node.makes_grad
    for group in node.children:
        assert isinstance(group, GroupNode)
        kept, plain = node.checkpointed(group), group.count - node.checkpointed(group)
        op = entry_op(group)
        if group is first:
            _keep_input(walk, group, x)
            kept = kept - 1
        probe = _Walk(counted=dict(walk.counted), shared=walk.shared)
        inside = _sequence(probe, group.children, _fresh(rg), dict(values))
        # instances whose input the instance before (plain, saving its own output) counted already
        warm_kept, warm_plain = sympy.Integer(0), sympy.Integer(0)
        counts_output = inside.key in probe.counted and plain != 0
        if counts_output:
            if node.grouped:
                raise UsageError(f"layer '{node.name}': every {node.checkpoint_every}-th instance is checkpointed "
                                 "and an instance of a variant group saves its own output, whose sharing with the "
                                 "next instance is not modelled, so the activations a training step saves cannot "
                                 "be counted")
            every, times = node.checkpoint_every, node.times
            warm_kept = sympy.ceiling(times / every) - 1  # every checkpointed instance but the first follows a plain
            warm_plain = plain - sympy.ceiling((times - 1) / every)  # a plain one after a plain one (i % N >= 2)
        size = input_bytes(group, _fresh(rg))
        if kept != 0:
            walk.charge(op.name, (kept - warm_kept) * size)
            if warm_kept != 0:
                walk.charge(op.name, warm_kept * sympy.Piecewise((0, probe.counted[inside.key]), (size, True)))
        for row, amount in probe.rows.items():
            walk.charge(row, (plain - warm_plain) * amount)
        if warm_plain != 0:
            warm = _fresh(rg)
            again = _Walk(counted={**walk.counted, warm.key: probe.counted[inside.key]}, shared=walk.shared)
            _sequence(again, group.children, warm, dict(values))
            for row, amount in again.rows.items():
                walk.charge(row, warm_plain * amount)
    return _fresh(rg)


def recomputed_bytes(root: ScopeNode) -> sympy.Expr:
    """The most bytes one checkpointed instance saves again while its forward is re-run in backward (its
    internals; its input is already held): 0 without checkpointing. memory adds it to the forward's saved
    bytes, an upper bound of a checkpointed step's activation peak (the bytes the backward freed before
    that recompute are not subtracted)."""
    found: list[sympy.Expr] = []
    for node in _nodes(root):
        if not node.checkpoint:
            continue
        parts = node.children if isinstance(node, RepeatNode) else [node]
        for part in parts:
            if isinstance(node, RepeatNode) and isinstance(part, GroupNode) and node.checkpointed(part) == 0:
                continue
            x = _fresh(True)  # (the recompute's input, already held: the checkpoint saved it)
            inner = _Walk(counted={x.key: sympy.true})
            if isinstance(node, RepeatNode):
                _sequence(inner, part.children, x, {})
            else:
                _plain(inner, node, x, {})
            found.append(saved_total(inner.rows))
    return sympy.Max(*found) if found else sympy.Integer(0)


@dataclass(frozen=True)
class RecomputePoint:
    """A checkpointed part at the moment backward has re-run its forward: for a repeat, its last checkpointed
    instance (the first one backward re-runs). `saved`: what the re-run keeps (its input, held already by the
    checkpoint, excluded); `output`: the bytes of the output the re-run returns (0 where one of its ops keeps
    it), `gradient`: the bytes of that output's gradient (its size, in its dtype); `later_plain`: the
    repeat's plain instances after it (their backward ran before, their saves freed), each keeping
    `plain_saved`."""

    part: Node
    saved: sympy.Expr
    output: sympy.Expr
    gradient: sympy.Expr
    later_plain: sympy.Expr = sympy.S.Zero
    plain_saved: sympy.Expr = sympy.S.Zero


def recompute_points(root: ScopeNode) -> list[RecomputePoint] | None:
    """The recompute moment of every checkpointed part (`RecomputePoint`), in forward order; None where one is
    not modelled exactly: a repeat of variant groups (which instance re-runs the most is not followed), or
    plain instances that keep their own output (the next one then saves its input again or not), or a
    checkpointed part inside a repeat (its rows count every instance of that repeat)."""
    points: list[RecomputePoint] = []
    for node, repeated in _nodes_in(root, False):
        if not node.checkpoint:
            continue
        if repeated:
            return None
        if not isinstance(node, RepeatNode):
            points.append(_point(node, node, _plain))
            continue
        if node.grouped:
            return None
        group = node.first_group()
        every = node.checkpoint_every
        later = node.times - 1 - every * (sympy.ceiling(node.times / every) - 1)
        point = _point(node, group, lambda w, g, x, v: _sequence(w, g.children, x, v))
        if later == 0:
            points.append(point)
            continue
        probe = _Walk()
        out = _sequence(probe, group.children, _fresh(True), {})
        if out.key in probe.counted:
            return None
        points.append(RecomputePoint(node, point.saved, point.output, point.gradient, later, saved_total(probe.rows)))
    return points


def _point(part: Node, body: Node, run) -> RecomputePoint:
    x = _fresh(True)  # (the re-run's input, held already: the checkpoint saved it)
    inner = _Walk(counted={x.key: sympy.true})
    out = run(inner, body, x, {})
    last = list(body.op_nodes())[-1]
    size = out.storage if out.storage is not None else last.canonical(
        numel(last.out_shape) * last.precision.bytes_per_element)
    kept = inner.counted.get(out.key, sympy.false)  # the dims at which one of its ops keeps its output
    output = sympy.Piecewise((0, kept), (size, True)) if kept is not sympy.false else size
    return RecomputePoint(part, saved_total(inner.rows), sympy.sympify(output), sympy.sympify(size))


def _nodes_in(node: Node, repeated: bool):
    """Every node under `node`, with whether a repeat above it (not itself) holds it."""
    yield node, repeated
    for child in node.children:
        yield from _nodes_in(child, repeated or isinstance(node, RepeatNode))


def _nodes(node: Node):
    yield node
    for child in node.children:
        yield from _nodes(child)


def _scaled(walk: _Walk, group: Node, x: Value, values: dict, times: sympy.Expr) -> Value:
    inner = _Walk(counted=dict(walk.counted), shared=walk.shared)
    out = _sequence(inner, group.children, x, dict(values))
    for row, amount in inner.rows.items():
        walk.charge(row, times * amount)
    # (what the group read from outside it, an encoder's output for every cross-attention, is one tensor: its
    # later readers must not count it again)
    outside = [*walk.shared.values(), *values.values()]
    for key in (x.key, out.key, x.copy_key, out.copy_key, *(v.key for v in outside), *(v.copy_key for v in outside)):
        if key in inner.counted:
            walk.counted[key] = inner.counted[key]
    return out


def _op(walk: _Walk, node: OpNode, x: Value, extra: list[Value], input_grad: bool | None = None) -> Value:
    try:
        return _op_saves(walk, node, x, extra, x.rg if input_grad is None else input_grad)
    except NotImplementedError as e:
        raise UsageError(f"layer '{node.name}': {e}, so the activations a training step saves cannot be "
                         "counted") from None


def _op_saves(walk: _Walk, node: OpNode, x: Value, extra: list[Value], input_grad: bool) -> Value:
    op, call = node.op, node.call
    inputs = [x, *extra]
    # (an op the running value passes through with trainable parameters of its own, DeBERTa's table, records its
    # nodes whatever that value's gradient)
    needs = any(v.rg for v in inputs) or node.makes_grad or (op.pass_through and node.trainable_params != 0)
    out_rg = x.rg if op.pass_through else any(v.rg for v in inputs) or node.makes_grad
    layout = op.view(call, x.contiguous)
    copies = sympy.sympify(op.copies(call, x.contiguous)) if layout is not None else sympy.true
    if copies is sympy.true or (copies is not sympy.false and x.alias is not sympy.true):
        out = _fresh(out_rg)
    else:  # a view of its input, or one only at some dims (a reshape of a view strided elsewhere: a copy there)
        storage = x.storage if x.storage is not None else numel(call.in_shape) * node.precision.bytes_per_element
        out = Value(x.key, storage, out_rg, layout, x.alias, x.copy_key) if copies is sympy.false else \
            Value(x.key, storage, out_rg, layout, sympy.Not(copies), next(_ids))
    for name, nbytes in op.makes(call).items():  # (replacing an earlier layer's: readers take the nearest)
        walk.shared[name] = _fresh(True, node.canonical(sympy.sympify(nbytes)))
    if not needs:
        return out
    tensors = {input_tensor(i): v for i, v in enumerate(inputs)}
    tensors[OUTPUT] = out
    own: set[str] = set()  # a tensor of its own kept by two of its aten ops is one tensor too
    items = op.saved(call, input_grad)
    for item in items:
        if item.tensor.startswith(SHARED) and item.tensor in walk.shared:
            tensors[item.tensor] = walk.shared[item.tensor]
    items = [item for item in items if not item.tensor.startswith(SHARED) or item.tensor in tensors]
    for item in frozen_saved(node, items) if node.weight_gemms else items:
        if item.tensor in tensors or item.tensor not in own:
            own.add(item.tensor)
            walk.charge(node.name, _charge(walk, node, item, tensors.get(item.tensor)))
    return out


# per op: which of its saved tensors only a weight GEMM's dW needs (by position in `OpDef.saved`'s list, or by
# name): the input of each weight GEMM, unless another of its aten ops keeps it too
_DW_ONLY = {
    "linear": lambda items: [0],
    # autograd's convolution keeps its input whatever needs a gradient (one backward for input, weight, bias)
    "conv1d": lambda items: [], "conv2d": lambda items: [], "conv3d": lambda items: [],
    "patch_embed": lambda items: [],
    "mlp": lambda items: [0, len(items) - 1],  # the input (fc1 / gate and up) and down's input (the last)
    "attention": lambda items: [i for i, item in enumerate(items) if item.tensor in (INPUT, "proj_input")],
}


def frozen_saved(node: OpNode, items: list[Saved]) -> list[Saved]:
    """What an op with frozen weight matrices (quantised, or under LoRA adapters) keeps: autograd saves a
    GEMM's input for the weight gradient only when the weight needs one, so a frozen matrix's dW input goes
    (`_DW_ONLY`); a LoRA adapter (x A^T B^T, PEFT's lora.Linear) keeps that input again for dA, one tensor
    with it, and its own x A^T (m x r at the layer's dtype) for dB, per weight GEMM."""
    if node.op.name not in _DW_ONLY:
        raise UsageError(f"layer '{node.name}': what {node.op.name} keeps for backward with frozen (quantised or "
                         "LoRA-adapted) weight matrices is not modelled, so the activations a training step saves "
                         "cannot be counted")
    r = node.precision.lora
    if r:
        b = node.precision.bytes_per_element
        return items + [Saved(f"lora.{part}.{i}", g.count * g.m * r, b)
                        for part, gemms in node.weight_gemms.items() for i, g in enumerate(gemms)]
    drop = set(_DW_ONLY[node.op.name](items))
    return [item for i, item in enumerate(items) if i not in drop]


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
    shared = sympy.And(sympy.Or(contiguous, item.folds) if item.folded else sympy.true, item.view)
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


__all__ = ["RecomputePoint", "Value", "entry_op", "frozen_saved", "input_bytes", "recompute_points", "recomputed_bytes",
           "saved_bytes", "saved_total", "subtree"]
