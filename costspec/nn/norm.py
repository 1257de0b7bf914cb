"""Norm modules torch has none of as the cost table counts them: LayerNorm over the channels of NCHW
(`LayerNorm2d`), batch norm without a batch counter (`BatchNorm`) and ConvNeXt-V2's global response
normalisation (`ConvNextV2GRN`)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm2d(nn.Module):
    """LayerNorm over the channel dim of (B, C, H, W): permute, F.layer_norm (one native_layer_norm
    kernel, as the cost table's `layernorm` kind assumes), permute back."""

    def __init__(self, channels: int, eps: float = 1e-6, affine: bool = True, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels)) if affine else None
        self.bias = nn.Parameter(torch.zeros(channels)) if affine and bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, C, H, W)
        x = x.permute(0, 2, 3, 1)  # (B, H, W, C)
        x = F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)  # (B, C, H, W)


class BatchNorm(nn.Module):
    """F.batch_norm with running-statistics buffers (one native_batch_norm kernel), in train mode (batch
    statistics, running stats updated inside the kernel) or eval mode (running statistics). Unlike
    nn.BatchNorm*d it keeps no num_batches_tracked counter, whose scalar += 1 is no work of the op."""

    def __init__(self, channels: int, eps: float, affine: bool, train: bool):
        super().__init__()
        self.eps, self.train_stats = eps, train
        self.weight = nn.Parameter(torch.ones(channels)) if affine else None
        self.bias = nn.Parameter(torch.zeros(channels)) if affine else None
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, C, ...)
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.train_stats,
                            0.1, self.eps)

    def extra_repr(self) -> str:
        return "train" if self.train_stats else "eval"


class ConvNextV2GRN(nn.Module):
    """Global Response Normalisation on channels-last (B, H, W, C), computed as transformers' ConvNextV2GRN
    computes it; the class carries that name because the runtime counter prices a module as one decomposed
    kind by its class name (`Runtime.decomposed` of the `grn` op), the same for both."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, 1, 1, channels))
        self.bias = nn.Parameter(torch.zeros(1, 1, 1, channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norms = torch.linalg.vector_norm(x, ord=2, dim=(1, 2), keepdim=True)
        normed = norms / (norms.mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * (x * normed) + self.bias + x
