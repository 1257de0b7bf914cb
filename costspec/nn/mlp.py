"""The `mlp` modules: fc1 -> act -> fc2 (`Mlp`), the gated form (`GatedMlp`), and the gated form with
gate and up as one projection (`FusedGatedMlp`, as MoE experts store them)."""
from __future__ import annotations

import torch
import torch.nn as nn

from costspec.nn.autograd import alias


class Mlp(nn.Module):
    """fc1 -> act -> fc2 (the `fc1` / `act` / `fc2` parts of `mlp`)."""

    def __init__(self, dim: int, hidden: int, out: int, act: nn.Module, bias: bool = True):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.act = act
        self.fc2 = nn.Linear(hidden, out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., C)
        return self.fc2(self.act(self.fc1(x)))  # (..., hidden) -> (..., out)


class GatedMlp(nn.Module):
    """down(act(gate(x)) * up(x)) (the `gate` / `up` / `act` / `mul` / `down` parts of a gated `mlp`;
    SwiGLU with SiLU, as Llama's MLP)."""

    def __init__(self, dim: int, hidden: int, out: int, act: nn.Module, bias: bool = True):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=bias)
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.act = act
        self.down = nn.Linear(hidden, out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., C)
        # x feeds two projections: each reads its own alias (see alias); autograd sums their input
        # gradients in this module's scope (the `mul` part's add per element of x).
        h = self.act(self.gate(alias(x))) * self.up(alias(x))  # (..., hidden)
        return self.down(h)  # (..., out)


class FusedGatedMlp(nn.Module):
    """down(act(gate) * up) with gate and up as one projection `gate_up` (dim -> 2*hidden) cut in two, as
    transformers 5 stores MoE experts (gate_up_proj): one GEMM forward, one dX product backward."""

    def __init__(self, dim: int, hidden: int, out: int, act: nn.Module, bias: bool = True):
        super().__init__()
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=bias)
        self.act = act
        self.down = nn.Linear(hidden, out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., C)
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (..., hidden) each
        return self.down(self.act(gate) * up)  # (..., out)
