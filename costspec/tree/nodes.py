"""The node types of the model tree, and the named values (`ValueRef`) the dataflow attaches to them.

Costs are per instance of a node and cached on it: `Node.forward()`, and `Node.backward(in_rg)` with
in_rg = "my input requires grad". Layers before the first parameterised layer get no backward, and that
first layer computes dW but no dX; `backward_terms` says which child sees which gradient state.

Activation checkpointing (`checkpoint:` on a block use or a repeat, `--checkpoint`) is the flag
`Node.checkpoint` on that block's scope or that repeat (`RepeatNode.checkpoint_every`: every N-th
instance; `checkpointed(group)` counts them). A checkpointed node's backward includes its recomputed
forward (`recompute`): torch.utils.checkpoint (non-reentrant, early stop off) re-runs the whole forward
of each checkpointed instance during backward, and such an instance keeps only its input for backward.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import sympy

from costspec.core.conventions import Precision
from costspec.core.errors import Location, SpecError
from costspec.ops.opdef import GRAD_YES, OpCall, OpDef
from costspec.ops.work import Part, Work
from costspec.tree.cost import ZERO_COST, Cost, route
from costspec.tree.weights import (
    backward_work,
    forward_work,
    lora_params,
    weight_elements,
    weight_gemms,
    weight_notes,
)


class Node:
    """A node of the model tree. Costs are per instance of this node."""

    kind = "node"
    transparent = False  # rows of a transparent node (residual) show in its parent
    source: tuple[str, ...] = ()  # the real model's module path(s) of this layer (`source:`, validate --against)
    saves: str | None = None  # `save: name`: this layer's output is the named value
    value: "ValueRef | None" = None  # (on the layer that saves, or its fanout) the value it names
    input_from: "ValueRef | None" = None  # `input: name`: this layer reads a saved value / model input
    reads: tuple[str, ...] = ()  # values an op reads besides its input (`with:`, `kv:`), in order
    # activation checkpointing: a block use's scope or a repeat (each instance checkpointed alone) whose
    # forward is re-run in backward; it saves only its input for backward. Nested ones are refused.
    checkpoint: bool = False

    def __init__(self, local: str, loc: Location, explicit: bool = False):
        self.local = local
        self.explicit = explicit
        self.loc = loc
        self.name = local
        self.children: list[Node] = []
        self.count: sympy.Expr = sympy.Integer(1)  # instances per instance of the parent
        self._bwd: dict[bool, Cost] = {}
        self._fwd: Cost | None = None

    @property
    def label(self) -> str:
        return self.local

    def forward(self) -> Cost:
        if self._fwd is None:
            total = ZERO_COST
            for child in self.children:
                total = total + child.forward().scaled(child.count)
            self._fwd = total
        return self._fwd

    def backward(self, in_rg: bool) -> Cost:
        """One instance's backward; a checkpointed node's includes its recomputed forward (`recompute`)."""
        if in_rg not in self._bwd:
            cost = self._backward(in_rg)
            if self.checkpoint and self.runs_recompute(in_rg):
                cost = cost + self.recompute()
            self._bwd[in_rg] = cost
        return self._bwd[in_rg]

    def runs_recompute(self, in_rg: bool) -> bool:
        """Whether a checkpointed instance re-runs its forward in backward: when anything in it is
        differentiated (its input needs a gradient, or it has parameters); else autograd saved nothing
        there and the backward never reaches it."""
        return in_rg or self.makes_grad

    def recompute(self) -> Cost:
        """The forward a checkpointed instance of this node re-runs in backward: all of it (no parameters:
        they are counted once, in the forward)."""
        return self.forward().without_params()

    def _backward(self, in_rg: bool) -> Cost:
        total = ZERO_COST
        for child, rg, instances in self.backward_terms(in_rg):
            total = total + child.backward(rg).scaled(instances)
        return total

    def backward_terms(self, in_rg: bool) -> list[tuple["Node", bool, sympy.Expr]]:
        """One backward instance of this node as (child, child's input-requires-grad, instances):
        children in order, each seeing a gradient once its input or an earlier child needs one.
        Costs (`backward`) and bytes (roofline) both add up these terms."""
        terms, rg = [], in_rg
        for child in self.children:
            if child.input_from is not None:
                rg = child.input_from.rg
            terms.append((child, rg, child.count))
            rg = rg or child.makes_grad
        return terms

    @property
    def makes_grad(self) -> bool:
        """True when this node has parameters, so its output requires grad."""
        return any(child.makes_grad for child in self.children)

    def op_nodes(self) -> Iterator["OpNode"]:
        for child in self.children:
            yield from child.op_nodes()


class OpNode(Node):
    """One use of a registered op."""

    kind = "op"

    def __init__(self, op: OpDef, call: OpCall, out_shape: tuple, table: Mapping[str, sympy.Expr],
                 local: str, explicit: bool, canonical: Callable[[sympy.Expr], sympy.Expr] = lambda e: e):
        super().__init__(local, call.loc, explicit)
        self.op, self.call, self.out_shape, self.table = op, call, out_shape, table
        self.canonical = canonical
        parts = op.forward(call)
        precision = call.precision
        # part -> its weight GEMMs, where the precision changes their work (weights.py)
        self.weight_gemms = weight_gemms(op, call, parts) if precision.quantised or precision.lora else {}
        self.fwd_parts: list[Part] = [self._canon(self._with_weights(p)) for p in parts]
        names = [p.name for p in self.fwd_parts]
        if len(self.fwd_parts) > 1 or names[0]:
            self.children = [PartNode(self, p.name, call.loc) for p in self.fwd_parts]
        self._bwd_parts: dict[bool, dict[str, Part]] = {}

    def _canon(self, part: Part) -> Part:
        """The part with its expressions written in derived dims (S rather than (img//patch)**2 + 1)."""
        c = self.canonical
        work = Work({k: c(v) for k, v in part.work.matmul.items()},
                    {k: c(v) for k, v in part.work.pointwise.items()})
        return Part(part.name, work, c(sympy.sympify(part.params)), part.own)

    def _with_weights(self, part: Part) -> Part:
        """The part with what its weight GEMMs add in this precision: dequantisation, LoRA adapters."""
        gemms = self.weight_gemms.get(part.name)
        if not gemms:
            return part
        return Part(part.name, part.work + forward_work(self.precision, gemms),
                    part.params + lora_params(self.precision, gemms), part.own)

    @property
    def precision(self) -> Precision:
        return self.call.precision

    @property
    def weight_notes(self) -> list[str]:
        """What the precision adds to the weight GEMMs' work (costspec.tree.weights), in words."""
        return weight_notes(self.precision) if self.weight_gemms else []

    @property
    def params(self) -> sympy.Expr:
        return sum((p.params for p in self.fwd_parts), sympy.Integer(0))

    @property
    def frozen_params(self) -> sympy.Expr:
        """Parameters that get no gradient: the weight matrices of a quantised or LoRA-adapted layer."""
        if not self.precision.frozen_weights:
            return sympy.Integer(0)
        return sum((weight_elements(g) for g in self.weight_gemms.values()), sympy.Integer(0))

    @property
    def adapter_params(self) -> sympy.Expr:
        """Parameters of the LoRA adapters on this op's weight GEMMs (precision `lora`)."""
        return sum((lora_params(self.precision, g) for g in self.weight_gemms.values()), sympy.Integer(0))

    @property
    def unused_params(self) -> sympy.Expr | None:
        """Parameters of this op a token does not use (experts it is not routed to), None where it uses all;
        LoRA adapters count as used (all of them)."""
        active = self.op.active_params(self.call)
        return None if active is None else self.params - self.adapter_params - active

    @property
    def trainable_params(self) -> sympy.Expr:
        """Parameters that get a gradient (and optimizer state): all but the frozen weight matrices."""
        return self.params - self.frozen_params

    @property
    def makes_grad(self) -> bool:
        """Whether this op's output needs a gradient whatever its running input: it has trainable parameters,
        or it reads another value that needs one (`with:`, `kv:`; a join of branches with parameters). An op
        the running value passes through (`OpDef.pass_through`) leaves it as it was. A layer that uses another
        layer's weight (`OpDef.tied_to`: a tied embedding or LM head) trains it too."""
        trains = self.trainable_params != 0 or self.op.tied_to(self.call) is not None
        return (trains and not self.op.pass_through) or GRAD_YES in self.call.wiring.grads

    @property
    def holds_quantised_weight(self) -> bool:
        """True when a GEMM / conv of this op multiplies by a weight matrix stored quantised (a norm's or a
        bias's parameters are not quantised)."""
        return self.precision.quantised and bool(self.weight_gemms)

    def part_forward(self, name: str) -> Cost:
        part = next(p for p in self.fwd_parts if p.name == name)
        return route(part.work, part.params, self.precision, self.table, part.name)

    def runs_backward(self, in_rg: bool) -> bool:
        """False when nothing before this op needs a gradient and it has no trainable parameters of its own
        (an op reading other values runs when one of them needs a gradient; a tied layer trains the weight it
        shares)."""
        return (in_rg or self.trainable_params != 0 or self.op.tied_to(self.call) is not None
                or GRAD_YES in self.call.wiring.grads)

    def backward_parts(self, in_rg: bool) -> dict[str, Part]:
        if in_rg not in self._bwd_parts:
            if not self.runs_backward(in_rg):
                parts = {}
            elif self.holds_quantised_weight and self.precision.native:
                raise SpecError(f"{self.op.name} '{self.name}' runs its {self.precision.weights} weights on the "
                                f"{self.precision.dtype} Tensor-Core path: a backward pass through it is not modelled "
                                "(QLoRA's dX runs through the weights dequantised)", self.loc,
                                "--pass forward, or compute: bf16")
            else:
                parts = {p.name: p for p in self.op.backward(self.call, in_rg)}
                unknown = set(parts) - {p.name for p in self.fwd_parts}
                if unknown:
                    raise AssertionError(f"{self.op.name}.backward returned unknown parts {unknown}")
                for name, gemms in self.weight_gemms.items():
                    extra = backward_work(self.precision, gemms, self.part_input_grad(name, in_rg))
                    mine = parts.get(name, Part(name, Work()))
                    parts[name] = Part(name, mine.work + extra, mine.params, mine.own)
                parts = {name: self._canon(p) for name, p in parts.items()}
            self._bwd_parts[in_rg] = parts
        return self._bwd_parts[in_rg]

    def part_input_grad(self, part: str, in_rg: bool) -> bool:
        """Whether the input of the weight GEMMs of `part` needs a gradient: the op's input does (`in_rg`), or
        the op's backward of the part is the same either way: it reads what an earlier part with parameters
        made (mla's q_b after q_a), so the frozen weight's dX (and its dequantisation) and the adapter's share
        of dX run either way."""
        if in_rg:
            return True
        if "_inner_parts" not in self.__dict__:
            with_grad = {p.name: p.work for p in self.op.backward(self.call, True)}
            without = {p.name: p.work for p in self.op.backward(self.call, False)}
            self.__dict__["_inner_parts"] = {name for name in self.weight_gemms
                                             if _same(with_grad.get(name), without.get(name))}
        return part in self.__dict__["_inner_parts"]

    def part_backward(self, name: str, in_rg: bool) -> Cost:
        part = self.backward_parts(in_rg).get(name)
        return route(part.work, 0, self.precision, self.table) if part else ZERO_COST

    def forward(self) -> Cost:
        if self._fwd is None:
            total = ZERO_COST
            for p in self.fwd_parts:
                total = total + self.part_forward(p.name)
            self._fwd = total
        return self._fwd

    def _backward(self, in_rg: bool) -> Cost:
        total = ZERO_COST
        for name in self.backward_parts(in_rg):
            total = total + self.part_backward(name, in_rg)
        return total

    def op_nodes(self):
        yield self


def _same(a: Work | None, b: Work | None) -> bool:
    if a is None or b is None:
        return a is b
    return all(sympy.expand(x.get(k, 0) - y.get(k, 0)) == 0
               for x, y in ((a.matmul, b.matmul), (a.pointwise, b.pointwise)) for k in set(x) | set(y))


class PartNode(Node):
    """A named piece of an op's work (attention's qkv / sdpa / proj)."""

    kind = "part"

    def __init__(self, owner: OpNode, part: str, loc: Location):
        super().__init__(part, loc)
        self.owner = owner

    def forward(self) -> Cost:
        return self.owner.part_forward(self.local)

    def _backward(self, in_rg: bool) -> Cost:
        return self.owner.part_backward(self.local, in_rg)

    @property
    def makes_grad(self) -> bool:
        return False  # the owner op decides

    def op_nodes(self):
        return iter(())


class ScopeNode(Node):
    """A sequence of layers; named (a scope in dotted names) or the model root (whose `inputs` are the
    further model inputs, `inputs:`)."""

    kind = "scope"
    inputs: Mapping[str, "ValueRef"] = {}


class ResidualNode(Node):
    """x + f(x): the body's layers then the residual add; transparent in names and rows."""

    kind = "residual"
    transparent = True

    def backward_terms(self, in_rg: bool):
        *body, add = super().backward_terms(in_rg)
        return body + [(add[0], in_rg, add[2])]  # the gradient sum at the fork exists iff x needs grad


class ParallelNode(Node):
    """Branches forking from one value, joined (`parallel:`, a residual with a shortcut): every branch
    and the join see the fork's input gradient state; transparent in names and rows."""

    kind = "parallel"
    transparent = True

    def backward_terms(self, in_rg: bool):
        return [(child, in_rg, child.count) for child in self.children]


class GroupNode(ScopeNode):
    """The instances of a repeat that share one body (all of them, or those at given indices)."""

    kind = "group"

    def __init__(self, local: str, loc: Location, indices: tuple[int, ...] | None, count: sympy.Expr):
        super().__init__(local, loc)
        self.indices = indices
        self.count = count

    @property
    def label(self) -> str:
        return self.local


class RepeatNode(Node):
    """`repeat: n` over a body, with optional per-index variant groups."""

    kind = "repeat"

    def __init__(self, local: str, loc: Location, explicit: bool, times: sympy.Expr):
        super().__init__(local, loc, explicit)
        self.times = times
        self.checkpoint_every = 1  # with `checkpoint`: instances 0, N, 2N, ... are checkpointed (N = this)

    def checkpointed(self, group: "GroupNode") -> sympy.Expr:
        """How many of `group`'s instances are checkpointed: all of them with every = 1, else the
        instances i with i % every == 0 (ceiling(times / every) of the repeat; Hugging Face's
        `every_n_layers`)."""
        if not self.checkpoint:
            return sympy.Integer(0)
        n = self.checkpoint_every
        if n == 1:
            return group.count
        if group.indices is not None:
            return sympy.Integer(sum(1 for i in group.indices if i % n == 0))
        listed = sum(1 for g in self.children if isinstance(g, GroupNode) and g.indices is not None
                     for i in g.indices if i % n == 0)
        return sympy.ceiling(self.times / n) - listed

    def recompute(self) -> Cost:
        total = ZERO_COST
        for group in self.children:
            assert isinstance(group, GroupNode)
            total = total + group.forward().scaled(self.checkpointed(group))
        return total.without_params()

    @property
    def grouped(self) -> bool:
        return len(self.children) > 1

    def first_group(self) -> GroupNode:
        for group in self.children:
            assert isinstance(group, GroupNode)
            if group.indices is None or 0 in group.indices:
                return group
        raise AssertionError("a repeat without a group holding index 0")

    def backward_terms(self, in_rg: bool):
        """Every instance sees the repeat's input state, unless that needs no gradient and the body
        has parameters: then only the very first instance runs without an input gradient."""
        if in_rg or not self.makes_grad:
            return [(group, in_rg, group.count) for group in self.children]
        first = self.first_group()
        if not first.makes_grad:
            raise SpecError("the first instance of this repeat has no parameters but later ones do; "
                            "costspec cannot yet tell which instance first needs a gradient", self.loc,
                            "the same parameterised layers in every instance")
        return [(first, False, sympy.Integer(1)), (first, True, first.count - 1)] + [
            (group, True, group.count) for group in self.children if group is not first]


@dataclass(eq=False)
class ValueRef:
    """A named value of the dataflow: a layer's output (`save:`) or a model input (`inputs:`).

    rg: whether it needs a gradient (it comes after layers with parameters); mult: instances of its
    saving layer in the model; uses: how many consumers read it per saving instance (the layer after it
    in its sequence, unless that one reads another value, plus every `input:` / `with:` / `kv:` read).
    """

    name: str
    shape: tuple
    rg: bool
    loc: Location
    mult: sympy.Expr = sympy.Integer(1)
    uses: sympy.Expr = sympy.Integer(0)
    node: Node | None = None  # the saving layer (None: a model input)
    parent: Node | None = None
    unsure: bool = False  # saved in a repeat whose first instance may differ in gradient state
    continued: bool = True  # the layer after the saving one reads it (no `input:` there)
    node_precision: Precision | None = None
