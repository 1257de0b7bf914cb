"""`Mean`: the module of the `mean` and `global_avg_pool` ops."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn


class Mean(nn.Module):
    """x.mean(axes, keepdim) (the `mean` and `global_avg_pool` ops)."""

    def __init__(self, axes: Sequence[int], keepdim: bool = False):
        super().__init__()
        self.axes, self.keepdim = tuple(axes), keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(self.axes, keepdim=self.keepdim)

    def extra_repr(self) -> str:
        return f"{list(self.axes)}, keepdim={self.keepdim}"
