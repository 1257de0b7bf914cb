"""DeBERTa's relative-position table shared by the layers (`RelEmbeddingTable`) and its disentangled
self-attention (`DisentangledSelfAttention`: content-to-content, content-to-position and
position-to-content scores)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from costspec.nn.autograd import FanOut, alias


class RelEmbeddingTable(nn.Module):
    """The running value passes through; `table` makes the normalised table for `readers` attention layers
    (each takes a slot of `shared` with `add_reader`)."""

    def __init__(self, rows: int, dim: int, norm: bool, readers: int):
        super().__init__()
        self.rows, self.readers, self.linked = rows, readers, 0
        self.table = SharedTable(rows, dim, norm, readers)
        self.shared: tuple[torch.Tensor, ...] = ()

    def add_reader(self) -> int | None:
        if self.linked >= self.readers:
            return None
        self.linked += 1
        return self.linked - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.shared = self.table()
        return x


class SharedTable(nn.Module):
    """A learned (rows, C) table, LayerNorm-ed and handed out as one view per reader; the readers' gradients
    are summed here (FanOut), in this module's backward scope whether or not the running value needs one."""

    def __init__(self, rows: int, dim: int, norm: bool, readers: int):
        super().__init__()
        self.readers, self.norm = readers, norm
        self.weight = nn.Parameter(torch.zeros(rows, dim))
        if norm:
            self.norm_weight = nn.Parameter(torch.ones(dim))
            self.norm_bias = nn.Parameter(torch.zeros(dim))

    def forward(self) -> tuple[torch.Tensor, ...]:
        table = self.weight
        if self.norm:
            table = F.layer_norm(table, (table.shape[-1],), self.norm_weight, self.norm_bias)
        return FanOut.apply(table, self.readers - 1)  # one view per reader


class DisentangledSelfAttention(nn.Module):
    """DeBERTa's disentangled self-attention (B, S, C) -> (B, S, h*d): `q`, `k`, `v`; the table read from a
    RelEmbeddingTable (`source`, set by DisentangledAttention.link) and projected by `k` (c2p) and `q` (p2c)
    themselves (share_att_key) or by `pos_k` / `pos_q`; scores q (k/scale)^T + the gathered c2p and p2c
    products / scale; softmax; AV.

    The bucket of each (query, key) pair is its relative position clamped to the span (DeBERTa-v2/v3 bucket
    them logarithmically first: other rows of the same table, the same cost), as buffers."""

    def __init__(self, dim: int, heads: int, head_dim: int, span: int, c2p: bool, p2c: bool, share: bool,
                 bias: bool, seq: int):
        super().__init__()
        self.heads, self.head_dim, self.span, self.c2p, self.p2c, self.share = heads, head_dim, span, c2p, p2c, share
        inner = heads * head_dim
        self.q = nn.Linear(dim, inner, bias=bias)
        self.k = nn.Linear(dim, inner, bias=bias)
        self.v = nn.Linear(dim, inner, bias=bias)
        if not share:
            if c2p:
                self.pos_k = nn.Linear(dim, inner, bias=bias)
            if p2c:
                self.pos_q = nn.Linear(dim, inner, bias=bias)
        self.scale = (head_dim * (1 + int(c2p) + int(p2c))) ** 0.5
        rel = torch.arange(seq)[:, None] - torch.arange(seq)[None, :]  # i - j
        self.register_buffer("rows", torch.arange(seq)[:, None], persistent=False)
        self.register_buffer("c2p_pos", (rel + span).clamp(0, 2 * span - 1), persistent=False)
        self.register_buffer("p2c_pos", (-rel + span).clamp(0, 2 * span - 1), persistent=False)
        self.source: tuple[RelEmbeddingTable, int] | None = None

    def _heads(self, t: torch.Tensor) -> torch.Tensor:  # (..., n, h*d) -> (..., h, n, d)
        return t.unflatten(-1, (self.heads, self.head_dim)).transpose(-3, -2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, S, C)
        if self.source is None or not self.source[0].shared:
            raise RuntimeError("a disentangled attention layer ran before its relative-position table")
        b, s, _ = x.shape
        # x feeds q, k and v: each reads its own alias (their gradients summed in this module's scope)
        q, k, v = (self._heads(lin(alias(x))) for lin in (self.q, self.k, self.v))  # (B, h, S, d)
        table = self.source[0].shared[self.source[1]][: 2 * self.span]  # (2K, C)
        scores = torch.matmul(q, (k / self.scale).transpose(-1, -2))  # (B, h, S, S)
        if self.c2p:  # q against the table projected by the key projection, at each pair's bucket
            pos_k = self._heads((self.k if self.share else self.pos_k)(alias(table)))  # (h, 2K, d)
            c2p = torch.matmul(q, pos_k.transpose(-1, -2))[:, :, self.rows, self.c2p_pos]  # (B, h, S, S)
            scores = scores + c2p / self.scale
        if self.p2c:  # k against the table projected by the query projection, transposed to (query, key)
            pos_q = self._heads((self.q if self.share else self.pos_q)(alias(table)))  # (h, 2K, d)
            p2c = torch.matmul(k, pos_q.transpose(-1, -2))[:, :, self.rows, self.p2c_pos].transpose(-1, -2)
            scores = scores + p2c / self.scale
        o = torch.matmul(F.softmax(scores, dim=-1), v)  # (B, h, S, d)
        return o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
