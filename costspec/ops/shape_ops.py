"""Ops that only move data: `flatten`, `reshape`, `transpose` (no FLOPs, no parameters)."""
from __future__ import annotations

import sympy

from costspec.ops.attrs import Attr
from costspec.ops.opdef import Constraint, OpCall, OpDef, same_size
from costspec.ops.registry import register_op
from costspec.ops.work import Part, Work, numel


def axis_index(call: OpCall, attr: str) -> int:
    rank = len(call.in_shape)
    axis = getattr(call.attrs, attr)
    if not -rank <= axis < rank:
        raise call.fail(f"axis {axis} is out of range for an input of rank {rank}", attr,
                        f"an axis in [{-rank}, {rank - 1}]")
    return axis % rank


class FreeOp(OpDef):
    """An op moving no data: its module returns a view of its input and keeps nothing for backward."""

    saves_nothing = True
    output_view = True

    def view(self, call: OpCall, contiguous):
        """A reshape or flatten views a contiguous input (a contiguous view) and copies a strided one (`copies`; a
        pad always copies)."""
        return sympy.true if contiguous is not sympy.false and self.aliases(call) else None

    def copies(self, call: OpCall, contiguous):
        """A reshape or flatten: where the input is strided (a slice on a later axis, a transpose); an op with a
        view() of its own (a slice, a transpose) never copies."""
        return sympy.Not(contiguous) if type(self).view is FreeOp.view else sympy.false

    def forward(self, call: OpCall):
        return [Part("", Work())]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", Work())]


@register_op
class Flatten(FreeOp):
    """Merge axes start..end into one."""

    name = "flatten"
    doc = "Merge axes start..end into one (torch.flatten); no FLOPs."
    default_name = "flatten"
    attrs = (Attr("start", "axis", "first axis", default=1), Attr("end", "axis", "last axis", default=-1))

    def output_shape(self, call: OpCall):
        start, end = axis_index(call, "start"), axis_index(call, "end")
        if start > end:
            raise call.fail(f"start axis {start} is after end axis {end}", "start")
        shape = call.in_shape
        return shape[:start] + (numel(shape[start:end + 1]),) + shape[end + 1:]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        return nn.Flatten(call.attrs.start, call.attrs.end)


@register_op
class Reshape(FreeOp):
    """View the input with a new shape (one -1 is inferred)."""

    name = "reshape"
    doc = "Reshape to a new shape (one -1 inferred); no FLOPs."
    default_name = "reshape"
    attrs = (Attr("shape", "shape", "the new shape, e.g. [B, S, heads, C/heads]"),)

    def output_shape(self, call: OpCall):
        shape = list(call.attrs.shape)
        total = numel(call.in_shape)
        holes = [i for i, d in enumerate(shape) if d == -1]
        if len(holes) > 1:
            raise call.fail("more than one -1 in shape", "shape")
        if holes:
            known = numel([d for d in shape if d != -1])
            # floor: an integer-valued size sympy can reason about; the element-count constraint
            # rejects shapes that do not divide evenly
            shape[holes[0]] = sympy.floor(sympy.simplify(total / known))
        if same_size(numel(shape), total) is False:
            raise call.fail(f"cannot reshape {len(call.in_shape)}-d input of {total} elements to {shape}", "shape",
                            "a shape with the same number of elements")
        return tuple(shape)

    def constraints(self, call: OpCall):
        """Without a -1, the new shape must hold exactly the input's elements; checked when the dims
        are bound if sympy cannot tell (with a -1, a non-integer inferred size is caught as an output dim)."""
        shape = list(call.attrs.shape)
        total = numel(call.in_shape)
        if any(d == -1 for d in shape):  # the inferred size must come out whole
            known = numel([d for d in shape if d != -1])
            shown = "[" + ", ".join("-1" if d == -1 else f"{{s{i}}}" for i, d in enumerate(shape)) + "]"
            values = {"total": total, **{f"s{i}": d for i, d in enumerate(shape) if d != -1}}
            return [Constraint(sympy.Eq(sympy.Mod(total, known), 0),
                               f"cannot reshape {len(call.in_shape)}-d input of {{total}} elements to {shown}",
                               call.attrs.where("shape"), values, "known sizes that divide the element count")]
        if same_size(numel(shape), total):
            return []
        values = {"total": total, **{f"s{i}": d for i, d in enumerate(shape)}}
        shown = "[" + ", ".join(f"{{s{i}}}" for i in range(len(shape))) + "]"
        return [Constraint(sympy.Eq(numel(shape), total),
                           f"cannot reshape {len(call.in_shape)}-d input of {{total}} elements to {shown}",
                           call.attrs.where("shape"), values, "a shape with the same number of elements")]

    def build(self, call: OpCall, ev):
        from costspec.nn.shape_ops import Reshape as TorchReshape

        out = self.output_shape(call)
        if same_size(out[0], call.in_shape[0]):  # keep the batch dim: the module runs at any batch size
            return TorchReshape([ev(d) for d in out[1:]])
        return TorchReshape([ev(d) for d in out], keep_batch=False)


@register_op
class Transpose(FreeOp):
    """Swap two axes."""

    def view(self, call: OpCall, contiguous):
        return sympy.false  # a strided view

    name = "transpose"
    doc = "Swap two axes (torch.transpose); no FLOPs."
    default_name = "transpose"
    attrs = (Attr("axis0", "axis", "first axis"), Attr("axis1", "axis", "second axis"))

    def output_shape(self, call: OpCall):
        i, j = axis_index(call, "axis0"), axis_index(call, "axis1")
        shape = list(call.in_shape)
        shape[i], shape[j] = shape[j], shape[i]
        return tuple(shape)

    def build(self, call: OpCall, ev):
        from costspec.nn.shape_ops import Transpose as TorchTranspose

        return TorchTranspose(call.attrs.axis0, call.attrs.axis1)
