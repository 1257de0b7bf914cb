"""`MixtureOfExperts`: the `moe` module (router, expert MLPs routed deterministically and balanced,
optional shared experts)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from costspec.nn.autograd import alias
from costspec.nn.mlp import FusedGatedMlp, GatedMlp, Mlp


class MixtureOfExperts(nn.Module):
    """Router (`router`: linear, softmax, top-k, renormalised), expert MLPs (`experts`), optional shared
    MLP (`shared`), and each token's k expert outputs summed with their routing weights (the `moe` op).

    Routing is deterministic and balanced (see costspec/ops/moe.py): the T*k (token, slot) rows are cut
    into E contiguous blocks of floor/ceil(T*k/E) rows, expert e taking block e, at most `capacity` rows
    of it (the rest dropped: zero output). The top-k scores still weight the outputs, so every op of a
    real router runs; only the choice of rows is fixed.
    """

    def __init__(self, dim: int, experts: int, top_k: int, hidden: int, gated: bool, act: Callable[[], nn.Module],
                 bias: bool, renorm: bool, shared_hidden: int = 0, capacity: int | None = None,
                 fused_gate_up: bool = False, shared_gate: bool = False):
        super().__init__()
        self.top_k, self.renorm, self.capacity = top_k, renorm, capacity
        self.router = nn.Linear(dim, experts, bias=False)
        mlp = GatedMlp if gated else Mlp
        expert = FusedGatedMlp if gated and fused_gate_up else mlp
        self.experts = nn.ModuleList(expert(dim, hidden, dim, act(), bias) for _ in range(experts))
        self.shared = mlp(dim, shared_hidden, dim, act(), bias) if shared_hidden else None
        # Qwen2-MoE's shared_expert_gate: sigmoid(x w) scales the shared output per token
        self.shared_gate = nn.Linear(dim, 1, bias=False) if shared_hidden and shared_gate else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., C)
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])  # (T, C)
        t, c = x2.shape
        k, e = self.top_k, len(self.experts)
        probs = torch.softmax(self.router(alias(x2)), dim=-1)  # (T, E)
        w, _ = probs.topk(k, dim=-1)  # (T, k)
        if self.renorm:
            w = w / w.sum(-1, keepdim=True)
        slots = t * k
        xs = x2 if k == 1 else x2[:, None, :].expand(t, k, c).reshape(slots, c)  # (T*k, C), token-major
        bounds = [i * slots // e for i in range(e + 1)]
        pieces = torch.split(xs, [bounds[i + 1] - bounds[i] for i in range(e)])
        outs = []
        for expert, piece in zip(self.experts, pieces):
            kept = piece.shape[0] if self.capacity is None else min(piece.shape[0], self.capacity)
            outs.append(expert(piece[:kept]))
            if kept < piece.shape[0]:
                outs.append(piece.new_zeros(piece.shape[0] - kept, c))  # dropped rows
        ys = torch.cat(outs).view(t, k, c)  # (T, k, C)
        out = (ys * w.unsqueeze(-1)).sum(1)  # (T, C)
        if self.shared is not None:
            shared = self.shared(alias(x2))
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(alias(x2))) * shared
            out = out + shared
        return out.reshape(shape)
