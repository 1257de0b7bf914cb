"""Activations torch has no module for, as the cost table counts them: QuickGELU (CLIP) and the
tanh-approximated GELU (`activation` and the MLPs' `fn`)."""
from __future__ import annotations

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
