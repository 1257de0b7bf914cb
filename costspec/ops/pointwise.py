"""Pointwise ops: `activation`, `softmax`, `dropout` (the joins `add` / `mul` / `concat` are in join.py)."""
from __future__ import annotations

from dataclasses import dataclass

from costspec.core.vocab import Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import OpCall, OpDef, Runtime
from costspec.ops.registry import register_op
from costspec.ops.work import Part, Work, numel, pointwise


@dataclass(frozen=True)
class Activation:
    """The cost-table kinds one activation executes per element, forward and backward.

    Kinds follow the aten ops PyTorch runs (QuickGELU is three ops: x * sigmoid(1.702 * x)),
    so the runtime counter can match them one to one.
    """

    forward: tuple[str, ...]
    backward: tuple[str, ...]
    torch_name: str  # nn module class, or a costspec.nn.activation class
    aten: tuple[tuple[str, str], ...] = ()  # aten ops its module runs -> cost-table kind


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(("relu",), ("relu_backward",), "ReLU",
                       (("aten.relu", "relu"), ("aten.threshold_backward", "relu_backward"))),
    # aten.gelu with approximate='tanh' is counted as gelu_tanh (runtime_count reads the argument)
    "gelu": Activation(("gelu",), ("gelu_backward",), "GELU",
                       (("aten.gelu", "gelu"), ("aten.gelu_backward", "gelu_backward"))),
    "gelu_tanh": Activation(("gelu_tanh",), ("gelu_tanh_backward",), "GELUTanh"),
    # y = x * s, s = sigmoid(1.702 x). Backward: g*s, g*x, sigmoid_backward, *1.702, and the add of
    # the two paths into dx.
    "quick_gelu": Activation(("scale", "sigmoid", "mul"), ("mul", "mul", "sigmoid_backward", "scale", "add"),
                             "QuickGELU"),
    "silu": Activation(("silu",), ("silu_backward",), "SiLU",
                       (("aten.silu", "silu"), ("aten.silu_backward", "silu_backward"))),
    "sigmoid": Activation(("sigmoid",), ("sigmoid_backward",), "Sigmoid",
                          (("aten.sigmoid", "sigmoid"), ("aten.sigmoid_backward", "sigmoid_backward"))),
    "tanh": Activation(("tanh",), ("tanh_backward",), "Tanh",
                       (("aten.tanh", "tanh"), ("aten.tanh_backward", "tanh_backward"))),
}


def activation_work(fn: str, elements, pass_: Phase) -> Work:
    """Work of activation `fn` on `elements` elements in one phase."""
    act = ACTIVATIONS[fn]
    kinds = act.forward if pass_ == Phase.FORWARD else act.backward
    work = Work()
    for kind in kinds:
        work = work + pointwise(kind, elements)
    return work


def build_activation(fn: str):
    """A torch module for activation `fn`."""
    import torch.nn as nn

    from costspec.nn import activation

    name = ACTIVATIONS[fn].torch_name
    return getattr(activation, name)() if hasattr(activation, name) else getattr(nn, name)()


ACT_ATTR = Attr("fn", "choice", "activation function", default="gelu", choices=tuple(ACTIVATIONS))


@register_op
class ActivationOp(OpDef):
    """An elementwise activation (CUDA-core FLOPs per element from the cost table)."""

    fusable = True
    runtime = Runtime(aten=dict(pair for act in ACTIVATIONS.values() for pair in act.aten))
    name = "activation"
    doc = "Elementwise activation: " + ", ".join(ACTIVATIONS) + " (gelu = exact erf form)."
    default_name = "act"
    attrs = (ACT_ATTR,)

    def forward(self, call: OpCall):
        return [Part("", activation_work(call.attrs.fn, numel(call.in_shape), Phase.FORWARD))]

    def backward(self, call: OpCall, input_grad: bool):
        work = activation_work(call.attrs.fn, numel(call.in_shape), Phase.BACKWARD) if input_grad else Work()
        return [Part("", work)]

    def build(self, call: OpCall, ev):
        return build_activation(call.attrs.fn)


@register_op
class Softmax(OpDef):
    """Softmax over one axis."""

    name = "softmax"
    doc = "Softmax over one axis (default the last)."
    default_name = "softmax"
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
    attrs = (Attr("p", "number", "drop probability (documentation only)", default=0.0),)

    def forward(self, call: OpCall):
        return [Part("", Work())]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", Work())]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        return nn.Dropout(p=0.0)  # identity, so runtime counts match the inference costing
