"""q/k normalisation modules inside attention (`qk_norm`): an RMSNorm or LayerNorm over each head's d
dims (one weight shared by the heads, or one per head as Cohere's (heads, d) weight) or over the whole
projected width (OLMo-2)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class QKNorm:
    """kind: rmsnorm | layernorm; over: head | all; per_head: a (heads, d) weight; bias: LayerNorm's bias."""

    kind: str
    over: str = "head"
    per_head: bool = False
    bias: bool = False

    def make(self, heads: int, head_dim: int) -> nn.Module:
        """The norm of q (heads = query heads) or k (heads = key/value heads)."""
        if self.over == "all":
            width = heads * head_dim
            return nn.RMSNorm(width) if self.kind == "rmsnorm" else nn.LayerNorm(width, bias=self.bias)
        if self.per_head:
            return HeadRMSNorm(heads, head_dim) if self.kind == "rmsnorm" else HeadLayerNorm(heads, head_dim, self.bias)
        return nn.RMSNorm(head_dim) if self.kind == "rmsnorm" else nn.LayerNorm(head_dim, bias=self.bias)


class HeadRMSNorm(nn.RMSNorm):
    """RMSNorm over each head's d dims with a weight per head ((heads, 1, d) on (B, heads, S, d)); an
    nn.RMSNorm, so the counters price its ops as one rmsnorm record."""

    def __init__(self, heads: int, head_dim: int):
        super().__init__(head_dim, elementwise_affine=False)
        self.head_weight = nn.Parameter(torch.ones(heads, 1, head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, heads, S, d)
        return F.rms_norm(x, (x.shape[-1],), None, self.eps) * self.head_weight


class HeadLayerNorm(nn.Module):
    """LayerNorm over each head's d dims with a weight (and bias) per head, as Cohere's q/k norm
    ((heads, 1, d) on (B, heads, S, d)); priced as one layernorm record (attention's runtime
    footprint declares the class)."""

    def __init__(self, heads: int, head_dim: int, bias: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(heads, 1, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads, 1, head_dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, heads, S, d)
        y = F.layer_norm(x, (x.shape[-1],)) * self.weight
        return y + self.bias if self.bias is not None else y
