"""Small nn.Modules the op builders return, and the containers `torch_build` assembles them in.

Imported only by op `build()` methods and `torch_build` (torch stays out of eval/check). Each
module computes exactly the work its op definition costs, with the aten ops the runtime
counter maps to cost-table kinds; shape comments use the op's names (B, S, C, h, d).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


def _alias(x: torch.Tensor) -> torch.Tensor:
    """A view of `x` with its own autograd node.

    Where one tensor feeds several modules, each consumer gets its own alias, so that torch's
    ModuleTracker (used by FlopCounterMode) closes each consumer's backward scope as soon as
    that consumer's own input gradient is done, instead of when the summed gradient is.
    """
    return x.view_as(x)


# ----------------------------------------------------------------------------------------------
# Op modules
# ----------------------------------------------------------------------------------------------
class PatchEmbed(nn.Module):
    """Image -> tokens: conv with kernel = stride = patch, flattened; optional class token and
    learned position embedding (the `proj` / `cls_token` / `pos_embed` parts of `patch_embed`)."""

    def __init__(self, in_chans: int, dim: int, patch: int, num_patches: int, cls_token: bool, pos_embed: bool,
                 bias: bool = True):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch, bias=bias)
        tokens = num_patches + (1 if cls_token else 0)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if cls_token else None
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, dim)) if pos_embed else None
        for p in (self.cls_token, self.pos_embed):
            if p is not None:
                if not p.is_meta:  # (on meta, normal_ would import torch._dynamo: 1 s)
                    nn.init.normal_(p, std=0.02)  # as in ViT / timm

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, Cin, H, W)
        x = self.proj(x)  # (B, dim, H/p, W/p)
        x = x.flatten(2).transpose(1, 2)  # (B, N, dim), N = (H/p)*(W/p)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, N+1, dim)
        if self.pos_embed is not None:
            x = x + self.pos_embed  # (B, S, dim), the (1, S, dim) embedding broadcast over B
        return x


def window_partition(x: torch.Tensor, window: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, H, W, C) -> (B * windows, w*w, C), zero-padding the grid at the bottom / right to a multiple
    of w first, as SAM's window_partition does; returns the padded grid (Hp, Wp) too."""
    b, h, w, c = x.shape
    pad_h, pad_w = (window - h % window) % window, (window - w % window) % window
    if pad_h or pad_w:
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))  # (B, Hp, Wp, C)
    hp, wp = h + pad_h, w + pad_w
    x = x.view(b, hp // window, window, wp // window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, window * window, c), (hp, wp)  # (B*nW, w*w, C)


def window_unpartition(x: torch.Tensor, window: int, padded: tuple[int, int], grid: tuple[int, int],
                       b: int) -> torch.Tensor:
    """(B * windows, w*w, C) -> (B, H*W, C): reassemble the padded grid and crop the padding."""
    (hp, wp), (h, w) = padded, grid
    x = x.view(b, hp // window, wp // window, window, window, -1).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(b, hp, wp, -1)[:, :h, :w, :]  # (B, H, W, C)
    return x.reshape(b, h * w, -1)


def shift_window_mask(grid: tuple[int, int], window: int, shift: int) -> torch.Tensor:
    """Swin's attention mask for windows of a grid rolled by -shift: (windows, w*w, w*w), 0 between
    tokens of one region of the unrolled grid, -100 between tokens of different regions."""
    regions = torch.zeros(1, *grid, 1)
    count = 0
    for hs in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
        for ws in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
            regions[:, hs, ws, :] = count
            count += 1
    labels = window_partition(regions, window)[0].squeeze(-1)  # (windows, w*w)
    diff = labels[:, None, :] - labels[:, :, None]
    return torch.zeros_like(diff).masked_fill(diff != 0, -100.0)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2021, as in Llama): x*cos + rotate_half(x)*sin on q and k,
    positions 0..S-1. rotate_half(x) = [-x2, x1] is computed as flip([x1, x2]) * [-1, 1], the sign
    folded into the sin table: 2 mul + 1 add per element, forward and backward."""

    def __init__(self, head_dim: int, seq: int, base: float = 10000.0):
        super().__init__()
        half = head_dim // 2
        inv_freq = 1.0 / (base ** (torch.arange(0, half, dtype=torch.float32) / half))
        freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)  # (S, d/2)
        self.register_buffer("cos", torch.cat([freqs.cos(), freqs.cos()], -1), persistent=False)  # (S, d)
        self.register_buffer("sin", torch.cat([-freqs.sin(), freqs.sin()], -1), persistent=False)  # (S, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, heads, S, d), q and k heads together
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


class _FanOut(torch.autograd.Function):
    """One tensor handed to n + 1 readers (views); the backward sums their gradients here, where the
    tensor was made: n adds per element (a reader whose output went unused contributes nothing)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, n: int):
        ctx.set_materialize_grads(False)
        return tuple(x.view_as(x) for _ in range(n + 1))

    @staticmethod
    def backward(ctx, *grads):
        present = [g for g in grads if g is not None]
        total = present[0] if present else None
        for g in present[1:]:
            total = total + g
        return total, None


class RelBiasTable(nn.Module):
    """A learned relative-position bias (heads columns) gathered per (query, key) pair: T5's log-bucketed
    distances ("t5", buckets, max_distance; bidirectional, as T5's encoder) or Swin's offsets in a
    qh x qw window ("swin", qh, qw). The pair -> row index depends on positions only: a buffer.

    A T5 table with `readers` hands its bias to that many later layers (T5 computes it in its first
    layer and passes it on): `add_reader` gives each its slot of `shared`, filled in every forward."""

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
            self.register_buffer("index", (rel[0] + a - 1) * (2 * b - 1) + rel[1] + b - 1, persistent=False)
        self.table = nn.Parameter(torch.zeros(rows, heads))

    def t5_index(self, s: int) -> torch.Tensor:
        """T5's _relative_position_bucket (bidirectional) for s positions, as a (s, s) index."""
        rel = torch.arange(s)[None, :] - torch.arange(s)[:, None]  # key - query
        half = self.buckets // 2
        bucket = (rel > 0).long() * half
        n = rel.abs()
        exact = half // 2
        large = exact + (torch.log(n.float().clamp(min=1) / exact) / math.log(self.max_distance / exact)
                         * (half - exact)).long()
        return bucket + torch.where(n < exact, n, large.clamp(max=half - 1))

    def set_tokens(self, s: int) -> None:
        self.tokens = s
        self.register_buffer("index", self.t5_index(s), persistent=False)

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
            bias, *rest = _FanOut.apply(bias, self.readers)
            self.shared = tuple(rest)
        return bias


class TokenEmbedding(nn.Module):
    """Token ids -> table rows (F.embedding), plus BERT's segment embedding of the default all-zero
    segment ids (the `embedding` op)."""

    def __init__(self, vocab: int, dim: int, segments: int = 0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, dim))
        self.segment = nn.Parameter(torch.zeros(segments, dim)) if segments else None
        if not self.weight.is_meta:
            nn.init.normal_(self.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: (B, S) int64
        x = F.embedding(ids, self.weight)  # (B, S, dim)
        if self.segment is not None:
            x = x + self.segment[0]  # segment id 0 for every token, broadcast over (B, S)
        return x


class PositionEmbedding(nn.Module):
    """x + table[:S] (a learned (length, C) table, broadcast over the batch; frozen: no gradient)."""

    def __init__(self, length: int, dim: int, trainable: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(length, dim), requires_grad=trainable)
        if not self.weight.is_meta:
            nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, C)
        return x + self.weight[: x.shape[1]]


class ClsToken(nn.Module):
    """Prepend a learned class token: (B, S, C) -> (B, S+1, C)."""

    def __init__(self, dim: int):
        super().__init__()
        self.token = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, C)
        return torch.cat([self.token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, S+1, C)


class TakeToken(nn.Module):
    """x[:, index]: (B, S, C) -> (B, C)."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.index]

    def extra_repr(self) -> str:
        return str(self.index)


class SelfAttention(nn.Module):
    """Multi-head self-attention: q/k/v projections (fused `qkv` or `q`, `k`, `v`), optional `rope` and
    `rel_pos`, SDPA (causal, grouped-query), `proj`; optionally within windows of a token grid."""

    def __init__(self, dim: int, heads: int, head_dim: int, qkv_bias: bool = True, proj_bias: bool = True,
                 fused_qkv: bool = True, kv_heads: int | None = None, gqa: bool = False, window: int = 0,
                 grid: tuple[int, int] | None = None, rel_pos: bool = False, rope: bool = False,
                 rope_len: int = 0, causal: bool = False, qkv_biases: tuple[bool, bool, bool] | None = None,
                 rope_dims: int = 0, sliding_window: int = 0, queries: int = 0,
                 rel_bias: tuple | None = None, unscaled: bool = False, shift: int = 0, cross: int = 0):
        super().__init__()
        self.heads, self.head_dim, self.fused_qkv = heads, head_dim, fused_qkv
        self.kv_heads, self.gqa, self.causal = kv_heads or heads, gqa, causal
        self.window, self.grid = window, grid
        self.rope_dims = rope_dims or head_dim
        self.scale = 1.0 if unscaled else None
        qb, kb, vb = qkv_biases or (qkv_bias,) * 3
        inner, kv_inner = heads * head_dim, self.kv_heads * head_dim
        self.split = (inner, kv_inner, kv_inner)
        if queries or cross:  # learned query tokens, or cross-attention: k and v (fused: `kv`) project another
            if queries:       # tensor than q (the input, or the `kv` value of width `cross`)
                self.queries = nn.Parameter(torch.zeros(1, queries, dim))
            src = cross or dim
            self.q = nn.Linear(dim, inner, bias=qb)
            if fused_qkv:
                self.kv = nn.Linear(src, 2 * kv_inner, bias=kb)
            else:
                self.k = nn.Linear(src, kv_inner, bias=kb)
                self.v = nn.Linear(src, kv_inner, bias=vb)
        elif fused_qkv:
            self.qkv = nn.Linear(dim, inner + 2 * kv_inner, bias=qb)
        else:
            self.q = nn.Linear(dim, inner, bias=qb)
            self.k = nn.Linear(dim, kv_inner, bias=kb)
            self.v = nn.Linear(dim, kv_inner, bias=vb)
        if rope:
            self.rope = Rotary(self.rope_dims, rope_len)
        if rel_pos:
            self.rel_pos = RelPosBias(head_dim, (window, window) if window else grid)
        # ("t5_shared", ...): the bias of an earlier layer's table, (table, slot) set by Attention.link
        self.bias_source: tuple[RelBiasTable, int] | None = None
        if rel_bias is not None and rel_bias[0] != "t5_shared":
            self.rel_bias = RelBiasTable(heads, *rel_bias)
            if rel_bias[0] == "t5":
                self.rel_bias.set_tokens(rope_len)
        self.reads_bias = rel_bias is not None and rel_bias[0] == "t5_shared"
        if sliding_window:  # additive mask, built once: 0 for keys i-w+1..i, -inf elsewhere
            i = torch.arange(rope_len)[:, None]
            j = torch.arange(rope_len)[None, :]
            allowed = (j <= i) & (i - j < sliding_window)
            self.register_buffer("window_mask", torch.zeros(rope_len, rope_len).masked_fill(~allowed, float("-inf")),
                                 persistent=False)
        self.shift = shift
        if shift:  # Swin's mask: tokens of a shifted window see only those of their own region
            self.register_buffer("shift_mask", shift_window_mask(grid, window, shift), persistent=False)
        self.proj = nn.Linear(inner, dim, bias=proj_bias)

    def _heads(self, t: torch.Tensor, heads: int) -> torch.Tensor:  # (B, S, heads*d) -> (B, heads, S, d)
        b, s, _ = t.shape
        return t.view(b, s, heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None) -> torch.Tensor:  # x: (B, S, C)
        b, s, c = x.shape
        if self.window:
            x = x.view(b, *self.grid, c)
            if self.shift:
                x = torch.roll(x, (-self.shift, -self.shift), dims=(1, 2))
            x, padded = window_partition(x, self.window)  # (B*nW, w*w, C)
        if kv is not None:  # cross-attention: k, v first (q's backward, run first, closes before theirs opens)
            if self.fused_qkv:
                k, v = self.kv(kv).split(self.split[1:], dim=-1)
            else:
                k, v = (lin(_alias(kv)) for lin in (self.k, self.v))
            q = self.q(_alias(x))
        elif hasattr(self, "queries"):
            # k, v first: q's backward (created last, run first) then closes before theirs opens
            if self.fused_qkv:
                k, v = self.kv(x).split(self.split[1:], dim=-1)
            else:
                k, v = (lin(_alias(x)) for lin in (self.k, self.v))
            q = self.q(self.queries.expand(b, -1, -1))  # (B, n, h*d)
        elif self.fused_qkv:
            q, k, v = self.qkv(x).split(self.split, dim=-1)  # (B, S, h*d), (B, S, kv*d) x 2
        else:
            # x feeds three projections: each reads its own alias (see _alias); autograd sums their
            # three input gradients in this module's scope (the `sdpa` part's 2 adds per element).
            q, k, v = (lin(_alias(x)) for lin in (self.q, self.k, self.v))
        q, k, v = self._heads(q, self.heads), self._heads(k, self.kv_heads), self._heads(v, self.kv_heads)
        if hasattr(self, "rope"):
            # q and k rotated in one call, as fused RoPE kernels do (and one tensor in and out gives the
            # module one backward scope; a two-output module's opens only once both gradients are ready)
            qk = torch.cat([q, k], dim=1)
            if self.rope_dims < self.head_dim:  # partial rotary: the first rope_dims dims, the rest pass
                rot, rest = qk.split((self.rope_dims, self.head_dim - self.rope_dims), dim=-1)
                qk = torch.cat([self.rope(rot), rest], dim=-1)
            else:
                qk = self.rope(qk)
            q, k = qk.split((self.heads, self.kv_heads), dim=1)
        mask = self.rel_pos(_alias(q)) if hasattr(self, "rel_pos") else None  # (B, h, S, S)
        if hasattr(self, "rel_bias"):
            mask = self.rel_bias()  # (1, h, S, S), broadcast over the problems
        elif self.reads_bias:  # an earlier layer's (its table made it in this forward)
            if self.bias_source is None or not self.bias_source[0].shared:
                raise RuntimeError("a shared T5 bias read before a layer with a table made it")
            table, slot = self.bias_source
            mask = table.shared[slot]
        if self.shift:  # (nW, t, t) per window, repeated over the batch: (B*nW, 1, t, t)
            shifted = self.shift_mask.unsqueeze(0).expand(b, -1, -1, -1).reshape(-1, 1, *self.shift_mask.shape[1:])
            mask = shifted if mask is None else shifted + mask  # + the bias table (1, h, t, t)
        causal = self.causal
        if hasattr(self, "window_mask"):
            mask, causal = self.window_mask, False
        extra = {"enable_gqa": True} if self.gqa else {}
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=self.scale,
                                           **extra)  # (B, h, S, d)
        o = o.transpose(1, 2).reshape(o.shape[0], o.shape[2], self.heads * self.head_dim)  # (B, S, h*d)
        o = self.proj(o)  # (B, S, C)
        if self.window:
            o = window_unpartition(o, self.window, padded, self.grid, b)  # (B, H*W, C), padding cropped
            if self.shift:
                o = torch.roll(o.view(b, *self.grid, -1), (self.shift, self.shift), dims=(1, 2)).reshape(b, s, -1)
        return o


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
        # x feeds two projections: each reads its own alias (see _alias); autograd sums their input
        # gradients in this module's scope (the `mul` part's add per element of x).
        h = self.act(self.gate(_alias(x))) * self.up(_alias(x))  # (..., hidden)
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


class QuickGELU(nn.Module):
    """x * sigmoid(1.702 x) (CLIP): three aten ops, mul by a constant, sigmoid, mul."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class GELUTanh(nn.Module):
    """GELU, tanh approximation (one aten.gelu with approximate='tanh')."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


class _Fork(torch.autograd.Function):
    """n aliases of one tensor as ONE autograd node, whose backward sums their gradients explicitly
    (n - 1 adds per element, unused aliases skipped). Autograd runs it once every alias's gradient is
    in, so the sum runs inside the backward scope of the module that forked, and after every branch."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, n: int):
        ctx.set_materialize_grads(False)
        return tuple(x.clone() for _ in range(n))  # (views of an input would be rebased by autograd)

    @staticmethod
    def backward(ctx, *grads):
        total = None
        for g in grads:
            if g is not None:
                total = g if total is None else total + g
        return total, None


class Join(nn.Module):
    """A join of several values (`add`, `mul`, `concat`), and the fork before it.

    `fork(x, n)` returns n aliases of x for the branches (one autograd node: the sum of their
    gradients, n - 1 adds per element, runs in this module's backward scope, where the join's op
    costs it); `join(a, b, ...)` joins. A `fanout` (a saved value read several times) only forks.
    A residual keeps the two-call form: `join(x)` is its fork (an alias), and its skip is a fresh
    alias of x made just before the add, so that autograd (which runs later-created nodes first)
    finishes the add's backward scope before it starts on the body.
    """

    def __init__(self, mode: str, axis: int = -1, uses: int = 0):
        super().__init__()
        self.mode, self.axis, self.uses = mode, axis, uses

    def forward(self, x: torch.Tensor, *others: torch.Tensor, fork: int = 0):
        if fork:
            return _Fork.apply(x, fork)
        if not others:
            if self.mode == "fanout":
                return _Fork.apply(x, self.uses)
            return _alias(x)
        if self.mode == "concat":
            return torch.cat((x, *others), dim=self.axis)
        out = x
        for other in others:
            out = out * other if self.mode == "mul" else out + other
        return out

    def extra_repr(self) -> str:
        return self.mode + (f", axis={self.axis}" if self.mode == "concat" else "") + \
            (f", uses={self.uses}" if self.mode == "fanout" else "")


class Reshape(nn.Module):
    """View as (B, *shape), keeping the input's batch dim B; or as `shape` when keep_batch is False
    (a reshape that changes the leading dim, e.g. [B, S, C] -> [B*S, C])."""

    def __init__(self, shape: Sequence[int], keep_batch: bool = True):
        super().__init__()
        self.shape, self.keep_batch = tuple(int(d) for d in shape), keep_batch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape) if self.keep_batch else x.reshape(self.shape)

    def extra_repr(self) -> str:
        return ", ".join(("B",) * self.keep_batch + tuple(map(str, self.shape)))


class Transpose(nn.Module):
    """Swap two axes."""

    def __init__(self, axis0: int, axis1: int):
        super().__init__()
        self.axis0, self.axis1 = axis0, axis1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(self.axis0, self.axis1)

    def extra_repr(self) -> str:
        return f"{self.axis0}, {self.axis1}"


# -- conv / norm / pool / scale / shape / moe op families ---------------------------------------
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



class Mean(nn.Module):
    """x.mean(axes, keepdim) (the `mean` and `global_avg_pool` ops)."""

    def __init__(self, axes: Sequence[int], keepdim: bool = False):
        super().__init__()
        self.axes, self.keepdim = tuple(axes), keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(self.axes, keepdim=self.keepdim)

    def extra_repr(self) -> str:
        return f"{list(self.axes)}, keepdim={self.keepdim}"



class Scale(nn.Module):
    """x * c for a constant c (one aten.mul by a scalar)."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor

    def extra_repr(self) -> str:
        return repr(self.factor)


class LayerScale(nn.Module):
    """x * gamma with gamma (C,) over one axis, `trailing` dims after it (0: the last axis)."""

    def __init__(self, channels: int, trailing: int = 0):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((channels,), 1e-5))
        self.trailing = trailing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma.view(-1, *([1] * self.trailing))



class Permute(nn.Module):
    """x.permute(order)."""

    def __init__(self, order: Sequence[int]):
        super().__init__()
        self.order = tuple(order)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(self.order)

    def extra_repr(self) -> str:
        return str(list(self.order))


class Narrow(nn.Module):
    """One piece along an axis (negative): x[..., start:start+length] (`slice`), or piece `index` of
    torch.split(x, sizes, axis) when `sizes` is given (`chunk`, `split`: the split op itself runs)."""

    def __init__(self, axis: int, start: int, length: int, sizes: Sequence[int] | None = None, index: int = 0):
        super().__init__()
        self.axis, self.start, self.length, self.index = axis, start, length, index
        self.sizes = list(sizes) if sizes is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sizes is not None:
            return torch.split(x, self.sizes, dim=self.axis)[self.index]
        return x.narrow(self.axis, self.start, self.length)

    def extra_repr(self) -> str:
        return f"axis={self.axis}, start={self.start}, length={self.length}"


class Pad(nn.Module):
    """F.pad(x, pads, value=value) (constant padding)."""

    def __init__(self, pads: Sequence[int], value: float = 0.0):
        super().__init__()
        self.pads, self.value = list(pads), value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, self.pads, value=self.value)

    def extra_repr(self) -> str:
        return str(self.pads)



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
        probs = torch.softmax(self.router(_alias(x2)), dim=-1)  # (T, E)
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
            shared = self.shared(_alias(x2))
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(_alias(x2))) * shared
            out = out + shared
        return out.reshape(shape)


# ----------------------------------------------------------------------------------------------
# Containers (torch_build): a scope runs its steps in order
# ----------------------------------------------------------------------------------------------
class Call(NamedTuple):
    """Run the child module `name` on the running tensor, with the values `reads` as further arguments."""

    name: str
    reads: tuple[str, ...] = ()


class Load(NamedTuple):
    """Make the value `name` the running tensor (`input:`)."""

    name: str


class Store(NamedTuple):
    """Remember the running tensor as the value `name` (`save:`); `continued`: the next layer reads it too."""

    name: str
    continued: bool = True


class Residual(NamedTuple):
    """x + body(x): fork with the Join child `add`, run `body`, add."""

    add: str
    body: tuple


class Parallel(NamedTuple):
    """Branches from one value, joined by the Join child `join`: () is the value itself."""

    join: str
    branches: tuple


class Repeat(NamedTuple):
    """Run every module of the ModuleList child `name` in order (each instance with its own values)."""

    name: str


def _take(values: dict, name: str) -> torch.Tensor:
    """The value `name` for one consumer: the next alias a fanout made for it, or an alias of the value."""
    value = values[name]
    if isinstance(value, list):
        return _alias(value.pop(0) if len(value) > 1 else value[0])
    return _alias(value)


class Scope(nn.Module):
    """A named scope of the spec (model root, named sequence, block, one repeat instance).

    Its children are the scope's layers under their local names; `steps` says how to run them
    (residuals are transparent in names, so their layers are children of the scope itself).
    `values` holds the named values (`save:` / `inputs:`); nested scopes share it, a repeat's
    instances each get their own copy (their values are theirs).
    """

    def __init__(self):
        super().__init__()
        self.steps: tuple = ()

    def _run(self, steps, x, values: dict):
        for step in steps:
            if isinstance(step, Call):
                module = getattr(self, step.name)
                if isinstance(module, Scope):
                    x = module.enter(x, values)
                else:
                    x = module(x, *(_take(values, r) for r in step.reads))
            elif isinstance(step, Load):
                x = _take(values, step.name)
            elif isinstance(step, Store):  # after a fanout: the running value is one of its aliases
                if isinstance(x, tuple):  # (if the next layer reads another value, x[0] goes to a reader:
                    # a scope's output must have a consumer for its backward scope to open)
                    values[step.name], x = (list(x[1:]), _alias(x[0])) if step.continued else (list(x), x[0])
                else:
                    values[step.name] = x
            elif isinstance(step, Residual):
                add = getattr(self, step.add)
                h = self._run(step.body, add(x), values)  # body(fork(x))
                x = add(_alias(x), h)  # x + body(x)
            elif isinstance(step, Parallel):
                join = getattr(self, step.join)
                forks = join(x, fork=len(step.branches))  # one node: the fork's gradient sum (see Join)
                outs = [self._run(branch, _alias(fork), values) for branch, fork in zip(step.branches, forks)]
                # every branch joins through a fresh alias: autograd runs them right after the join, so the
                # join's backward scope closes before any branch's opens
                x = join(*(_alias(out) for out in outs))
            else:
                for instance in getattr(self, step.name):
                    x = instance.enter(x, dict(values))
        return x

    def enter(self, x: torch.Tensor, values: dict) -> torch.Tensor:
        """Run this scope with the named values of the enclosing one. They are handed over outside the
        call's arguments: module hooks (the scope trackers) must see the scope's input tensor only."""
        self._values = values
        try:
            return self(x)
        finally:
            del self._values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = getattr(self, "_values", None)
        return self._run(self.steps, x, {} if values is None else values)


class CostspecModel(Scope):
    """The root module built from a spec (`costspec.load(path).to_torch()`)."""

    def __init__(self, spec_name: str = "", input_shape: Sequence[int] = ()):
        super().__init__()
        self.spec_name, self.input_shape = spec_name, tuple(input_shape)

    def extra_repr(self) -> str:
        return f"{self.spec_name}, input {list(self.input_shape)}"

    def add_input(self, name: str, value: torch.Tensor) -> None:
        """A further model input (`inputs:`), held as a buffer so the module is still called with one
        tensor: constant data that needs no gradient, as an encoder's output fed to a decoder is."""
        self.register_buffer(f"input_{name}", value, persistent=False)
        self.input_names = (*getattr(self, "input_names", ()), name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = {name: getattr(self, f"input_{name}") for name in getattr(self, "input_names", ())}
        return self._run(self.steps, x, values)


__all__ = [
    "PatchEmbed", "TokenEmbedding", "PositionEmbedding", "ClsToken", "TakeToken", "SelfAttention", "Rotary",
    "RelPosBias", "window_partition", "window_unpartition", "Mlp", "GatedMlp", "LayerNorm2d", "QuickGELU",
    "GELUTanh", "Join", "Reshape", "Transpose", "Scope", "CostspecModel", "Call", "Load", "Store", "Residual",
    "Parallel", "Repeat"
]
