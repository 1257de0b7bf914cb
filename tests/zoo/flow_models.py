"""Small torch modules for `validate --against` tests of the dataflow specs (tests/zoo/test_flow.py)."""
from __future__ import annotations

import torch
from torch import nn


class _Projected(nn.Module):
    """A block whose shortcut projects: body(x) + proj(x) (ResNet's first block of a stage)."""

    def __init__(self, c: int, d: int):
        super().__init__()
        self.body = nn.Conv2d(c, d, 1, bias=False)
        self.proj = nn.Conv2d(c, d, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + self.proj(x)


class _Identity(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.conv = nn.Conv2d(d, d, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x)


class _Stage(nn.Module):
    """All blocks in one list, the projecting one first (transformers' ResNetStage.layers)."""

    def __init__(self, c: int, d: int, n: int):
        super().__init__()
        self.layers = nn.Sequential(_Projected(c, d), *[_Identity(d) for _ in range(n - 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class _Net(nn.Module):
    def __init__(self, c: int, d: int, n: int):
        super().__init__()
        self.stage = _Stage(c, d, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage(x)


def stage(C: int, D: int, N: int) -> nn.Module:
    return _Net(C, D, N)
