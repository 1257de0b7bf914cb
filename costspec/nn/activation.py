"""Activations torch has no module for, as the cost table counts them: QuickGELU (CLIP), the
tanh-approximated GELU as one op, and transformers' python-level forms (gelu_new, gelu_fast, relu2),
written exactly as transformers' activations.py runs them so that their aten ops are the same
(`activation` and the MLPs' `fn`)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class QuickGELU(nn.Module):
    """x * sigmoid(1.702 x) (CLIP): three aten ops, mul by a constant, sigmoid, mul."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class GELUTanh(nn.Module):
    """GELU, tanh approximation (one aten.gelu with approximate='tanh')."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


class NewGELU(nn.Module):
    """The tanh GELU as transformers' NewGELUActivation (`gelu_new`: GPT-2, Phi) runs it: eight aten ops,
    pow(x, 3), three multiplications by a constant, two adds, tanh and one product."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class FastGELU(nn.Module):
    """The tanh GELU as transformers' FastGELUActivation (`gelu_fast`) runs it: x^3 written as products."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


class SquaredReLU(nn.Module):
    """relu(x)^2 (Primer; transformers' ReLUSquaredActivation, `relu2`): relu, then torch.square."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.square(F.relu(x))
