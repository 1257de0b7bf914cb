"""Pointwise ops: `activation`, `softmax`, `dropout` (the joins `add` / `mul` / `concat` are in join.py)."""
from __future__ import annotations

from costspec.core.vocab import Phase
from costspec.ops.activations import (
    ACT_ATTR,
    ACTIVATIONS,
    activation_saved,
    activation_work,
    build_activation,
    runtime_aten,
)
from costspec.ops.attrs import Attr
from costspec.ops.opdef import OUTPUT, OpCall, OpDef, Runtime, Saved
from costspec.ops.registry import register_op
from costspec.ops.work import Part, Work, numel, pointwise

# the activation op's attributes that only one function reads, with their defaults (torch's)
OPTIONS = {"min_val": ("hardtanh", -1.0), "max_val": ("hardtanh", 1.0), "negative_slope": ("leaky_relu", 0.01)}


@register_op
class ActivationOp(OpDef):
    """An elementwise activation (CUDA-core FLOPs per element from the cost table)."""

    fusable = True
    runtime = Runtime(aten=runtime_aten())
    name = "activation"
    doc = ("Elementwise activation: " + ", ".join(ACTIVATIONS) + " (gelu = exact erf form; gelu_tanh = the tanh "
           "form as one op; gelu_new / gelu_fast = the tanh form as transformers' python-level ops; relu6 = "
           "hardtanh(0, 6); squared_relu = relu(x)^2), or an activation the spec's costs: declares.")
    default_name = "act"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """What the function's aten ops keep (`Activation.saves`): relu, sigmoid, tanh their output, the
        others their input, the python-level GELUs their intermediate factors too."""
        return activation_saved(call.attrs.fn, numel(call.in_shape), call.precision.bytes_per_element)
    attrs = (ACT_ATTR,
             Attr("min_val", "number", "hardtanh's lower bound (fn: hardtanh only)", default=OPTIONS["min_val"][1]),
             Attr("max_val", "number", "hardtanh's upper bound (fn: hardtanh only)", default=OPTIONS["max_val"][1]),
             Attr("negative_slope", "number", "leaky_relu's slope for x < 0 (fn: leaky_relu only)",
                  default=OPTIONS["negative_slope"][1]))

    def output_shape(self, call: OpCall):
        a = call.attrs
        for option, (fn, default) in OPTIONS.items():
            if getattr(a, option) != default and a.fn != fn:
                raise call.fail(f"{option} is an option of fn: {fn}, and this activation is {a.fn}", option,
                                f"fn: {fn} with it, or no {option}")
        if a.fn == "hardtanh" and a.min_val >= a.max_val:
            raise call.fail(f"hardtanh's bounds are empty: min_val {a.min_val} >= max_val {a.max_val}", "max_val",
                            "max_val > min_val")
        return call.in_shape

    def forward(self, call: OpCall):
        return [Part("", activation_work(call.attrs.fn, numel(call.in_shape), Phase.FORWARD))]

    def backward(self, call: OpCall, input_grad: bool):
        work = activation_work(call.attrs.fn, numel(call.in_shape), Phase.BACKWARD) if input_grad else Work()
        return [Part("", work)]

    def build(self, call: OpCall, ev):
        return build_activation(call.attrs.fn, {name: getattr(call.attrs, name) for name in OPTIONS},
                                lambda message, expected: call.fail(message, "fn", expected))


@register_op
class Softmax(OpDef):
    """Softmax over one axis."""

    name = "softmax"
    doc = "Softmax over one axis (default the last)."
    default_name = "softmax"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """Its output (the backward needs the probabilities)."""
        return [Saved(OUTPUT, numel(call.in_shape), call.precision.bytes_per_element)]
    runtime = Runtime(aten={"aten._softmax": "softmax", "aten._safe_softmax": "softmax",
                            "aten._softmax_backward_data": "softmax_backward"})
    attrs = (Attr("axis", "axis", "axis to normalise", default=-1),)

    def output_shape(self, call: OpCall):
        rank, axis = len(call.in_shape), call.attrs.axis
        if not -rank <= axis < rank:
            raise call.fail(f"axis {axis} is out of range for an input of rank {rank}", "axis",
                            f"an axis in [{-rank}, {rank - 1}]")
        return call.in_shape

    def forward(self, call: OpCall):
        return [Part("", pointwise("softmax", numel(call.in_shape)))]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", pointwise("softmax_backward", numel(call.in_shape)) if input_grad else Work())]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        return nn.Softmax(dim=call.attrs.axis)


@register_op
class Dropout(OpDef):
    """Dropout: costed as inference (identity, no FLOPs); training-time masking is not modelled."""

    fusable = True
    name = "dropout"
    doc = "Dropout; costed as at inference (identity: no FLOPs, no parameters)."
    default_name = "drop"
    saves_nothing = True  # its module drops nothing (p = 0: the inference costing), so keeps no mask
    output_view = True  # nn.Dropout(p=0) returns its input
    attrs = (Attr("p", "number", "drop probability (documentation only)", default=0.0),)

    def forward(self, call: OpCall):
        return [Part("", Work())]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", Work())]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        return nn.Dropout(p=0.0)  # identity, so runtime counts match the inference costing
