"""Joins of several values: `add`, `mul` (both broadcasting) and `concat`, and the gradient sum at a
value that feeds several consumers (`fanout`).

A join is written in a spec with `with:` (the running value joined with saved values or model
inputs), and the engine inserts one at the end of every `residual:` and `parallel:` (the branch
outputs). Its backward runs, besides its own gradients, the sum of the branch gradients at the fork
(`Wiring.fanout`): autograd adds the gradients of a tensor used n times, n - 1 adds per element.
"""
from __future__ import annotations

from typing import Sequence

import sympy

from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import Constraint, OpCall, OpDef, Saved, input_tensor, same_size
from costspec.ops.registry import register_op
from costspec.ops.work import ONE, ZERO, Part, Shape, Traffic, Work, numel, pointwise


def _inputs(call: OpCall) -> list[Shape]:
    return [call.in_shape, *call.wiring.extra]


def _describe(shape: Sequence) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def broadcast(shapes: list[Shape], call: OpCall, what: str = "add") -> Shape:
    """The broadcast shape of `shapes` (aligned from the right; a dim of 1 stretches), or a SpecError."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(-rank, 0):
        dims = [s[axis] for s in shapes if len(s) >= -axis]
        sizes = [d for d in dims if not (d.is_number and d == 1)]
        if not sizes:
            out.append(ONE)
            continue
        first = sizes[0]
        if any(same_size(first, d) is False for d in sizes[1:]):
            shown = " and ".join(_describe(s) for s in shapes)
            raise call.fail(f"{what} cannot broadcast {shown}: axis {axis} is "
                            + " vs ".join(str(d) for d in dims), "with",
                            "shapes that agree on every axis, or have 1 there")
        out.append(first)
    return tuple(out)


def _pair_shape(a: Shape, b: Shape) -> Shape:
    """The broadcast shape of two shapes already checked to agree (see broadcast)."""
    rank = max(len(a), len(b))
    a = (ONE,) * (rank - len(a)) + tuple(a)
    b = (ONE,) * (rank - len(b)) + tuple(b)
    return tuple(y if x.is_number and x == 1 else x for x, y in zip(a, b))


def _stretch(shape: Shape, out: Shape) -> sympy.Expr:
    """How many times an input of `shape` is repeated to fill `out`: the product of out's sizes on the
    axes the input lacks or has as 1."""
    missing = len(out) - len(shape)
    factor = sympy.Integer(1)
    for axis, o in enumerate(out):
        d = shape[axis - missing] if axis >= missing else ONE
        if d.is_number and d == 1:
            factor *= o
    return factor


def _reduced(shape: Shape, out: Shape) -> sympy.Expr:
    """1 when autograd sums the gradient of a broadcast input back to its shape, 0 when it does not (the
    stretch is 1, perhaps only at the bound dims: sum_to_size is then a no-op), as an expression."""
    factor = _stretch(shape, out)
    if factor.is_number:
        return sympy.Integer(1 if factor > 1 else 0)
    return sympy.Min(1, factor - 1)


class _Join(OpDef):
    """add / mul / concat of the running value and `with:` values (or of branch outputs)."""

    fusable = True
    kind = ""  # the cost-table kind of one output element of a two-input join

    def _needs(self, call: OpCall, input_grad: bool) -> list[bool]:
        return [call.wiring.needs_grad(i, input_grad) for i in range(len(_inputs(call)))]

    def constraints(self, call: OpCall) -> list[Constraint]:
        """Sizes sympy cannot compare (2*floor(H/2) and H) must agree once the dims are bound."""
        shapes, out = _inputs(call), self.output_shape(call)
        skip = self._free_axis(call, len(out))
        found = []
        for shape in shapes:
            for axis in range(-len(shape), 0):
                if axis + len(out) == skip or (shape[axis].is_number and shape[axis] == 1 and self.name != "concat"):
                    continue
                if same_size(shape[axis], out[axis]) is None:
                    found.append(Constraint(sympy.Eq(shape[axis], out[axis]),
                                            f"{self.name} needs equal sizes on axis {axis}: {{a}} vs {{b}}",
                                            call.attrs.where("with"), {"a": shape[axis], "b": out[axis]},
                                            "values whose sizes agree"))
        return found

    def _free_axis(self, call: OpCall, rank: int) -> int | None:
        return None

    def _fanout(self, call: OpCall, input_grad: bool) -> Work:
        # the fork's input is the running value of the enclosing parallel / residual: it needs a
        # gradient exactly when input_grad says so
        return pointwise("add", call.wiring.fanout) if input_grad and call.wiring.fanout != 0 else Work()


@register_op
class Add(_Join):
    name = "add"
    doc = ("Elementwise sum of the running value and `with:` (saved values or model inputs), broadcasting "
           "(a dim of 1 stretches); n - 1 adds per output element. Also the join that closes every "
           "`residual:` and `parallel:` (x + f(x)).")
    default_name = "add"
    saves_nothing = True  # a sum's backward passes the gradient on
    kind = "add"
    attrs = (Attr("with", "values", "the value(s) added to the running value: names given by `save:` or "
                  "`inputs:`", default=None),)

    def output_shape(self, call: OpCall) -> Shape:
        return broadcast(_inputs(call), call, self.name)

    def forward(self, call: OpCall):
        n = len(_inputs(call))
        return [Part("", pointwise(self.kind, (n - 1) * numel(self.output_shape(call))))]

    def backward(self, call: OpCall, input_grad: bool):
        """The join runs as a chain of binary ops, ((a op b) op c) ...: each one's backward gives each
        side that needs a gradient its own (a product's: the gradient times the other side), summed
        back over the axes that side was broadcast along."""
        work = self._fanout(call, input_grad)
        shapes, needs = _inputs(call), self._needs(call, input_grad)
        left, left_needs = shapes[0], needs[0]
        for right, right_needs in zip(shapes[1:], needs[1:]):
            out = _pair_shape(left, right)
            for side, side_needs in ((left, left_needs), (right, right_needs)):
                if side_needs:
                    work = work + self._side_grad(numel(out))
                    reduced = _reduced(side, out)
                    if reduced != 0:
                        work = work + pointwise("bias_grad", reduced * numel(out))
            left, left_needs = out, left_needs or right_needs
        return [Part("", work)]

    def _side_grad(self, out: sympy.Expr) -> Work:
        return Work()  # a sum's gradient passes through

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion) -> list[Traffic]:
        """Forward: every input read, the output written. Backward: a gradient that passes through
        moves nothing; the fork's sum reads two gradients and writes one per add; an input that needs
        its own kernel (a product's factor, a broadcast sum) reads the output gradient (and the other
        factors) and writes its gradient."""
        if fusion == Fusion.AGGRESSIVE:
            return [Traffic("", ZERO, ZERO)]
        out = numel(self.output_shape(call))
        if pass_ == Phase.FORWARD:
            return [Traffic("", sum((numel(s) for s in _inputs(call)), ZERO), out)]
        fan = call.wiring.fanout if input_grad else ZERO
        reads, writes = 2 * fan, fan
        for shape, needed in zip(_inputs(call), self._needs(call, input_grad)):
            own = self._kernel_share(shape, self.output_shape(call)) if needed else ZERO
            if own != 0:
                reads += own * (out + self._factor_reads(call, shape))
                writes += own * numel(shape)
        return [Traffic("", reads, writes)]

    def _kernel_share(self, shape: Shape, out: Shape) -> sympy.Expr:
        """1 when this input's gradient runs a kernel of its own (0: it passes through), as an expression:
        for a sum, only a broadcast input's (the sum back to its shape)."""
        return _reduced(shape, out)

    def _factor_reads(self, call: OpCall, shape: Shape) -> sympy.Expr:
        return ZERO

    def build(self, call: OpCall, ev):
        from costspec.nn.join import Join

        return Join("add")


@register_op
class Mul(Add):
    name = "mul"
    doc = ("Elementwise product of the running value and `with:`, broadcasting (squeeze-excitation's "
           "x * gate(x)); n - 1 multiplies per output element; the backward multiplies the gradient by the "
           "other inputs for each input that needs one (and sums it back over broadcast axes).")
    default_name = "mul"
    saves_nothing = False

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """((a * b) * c) ...: each product keeps its left side when the right one needs a gradient and its
        right side when the left one does (the partial products are its own tensors)."""
        shapes, needs = _inputs(call), self._needs(call, input_grad)
        b, out = call.precision.bytes_per_element, []
        left, left_shape, left_grad = input_tensor(0), shapes[0], needs[0]
        for k in range(1, len(shapes)):
            if needs[k]:
                out.append(Saved(left, numel(left_shape), b))
            if left_grad:
                out.append(Saved(input_tensor(k), numel(shapes[k]), b))
            left, left_grad = f"product{k}", left_grad or needs[k]
            left_shape = broadcast(shapes[:k + 1], call, self.name)
        return out
    kind = "mul"
    attrs = (Attr("with", "values", "the value(s) multiplied with the running value", default=None),)

    def _side_grad(self, out: sympy.Expr) -> Work:
        return pointwise("mul", out)  # the gradient times the other side

    def _kernel_share(self, shape: Shape, out: Shape) -> sympy.Expr:
        return sympy.Integer(1)  # every factor's gradient is a product

    def _factor_reads(self, call: OpCall, shape: Shape) -> sympy.Expr:
        return sum((numel(s) for s in _inputs(call)), ZERO) - numel(shape)  # the other factors

    def build(self, call: OpCall, ev):
        from costspec.nn.join import Join

        return Join("mul")


@register_op
class Concat(_Join):
    name = "concat"
    doc = ("The running value and `with:` joined along `axis` (all other dims equal): a copy, no FLOPs; "
           "its backward slices the gradient apart (no FLOPs).")
    default_name = "concat"
    saves_nothing = True  # its backward slices the gradient by the sizes
    fusable = False
    attrs = (Attr("with", "values", "the value(s) appended after the running value along `axis`", default=None),
             Attr("axis", "axis", "the axis to join along (negative counts from the end)", default=-1))

    def output_shape(self, call: OpCall) -> Shape:
        shapes = _inputs(call)
        rank = len(shapes[0])
        axis = call.attrs.axis
        if not -rank <= axis < rank:
            raise call.fail(f"axis {axis} is out of range for rank {rank}", "axis", f"-{rank} .. {rank - 1}")
        axis %= rank
        for shape in shapes[1:]:
            if len(shape) != rank or any(same_size(a, b) is False
                                         for i, (a, b) in enumerate(zip(shapes[0], shape)) if i != axis):
                raise call.fail(f"concat along axis {call.attrs.axis} needs the other dims equal: "
                                + " and ".join(_describe(s) for s in shapes), "with",
                                "values of the same rank whose other dims agree")
        return tuple(sum((s[axis] for s in shapes), ZERO) if i == axis else d for i, d in enumerate(shapes[0]))

    def _free_axis(self, call: OpCall, rank: int) -> int | None:
        return call.attrs.axis % rank

    def forward(self, call: OpCall):
        return [Part("", Work())]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", self._fanout(call, input_grad))]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion) -> list[Traffic]:
        out = numel(self.output_shape(call))
        fan = call.wiring.fanout if input_grad else ZERO
        if pass_ == Phase.FORWARD:
            return [Traffic("", out, out)]
        needed = any(self._needs(call, input_grad))
        return [Traffic("", (out if needed else ZERO) + 2 * fan, (out if needed else ZERO) + fan)]

    def build(self, call: OpCall, ev):
        from costspec.nn.join import Join

        return Join("concat", int(call.attrs.axis))


@register_op
class Fanout(OpDef):
    """Where a saved value is read by several layers: autograd's sum of their gradients."""

    name = "fanout"
    doc = ("Inserted after a layer whose output is `save:`d and read more than once: the backward sum of the "
           "gradients of its consumers, (uses - 1) adds per element when the value needs a gradient.")
    default_name = "fanout"
    saves_nothing = True
    output_view = True  # the value itself, read by several layers
    in_spec = False
    fusable = True

    def forward(self, call: OpCall):
        return [Part("", Work())]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", pointwise("add", call.wiring.fanout) if input_grad else Work())]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion) -> list[Traffic]:
        if pass_ == Phase.FORWARD or not input_grad or fusion == Fusion.AGGRESSIVE:
            return [Traffic("", ZERO, ZERO)]
        return [Traffic("", 2 * call.wiring.fanout, call.wiring.fanout)]

    def build(self, call: OpCall, ev):
        from costspec.nn.join import Join

        uses = ev(call.wiring.fanout / numel(call.in_shape)) + 1
        return Join("fanout", uses=uses + 1)  # one alias per consumer, and one for the running value


__all__ = ["Add", "Mul", "Concat", "Fanout", "broadcast"]
