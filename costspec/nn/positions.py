"""Position modules inside attention: rotary embedding (`Rotary`), SAM's decomposed relative position
bias (`RelPosBias`), and a learned relative-position bias table, T5's or Swin's (`RelBiasTable`)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from costspec.nn.autograd import FanOut


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2021, as in Llama): x*cos + rotate_half(x)*sin on q and k,
    positions 0..S-1. rotate_half(x) = [-x2, x1] is computed as flip([x1, x2]) * [-1, 1], the sign
    folded into the sin table: 2 mul + 1 add per element, forward and backward. `positions`: the position
    of each row when the rows are not 0..S-1 (cross-attention's q and k rows, flattened per head)."""

    def __init__(self, head_dim: int, seq: int, base: float = 10000.0, positions: torch.Tensor | None = None):
        super().__init__()
        half = head_dim // 2
        inv_freq = 1.0 / (base ** (torch.arange(0, half, dtype=torch.float32) / half))
        rows = torch.arange(seq) if positions is None else positions
        freqs = torch.outer(rows.to(torch.float32), inv_freq)  # (rows, d/2)
        self.register_buffer("cos", torch.cat([freqs.cos(), freqs.cos()], -1), persistent=False)  # (S, d)
        self.register_buffer("sin", torch.cat([-freqs.sin(), freqs.sin()], -1), persistent=False)  # (S, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, heads, S, d) or (B, rows, d): q and k together
        swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)  # [x2, x1]
        return x * self.cos + swapped * self.sin


class RelPosBias(nn.Module):
    """SAM's decomposed relative position bias (add_decomposed_rel_pos) for a q_h x q_w token grid:
    bias[q, k] = <q, Rh[qh - kh]> + <q, Rw[qw - kw]>, from tables rel_pos_h (2*q_h-1, d) and
    rel_pos_w (2*q_w-1, d); returned as an additive SDPA mask (B, h, S, S)."""

    def __init__(self, head_dim: int, size: tuple[int, int]):
        super().__init__()
        self.size = size
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * size[0] - 1, head_dim))  # SAM: zero init
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * size[1] - 1, head_dim))
        for axis, n in (("h", size[0]), ("w", size[1])):  # relative coordinate (q - k) + (n - 1)
            coords = torch.arange(n)[:, None] - torch.arange(n)[None, :] + (n - 1)
            self.register_buffer(f"coords_{axis}", coords, persistent=False)

    def forward(self, q: torch.Tensor) -> torch.Tensor:  # q: (B, h, S, d), S = q_h * q_w
        b, h, s, d = q.shape
        qh, qw = self.size
        r_q = q.reshape(b * h, qh, qw, d)
        rh = self.rel_pos_h[self.coords_h]  # (q_h, k_h, d)
        rw = self.rel_pos_w[self.coords_w]  # (q_w, k_w, d)
        # SAM's einsum("bhwc,hkc->bhwk", r_q, Rh) and einsum("bhwc,wkc->bhwk", r_q, Rw), written as the bmm
        # einsum lowers them to (and FlopCounterMode counts), batched over q_h and q_w respectively; as bmm
        # they stay matmuls at any size (einsum turns a contraction over d = 1 into an elementwise product)
        bh = b * h
        rel_h = torch.bmm(r_q.permute(1, 0, 2, 3).reshape(qh, bh * qw, d), rh.transpose(1, 2))  # (q_h, B*h*q_w, k_h)
        rel_h = rel_h.view(qh, bh, qw, -1).permute(1, 0, 2, 3)  # (B*h, q_h, q_w, k_h)
        rel_w = torch.bmm(r_q.permute(2, 0, 1, 3).reshape(qw, bh * qh, d), rw.transpose(1, 2))  # (q_w, B*h*q_h, k_w)
        rel_w = rel_w.view(qw, bh, qh, -1).permute(1, 2, 0, 3)  # (B*h, q_h, q_w, k_w)
        bias = rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]  # (B*h, q_h, q_w, k_h, k_w)
        return bias.reshape(b, h, s, s)


class RelBiasTable(nn.Module):
    """A learned relative-position bias (heads columns) gathered per (query, key) pair: T5's log-bucketed
    distances ("t5", buckets, max_distance; bidirectional, as T5's encoder), Swin's offsets in a
    qh x qw window ("swin", qh, qw), or BEiT's offsets in a qh x qw patch grid after a class token ("beit",
    qh, qw: three more rows for class to patch, patch to class and class to class; T5's decoder buckets one
    direction, `set_tokens(s, bidirectional=False)`). The pair -> row index
    depends on positions only: a buffer.

    A T5 or BEiT table with `readers` hands its bias to that many later layers (T5 computes it in its
    first layer and passes it on, BEiT's shared table once for all): `add_reader` gives each its slot of
    `shared`, filled in every forward."""

    def __init__(self, heads: int, kind: str, a: int, b: int, readers: int = 0):
        super().__init__()
        self.readers, self.linked = readers, 0
        self.shared: tuple[torch.Tensor, ...] = ()
        if kind == "t5":
            rows, self.tokens = a, None
            self.buckets, self.max_distance = a, b
        else:
            rows, self.tokens = (2 * a - 1) * (2 * b - 1), a * b
            coords = torch.stack(torch.meshgrid(torch.arange(a), torch.arange(b), indexing="ij")).flatten(1)
            rel = coords[:, :, None] - coords[:, None, :]  # (2, t, t)
            index = (rel[0] + a - 1) * (2 * b - 1) + rel[1] + b - 1
            if kind == "beit":  # the class token first: its row and column get three rows of their own
                full = torch.full((a * b + 1, a * b + 1), rows, dtype=index.dtype)  # class to patch
                full[1:, 0] = rows + 1  # patch to class
                full[0, 0] = rows + 2  # class to class
                full[1:, 1:] = index
                index, rows, self.tokens = full, rows + 3, a * b + 1
            self.register_buffer("index", index, persistent=False)
        self.table = nn.Parameter(torch.zeros(rows, heads))

    def t5_index(self, s: int, bidirectional: bool = True) -> torch.Tensor:
        """T5's _relative_position_bucket for s positions, as a (s, s) index: bidirectional (the encoder: half
        the buckets per direction) or one-directional (the causal decoder: every bucket for the keys at or
        before the query, the later ones in bucket 0, which the causal mask hides)."""
        rel = torch.arange(s)[None, :] - torch.arange(s)[:, None]  # key - query
        if bidirectional:
            half = self.buckets // 2
            bucket = (rel > 0).long() * half
            n = rel.abs()
        else:
            half, bucket, n = self.buckets, torch.zeros_like(rel), (-rel).clamp(min=0)
        exact = half // 2
        large = exact + (torch.log(n.float().clamp(min=1) / exact) / math.log(self.max_distance / exact)
                         * (half - exact)).long()
        return bucket + torch.where(n < exact, n, large.clamp(max=half - 1))

    def set_tokens(self, s: int, bidirectional: bool = True) -> None:
        self.tokens = s
        self.register_buffer("index", self.t5_index(s, bidirectional), persistent=False)

    def add_reader(self) -> int | None:
        """The slot of `shared` the next reading layer takes, or None when all `readers` are taken."""
        if self.linked >= self.readers:
            return None
        self.linked += 1
        return self.linked - 1

    def forward(self) -> torch.Tensor:
        bias = F.embedding(self.index, self.table)  # (t, t, heads): a gather
        bias = bias.permute(2, 0, 1).unsqueeze(0)  # (1, heads, t, t)
        if self.readers:  # the later layers read their views; their gradients are summed in here
            bias, *rest = FanOut.apply(bias, self.readers)
            self.shared = tuple(rest)
        return bias
