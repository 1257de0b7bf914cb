"""Validated spec -> model tree: dotted names, symbolic shapes, costs per node.

A `repeat` keeps one body per variant group and multiplies its cost by the group's count; it is
never unrolled. Backward costs know which instance is the first to see a gradient: layers before
the first parameterised layer get no backward, and that first layer computes dW but no dX
(`Node.backward(in_rg)` with in_rg = "my input requires grad").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import sympy

from costspec.core.budget import check_op_instances
from costspec.core.conventions import Precision
from costspec.core.dims import Dims
from costspec.core.errors import Location, SpecError
from costspec.core.expr import parse_expr
from costspec.ops import OPS, spec_ops
from costspec.ops.attrs import REQUIRED, Attrs
from costspec.ops.opdef import GRAD_INPUT, GRAD_NO, GRAD_YES, NO_WIRING, Constraint, OpCall, OpDef, Wiring
from costspec.ops.work import Part, Work, numel
from costspec.spec.schema import COMPOSITION_KEYS
from costspec.tree.cost import ZERO_COST, Cost, route

MAX_TREE_DEPTH = 64  # nested blocks / scopes
MAX_OP_NODES = 20_000  # op instances in the tree (repeats count once)


class Node:
    """A node of the model tree. Costs are per instance of this node."""

    kind = "node"
    transparent = False  # rows of a transparent node (residual) show in its parent
    source: tuple[str, ...] = ()  # the real model's module path(s) of this layer (`source:`, validate --against)
    saves: str | None = None  # `save: name`: this layer's output is the named value
    value: "ValueRef | None" = None  # (on the layer that saves, or its fanout) the value it names
    input_from: "ValueRef | None" = None  # `input: name`: this layer reads a saved value / model input
    reads: tuple[str, ...] = ()  # values an op reads besides its input (`with:`, `kv:`), in order

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
        if in_rg not in self._bwd:
            self._bwd[in_rg] = self._backward(in_rg)
        return self._bwd[in_rg]

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
        self.fwd_parts: list[Part] = [self._canon(p) for p in op.forward(call)]
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

    @property
    def precision(self) -> Precision:
        return self.call.precision

    @property
    def params(self) -> sympy.Expr:
        return sum((p.params for p in self.fwd_parts), sympy.Integer(0))

    @property
    def makes_grad(self) -> bool:
        """Whether this op's output needs a gradient whatever its running input: it has parameters, or it
        reads another value that needs one (`with:`, `kv:`; a join of branches with parameters). An op the
        running value passes through (`OpDef.pass_through`) leaves it as it was."""
        return (self.params != 0 and not self.op.pass_through) or GRAD_YES in self.call.wiring.grads

    def part_forward(self, name: str) -> Cost:
        part = next(p for p in self.fwd_parts if p.name == name)
        return route(part.work, part.params, self.precision, self.table, part.name)

    def runs_backward(self, in_rg: bool) -> bool:
        """False when nothing before this op needs a gradient and it has no parameters of its own (an
        op reading other values runs when one of them needs a gradient)."""
        return in_rg or self.params != 0 or GRAD_YES in self.call.wiring.grads

    def backward_parts(self, in_rg: bool) -> dict[str, Part]:
        if in_rg not in self._bwd_parts:
            if not self.runs_backward(in_rg):
                parts = {}
            else:
                parts = {p.name: self._canon(p) for p in self.op.backward(self.call, in_rg)}
                unknown = set(parts) - {p.name for p in self.fwd_parts}
                if unknown:
                    raise AssertionError(f"{self.op.name}.backward returned unknown parts {unknown}")
            self._bwd_parts[in_rg] = parts
        return self._bwd_parts[in_rg]

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


# ----------------------------------------------------------------------------------------------
# Building
# ----------------------------------------------------------------------------------------------
@dataclass
class _Env:
    """What expressions in one place of the spec can see."""

    names: dict[str, sympy.Expr]  # dims and block parameters, as sympy values
    raw_params: dict[str, object]  # block parameters as written (for bool / choice attributes)
    precision: Precision
    blocks_stack: tuple[str, ...] = ()
    depth: int = 0


class TreeBuilder:
    """Builds the model tree of a validated spec document."""

    def __init__(self, data: dict, locate: Callable[[tuple], Location], dims: Dims,
                 table: Mapping[str, sympy.Expr], collect: list[SpecError] | None = None):
        self.data, self.locate, self.dims, self.table = data, locate, dims, table
        self.collect = collect  # not None: a bad layer is recorded and the build goes on (costspec check)
        self.blocks = data.get("blocks", {})
        self.constraints: list[Constraint] = []
        self.op_count = 0
        # the dataflow: named values visible here, all saved values, the running value's state
        self.values: dict[str, ValueRef] = {}
        self.saved: list[ValueRef] = []
        self.mult: sympy.Expr = sympy.Integer(1)  # instances of the layer being built, in the model
        self.rg = False  # whether the running value needs a gradient
        self.running: ValueRef | None = None  # the saved value the running value is, right after a save
        self.unsure = False  # inside a repeat whose first instance's input needs no gradient
        self.unsure_reads: list[SpecError] = []  # reads of values saved there before any gradient, per repeat

    def build(self, precision: Precision) -> tuple[ScopeNode, tuple]:
        check_op_instances(self.data, self.locate(("layers",)))
        env = _Env(dict(self.dims.symbols), {}, precision)
        shape = tuple(self._size(v, env, ("input", i)) for i, v in enumerate(self.data["input"]))
        for name, dims in self.data.get("inputs", {}).items():
            where = self.locate(("inputs", name))
            if name in self.values:
                raise SpecError(f"input '{name}' is named twice", where)
            self.values[name] = ValueRef(name, tuple(self._size(v, env, ("inputs", name, i))
                                                     for i, v in enumerate(dims)), False, where)
        root = ScopeNode("", self.locate(()))
        shape = self._sequence(root, self.data["layers"], ("layers",), shape, env)
        self._insert_fanouts()
        _assign_names(root, "")
        root.inputs = {name: ref for name, ref in self.values.items() if ref.node is None}
        return root, shape

    # -- the dataflow -------------------------------------------------------------------------
    def _value(self, name, path: tuple, what: str) -> ValueRef:
        """The named value a layer reads, counted as one more use of it."""
        where = self.locate(path)
        if not isinstance(name, str) or name not in self.values:
            known = ", ".join(sorted(self.values)) or "none saved before this layer"
            raise SpecError(f"{what} reads '{name}', which is not a saved value or model input here", where,
                            f"a name given by `save:` on an earlier layer (not inside a repeat it is outside of) "
                            f"or by `inputs:` ({known})")
        ref = self.values[name]
        if ref.unsure and not ref.rg:  # an error only if the repeat's body has parameters (see _repeat)
            self.unsure_reads.append(SpecError(
                f"'{name}' is saved inside a repeat whose first instance's input needs no gradient; "
                "costspec cannot yet tell which instances of it need one", where,
                "the read outside such a repeat, or a layer with parameters before the repeat"))
        ref.uses = ref.uses + self.mult / ref.mult
        return ref

    def _save(self, node: Node, name, parent: Node, shape: tuple, path: tuple, precision: Precision) -> None:
        where = self.locate(path)
        if name in self.values:
            first = self.values[name]
            raise SpecError(f"value '{name}' is already named (at {first.loc})", where,
                            "a name not used by another `save:` or `inputs:` (a block used twice saves twice: "
                            "pass the name as a block parameter)")
        ref = ValueRef(name, shape, self.rg, where, self.mult, sympy.Integer(1), node, parent, self.unsure,
                       node_precision=precision)
        self.values[name] = ref
        self.saved.append(ref)
        self.running = ref
        node.saves, node.value = name, ref

    def _insert_fanouts(self) -> None:
        """A value read more than once gets a `fanout` layer right after its saving layer: the backward
        sum of its consumers' gradients ((uses - 1) adds per element)."""
        def position(ref: ValueRef) -> int:
            assert ref.parent is not None and ref.node is not None
            return ref.parent.children.index(ref.node)

        for ref in sorted(self.saved, key=lambda r: -position(r)):
            uses = sympy.simplify(ref.uses)
            if uses == 0:
                raise SpecError(f"value '{ref.name}' is saved but never read, and the next layer reads another "
                                "value: its layer's output is never used", ref.loc,
                                "a layer that reads it (`input:`, `with:`, `kv:`), or no `input:` after it")
            if uses.is_number and uses <= 1:
                continue
            assert ref.node is not None and ref.parent is not None
            assert ref.node_precision is not None
            call = OpCall(Attrs({}, ref.loc), ref.shape, ref.node_precision, ref.loc,
                          Wiring(fanout=(uses - 1) * numel(ref.shape)))
            fan = OpNode(OPS["fanout"], call, ref.shape, self.table, f"{ref.name}_fanout", False,
                         self.dims.canonical)
            fan.saves, fan.value, ref.node.saves, ref.node.value = ref.name, ref, None, None
            ref.parent.children.insert(ref.parent.children.index(ref.node) + 1, fan)

    # -- values -------------------------------------------------------------------------------
    def _size(self, raw, env: _Env, path: tuple, what: str = "size") -> sympy.Expr:
        where = self.locate(path)
        value = parse_expr(raw, env.names, where)
        if not isinstance(value, sympy.Expr):
            raise SpecError(f"{raw!r} is a condition, not a size", where, "a size")
        if value.is_number and (value < 1 or not value.is_integer):
            raise SpecError(f"{what} {raw!r} = {value} is not a positive integer", where, "a positive integer")
        if not value.is_number:  # checked once the dims are bound (and at their defaults, by check)
            shown = str(raw).replace("{", "{{").replace("}", "}}")
            self.constraints.append(Constraint(sympy.And(sympy.Eq(sympy.floor(value), value), value >= 1),
                                               f"{what} {shown!r} = {{value}} is not a positive integer", where,
                                               {"value": value}, "a positive integer"))
        return self.dims.canonical(value)

    def _attrs(self, op: OpDef, given: dict, env: _Env, path: tuple, in_shape: tuple) -> Attrs:
        values: dict[str, object] = {}
        for attr in op.attrs:
            apath = path + (attr.name,)
            if attr.name in given:
                values[attr.name] = self._attr_value(attr, given[attr.name], env, apath)
            elif attr.default is REQUIRED:
                raise SpecError(f"{op.name} needs '{attr.name}'", self.locate(path), attr.doc)
            elif callable(attr.default):
                values[attr.name] = self.dims.canonical(sympy.sympify(attr.default(in_shape, values)))
            else:
                values[attr.name] = sympy.Integer(attr.default) if attr.kind in ("size", "count", "pair", "triple") \
                    else attr.default
        return Attrs(values, self.locate(path))

    def _attr_value(self, attr, raw, env: _Env, path: tuple):
        where = self.locate(path)
        if attr.kind in ("bool", "choice", "number", "axis") and isinstance(raw, str) and raw in env.raw_params:
            raw = env.raw_params[raw]  # a block parameter passed through
        if attr.kind == "bool":
            if not isinstance(raw, bool):
                raise SpecError(f"bad value {raw!r}", where, "true or false, or the name of a block parameter "
                                "that is true or false")
            return raw
        if attr.kind == "choice":
            if raw not in attr.choices:
                raise SpecError(f"bad value {raw!r}", where, "one of " + ", ".join(attr.choices))
            return raw
        if attr.kind == "number":
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise SpecError(f"{attr.name} must be a number, got {raw!r}", where, "a number")
            return raw
        if attr.kind == "axis":
            if isinstance(raw, bool) or not isinstance(raw, int):
                raise SpecError(f"{attr.name} must be an integer axis, got {raw!r}", where, "an integer")
            return raw
        if attr.kind == "shape":
            return tuple(-1 if item == -1 else self._size(item, env, path + (i,)) for i, item in enumerate(raw))
        if attr.kind == "axes":
            if not isinstance(raw, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in raw):
                raise SpecError(f"{attr.name} must be a list of integer axes, got {raw!r}", where, "a list of integers")
            return tuple(raw)
        if attr.kind in ("values", "value"):  # names of values, resolved by the dataflow (_read_values)
            return raw
        if attr.kind == "expr":  # any value of the dims (a constant factor such as sqrt(C)), not only integers
            value = parse_expr(raw, env.names, where)
            if not isinstance(value, sympy.Expr) or value.has(sympy.zoo, sympy.nan):
                raise SpecError(f"{raw!r} is not a number or an expression of the dims", where, "an expression")
            return self.dims.canonical(value)
        if attr.kind == "counts":
            return tuple(self._count(item, env, path + (i,)) for i, item in enumerate(raw))
        if attr.kind in ("pair", "triple") and isinstance(raw, list):
            return tuple(self._count(item, env, path + (i,)) for i, item in enumerate(raw))
        if attr.kind in ("pair", "triple", "count"):
            return self._count(raw, env, path)
        return self._size(raw, env, path)

    def _count(self, raw, env: _Env, path: tuple) -> sympy.Expr:
        where = self.locate(path)
        value = parse_expr(raw, env.names, where)
        if not isinstance(value, sympy.Expr) or (value.is_number and (value < 0 or not value.is_integer)):
            raise SpecError(f"{raw!r} is not a non-negative integer", where, "a non-negative integer")
        return self.dims.canonical(value)

    # -- structure ----------------------------------------------------------------------------
    def _sequence(self, parent: Node, layers: list, path: tuple, shape: tuple, env: _Env,
                  fork: str | None = None) -> tuple:
        """Build `layers` in order into `parent`; `fork` names the composition whose branch this is (its
        first layer reads the fork's value)."""
        if env.depth > MAX_TREE_DEPTH:
            raise SpecError(f"layers nested deeper than {MAX_TREE_DEPTH} levels", self.locate(path))
        failed = False
        for i, layer in enumerate(layers):
            try:
                reads = None
                if isinstance(layer, dict) and "input" in layer:
                    if i == 0 and fork is not None:
                        raise SpecError(f"the first layer of a {fork} reads the {fork}'s input; `input:` cannot "
                                        "change it", self.locate(path + (i, "input")),
                                        f"`input:` on a layer outside the {fork}, or later in it")
                    reads = self._value(layer["input"], path + (i, "input"), "input:")
                    if self.running is not None:  # the running value's next consumer is not this layer
                        self.running.uses -= 1
                        self.running.continued = False
                    elif self.op_count > 0:
                        raise SpecError("this layer reads another value, so the previous layer's output is never "
                                        "used", self.locate(path + (i, "input")),
                                        "`save:` on the previous layer (and a layer that reads it), or no layers "
                                        "whose output is dropped")
                    shape, self.rg = reads.shape, reads.rg
                before = self.running
                node, shape = self._layer(layer, path + (i,), shape, env)
                if self.running is before:  # consumed by this layer (unless a layer inside it saved its output)
                    self.running = None
                node.input_from = reads
                self.rg = self.rg or node.makes_grad
                if "save" in layer:
                    self._save(node, layer["save"], parent, shape, path + (i, "save"), env.precision)
            except SpecError as exc:
                if self.collect is None:
                    raise
                # go on with the input shape, so later layers are still checked; what they report may
                # follow from this problem, and says so
                self.collect.append(exc if not failed else SpecError(
                    exc.message + " (after an earlier problem in this sequence, which it may follow from)",
                    exc.location, exc.expected))
                failed = True
                continue
            if "source" in layer:  # the real model's counterpart (validate --against)
                if node.transparent:
                    raise SpecError(f"a {node.kind} has no source of its own", self.locate(path + (i, "source")),
                                    "a source on the layers inside it")
                node.source = (layer["source"],) if isinstance(layer["source"], str) else tuple(layer["source"])
            parent.children.append(node)
        return shape

    def _layer(self, layer: dict, path: tuple, shape: tuple, env: _Env) -> tuple[Node, tuple]:
        where = self.locate(path)
        kinds = [k for k in layer if k in spec_ops() or k in COMPOSITION_KEYS]
        if len(kinds) != 1:
            what = "nothing to do" if not kinds else "both " + " and ".join(f"'{k}'" for k in kinds)
            raise SpecError(f"a layer must have exactly one op or composition key, this one has {what}", where,
                            "one op name, or one of " + ", ".join(COMPOSITION_KEYS))
        kind = kinds[0]
        if kind != "repeat":
            for key in ("body", "at"):
                if key in layer:
                    raise SpecError(f"'{key}' only belongs to a repeat", self.locate(path + (key,)))
        if "args" in layer and kind not in ("repeat", "block"):
            raise SpecError("'args' only belongs to a repeat or a block", self.locate(path + ("args",)))
        if "precision" in layer:
            precision = Precision.of_spec(layer["precision"], env.precision, self.locate(path + ("precision",)))
            env = _Env(env.names, env.raw_params, precision, env.blocks_stack, env.depth)
        name = layer.get("name")
        if kind == "residual":
            if name is not None:
                raise SpecError("a residual has no name of its own (its layers are named in the enclosing scope)",
                                self.locate(path + ("name",)), "a name on the layers inside it")
            return self._residual(layer["residual"], path + ("residual",), shape, env)
        if kind == "parallel":
            if name is not None:
                raise SpecError("a parallel has no name of its own (its layers are named in the enclosing scope)",
                                self.locate(path + ("name",)), "a name on the layers inside it")
            return self._parallel(layer["parallel"], path + ("parallel",), shape, env)
        if kind == "sequence":
            return self._scope(name, layer["sequence"], path + ("sequence",), shape, env, where)
        if kind == "block":
            return self._block_use(layer["block"], layer.get("args", {}), name, path, shape, env)
        if kind == "repeat":
            return self._repeat(layer, name, path, shape, env)
        return self._op(kind, layer[kind] or {}, name, path + (kind,), shape, env, where)

    def _op(self, kind, given, name, path, shape, env: _Env, where: Location,
            wiring: Wiring = NO_WIRING) -> tuple[Node, tuple]:
        self.op_count += 1
        if self.op_count > MAX_OP_NODES:
            raise SpecError(f"more than {MAX_OP_NODES} op instances after expanding blocks", where)
        op = OPS[kind]
        if type(op).example_input is not OpDef.example_input and self.op_count > 1 and not self._reads_input(path):
            raise SpecError(f"{kind} reads the model input (e.g. token ids) and must be the first layer", where,
                            f"{kind} as the first layer of the spec, or on a model input (`input:` a name "
                            "from `inputs:`)")
        attrs = self._attrs(op, given, env, path, shape)
        reads: tuple[str, ...] = ()
        value_attrs = [a for a in op.attrs if a.kind in ("values", "value")]
        if value_attrs and wiring is NO_WIRING:
            wiring, reads = self._read_values(op, attrs, value_attrs, path)
        call = OpCall(attrs, shape, env.precision, where, wiring)
        out = tuple(self.dims.canonical(sympy.sympify(d)) for d in op.output_shape(call))
        self.constraints.extend(op.constraints(call))
        node = OpNode(op, call, out, self.table, name or op.default_name, name is not None, self.dims.canonical)
        node.reads = reads
        return node, out

    def _reads_input(self, path: tuple) -> bool:
        """Whether the layer at `path` (an op key's path) reads a model input by `input:`."""
        layer = self.data
        try:
            for key in path[:-1]:
                layer = layer[key]
        except (KeyError, IndexError, TypeError):
            return False
        name = layer.get("input") if isinstance(layer, dict) else None
        ref = self.values.get(name) if isinstance(name, str) else None
        return ref is not None and ref.node is None

    def _read_values(self, op: OpDef, attrs: Attrs, value_attrs, path: tuple) -> tuple[Wiring, tuple[str, ...]]:
        """The wiring of an op whose attributes name other values (`with:`, `kv:`)."""
        names: list[str] = []
        for attr in value_attrs:
            raw = getattr(attrs, attr.name)
            if raw is None:
                continue
            names.extend((raw,) if isinstance(raw, str) else raw)
        if not names and op.name in ("add", "mul", "concat"):
            raise SpecError(f"{op.name} needs 'with': the value(s) to join with the running value",
                            self.locate(path), "with: NAME (a `save:`d value or an `inputs:` name), or a list")
        refs = [self._value(n, path + (value_attrs[0].name,), f"{op.name}") for n in names]
        grads = (GRAD_INPUT,) + tuple(GRAD_YES if r.rg else GRAD_NO for r in refs)
        return Wiring(tuple(r.shape for r in refs), grads), tuple(names)

    def _residual(self, spec, path, shape, env: _Env) -> tuple[Node, tuple]:
        if isinstance(spec, dict):  # {body, shortcut}: body(x) + shortcut(x)
            return self._fork(ParallelNode("residual", self.locate(path)), "residual",
                              [(spec["body"], path + ("body",)), (spec["shortcut"], path + ("shortcut",))],
                              "add", -1, path, shape, env)
        node = ResidualNode("residual", self.locate(path))
        in_rg = self.rg
        out = self._sequence(node, spec, path, shape, _deeper(env), fork="residual")
        if _shape_differs(out, shape):
            raise SpecError(f"residual body changes the shape from {_fmt(shape)} to {_fmt(out)}", self.locate(path),
                            "layers that keep the shape, so x + f(x) is defined, or a `shortcut:` path that "
                            "changes it the same way")
        body_rg = GRAD_YES if any(c.makes_grad for c in node.children) else GRAD_INPUT
        add, _ = self._op("add", {}, None, path, shape, env, self.locate(path),
                          Wiring((out,), (GRAD_INPUT, body_rg), numel(shape)))
        node.children.append(add)
        self.rg = in_rg or node.makes_grad
        return node, shape

    def _parallel(self, spec, path, shape, env: _Env) -> tuple[Node, tuple]:
        branches = [(b, path + ("branches", i)) for i, b in enumerate(spec["branches"])]
        return self._fork(ParallelNode("parallel", self.locate(path)), "parallel branch", branches,
                          spec.get("join", "add"), spec.get("axis", -1), path, shape, env)

    def _fork(self, node: ParallelNode, what: str, branches: list, join: str, axis, path: tuple, shape: tuple,
              env: _Env) -> tuple[Node, tuple]:
        """Branches from one value, each a transparent sequence (empty: the value itself), then the join."""
        in_rg, outs, grads = self.rg, [], []
        for layers, bpath in branches:
            branch = ScopeNode("branch", self.locate(bpath))
            branch.transparent = True
            self.rg = in_rg
            outs.append(self._sequence(branch, layers, bpath, shape, _deeper(env), fork=what.split()[0])
                        if layers else shape)
            grads.append(GRAD_YES if branch.makes_grad else GRAD_INPUT)
            node.children.append(branch)
        wiring = Wiring(tuple(outs[1:]), tuple(grads), (len(branches) - 1) * numel(shape))
        given = {"axis": axis} if join == "concat" else {}
        joined, out = self._op(join, given, None, path, outs[0], env, self.locate(path + ("join",)), wiring)
        node.children.append(joined)
        self.rg = in_rg or node.makes_grad
        self.running = None
        return node, out

    def _scope(self, name, layers, path, shape, env, where) -> tuple[Node, tuple]:
        node = ScopeNode(name or "seq", where, name is not None)
        node.transparent = name is None
        return node, self._sequence(node, layers, path, shape, _deeper(env))

    def _block_env(self, block: str, args: dict, env: _Env, path: tuple) -> tuple[list, tuple, _Env]:
        where = self.locate(path)
        if block not in self.blocks:
            known = ", ".join(sorted(self.blocks)) or "none defined"
            raise SpecError(f"unknown block '{block}'", where, f"a block from blocks: ({known})")
        if block in env.blocks_stack:
            cycle = " -> ".join(env.blocks_stack[env.blocks_stack.index(block):] + (block,))
            raise SpecError(f"blocks use each other in a cycle: {cycle}", where,
                            "blocks that do not contain themselves")
        spec = self.blocks[block]
        layers, params = (spec, {}) if isinstance(spec, list) else (spec["layers"], spec.get("params", {}))
        unknown = set(args) - set(params)
        if unknown:
            raise SpecError(f"block '{block}' has no parameter '{sorted(unknown)[0]}'",
                            self.locate(path[:-1] + ("args", sorted(unknown)[0])),
                            "one of: " + (", ".join(params) or "no parameters"))
        names, raw_params = dict(self.dims.symbols), {}
        for pname, default in params.items():
            given = pname in args
            raw = args[pname] if given else default
            ppath = path[:-1] + ("args", pname) if given else ("blocks", block, "params", pname)
            # Arguments are expressions in the caller's scope; defaults in the dims' scope.
            scope = env.names if given else self.dims.symbols
            value = raw if not isinstance(raw, str) or raw not in env.raw_params else env.raw_params[raw]
            raw_params[pname] = value
            if isinstance(value, bool):
                names[pname] = sympy.true if value else sympy.false
            elif isinstance(value, str) and not _looks_numeric(value, scope):
                pass  # a string parameter (e.g. an activation name), usable by choice attributes
            else:
                names[pname] = parse_expr(raw_params[pname], scope, self.locate(ppath))
            if pname not in names and isinstance(raw_params[pname], str):
                try:  # keep the argument's own error for the place it is used as a number
                    parse_expr(raw_params[pname], scope, self.locate(ppath))
                except SpecError as exc:
                    names[pname] = exc
        inner = _Env(names, raw_params, env.precision, env.blocks_stack + (block,), env.depth + 1)
        return layers, ("blocks", block) if isinstance(spec, list) else ("blocks", block, "layers"), inner

    def _block_use(self, block, args, name, path, shape, env) -> tuple[Node, tuple]:
        layers, bpath, inner = self._block_env(block, args, env, path + ("block",))
        node = ScopeNode(name or block, self.locate(path), name is not None)
        return node, self._sequence(node, layers, bpath, shape, inner)

    def _repeat(self, layer, name, path, shape, env: _Env) -> tuple[Node, tuple]:
        where = self.locate(path)
        times = self._size(layer["repeat"], env, path + ("repeat",), "repeat count")
        if "body" not in layer:
            raise SpecError("a repeat needs a body", where, "body: a block name or a list of layers")
        node = RepeatNode(name or "repeat", where, name is not None, times)
        variants = layer.get("at", [])
        taken: set[int] = set()
        named: dict[str, int] = {}
        for j, variant in enumerate(variants):
            vname = variant.get("name")
            if vname is not None and vname in named:
                raise SpecError(f"two variants are named '{vname}' (the first is at[{named[vname]}])",
                                self.locate(path + ("at", j, "name")), "unique variant names")
            if vname is not None:
                named[vname] = j
            overlap = taken & set(variant["indices"])
            if overlap:
                raise SpecError(f"index {sorted(overlap)[0]} is in two variants",
                                self.locate(path + ("at", j, "indices")))
            taken |= set(variant["indices"])
        if taken:
            largest = max(taken)
            self.constraints.append(Constraint(sympy.Gt(times, largest),
                                               "variant index {i} is not below repeat count {n}",
                                               self.locate(path + ("at",)), {"i": sympy.Integer(largest), "n": times}))
        groups: list[tuple[str, tuple[int, ...] | None, dict, tuple]] = [
                  (variant.get("name") or "[" + ",".join(map(str, variant["indices"])) + "]",
                   tuple(variant["indices"]), {**layer.get("args", {}), **variant.get("args", {})}, path + ("at", j))
                  for j, variant in enumerate(variants)]
        rest = times - len(taken)
        if not (rest.is_number and rest == 0):
            groups.append(("others" if variants else "", None, layer.get("args", {}), path))
        out = None
        outer = (dict(self.values), self.mult, self.rg, self.unsure)
        for label, indices, args, gpath in groups:
            count = sympy.Integer(len(indices)) if indices is not None else rest
            group = GroupNode(label, self.locate(gpath), indices, count)
            body = layer["body"]
            if isinstance(body, str):
                layers, bpath, inner = self._block_env(body, args, env, path + ("body",))
            else:
                if args:
                    raise SpecError("'args' needs a body that names a block", self.locate(path + ("args",)))
                layers, bpath, inner = body, path + ("body",), _deeper(env)
            # values saved in the body are its own (one per instance); it reads the ones saved before it
            self.values, self.mult = dict(outer[0]), outer[1] * count
            self.rg, self.unsure = outer[2], outer[3] or not outer[2]
            pending = len(self.unsure_reads)
            try:
                group_out = self._sequence(group, layers, bpath, shape, inner, fork="repeat body")
            finally:
                self.values, self.mult, self.unsure = outer[0], outer[1], outer[3]
            if len(self.unsure_reads) > pending and group.makes_grad:
                raise self.unsure_reads[pending]
            if not outer[3]:  # a body without parameters: no instance needs a gradient, every read is sure
                del self.unsure_reads[pending:]
            if _shape_differs(group_out, shape):
                raise SpecError(f"a repeated body must keep its input shape {_fmt(shape)}, it gives {_fmt(group_out)}",
                                self.locate(path + ("body",)), "a body whose output can feed its input")
            out = group_out
            node.children.append(group)
        assert out is not None  # a repeat has at least one group (variants, or the others)
        self.rg, self.running = outer[2] or node.makes_grad, None
        return node, out


def _deeper(env: _Env) -> _Env:
    return _Env(env.names, env.raw_params, env.precision, env.blocks_stack, env.depth + 1)


def _looks_numeric(raw: str, scope) -> bool:
    try:
        parse_expr(raw, scope)
        return True
    except SpecError:
        return False


def _shape_differs(a: tuple, b: tuple) -> bool:
    return len(a) != len(b) or any(sympy.simplify(x - y) != 0 for x, y in zip(a, b))


def _fmt(shape: tuple) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _assign_names(scope: Node, prefix: str) -> None:
    """Give every node its dotted name; default names that collide in a scope are numbered."""
    members = list(scope_members(scope))
    seen_explicit: dict[str, Node] = {}
    defaults: dict[str, list[Node]] = {}
    for node in members:
        if node.explicit:
            if node.local in seen_explicit:
                raise SpecError(f"two layers are named '{node.local}' in the same scope", node.loc,
                                "unique layer names")
            seen_explicit[node.local] = node
        else:
            defaults.setdefault(node.local, []).append(node)
    for local, nodes in defaults.items():
        if len(nodes) > 1 or local in seen_explicit:
            for k, node in enumerate(nodes, start=1):
                node.local = f"{local}{k}"
    for node in members:
        node.name = f"{prefix}.{node.local}" if prefix else node.local
        if isinstance(node, RepeatNode):
            for group in node.children:
                group.name = f"{node.name}[{group.local.strip('[]')}]" if node.grouped else node.name
                _assign_names(group, group.name)
        elif isinstance(node, OpNode):
            for part in node.children:
                part.name = f"{node.name}.{part.local}"
        else:
            _assign_names(node, node.name)


def scope_members(scope: Node) -> Iterator[Node]:
    """The nodes named in `scope`: its children, looking through transparent ones (residuals)."""
    for child in scope.children:
        if child.transparent:
            yield from scope_members(child)
        else:
            yield child
