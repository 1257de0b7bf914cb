"""`LoraLinear`: a frozen linear layer with a LoRA adapter, as PEFT's `lora.Linear` runs it (lora_dropout 0):
x W^T + b + (x A^T) B^T * scaling. costspec's generated module puts it in place of the nn.Linear of each
weight GEMM of a layer with `precision: {lora: r}` (costspec.runtime.torch_build). One module with no
submodules, so that the counters' module scopes see the three GEMMs (and, backward, the sum of the two
input gradients) in one place."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

SCALING = 2.0  # lora_alpha / r: its value changes no count (one multiply per output element)


class LoraLinear(nn.Module):
    """The weight and bias of `base` (the weight frozen by the caller), lora_A (r x in), lora_B (out x r)."""

    def __init__(self, base: nn.Linear, rank: int):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, dtype=base.weight.dtype))
        self.lora_B = nn.Parameter(torch.empty(base.out_features, rank, dtype=base.weight.dtype))
        nn.init.normal_(self.lora_A, std=0.02)
        nn.init.zeros_(self.lora_B)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + F.linear(F.linear(x, self.lora_A), self.lora_B) * SCALING
