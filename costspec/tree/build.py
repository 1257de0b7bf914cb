"""Validated spec -> model tree: the builder that walks the spec's layers, blocks and compositions.

A `repeat` keeps one body per variant group and multiplies its cost by the group's count; it is
never unrolled. The pieces it uses live beside it: the node types (`tree.nodes`), reading sizes and
attributes (`tree.attributes`), the named values and gradient state (`tree.dataflow`) and the dotted
names (`tree.naming`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

import sympy

from costspec.core.budget import MAX_OP_INSTANCES, check_op_instances
from costspec.core.conventions import Precision
from costspec.core.cost_table import declared_activations
from costspec.core.dims import Dims
from costspec.core.errors import Location, SpecError
from costspec.ops import OPS, spec_ops
from costspec.ops.opdef import GRAD_INPUT, MAX_RANK, NO_WIRING, Constraint, OpCall, OpDef, Wiring
from costspec.spec.schema import COMPOSITION_KEYS
from costspec.tree.attributes import AttributeReader, Env, bind_param
from costspec.tree.dataflow import Dataflow, grad_of, join_wiring
from costspec.tree.naming import assign_names
from costspec.tree.nodes import GroupNode, Node, OpNode, ParallelNode, RepeatNode, ResidualNode, ScopeNode

MAX_TREE_DEPTH = 64  # nested blocks / scopes
AFTER_PROBLEM = " (after an earlier problem in this sequence, which it may follow from)"


class TreeBuilder:
    """Builds the model tree of a validated spec document."""

    def __init__(self, data: dict, locate: Callable[[tuple], Location], dims: Dims,
                 table: Mapping[str, sympy.Expr], collect: list[SpecError] | None = None,
                 reported: frozenset[tuple] = frozenset()):
        self.data, self.locate, self.dims, self.table = data, locate, dims, table
        self.collect = collect  # not None: a bad layer is recorded and the build goes on (costspec check)
        # with `collect`: the paths of layers whose problems the schema check already reported; building
        # them only gives their output shape, and what fails there follows from those problems
        self.reported = reported
        self.unknown: set[sympy.Symbol] = set()  # stand-ins for input sizes that did not read (with collect)
        self.in_shape: tuple = ()
        self.blocks = data.get("blocks", {})
        self.constraints: list[Constraint] = []
        self.op_count = 0
        self.read = AttributeReader(locate, dims, self.constraints, declared_activations(table))
        self.flow = Dataflow(locate)
        self.checkpointed: tuple | None = None  # the spec path of the checkpointed layer being built

    def build(self, precision: Precision) -> tuple[ScopeNode, tuple]:
        check_op_instances(self.data, self.locate(("layers",)))
        env = Env(dict(self.dims.symbols), {}, precision)
        shape = self.in_shape = self._input_shape(self.data["input"], env, ("input",))
        for name, dims in self.data.get("inputs", {}).items():
            self.flow.add_input(name, self._input_shape(dims, env, ("inputs", name)), self.locate(("inputs", name)))
        root = ScopeNode("", self.locate(()))
        shape = self._sequence(root, self.data["layers"], ("layers",), shape, env)
        self.flow.insert_fanouts(self.table, self.dims.canonical)
        assign_names(root, "")
        root.inputs = self.flow.inputs()
        return root, shape

    def _input_shape(self, sizes: list, env: Env, path: tuple) -> tuple:
        """A model input's shape. With `collect`, a size that does not read is recorded and stands in as an
        unknown symbol, so the layers are still checked (what involves it is not)."""
        shape = []
        for i, raw in enumerate(sizes):
            try:
                shape.append(self.read.size(raw, env, path + (i,)))
            except SpecError as exc:
                if self.collect is None:
                    raise
                self.collect.append(exc)
                self.unknown.add(stand_in := sympy.Dummy(f"unknown{len(self.unknown)}", integer=True, positive=True))
                shape.append(stand_in)
        return tuple(shape)

    def _sequence(self, parent: Node, layers: list, path: tuple, shape: tuple, env: Env,
                  fork: str | None = None) -> tuple:
        """Build `layers` in order into `parent`; `fork` names the composition whose branch this is (its
        first layer reads the fork's value)."""
        if env.depth > MAX_TREE_DEPTH:
            raise SpecError(f"layers nested deeper than {MAX_TREE_DEPTH} levels", self.locate(path))
        failed = False
        for i, layer in enumerate(layers):
            reported = self.collect is not None and path + (i,) in self.reported
            constraints_before = len(self.constraints)
            try:
                reads = None
                if isinstance(layer, dict) and "input" in layer:
                    if i == 0 and fork is not None:
                        raise SpecError(f"the first layer of a {fork} reads the {fork}'s input; `input:` cannot "
                                        "change it", self.locate(path + (i, "input")),
                                        f"`input:` on a layer outside the {fork}, or later in it")
                    reads = self.flow.read_input(env.value_name(layer["input"]), path + (i, "input"),
                                                 self.op_count > 0)
                    shape = reads.shape
                before = self.flow.running
                node, shape = self._layer(layer, path + (i,), shape, env)
                node.input_from = reads
                if isinstance(node, OpNode) and not node.op.reads_input(node.call):
                    self.flow.unread(node, before, reads is not None, fork if i == 0 else None, self.op_count > 1,
                                     path + (i,))
                else:
                    self.flow.passed(node, before)
                if "save" in layer:
                    self.flow.save(node, env.value_name(layer["save"]), parent, shape, path + (i, "save"),
                                   env.precision)
            except SpecError as exc:
                if self.collect is None:
                    raise
                # go on with the input shape, so later layers are still checked; what they report may
                # follow from this problem, and says so
                if not reported:
                    self.collect.append(exc if not failed else SpecError(exc.message + AFTER_PROBLEM,
                                                                         exc.location, exc.expected))
                failed = True
                continue
            except (TypeError, KeyError, ValueError, AttributeError, IndexError):
                if not reported:  # a layer the schema check passed is built without these
                    raise
                failed = True  # a layer the schema rejected, whose problems are reported
                continue
            if failed and self.collect is not None:  # its sizes are checked at the shape an earlier problem left
                self.constraints[constraints_before:] = [
                    replace(c, message=c.message + AFTER_PROBLEM) for c in self.constraints[constraints_before:]]
            if "source" in layer:  # the real model's counterpart (validate --against)
                if node.transparent:
                    raise SpecError(f"a {node.kind} has no source of its own", self.locate(path + (i, "source")),
                                    "a source on the layers inside it")
                node.source = (layer["source"],) if isinstance(layer["source"], str) else tuple(layer["source"])
            parent.children.append(node)
        return shape

    def _layer(self, layer: dict, path: tuple, shape: tuple, env: Env) -> tuple[Node, tuple]:
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
        every = self._checkpoint(layer, kind, path)
        if every:
            outer, self.checkpointed = self.checkpointed, path
            try:
                node, shape = self._layer_of(layer, kind, path, shape, env, where)
            finally:
                self.checkpointed = outer
            node.checkpoint = True
            if isinstance(node, RepeatNode):
                node.checkpoint_every = every
            return node, shape
        return self._layer_of(layer, kind, path, shape, env, where)

    def _checkpoint(self, layer: dict, kind: str, path: tuple) -> int:
        """`checkpoint:` on a block use or a repeat: 0 (none), 1 (every instance) or N (`{every: N}`, a repeat's
        instances 0, N, 2N, ...). Refused on other layers and inside a checkpointed block or repeat."""
        value = layer.get("checkpoint", False)
        if value is False:
            return 0
        where = self.locate(path + ("checkpoint",))
        if kind not in ("block", "repeat"):
            raise SpecError(f"'checkpoint' belongs to a block use or a repeat, not to a {kind}", where,
                            "checkpoint: true on the `block:` or `repeat:` layer that holds this one")
        every = 1 if value is True else value["every"]
        if every != 1 and kind != "repeat":
            raise SpecError("checkpoint: {every: N} picks instances of a repeat; a block use has one", where,
                            "checkpoint: true")
        if self.checkpointed is not None:
            outer = self.locate(self.checkpointed)
            raise SpecError(f"a checkpoint inside the checkpointed layer at {outer}: nested checkpoints "
                            "(an inner forward re-run twice) are not modelled", where,
                            "checkpoint on the outer layer or on the inner ones, not both")
        return every

    def _layer_of(self, layer: dict, kind: str, path: tuple, shape: tuple, env: Env,
                  where: Location) -> tuple[Node, tuple]:
        if "precision" in layer:
            env = env.with_precision(Precision.of_spec(layer["precision"], env.precision,
                                                       self.locate(path + ("precision",))))
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

    def _op(self, kind, given, name, path, shape, env: Env, where: Location,
            wiring: Wiring = NO_WIRING) -> tuple[Node, tuple]:
        self.op_count += 1
        if self.op_count > MAX_OP_INSTANCES:  # counted up front (check_op_instances); this holds if that count is low
            raise SpecError(f"more than {MAX_OP_INSTANCES:,} op layers after expanding blocks", where,
                            f"at most {MAX_OP_INSTANCES:,} op layers (repeats count once)")
        op = OPS[kind]
        if len(shape) > MAX_RANK:  # every op alike: a value of more dims is refused where it is read
            raise SpecError(f"{kind} reads a value of rank {len(shape)}, shape {_fmt(shape)}", where,
                            f"at most {MAX_RANK} dims")
        if type(op).example_input is not OpDef.example_input and self.op_count > 1 and not self._reads_input(path):
            raise SpecError(f"{kind} reads the model input (e.g. token ids) and must be the first layer", where,
                            f"{kind} as the first layer of the spec, or on a model input (`input:` a name "
                            "from `inputs:`)")
        attrs = self.read.attrs(op, given, env, path, shape)
        reads: tuple[str, ...] = ()
        value_attrs = [a for a in op.attrs if a.kind in ("values", "value")]
        if value_attrs and wiring is NO_WIRING:
            wiring, reads = self.flow.read_values(op, attrs, value_attrs, path)
        call = OpCall(attrs, shape, env.precision, where, wiring)
        out = tuple(self.dims.canonical(sympy.sympify(d)) for d in op.output_shape(call))
        if len(out) > MAX_RANK:  # and where it is made (a reshape to 7 dims, even as the last layer)
            raise SpecError(f"{kind} gives a value of rank {len(out)}, shape {_fmt(out)}", where,
                            f"at most {MAX_RANK} dims")
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
        ref = self.flow.values.get(name) if isinstance(name, str) else None
        return ref is not None and ref.node is None

    def _residual(self, spec, path, shape, env: Env) -> tuple[Node, tuple]:
        if isinstance(spec, dict):  # {body, shortcut}: body(x) + shortcut(x)
            return self._fork(ParallelNode("residual", self.locate(path)), "residual",
                              [(spec["body"], path + ("body",)), (spec["shortcut"], path + ("shortcut",))],
                              "add", -1, path, shape, env)
        node = ResidualNode("residual", self.locate(path))
        in_rg = self.flow.rg
        out = self._sequence(node, spec, path, shape, env.deeper(), fork="residual")
        if _shape_differs(out, shape):
            raise SpecError(f"residual body changes the shape from {_fmt(shape)} to {_fmt(out)}", self.locate(path),
                            "layers that keep the shape, so x + f(x) is defined, or a `shortcut:` path that "
                            "changes it the same way")
        add, _ = self._op("add", {}, None, path, shape, env, self.locate(path),
                          join_wiring([out], [GRAD_INPUT, grad_of(node)], shape))
        node.children.append(add)
        self.flow.rg = in_rg or node.makes_grad
        return node, shape

    def _parallel(self, spec, path, shape, env: Env) -> tuple[Node, tuple]:
        branches = [(b, path + ("branches", i)) for i, b in enumerate(spec["branches"])]
        return self._fork(ParallelNode("parallel", self.locate(path)), "parallel branch", branches,
                          spec.get("join", "add"), spec.get("axis", -1), path, shape, env)

    def _fork(self, node: ParallelNode, what: str, branches: list, join: str, axis, path: tuple, shape: tuple,
              env: Env) -> tuple[Node, tuple]:
        """Branches from one value, each a transparent sequence (empty: the value itself), then the join."""
        in_rg, outs, grads = self.flow.rg, [], []
        for layers, bpath in branches:
            branch = ScopeNode("branch", self.locate(bpath))
            branch.transparent = True
            self.flow.rg = in_rg
            outs.append(self._sequence(branch, layers, bpath, shape, env.deeper(), fork=what.split()[0])
                        if layers else shape)
            grads.append(grad_of(branch))
            node.children.append(branch)
        given = {"axis": axis} if join == "concat" else {}
        joined, out = self._op(join, given, None, path, outs[0], env, self.locate(path + ("join",)),
                               join_wiring(outs[1:], grads, shape))
        node.children.append(joined)
        self.flow.rg = in_rg or node.makes_grad
        self.flow.running = None
        return node, out

    def _scope(self, name, layers, path, shape, env, where) -> tuple[Node, tuple]:
        node = ScopeNode(name or "seq", where, name is not None)
        node.transparent = name is None
        return node, self._sequence(node, layers, path, shape, env.deeper())

    def _block_env(self, block: str, args: dict[str, tuple[object, tuple]], env: Env,
                   path: tuple) -> tuple[list, tuple, Env]:
        """A block's layers, their spec path, and the scope they see: the dims and the block's parameters.

        `args` maps a parameter to its argument and the argument's spec path. An argument is an expression
        in the scope of the use that writes it (`env`), bound here once: the block's layers, and the uses of
        other blocks inside them, see its value, never its text. A default is read in the dims' scope."""
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
        unknown = sorted(set(args) - set(params))
        if unknown:
            raise SpecError(f"block '{block}' has no parameter '{unknown[0]}'", self.locate(args[unknown[0]][1]),
                            "one of: " + (", ".join(params) or "no parameters"))
        defaults = Env(dict(self.dims.symbols), {}, env.precision)
        names: dict[str, object] = dict(self.dims.symbols)
        values: dict[str, object] = {}
        for pname, default in params.items():
            raw, ppath = args[pname] if pname in args else (default, ("blocks", block, "params", pname))
            bind_param(pname, raw, env if pname in args else defaults, self.locate(ppath), names, values)
        inner = Env(names, values, env.precision, env.blocks_stack + (block,), env.depth + 1)
        return layers, ("blocks", block) if isinstance(spec, list) else ("blocks", block, "layers"), inner

    def _block_use(self, block, args, name, path, shape, env) -> tuple[Node, tuple]:
        given = {p: (raw, path + ("args", p)) for p, raw in args.items()}
        layers, bpath, inner = self._block_env(block, given, env, path + ("block",))
        node = ScopeNode(name or block, self.locate(path), name is not None)
        with self.flow.block_use():
            return node, self._sequence(node, layers, bpath, shape, inner)

    def _repeat(self, layer, name, path, shape, env: Env) -> tuple[Node, tuple]:
        where = self.locate(path)
        times = self.read.size(layer["repeat"], env, path + ("repeat",), "repeat count")
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
        shared = {p: (raw, path + ("args", p)) for p, raw in layer.get("args", {}).items()}
        groups: list[tuple[str, tuple[int, ...] | None, dict, tuple]] = [
                  (variant.get("name") or "[" + ",".join(map(str, variant["indices"])) + "]",
                   tuple(variant["indices"]),
                   {**shared, **{p: (raw, path + ("at", j, "args", p)) for p, raw in variant.get("args", {}).items()}},
                   path + ("at", j))
                  for j, variant in enumerate(variants)]
        rest = times - len(taken)
        if not (rest.is_number and rest == 0):
            groups.append(("others" if variants else "", None, shared, path))
        out = None
        outer = self.flow.outside()
        for label, indices, args, gpath in groups:
            count = sympy.Integer(len(indices)) if indices is not None else rest
            group = GroupNode(label, self.locate(gpath), indices, count)
            body = layer["body"]
            if isinstance(body, str):
                layers, bpath, inner = self._block_env(body, args, env, path + ("body",))
            else:
                if args:
                    raise SpecError("'args' needs a body that names a block", self.locate(path + ("args",)))
                layers, bpath, inner = body, path + ("body",), env.deeper()
            with self.flow.repeat_group(outer, group):
                group_out = self._sequence(group, layers, bpath, shape, inner, fork="repeat body")
            if _shape_differs(group_out, shape):
                raise SpecError(f"a repeated body must keep its input shape {_fmt(shape)}, it gives {_fmt(group_out)}",
                                self.locate(path + ("body",)), "a body whose output can feed its input")
            out = group_out
            node.children.append(group)
        assert out is not None  # a repeat has at least one group (variants, or the others)
        self.flow.rg, self.flow.running = outer.rg or node.makes_grad, None
        return node, out


def _shape_differs(a: tuple, b: tuple) -> bool:
    return len(a) != len(b) or any(sympy.simplify(x - y) != 0 for x, y in zip(a, b))


def _fmt(shape: tuple) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
