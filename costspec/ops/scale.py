"""Scaling: `scale` (by a constant expression, no parameters) and `layer_scale` (a learned per-channel
gamma, Touvron et al. 2021 "CaiT"; ConvNeXt, DINOv2)."""
from __future__ import annotations

import sympy

from costspec.core.vocab import Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import INPUT, OpCall, OpDef, Reconcile, Saved
from costspec.ops.registry import register_op
from costspec.ops.work import Part, Work, numel, pointwise


@register_op
class Scale(OpDef):
    """x * c for a constant c (an expression of the dims, e.g. sqrt(C) for Gemma's embeddings)."""

    fusable = True
    name = "scale"
    doc = ("Multiply by a constant: a number or an expression of the dims (`by: sqrt(C)` scales Gemma's "
           "embeddings); one multiply per element, no parameters.")
    default_name = "scale"
    saves_nothing = True  # a product with a constant
    attrs = (Attr("by", "expr", "the constant factor (a number or an expression of the dims)"),)

    def forward(self, call: OpCall):
        return [Part("", pointwise("scale", numel(call.in_shape)))]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", pointwise("scale", numel(call.in_shape)) if input_grad else Work())]

    def build(self, call: OpCall, ev):
        from costspec.nn.scale import Scale as TorchScale

        return TorchScale(_evaluate(call.attrs.by, ev))


def _evaluate(value, ev) -> float:
    """A constant factor at the bound dims: `ev` evaluates integer sizes, so evaluate each free symbol."""
    expr = sympy.sympify(value)
    return float(expr.xreplace({s: ev(s) for s in expr.free_symbols}))


def _axis(call: OpCall) -> int:
    rank, axis = len(call.in_shape), call.attrs.axis
    if not -rank <= axis < rank:
        raise call.fail(f"axis {axis} is out of range for an input of rank {rank}", "axis",
                        f"an axis in [{-rank}, {rank - 1}]")
    return axis % rank


@register_op
class LayerScale(OpDef):
    """x * gamma, gamma a learned vector over one channel axis (the last by default)."""

    fusable = True
    name = "layer_scale"
    doc = ("Learned per-channel scale x * gamma (LayerScale: CaiT, ConvNeXt, DINOv2), gamma over one axis "
           "(default the last); C parameters, one multiply per element.")
    default_name = "ls"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The input (gamma's gradient needs it)."""
        return [Saved(INPUT, numel(call.in_shape), call.precision.bytes_per_element)]
    attrs = (Attr("axis", "axis", "the channel axis gamma runs over", default=-1),)

    def output_shape(self, call: OpCall):
        _axis(call)
        return call.in_shape

    def _channels(self, call: OpCall):
        return call.in_shape[_axis(call)]

    def forward(self, call: OpCall):
        return [Part("", pointwise("mul", numel(call.in_shape)), self._channels(call))]

    def backward(self, call: OpCall, input_grad: bool):
        """dgamma = sum over the broadcast dims of g*x (mul, then bias_grad per element); dx = g*gamma."""
        n = numel(call.in_shape)
        work = pointwise("mul", n) + pointwise("bias_grad", n)
        return [Part("", work + pointwise("mul", n) if input_grad else work)]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """NB: gamma is broadcast as (C, 1, ..., 1) against the dims from its axis on; when the axis is
        the first and the other dims are all 1, autograd's sum of dgamma has nothing to reduce and does
        not run (with dims before the axis it runs even over size-1 dims)."""
        n = numel(call.in_shape)
        if pass_ != Phase.BACKWARD or _axis(call) != 0 or ev(n) != ev(self._channels(call)):
            return []
        return [Reconcile("broadcast-grad-size-1", "", pointwise("bias_grad", sympy.Mul(-1, n)),
                          "gamma covers every element (channels first, the other dims 1): autograd runs no "
                          "reduction for dgamma; costspec counts one addition per element")]

    def build(self, call: OpCall, ev):
        from costspec.nn.scale import LayerScale as TorchLayerScale

        axis = _axis(call)
        return TorchLayerScale(ev(self._channels(call)), len(call.in_shape) - 1 - axis)
