"""DeBERTa's relative-position table shared by the layers (`RelEmbeddingTable`) and its disentangled
self-attention (`DisentangledSelfAttention`: content-to-content, content-to-position and
position-to-content scores)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from costspec.nn.autograd import FanOut, alias


class RelEmbeddingTable(nn.Module):
    """The running value passes through `table`, which makes the normalised table for `readers` attention
    layers (each takes a slot of `shared` with `add_reader`)."""

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
        self.shared, x = self.table(x)
        return x


class FanOutWith(torch.autograd.Function):
    """One tensor handed to n + 1 readers (FanOut), and the running value passed through the same node: the
    readers' gradients are summed once the running value's gradient has arrived too, so the sum runs after
    every reader's backward, in the scope of the module that made the table."""

    @staticmethod
    def forward(ctx, table: torch.Tensor, x: torch.Tensor, n: int):
        ctx.set_materialize_grads(False)
        return (*(table.view_as(table) for _ in range(n + 1)), x.view_as(x))

    @staticmethod
    def backward(ctx, *grads):
        *readers, gx = grads
        present = [g for g in readers if g is not None]
        total = present[0] if present else None
        for g in present[1:]:
            total = total + g
        return total, gx, None


class SharedTable(nn.Module):
    """A learned (rows, C) table, LayerNorm-ed and handed out as one view per reader; the readers' gradients
    are summed here. A running value that needs a gradient passes through the same node (FanOutWith), else
    beside it (FanOut): either way the sum and the norm's backward run in this module's backward scope."""

    def __init__(self, rows: int, dim: int, norm: bool, readers: int):
        super().__init__()
        self.readers, self.norm = readers, norm
        self.weight = nn.Parameter(torch.zeros(rows, dim))
        if norm:
            self.norm_weight = nn.Parameter(torch.ones(dim))
            self.norm_bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        table: torch.Tensor = self.weight
        if self.norm:
            table = F.layer_norm(table, (table.shape[-1],), self.norm_weight, self.norm_bias)
        if not x.requires_grad:
            return FanOut.apply(table, self.readers - 1), x  # one view per reader
        *views, x = FanOutWith.apply(table, x, self.readers - 1)
        return tuple(views), x


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

    @staticmethod
    def _repeat(t: torch.Tensor, b: int) -> torch.Tensor:  # (h, 2K, d) -> (B, h, 2K, d), as (B*h, 2K, d)
        return t.repeat(b, 1, 1).view(b, *t.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, S, C)
        if self.source is None or not self.source[0].shared:
            raise RuntimeError("a disentangled attention layer ran before its relative-position table")
        b, s, _ = x.shape
        # x feeds q, k and v: each reads its own alias (their gradients summed in this module's scope)
        q, k, v = (self._heads(lin(alias(x))) for lin in (self.q, self.k, self.v))  # (B, h, S, d)
        table = self.source[0].shared[self.source[1]][: 2 * self.span]  # (2K, C)
        scores = torch.matmul(q, (k / self.scale).transpose(-1, -2))  # (B, h, S, S)
        # the projected table repeated over the batch, as DeBERTa does (its gradient summed back when B > 1)
        if self.c2p:  # q against the table projected by the key projection, at each pair's bucket
            pos_k = self._repeat(self._heads((self.k if self.share else self.pos_k)(alias(table))), b)
            c2p = torch.matmul(q, pos_k.transpose(-1, -2))[:, :, self.rows, self.c2p_pos]  # (B, h, S, S)
            scores = scores + c2p / self.scale
        if self.p2c:  # k against the table projected by the query projection, transposed to (query, key)
            pos_q = self._repeat(self._heads((self.q if self.share else self.pos_q)(alias(table))), b)
            p2c = torch.matmul(k, pos_q.transpose(-1, -2))[:, :, self.rows, self.p2c_pos].transpose(-1, -2)
            scores = scores + p2c / self.scale
        o = torch.matmul(F.softmax(scores, dim=-1), v)  # (B, h, S, d)
        return o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
