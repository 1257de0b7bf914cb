"""`MixtureOfExperts`: the `moe` module (router, expert MLPs routed deterministically and balanced,
optional shared experts), its router variants (`Routing`: softmax, sigmoid or top-k-then-softmax
scores, DeepSeek-V3's score-correction bias and group-limited choice, renormalisation, scaling) and
gpt-oss's clamped SwiGLU expert (`ClampedGluMlp`), each written as transformers runs it so that the
aten ops are the same."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from costspec.nn.autograd import alias
from costspec.nn.mlp import FusedGatedMlp, GatedMlp, Mlp


@dataclass(frozen=True)
class Routing:
    """How the router turns its logits into each token's k weights (the `moe` op's router attributes)."""

    scoring: str = "softmax"  # softmax | sigmoid over the E logits, or topk_softmax: softmax over the top k logits
    renorm: bool = True  # the k weights divided by their sum
    renorm_eps: bool = False  # ... plus a small epsilon (sum + 1e-20, DeepSeek-V3)
    score_bias: bool = False  # experts chosen by score + a per-expert correction bias (a buffer)
    n_group: int = 0  # group-limited choice: the experts in n_group groups, ...
    topk_group: int = 0  # ... the top topk_group groups (by the sum of their two best scores) kept
    scaling: float = 0.0  # routed_scaling_factor: the weights multiplied by it (0: no multiply)
    router_bias: bool = False  # a bias on the router's linear (gpt-oss)

    @property
    def gathers(self) -> bool:
        """The experts are chosen on other values than the weights: the weights are gathered from the scores."""
        return self.score_bias or self.n_group > 0


class ClampedGluMlp(nn.Module):
    """gpt-oss's expert: gate_up (dim -> 2*hidden, gate and up interleaved or concatenated), the gate
    clamped to at most `limit` and the up projection to [-limit, limit], then down(act(gate) * (up + 1))
    (GptOssExperts._apply_gate, with act = x * sigmoid(alpha x): QuickGELU for alpha 1.702); with no
    limit, down(act(gate) * up) on interleaved columns."""

    def __init__(self, dim: int, hidden: int, out: int, act: nn.Module, bias: bool, limit: float, interleaved: bool):
        super().__init__()
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=bias)
        self.act, self.limit, self.interleaved = act, limit, interleaved
        self.down = nn.Linear(hidden, out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., C)
        gate_up = self.gate_up(x)  # (..., 2*hidden)
        if self.interleaved:  # strided slices: their gradients are summed into gate_up's
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        else:
            gate, up = gate_up.chunk(2, dim=-1)
        if self.limit:
            gate = gate.clamp(min=None, max=self.limit)
            up = up.clamp(min=-self.limit, max=self.limit) + 1
        return self.down(up * self.act(gate))  # (..., out)


class MixtureOfExperts(nn.Module):
    """Router (`router`: linear, scores, top-k, renormalised), expert MLPs (`experts`), optional shared
    MLP (`shared`), and each token's k expert outputs summed with their routing weights (the `moe` op).

    Routing is deterministic and balanced (see costspec/ops/moe.py): the T*k (token, slot) rows are cut
    into E contiguous blocks of floor/ceil(T*k/E) rows, expert e taking block e, at most `capacity` rows
    of it (the rest dropped: zero output). The top-k scores still weight the outputs, so every op of a
    real router runs; only the choice of rows is fixed.
    """

    def __init__(self, dim: int, experts: int, top_k: int, hidden: int, gated: bool, act: Callable[[], nn.Module],
                 bias: bool, routing: Routing, shared_hidden: int = 0, capacity: int | None = None,
                 fused_gate_up: bool = False, shared_gate: bool = False,
                 expert: Callable[[], nn.Module] | None = None):
        super().__init__()
        self.top_k, self.routing, self.capacity = top_k, routing, capacity
        self.router = nn.Linear(dim, experts, bias=routing.router_bias)
        if routing.score_bias:  # DeepSeek-V3's e_score_correction_bias: a buffer, updated outside autograd
            self.register_buffer("score_bias", torch.zeros(experts))
        mlp = GatedMlp if gated else Mlp
        kind = FusedGatedMlp if gated and fused_gate_up else mlp
        self.experts = nn.ModuleList((expert or (lambda: kind(dim, hidden, dim, act(), bias)))()
                                     for _ in range(experts))
        self.shared = mlp(dim, shared_hidden, dim, act(), bias) if shared_hidden else None
        # Qwen2-MoE's shared_expert_gate: sigmoid(x w) scales the shared output per token
        self.shared_gate = nn.Linear(dim, 1, bias=False) if shared_hidden and shared_gate else None

    def route(self, logits: torch.Tensor) -> torch.Tensor:
        """(T, E) router logits -> (T, k) routing weights, as the transformers routers compute them
        (Mixtral / Qwen / OLMoE: softmax, top-k; DeepSeek-V3: sigmoid, biased group-limited choice, gather;
        gpt-oss: top-k of the logits, softmax over the k)."""
        r, k = self.routing, self.top_k
        if r.scoring == "topk_softmax":
            top, _ = logits.topk(k, dim=-1)
            return self._scaled(torch.softmax(top, dim=-1))
        scores = torch.softmax(logits, dim=-1) if r.scoring == "softmax" else logits.sigmoid()  # (T, E)
        if not r.gathers:
            w, _ = scores.topk(k, dim=-1)
        else:
            choice = scores + self.score_bias if r.score_bias else scores
            if r.n_group:
                t, e = choice.shape
                groups = choice.view(t, r.n_group, e // r.n_group).topk(2, dim=-1)[0].sum(dim=-1)  # (T, G)
                kept = groups.topk(r.topk_group, dim=-1, sorted=False)[1]
                mask = torch.zeros_like(groups).scatter_(1, kept, 1)
                mask = mask.unsqueeze(-1).expand(t, r.n_group, e // r.n_group).reshape(t, e)
                choice = choice.masked_fill(~mask.bool(), float("-inf"))
            w = scores.gather(1, choice.topk(k, dim=-1, sorted=False)[1])  # (T, k)
        if r.renorm:
            denominator = w.sum(-1, keepdim=True)
            w = w / (denominator + 1e-20 if r.renorm_eps else denominator)
        return self._scaled(w)

    def _scaled(self, w: torch.Tensor) -> torch.Tensor:
        return w * self.routing.scaling if self.routing.scaling else w

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., C)
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])  # (T, C)
        t, c = x2.shape
        k, e = self.top_k, len(self.experts)
        w = self.route(self.router(alias(x2)))  # (T, k)
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
