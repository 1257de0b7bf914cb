"""The parameter tensors of the module generated from a spec (name, shape, trainable), built on the
meta device (nothing allocated): what the optimizers whose state depends on each tensor's shape need
(`costspec.analysis.memory_optim`). A weight two layers share is one tensor."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import sympy

from costspec.analysis.memory_optim import ParamTensor
from costspec.runtime.torch_build import build_module, import_torch

if TYPE_CHECKING:
    from costspec.tree.network import Network


def parameter_tensors(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer]) -> list[ParamTensor]:
    """Every parameter tensor of `model`'s module at `values`, once, in module order."""
    torch = import_torch("reading the shapes of a model's parameter tensors")
    with torch.device("meta"):
        module, _ = build_module(model, values)
    return [ParamTensor(name, tuple(int(d) for d in p.shape), p.requires_grad)
            for name, p in module.named_parameters()]


__all__ = ["parameter_tensors"]
