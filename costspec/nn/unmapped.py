"""The module of the `unmapped` op: the output shape from the input, with no arithmetic."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Unmapped(nn.Module):
    """The input's elements cut or zero-padded to `shape` (views, a slice, a pad: no FLOPs), and `params`
    parameters (counted, as the real module's are), joined to the output as an empty slice: the output
    then needs a gradient, as the real module's does, with no arithmetic."""

    def __init__(self, shape: list[int], params: int):
        super().__init__()
        self.shape = list(shape)
        self.weight = nn.Parameter(torch.zeros(params)) if params else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1)
        n = 1
        for size in self.shape:
            n *= size
        flat = flat[:n] if flat.numel() >= n else F.pad(flat, (0, n - flat.numel()))
        if self.weight is not None:
            flat = torch.cat([flat, self.weight[:0].to(flat.dtype)])
        return flat.reshape(self.shape)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, params={self.weight.numel() if self.weight is not None else 0}"
