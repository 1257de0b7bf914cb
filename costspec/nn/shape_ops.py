"""Shape modules: `Reshape` and `Transpose`."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn


class Reshape(nn.Module):
    """View as (B, *shape), keeping the input's batch dim B; or as `shape` when keep_batch is False
    (a reshape that changes the leading dim, e.g. [B, S, C] -> [B*S, C])."""

    def __init__(self, shape: Sequence[int], keep_batch: bool = True):
        super().__init__()
        self.shape, self.keep_batch = tuple(int(d) for d in shape), keep_batch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape) if self.keep_batch else x.reshape(self.shape)

    def extra_repr(self) -> str:
        return ", ".join(("B",) * self.keep_batch + tuple(map(str, self.shape)))


class Transpose(nn.Module):
    """Swap two axes."""

    def __init__(self, axis0: int, axis1: int):
        super().__init__()
        self.axis0, self.axis1 = axis0, axis1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(self.axis0, self.axis1)

    def extra_repr(self) -> str:
        return f"{self.axis0}, {self.axis1}"
