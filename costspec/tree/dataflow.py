"""The dataflow of the model tree: named values (`save:`, `inputs:`), the layers that read them
(`input:`, `with:`, `kv:`), the wiring of joins, the fanout at a value read several times, and the
gradient state of the running value.

A value's `uses` count its consumers per saving instance; one read more than once gets a `fanout` layer
(the backward sum of its consumers' gradients). Inside a repeat, values saved in the body are its own
(one per instance) and it reads the ones saved before it. Inside a block use, a name saved there is the
use's own: reads inside the use see it, and after the use it stays readable until another use of a block
saves the same name (a later read of it is then ambiguous, and refused).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

import sympy

from costspec.core.conventions import Precision
from costspec.core.errors import Location, SpecError
from costspec.ops import OPS
from costspec.ops.attrs import Attr, Attrs
from costspec.ops.opdef import GRAD_INPUT, GRAD_NO, GRAD_YES, OpCall, OpDef, Wiring
from costspec.ops.work import numel
from costspec.tree.nodes import Node, OpNode, ValueRef


def grad_of(node: Node) -> str:
    """The gradient state of a branch's output, for a join's wiring: needs one when the branch has
    parameters, else exactly when its input does."""
    return GRAD_YES if node.makes_grad else GRAD_INPUT


def join_wiring(others: Sequence[tuple], grads: Sequence[str], shape: tuple) -> Wiring:
    """The wiring of a join of branches forked from one value of `shape`: the other branches' outputs,
    every branch's gradient state, and the gradient sum at the fork (one add per element per extra branch)."""
    return Wiring(tuple(others), tuple(grads), len(others) * numel(shape))


@dataclass(frozen=True)
class Outside:
    """The dataflow state outside a repeat, which each of its variant groups starts from."""

    values: dict[str, ValueRef]
    mult: sympy.Expr
    rg: bool
    unsure: bool
    ambiguous: dict[str, list[ValueRef]]
    exported: frozenset[str]


class Dataflow:
    """The named values visible at the layer being built, every saved value, and the running value's state."""

    def __init__(self, locate: Callable[[tuple], Location]):
        self.locate = locate
        self.values: dict[str, ValueRef] = {}
        self.saved: list[ValueRef] = []
        self.mult: sympy.Expr = sympy.Integer(1)  # instances of the layer being built, in the model
        self.rg = False  # whether the running value needs a gradient
        self.running: ValueRef | None = None  # the saved value the running value is, right after a save
        self.unsure = False  # inside a repeat whose first instance's input needs no gradient
        self.unsure_reads: list[SpecError] = []  # reads of values saved there before any gradient, per repeat
        # names several block uses saved (a read is refused), and names a finished block use saved (another
        # use may save them again)
        self.ambiguous: dict[str, list[ValueRef]] = {}
        self.exported: set[str] = set()
        self.block_uses = 0  # block uses being built around the current layer

    def add_input(self, name: str, shape: tuple, where: Location) -> None:
        """A further model input (`inputs:`): a value that needs no gradient."""
        if name in self.values:
            raise SpecError(f"input '{name}' is named twice", where)
        self.values[name] = ValueRef(name, shape, False, where)

    def inputs(self) -> dict[str, ValueRef]:
        """The model inputs, by name."""
        return {name: ref for name, ref in self.values.items() if ref.node is None}

    def read(self, name, path: tuple, what: str) -> ValueRef:
        """The named value a layer reads, counted as one more use of it."""
        where = self.locate(path)
        if isinstance(name, str) and name not in self.values and name in self.ambiguous:
            saves = ", ".join(str(ref.loc) for ref in self.ambiguous[name])
            raise SpecError(f"{what} reads '{name}', which {len(self.ambiguous[name])} block uses save (at {saves}): "
                            "a read after them cannot tell which", where,
                            "the read inside the block use that saves it, or a name per use: a block parameter "
                            "given as the `save:` name (`save: p` with `args: {p: NAME}`)")
        if not isinstance(name, str) or name not in self.values:
            known = ", ".join(sorted(self.values)) or "none saved before this layer"
            raise SpecError(f"{what} reads '{name}', which is not a saved value or model input here", where,
                            f"a name given by `save:` on an earlier layer (not inside a repeat it is outside of) "
                            f"or by `inputs:` ({known})")
        ref = self.values[name]
        if ref.unsure and not ref.rg:  # an error only if the repeat's body has parameters (see repeat_group)
            self.unsure_reads.append(SpecError(
                f"'{name}' is saved inside a repeat whose first instance's input needs no gradient; "
                "costspec cannot yet tell which instances of it need one", where,
                "the read outside such a repeat, or a layer with parameters before the repeat"))
        ref.uses = ref.uses + self.mult / ref.mult
        return ref

    def read_input(self, name, path: tuple, after_ops: bool) -> ValueRef:
        """`input: name`: the running value becomes the named one. `after_ops`: layers were built before
        this one, whose output then must have been saved, or it would never be used."""
        ref = self.read(name, path, "input:")
        if self.running is not None:  # the running value's next consumer is not this layer
            self.running.uses -= 1
            self.running.continued = False
        elif after_ops:
            raise SpecError("this layer reads another value, so the previous layer's output is never "
                            "used", self.locate(path),
                            "`save:` on the previous layer (and a layer that reads it), or no layers "
                            "whose output is dropped")
        self.rg = ref.rg
        return ref

    def passed(self, node: Node, running_before: ValueRef | None) -> None:
        """After a layer: it consumed the running value (unless a layer inside it saved its output), and
        its output needs a gradient once its input or its parameters do."""
        if self.running is running_before:
            self.running = None
        self.rg = self.rg or node.makes_grad

    def unread(self, node: Node, running_before: ValueRef | None, has_input: bool, fork: str | None,
               after_ops: bool, path: tuple) -> None:
        """After a layer that does not read its input (a table computed from its parameters, `add: false`):
        the running value before it is not consumed, so it must be a saved value a later layer reads; the
        layer's output needs a gradient exactly when it has parameters."""
        where = self.locate(path)
        if has_input or fork is not None:
            raise SpecError("this layer does not read its input (its output comes from its parameters alone), so "
                            + ("`input:` gives it nothing" if has_input else f"it cannot start a {fork}"), where,
                            "the layer on its own, after a layer whose output is `save:`d")
        if running_before is None:
            what = "the previous layer's output" if after_ops else "the model's input"
            raise SpecError(f"this layer does not read its input, so {what} is never used", where,
                            "`save:` on the previous layer, and `input:` that name after this one" if after_ops
                            else "a layer that reads the model's input before it")
        running_before.uses -= 1
        running_before.continued = False
        self.running = None
        self.rg = node.makes_grad

    def save(self, node: Node, name, parent: Node, shape: tuple, path: tuple, precision: Precision) -> None:
        """`save: name` on `node` (a child of `parent`): its output is the named value."""
        where = self.locate(path)
        # another block use's name may be saved again inside a block use or a repeat body (each has its own)
        reused = self.block_uses > 0 and (name in self.exported or name in self.ambiguous)
        if name in self.values and not reused:
            first = self.values[name]
            raise SpecError(f"value '{name}' is already named (at {first.loc})", where,
                            "a name not used by another `save:` or `inputs:` in this scope (a name saved inside a "
                            "block is each use's own; to keep the values of several uses apart, give the name "
                            "as a block parameter: `save: p` with `args: {p: NAME}`)")
        if name in self.ambiguous and not reused:
            raise SpecError(f"value '{name}' is already named by {len(self.ambiguous[name])} block uses", where,
                            "a name no block use saved before")
        self.exported.discard(name)
        ref = ValueRef(name, shape, self.rg, where, self.mult, sympy.Integer(1), node, parent, self.unsure,
                       node_precision=precision)
        self.values[name] = ref
        self.saved.append(ref)
        self.running = ref
        node.saves, node.value = name, ref

    def read_values(self, op: OpDef, attrs: Attrs, value_attrs: list[Attr],
                    path: tuple) -> tuple[Wiring, tuple[str, ...]]:
        """The wiring of an op whose attributes name other values (`with:`, `kv:`), and those names."""
        names: list[str] = []
        for attr in value_attrs:
            raw = getattr(attrs, attr.name)
            if raw is None:
                continue
            names.extend((raw,) if isinstance(raw, str) else raw)
        if not names and op.name in ("add", "mul", "concat"):
            raise SpecError(f"{op.name} needs 'with': the value(s) to join with the running value",
                            self.locate(path), "with: NAME (a `save:`d value or an `inputs:` name), or a list")
        refs = [self.read(n, path + (value_attrs[0].name,), f"{op.name}") for n in names]
        grads = (GRAD_INPUT,) + tuple(GRAD_YES if r.rg else GRAD_NO for r in refs)
        return Wiring(tuple(r.shape for r in refs), grads), tuple(names)

    def outside(self) -> Outside:
        return Outside(dict(self.values), self.mult, self.rg, self.unsure, dict(self.ambiguous),
                       frozenset(self.exported))

    @contextmanager
    def block_use(self) -> Iterator[None]:
        """Building one use of a block: the names saved inside it are its own. After it, each stays
        readable (an export) unless an earlier block use's export has that name too: then it is ambiguous."""
        values, ambiguous, exported = dict(self.values), dict(self.ambiguous), set(self.exported)
        self.block_uses += 1
        try:
            yield
        finally:
            self.block_uses -= 1
        new = [(n, [r]) for n, r in self.values.items() if values.get(n) is not r]
        new += [(n, refs) for n, refs in self.ambiguous.items() if ambiguous.get(n) != refs and n not in self.values]
        self.values, self.ambiguous, self.exported = values, ambiguous, exported
        for name, refs in new:
            earlier = [values.pop(name)] if name in values else ambiguous.pop(name, [])
            seen = {id(r) for r in earlier}
            every = earlier + [r for r in refs if id(r) not in seen]
            if len(every) == 1:
                values[name] = every[0]
                exported.add(name)
            else:
                exported.discard(name)
                ambiguous[name] = every

    @contextmanager
    def repeat_group(self, outer: Outside, group: Node) -> Iterator[None]:
        """Building one variant group of a repeat (`group.count` instances) from the state `outer`.

        Its first instance's input may need no gradient while later ones do: a value saved there and read
        is then an error, but only when the body has parameters (else no instance needs a gradient)."""
        self.values, self.mult = dict(outer.values), outer.mult * group.count
        self.ambiguous, self.exported = dict(outer.ambiguous), set(outer.exported)
        self.rg, self.unsure = outer.rg, outer.unsure or not outer.rg
        pending = len(self.unsure_reads)
        self.block_uses += 1  # a body's values are its own: it may save a name block uses saved before it
        try:
            yield
        finally:
            self.block_uses -= 1
            self.values, self.mult, self.unsure = outer.values, outer.mult, outer.unsure
            self.ambiguous, self.exported = dict(outer.ambiguous), set(outer.exported)
        if len(self.unsure_reads) > pending and group.makes_grad:
            raise self.unsure_reads[pending]
        if not outer.unsure:  # a body without parameters: no instance needs a gradient, every read is sure
            del self.unsure_reads[pending:]

    def insert_fanouts(self, table: Mapping[str, sympy.Expr], canonical: Callable[[sympy.Expr], sympy.Expr]) -> None:
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
            fan = OpNode(OPS["fanout"], call, ref.shape, table, f"{ref.name}_fanout", False, canonical)
            fan.saves, fan.value, ref.node.saves, ref.node.value = ref.name, ref, None, None
            ref.parent.children.insert(ref.parent.children.index(ref.node) + 1, fan)
