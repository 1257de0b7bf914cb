"""Layout modules: `Permute`, `Narrow` (`slice`, `chunk`, `split`) and `Pad`."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


class Permute(nn.Module):
    """x.permute(order)."""

    def __init__(self, order: Sequence[int]):
        super().__init__()
        self.order = tuple(order)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(self.order)

    def extra_repr(self) -> str:
        return str(list(self.order))


class Narrow(nn.Module):
    """One piece along an axis (negative): x[..., start:start+length] (`slice`), or piece `index` of
    torch.split(x, sizes, axis) when `sizes` is given (`chunk`, `split`: the split op itself runs)."""

    def __init__(self, axis: int, start: int, length: int, sizes: Sequence[int] | None = None, index: int = 0):
        super().__init__()
        self.axis, self.start, self.length, self.index = axis, start, length, index
        self.sizes = list(sizes) if sizes is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sizes is not None:
            return torch.split(x, self.sizes, dim=self.axis)[self.index]
        return x.narrow(self.axis, self.start, self.length)

    def extra_repr(self) -> str:
        return f"axis={self.axis}, start={self.start}, length={self.length}"


class Pad(nn.Module):
    """F.pad(x, pads, value=value) (constant padding)."""

    def __init__(self, pads: Sequence[int], value: float = 0.0):
        super().__init__()
        self.pads, self.value = list(pads), value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, self.pads, value=self.value)

    def extra_repr(self) -> str:
        return str(self.pads)
