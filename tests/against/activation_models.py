"""transformers' activations (ACT2FN) and torch's hard activations in a tiny model, as `validate --against`
targets (package.module:callable): Linear(C, C) -> activation -> Linear(C, 2), one callable per
activation, named by transformers' ACT2FN key (tests/against/test_activation_against.py)."""
from __future__ import annotations

import torch
from torch import nn

# ACT2FN key (or torch class) -> costspec's fn
ACTIVATIONS = {
    "gelu": "gelu", "gelu_new": "gelu_new", "gelu_fast": "gelu_fast", "gelu_pytorch_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu", "silu": "silu", "relu": "relu", "relu2": "squared_relu", "relu6": "relu6",
    "hardswish": "hardswish", "leaky_relu": "leaky_relu", "sigmoid": "sigmoid", "tanh": "tanh",
    "Hardsigmoid": "hardsigmoid", "Hardtanh": "hardtanh",
}


class Tiny(nn.Module):
    def __init__(self, act: nn.Module, c: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(c, c), act, nn.Linear(c, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def _builder(key: str):
    def build(C: int) -> nn.Module:
        if key[0].isupper():  # a torch class transformers has no ACT2FN key for
            return Tiny(getattr(nn, key)(), C)
        from transformers.activations import ACT2FN

        return Tiny(ACT2FN[key], C)

    build.__name__ = key
    return build


for _key in ACTIVATIONS:
    globals()[_key] = _builder(_key)
