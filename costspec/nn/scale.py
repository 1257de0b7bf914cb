"""Scaling modules: by a constant (`Scale`) and by a learned per-channel gamma (`LayerScale`)."""
from __future__ import annotations

import torch
import torch.nn as nn


class Scale(nn.Module):
    """x * c for a constant c (one aten.mul by a scalar)."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor

    def extra_repr(self) -> str:
        return repr(self.factor)


class LayerScale(nn.Module):
    """x * gamma with gamma (C,) over one axis, `trailing` dims after it (0: the last axis)."""

    def __init__(self, channels: int, trailing: int = 0):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((channels,), 1e-5))
        self.trailing = trailing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma.view(-1, *([1] * self.trailing))
