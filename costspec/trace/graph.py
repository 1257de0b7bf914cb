"""One recorded module call -> the layers of its scope (`Seq`), following the dataflow.

Inside a scope the values computed from its input form a graph whose nodes are the calls of its
own code and its submodules' calls. `Compiler.scope` walks it back from the output: a node with
one data input continues a chain; a join (add, mul, cat of two data values) closes the branches
that start at the nearest value all of them pass through (their common dominator): an add with
one branch empty is a `residual`, two non-empty ones a residual with a shortcut, mul and cat a
`parallel` join. A graph that is not built of chains, forks and joins (a value read by two
branches, a second data input) makes the whole scope one gap, with the reason.

Submodules map by their own rules (`leaf`, the patterns of `patterns`), or become scopes in
turn; `nn.Sequential` containers are transparent (their children join the enclosing scope with
paths through the container: `layer1.0`), so that a run of identical children can become a
repeat whose source is the container (`repeats`).
"""
from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Callable

from torch import nn

from costspec.trace import functions
from costspec.trace.ir import Extra, Gap, Layer, Op, Parallel, Residual, Seq
from costspec.trace.leaf import Unmappable, map_leaf
from costspec.trace.record import DATA, Call, Entry, Scope, Value

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Unmapped:
    """Something the importer could not map: where (a module path), what, and why."""

    where: str
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.where or '(model)'}: {self.what}: {self.why}"


class NotSeriesParallel(Exception):
    """The scope's dataflow is not chains, forks and joins."""


def relative(path: str, base: str) -> str:
    return path[len(base) + 1:] if base else path


def layer_name(rel: str) -> str | None:
    """A module's layer name from its path relative to the scope: `conv`, `layers.0` -> `layers_0`."""
    name = rel.replace(".", "_")
    if not _IDENT.match(name) or keyword.iskeyword(name) or name[0].isdigit():
        return None
    return name


def op_name(rel: str) -> str | None:
    """An op's layer name: its attribute's (`conv`); none for a container's numbered child (`stem.0`: the op's
    default name, numbered by costspec), whose `source:` says which it is."""
    return None if rel.rpartition(".")[2].isdigit() else layer_name(rel)


def transparent(module: nn.Module) -> bool:
    """A container whose forward only chains its children (nn.Sequential)."""
    return isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward


def params_of(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


Pattern = Callable[["Compiler", Scope, str], "Layer | None"]


@dataclass
class Compiler:
    """Compiles recorded scopes into layers; collects what it could not map."""

    patterns: list[Pattern] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)
    saved: set[str] = field(default_factory=set)  # value names given so far (model-wide)

    def value_name(self, hint: str) -> str:
        """A model-wide unique name for a saved value."""
        base = layer_name(hint) or "value"
        name, i = base, 2
        while name in self.saved:
            name, i = f"{base}{i}", i + 1
        self.saved.add(name)
        return name

    # -- entries ---------------------------------------------------------------------------------
    def gap(self, where: str, what: str, why: str, out: Value, params: int = 0, base: str = "") -> Gap:
        self.unmapped.append(Unmapped(where, what, why))
        return Gap(name=None, source=relative(where, base) if where and params else None, where=where, what=what,
                   shape=list(out.shape), params=params)

    def module(self, scope: Scope, base: str, named: dict[int, str] | None = None) -> list[Layer]:
        """The layers of a submodule call (relative to the scope at `base`); `named`: its further data
        inputs, saved by the enclosing scope under these names."""
        rel = relative(scope.path, base)
        if scope.leaf:
            try:
                x = next((v.shape for v in scope.inputs if v.kind == DATA), ())
                op = map_leaf(scope.module, (x, scope.outputs[0].shape if scope.outputs else ()))
            except Unmappable as exc:
                return [self.gap(scope.path, scope.cls, str(exc), scope.outputs[0], params_of(scope.module), base)]
            if op is None:
                return []
            op.name, op.source = op_name(rel), rel
            return [op]
        for pattern in self.patterns if not named else []:
            layer = pattern(self, scope, base)
            if layer is not None:
                if layer.source is None:
                    layer.name, layer.source = layer_name(rel), rel
                return [layer]
        seq = self.scope(scope, named=named)
        if isinstance(seq, Gap):
            seq.source = rel if seq.params else None
            return [seq]
        seq.name, seq.source = layer_name(rel), rel
        if len(seq.layers) == 1 and isinstance(seq.layers[0], Op) and seq.layers[0].source is None:
            op = seq.layers[0]  # a module whose code is one function call (an activation class): the op itself
            op.name, op.source = seq.name, seq.source
            return [op]
        return [seq] if seq.layers else []

    def call(self, call: Call, index: int, scope: Scope) -> list[Layer]:
        try:
            return list(functions.map_call(call, index))
        except Unmappable as exc:
            aten = f" ({', '.join(call.aten)})" if call.aten else ""
            return [self.gap(scope.path, f"{call.fn}{aten}", str(exc), call.outputs[index])]

    # -- a scope ---------------------------------------------------------------------------------
    def scope(self, scope: Scope, output: Value | None = None, named: dict[int, str] | None = None) -> Seq | Gap:
        """The layers of `scope`, from its first data input to `output` (default: its first data output);
        `named`: its further data inputs (vid -> the name the enclosing scope saved them under)."""
        start = next((v for v in scope.inputs if v.kind == DATA), None)
        outs = [v for v in scope.outputs if v.kind == DATA]
        end = output or (outs[0] if outs else None)
        if start is None or end is None:
            return self.gap(scope.path, scope.cls, "no data input or output", scope.outputs[0],
                            params_of(scope.module))
        flow = _Flow(self, scope, named or {})
        try:
            layers = flow.path(start, end)
        except NotSeriesParallel as exc:
            return self.gap(scope.path, scope.cls, str(exc), end, params_of(scope.module))
        for entry in flow.unreached():
            self.unmapped.append(Unmapped(getattr(entry, "path", "") or scope.path, _what(entry),
                                          "runs, but its result does not reach the output"))
        rank = len(start.shape)
        width = None if not rank or not start.dtype.is_floating_point else \
            start.shape[1] if rank in (4, 5) else start.shape[-1]
        return Seq(layers=layers, cls=scope.cls, path=scope.path, width=width)


def _what(entry: Entry) -> str:
    return entry.cls if isinstance(entry, Scope) else entry.fn if isinstance(entry, Call) else "?"


class _Flow:
    """The dataflow graph of one scope (its own calls and submodule calls; containers flattened)."""

    def __init__(self, compiler: Compiler, scope: Scope, named: dict[int, str]):
        self.compiler, self.scope, self.named = compiler, scope, named
        self.produced: dict[int, Layer] = {}  # vid -> the layer whose output it is
        self.entries: list[Entry] = []
        self._flatten(scope)
        self.index = {id(e): i for i, e in enumerate(self.entries)}
        self.emitted: set = set()
        self.dominators: dict[int, list[Value]] = {}

    def _flatten(self, scope: Scope) -> None:
        start = next((v for v in self.scope.inputs if v.kind == DATA), None)
        for entry in scope.entries:
            if isinstance(entry, Scope) and not entry.leaf and (transparent(entry.module) or self._joins_input(entry,
                                                                                                        start)):
                self._flatten(entry)
            else:
                self.entries.append(entry)

    @staticmethod
    def _joins_input(entry: Scope, start: Value | None) -> bool:
        """A submodule that reads this scope's input beside another data value (EfficientNet's last block layer
        adds the block's input back): its layers join this scope's, so that the join is a residual here."""
        data = entry.data_inputs
        return start is not None and len(data) >= 2 and any(v is start for v in data)

    def owner(self, value: Value) -> Entry | None:
        """The entry of this scope that produced `value` (a submodule's, for a value made inside it)."""
        entry = value.producer
        while entry is not None and id(entry) not in self.index:
            entry = entry.scope if entry.scope is not entry else None
            if isinstance(entry, Scope) and entry is self.scope:
                return None
        return entry

    def _output_index(self, entry: Entry, value: Value) -> int:
        if isinstance(entry, Call):
            return entry.outputs.index(value) if value in entry.outputs else 0
        return 0

    def dom(self, value: Value, start: Value) -> list[Value]:
        """The values every path from `start` to `value` passes through (`value` last)."""
        if value is start:
            return [value]
        if value.vid in self.dominators:
            return self.dominators[value.vid]
        entry = self.owner(value)
        if entry is None:
            raise NotSeriesParallel(f"{value} does not come from the module's input (a second data input)")
        ins = entry.data_inputs
        common = self.dom(ins[0], start)
        for other in ins[1:]:
            keep = {v.vid for v in self.dom(other, start)}
            common = [v for v in common if v.vid in keep]
        self.dominators[value.vid] = common + [value]
        return self.dominators[value.vid]

    def path(self, start: Value, end: Value) -> list[Layer]:
        """The layers computing `end` from `start` (the last one's output is `end`)."""
        layers = self._path(start, end)
        if layers:
            self.produced[end.vid] = layers[-1]
        return layers

    def _path(self, start: Value, end: Value) -> list[Layer]:
        if end is start:
            return []
        entry = self.owner(end)
        if entry is None:
            raise NotSeriesParallel(f"{end} does not come from {start} (a second data input)")
        index = self._output_index(entry, end)
        key = (id(entry), index) if isinstance(entry, Call) else id(entry)
        if key in self.emitted:
            raise NotSeriesParallel(f"a value of {_what(entry)} is read by two branches that join later")
        self.emitted.add(key)
        ins = [v for v in entry.data_inputs if v.vid not in self.named]
        outside = [v for v in entry.data_inputs if v.vid in self.named]
        if isinstance(entry, Call) and entry.fn in functions.JOINS and len(ins) + len(outside) >= 2:
            if outside:  # a join with a value the enclosing scope saved: `with:` it
                return self._joined(start, ins, entry, [self.named[v.vid] for v in outside])
            merged = space_to_depth(entry, [self.owner(v) for v in ins])
            if merged is not None:  # strided slices of one value, concatenated (Swin's patch merging)
                source, ops = merged
                for v in ins:
                    self.emitted.add((id(self.owner(v)), 0))
                return self.path(start, source) + ops
            fork = [v for v in self.dom(ins[0], start) if all(v in self.dom(o, start) for o in ins[1:])][-1]
            branches = [self.path(fork, v) for v in ins]
            return self.path(start, fork) + [join(entry, branches)]
        if isinstance(entry, Scope) and len(ins) >= 2 and not outside:
            return self._reads_saved(start, entry, ins, end)
        if len(ins) != 1 or outside:
            aten = f" ({', '.join(entry.aten)})" if isinstance(entry, Call) and entry.aten else ""
            raise NotSeriesParallel(f"{_what(entry)}{aten} reads {len(ins) + len(outside)} data values and is not a "
                                    "join the importer knows (add, mul, cat) or part of a recognised attention")
        before = self.path(start, ins[0])
        if isinstance(entry, Scope):
            if entry.leaf or entry.outputs and entry.outputs[0] is end:
                return before + self.compiler.module(entry, self.scope.path)
            return before + self._inner(entry, end)
        assert isinstance(entry, Call)
        return before + self.compiler.call(entry, index, self.scope)

    def _joined(self, start: Value, ins: list[Value], entry: Call, names: list[str]) -> list[Layer]:
        """A join of the running value with values saved outside this scope: add/mul/concat `with:` them."""
        if len(ins) != 1:
            raise NotSeriesParallel(f"{entry.fn} of {len(ins)} values of this module and a value from outside")
        attrs: dict = {"with": names[0] if len(names) == 1 else names}
        if entry.fn == "cat":
            axis = entry.kwargs.get("dim", entry.args[1] if len(entry.args) > 1 else 0)
            attrs["axis"] = int(axis) % len(entry.outputs[0].shape)
        return self.path(start, ins[0]) + [Op(op="concat" if entry.fn == "cat" else entry.fn, attrs=attrs)]

    def _reads_saved(self, start: Value, entry: Scope, ins: list[Value], end: Value) -> list[Layer]:
        """A submodule called with several data values (a U-Net up block's features and skip): the first
        continues the chain; each other one must be computed earlier on it, and is saved by name."""
        before = self.path(start, ins[0])
        named: dict[int, str] = {}
        for value in ins[1:]:
            layer = self._layer_of(value, start)
            if layer is None:
                raise NotSeriesParallel(f"{entry.cls} reads {value}, which no layer before it computes")
            if layer.save is None:
                layer.save = self.compiler.value_name(f"{layer.name or layer.source or 'value'}_out")
            named[value.vid] = layer.save
        if entry.outputs and entry.outputs[0] is not end:
            raise NotSeriesParallel(f"{entry.cls} reads several data values and returns more than one")
        return before + self.compiler.module(entry, self.scope.path, named)

    def _layer_of(self, value: Value, start: Value) -> Layer | None:
        """The layer whose output `value` is (through layers that emit nothing: casts, dropout)."""
        seen = 0
        while value.vid not in self.produced and seen < 64:
            entry = self.owner(value)
            if entry is None or len(entry.data_inputs) != 1 or value is start:
                return None
            value, seen = entry.data_inputs[0], seen + 1
        return self.produced.get(value.vid)

    def _inner(self, entry: Scope, end: Value) -> list[Layer]:
        """A submodule whose used output is not its first: its scope compiled to that output."""
        seq = self.compiler.scope(entry, end)
        rel = relative(entry.path, self.scope.path)
        if isinstance(seq, Gap):
            return [seq]
        seq.name, seq.source = layer_name(rel), rel
        return [seq]

    def unreached(self) -> list[Entry]:
        """Entries with data inputs whose results never reach the output (work the spec would miss)."""
        done = {k if isinstance(k, int) else k[0] for k in self.emitted}
        out = []
        for entry in self.entries:
            if id(entry) in done or not entry.data_inputs:
                continue
            if not any(v.kind == DATA for v in entry.outputs):
                continue  # computes constants (positions, rotary tables) from the data's shape only
            if all(any(o is v for v in entry.inputs) for o in entry.outputs):
                continue  # returns its input (a cast, a drop-path in eval mode)
            if isinstance(entry, Call):
                try:
                    if all(op.op in functions.FREE_OPS for op in functions.map_call(entry, 0)):
                        continue  # a view whose result is unused costs nothing
                except Unmappable:
                    pass
            out.append(entry)
        return out


def join(entry: Call, branches: list[list[Layer]]) -> Layer:
    """add -> residual (with a shortcut when both branches compute); mul, cat -> parallel."""
    if entry.fn == "add" and len(branches) == 2:
        empty = [b for b in branches if not b]
        full = [b for b in branches if b]
        if len(empty) == 1:
            return Residual(body=full[0])
        if not empty:
            body, shortcut = sorted(full, key=len, reverse=True)
            return Residual(body=body, shortcut=shortcut)
    if entry.fn == "cat":
        axis = entry.kwargs.get("dim", entry.args[1] if len(entry.args) > 1 else 0)
        rank = len(entry.outputs[0].shape)
        return Parallel(branches=branches, join="concat", axis=int(axis) % rank)
    if entry.fn == "mul":
        return Parallel(branches=branches, join="mul")
    return Parallel(branches=branches, join="add")


def space_to_depth(entry: Call, owners: list[Entry | None]) -> tuple[Value, list[Layer]] | None:
    """cat([x[:, 0::k, 0::k], x[:, 1::k, 0::k], ...], dim=-1) over every offset of the strided axes: the
    k x k neighbourhoods moved into the last axis, as reshape, permute, reshape (no FLOPs)."""
    if entry.fn != "cat" or any(not isinstance(o, Call) or o.fn != "getitem" for o in owners):
        return None
    calls = [o for o in owners if isinstance(o, Call)]
    source = calls[0].data_inputs[0] if calls[0].data_inputs else None
    rank = len(source.shape) if source is not None else 0
    axis = entry.kwargs.get("dim", entry.args[1] if len(entry.args) > 1 else 0)
    if source is None or int(axis) % rank != rank - 1:
        return None
    offsets, strided, step = set(), None, None
    for call in calls:
        key = call.args[1] if isinstance(call.args[1], tuple) else (call.args[1],)
        if call.data_inputs != [source] or Ellipsis in key or len(key) > rank:
            return None
        axes = tuple(i for i, k in enumerate(key) if isinstance(k, slice) and k != slice(None))
        if any(not isinstance(k, slice) for k in key) or (strided is not None and axes != strided):
            return None
        steps = {key[i].step for i in axes}
        if len(steps) != 1 or (step is not None and steps != {step}) or not axes or rank - 1 in axes:
            return None
        strided, step = axes, steps.pop()
        if not isinstance(step, int) or step < 2 or any(key[i].stop is not None for i in axes):
            return None
        offsets.add(tuple(key[i].start or 0 for i in axes))
    assert strided is not None and step is not None
    if len(offsets) != len(calls) or len(calls) != step ** len(strided) or \
            any(source.shape[i] % step for i in strided):
        return None
    split: list[int] = []
    outer: list[int] = []
    inner: list[int] = []
    for i, n in enumerate(source.shape[:-1]):
        if i in strided:
            outer.append(len(split))
            inner.append(len(split) + 1)
            split += [n // step, step]
        else:
            outer.append(len(split))
            split.append(n)
    order = outer + inner + [len(split)]
    split.append(source.shape[-1])
    sums = Extra("add", "backward", [(len(calls) - 1) * math.prod(source.shape)],
                 f"the {len(calls)} strided slices' gradients, each zero-filled to the full input, are summed "
                 f"({len(calls) - 1} adds per element of the input); the reshape and permute that stand for them "
                 "run no arithmetic")
    return source, [Op(op="reshape", attrs={"shape": split}), Op(op="permute", attrs={"order": order}),
                    Op(op="reshape", attrs={"shape": list(entry.outputs[0].shape)}, extra=[sums],
                       comment="the strided slices concatenated: each neighbourhood moved into the last axis")]
