"""The activation functions: for each, the cost-table kinds it executes per element (forward and
backward, one kind per aten op PyTorch runs, so that the runtime counter matches them one to one),
its torch module, and the aten ops that module runs; and activations a spec prices itself.

Used by `activation` (ops/pointwise.py) and by the `fn` of mlp and moe.

A spec may price an activation the table lacks: `costs: {my_act: 7, my_act_backward: 12}` declares
the kinds, and `fn: my_act` then runs one `my_act` per element forward and one `my_act_backward`
per element backward. Such an activation has no torch module: building it (`costspec validate`)
is refused with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from costspec.core.errors import SpecError
from costspec.core.vocab import Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import INPUT, OUTPUT, Saved
from costspec.ops.work import Work, pointwise

BACKWARD = "_backward"


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
    options: tuple[str, ...] = ()  # the activation op's attributes its torch class takes (Hardtanh's bounds)
    # what its module keeps for backward, each one tensor of the input's size: "input", "output", or a
    # tensor made inside it (a product's factor, tanh's output) -- autograd's saved tensors, op by op
    saves: tuple[str, ...] = ("input",)


# Backward kinds of the python-level forms are autograd's, op by op: each product x*y gives g*y and g*x
# (2 mul), a product with a constant one scale, tanh one tanh_backward, pow(x, 3) pow(x, 2) * 3 * g
# (square, scale, mul), and each further use of x one add where its gradients meet.
ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(("relu",), ("relu_backward",), "ReLU",
                       (("aten.relu", "relu"), ("aten.threshold_backward", "relu_backward")), saves=("output",)),
    # aten.gelu with approximate='tanh' is counted as gelu_tanh (runtime_count reads the argument)
    "gelu": Activation(("gelu",), ("gelu_backward",), "GELU",
                       (("aten.gelu", "gelu"), ("aten.gelu_backward", "gelu_backward"))),
    "gelu_tanh": Activation(("gelu_tanh",), ("gelu_tanh_backward",), "GELUTanh"),
    # transformers' gelu_new: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))), 8 ops (9 FLOPs, as gelu_tanh).
    # Backward: the outer product (2 mul), *0.5, tanh_backward, *sqrt(2/pi), *0.044715, x^3's square, *3
    # and *g, and x's three uses met with 2 adds: 13 FLOPs (gelu_tanh_backward's fused kernel: 17)
    "gelu_new": Activation(("cube", "scale", "add", "scale", "tanh", "add", "scale", "mul"),
                           ("mul", "mul", "scale", "tanh_backward", "scale", "scale", "square", "scale", "mul",
                            "add", "add"), "NewGELU", saves=("input", "half_x", "one_plus_tanh", "tanh")),
    # transformers' gelu_fast: 0.5*x*(1 + tanh(x*0.7978845608*(1 + 0.044715*x*x))): 9 FLOPs. Backward: the
    # three products' 6 mul, 3 constants' scale, tanh_backward, x's four uses met with 3 adds: 15 FLOPs
    "gelu_fast": Activation(("scale", "scale", "scale", "mul", "add", "mul", "tanh", "add", "mul"),
                            ("mul",) * 6 + ("scale",) * 3 + ("tanh_backward", "add", "add", "add"), "FastGELU",
                            saves=("input", "half_x", "one_plus_tanh", "tanh", "x_scaled", "x_cubic_coef",
                                   "inner")),
    # y = x * s, s = sigmoid(1.702 x). Backward: g*s, g*x, sigmoid_backward, *1.702, and the add of
    # the two paths into dx.
    "quick_gelu": Activation(("scale", "sigmoid", "mul"), ("mul", "mul", "sigmoid_backward", "scale", "add"),
                             "QuickGELU", saves=("input", "sigmoid")),
    "silu": Activation(("silu",), ("silu_backward",), "SiLU",
                       (("aten.silu", "silu"), ("aten.silu_backward", "silu_backward"))),
    "sigmoid": Activation(("sigmoid",), ("sigmoid_backward",), "Sigmoid",
                          (("aten.sigmoid", "sigmoid"), ("aten.sigmoid_backward", "sigmoid_backward")),
                          saves=("output",)),
    "tanh": Activation(("tanh",), ("tanh_backward",), "Tanh",
                       (("aten.tanh", "tanh"), ("aten.tanh_backward", "tanh_backward")), saves=("output",)),
    # nn.ReLU6 is nn.Hardtanh(0, 6): one aten.hardtanh
    "relu6": Activation(("hardtanh",), ("hardtanh_backward",), "ReLU6",
                        (("aten.hardtanh", "hardtanh"), ("aten.hardtanh_backward", "hardtanh_backward"))),
    "hardtanh": Activation(("hardtanh",), ("hardtanh_backward",), "Hardtanh", options=("min_val", "max_val")),
    "hardswish": Activation(("hardswish",), ("hardswish_backward",), "Hardswish",
                            (("aten.hardswish", "hardswish"), ("aten.hardswish_backward", "hardswish_backward"))),
    "hardsigmoid": Activation(("hardsigmoid",), ("hardsigmoid_backward",), "Hardsigmoid",
                              (("aten.hardsigmoid", "hardsigmoid"),
                               ("aten.hardsigmoid_backward", "hardsigmoid_backward"))),
    "leaky_relu": Activation(("leaky_relu",), ("leaky_relu_backward",), "LeakyReLU",
                             (("aten.leaky_relu", "leaky_relu"), ("aten.leaky_relu_backward", "leaky_relu_backward")),
                             options=("negative_slope",)),
    # relu(x)^2 (transformers' relu2): relu, square. Backward: square's pow(y, 1) is a copy, then *2 and *g;
    # relu's threshold_backward
    "squared_relu": Activation(("relu", "square"), ("scale", "mul", "relu_backward"), "SquaredReLU",
                                 saves=("relu",)),
}

ACT_ATTR = Attr("fn", "choice", "activation function, or one the spec's costs: declares (fn: my_act with "
                "costs: {my_act: F, my_act_backward: G})", default="gelu", choices=tuple(ACTIVATIONS), extensible=True)


def custom(fn: str) -> Activation:
    """An activation the spec prices itself: one kind `fn` forward, `fn`_backward backward, no torch module."""
    return Activation((fn,), (fn + BACKWARD,), "")


def activation(fn: str) -> Activation:
    return ACTIVATIONS.get(fn) or custom(fn)


def activation_saved(fn: str, elements, bytes_per_element, inp: str = INPUT, out: str = OUTPUT,
                     prefix: str = "") -> list[Saved]:
    """What activation `fn`'s module keeps for backward (`Activation.saves`), on `elements` elements: its
    input and output are the tensors named `inp` and `out` (an mlp's hidden values), the others its own
    (named `prefix` + their name)."""
    names = {"input": inp, "output": out}
    return [Saved(names.get(t, prefix + t), elements, bytes_per_element) for t in activation(fn).saves]


def activation_work(fn: str, elements, pass_: Phase) -> Work:
    """Work of activation `fn` on `elements` elements in one phase."""
    act = activation(fn)
    kinds = act.forward if pass_ == Phase.FORWARD else act.backward
    work = Work()
    for kind in kinds:
        work = work + pointwise(kind, elements)
    return work


def build_activation(fn: str, options: Mapping[str, Any] | None = None, fail=None):
    """A torch module for activation `fn` (`options`: the activation op's attributes its class takes).
    An activation the spec prices itself has none: `fail(message, expected)` (or a SpecError) says so."""
    import torch.nn as nn

    from costspec.nn import activation as modules

    if fn not in ACTIVATIONS:
        message = (f"activation '{fn}' is priced by the spec's costs: ({fn}, {fn}{BACKWARD}) and has no torch "
                   "module, so the spec cannot be built in torch (validate, torch, ncu)")
        expected = ("a built-in activation (" + ", ".join(ACTIVATIONS) + ") for the torch check, or "
                    "validate --against your own model, where the real activation's ops show beside the spec's "
                    f"{fn} kinds")
        raise fail(message, expected) if fail else SpecError(message, None, expected)
    act = ACTIVATIONS[fn]
    cls = getattr(modules, act.torch_name, None) or getattr(nn, act.torch_name)
    return cls(**{name: (options or {})[name] for name in act.options if name in (options or {})})


def runtime_aten() -> dict[str, str]:
    """aten op -> kind for every activation's module (the activation op's runtime footprint)."""
    return dict(pair for act in ACTIVATIONS.values() for pair in act.aten)
