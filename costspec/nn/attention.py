"""The `attention` module (`SelfAttention`: projections, q/k norms, positions, SDPA or eager attention,
output projection), eager attention with soft-capping and sinks (`eager_attention`), the score masks
(`band_mask`), and SAM's / Swin's windows on a token grid (partition, unpartition, the shifted
windows' mask)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from costspec.nn.autograd import alias
from costspec.nn.positions import RelBiasTable, RelPosBias, Rotary
from costspec.nn.qk_norm import QKNorm


@dataclass(frozen=True)
class Scores:
    """How the scores are formed beyond SDPA's options: eagerly (explicit matmul / softmax / matmul),
    soft-capped, with sinks, with ALiBi's bias; a bidirectional local window; the queries' length
    (cross-attention); `math`: SDPA on PyTorch's math kernel (`backend: math`), else on the kernel torch picks."""

    eager: bool = False
    softcap: float = 0.0
    sinks: bool = False
    local_window: int = 0
    q_len: int = 0  # 0: as many queries as keys
    math: bool = False
    alibi: bool = False
    zero_bias: bool = False  # T5's cross-attention: an all-zero float mask, added to every score


def alibi_slopes(heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes as BLOOM and Falcon compute them: a geometric series 2^(-8i/n) over the nearest
    power of two n <= heads, the remaining heads interleaved from the series of 2n."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2 ** (-8 * i / n) for i in range(1, n + 1)]
    slopes += [2 ** (-4 * i / n) for i in range(1, 2 * min(n, heads - n), 2)]
    return torch.tensor(slopes)


def alibi_bias(heads: int, q_len: int, k_len: int, causal: bool) -> torch.Tensor:
    """ALiBi's additive (1, heads, q_len, k_len) bias, built once: slope_h x key position, with the causal
    mask (-inf above the diagonal) folded in, as transformers passes it (one float mask)."""
    bias = alibi_slopes(heads)[:, None, None] * torch.arange(k_len)[None, None, :].float()
    return (bias + band_mask(q_len, k_len, causal)).unsqueeze(0).expand(1, heads, q_len, k_len).contiguous()


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, math: bool = False, **kwargs) -> torch.Tensor:
    """F.scaled_dot_product_attention on PyTorch's math kernel (`math`: the decomposition `backend: math`
    costs, on every device) or on the kernel torch picks (`backend: flash`: the fused kernel where the
    device has one, e.g. cpu's flash kernel; meta always decomposes)."""
    if not math:
        return F.scaled_dot_product_attention(q, k, v, **kwargs)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def band_mask(q_len: int, k_len: int, causal: bool, sliding: int = 0, local: int = 0) -> torch.Tensor:
    """An additive (q_len, k_len) mask, built once: 0 where query i may see key j, -inf elsewhere -- causal
    (top-left aligned: j <= i), a causal sliding window (i - w < j <= i) or a local window
    (|i - j| <= local // 2)."""
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    allowed = torch.ones(q_len, k_len, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if sliding:
        allowed &= i - j < sliding
    if local:
        allowed &= (i - j).abs() <= local // 2
    return torch.zeros(q_len, k_len).masked_fill(~allowed, float("-inf"))


def causal_bias_mask(bias: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """A (1, h, S, S) bias kept where `allowed` (the [S, S] lower triangle), the dtype's lowest value above it:
    a where (h*S*S), in every layer, as transformers' create_position_bias_mask does for T5's decoder (SDPA
    takes is_causal or a float mask, not both)."""
    return torch.where(allowed, bias, torch.finfo(bias.dtype).min)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float,
                    softcap: float = 0.0, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention as transformers' eager_attention_forward runs it: k and v repeated to the query heads,
    scores = q k^T * scale, soft-capped (cap * tanh(scores / cap)), the mask added, softmax (with a sink
    logit per head appended to every row and dropped after it), times v. q: (B, h, Sq, d); k, v:
    (B, kv, Sk, d)."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:  # repeat_kv: (B, kv, Sk, d) -> (B, h, Sk, d); its backward sums each group
        k = k[:, :, None].expand(-1, -1, groups, -1, -1).flatten(1, 2)
        v = v[:, :, None].expand(-1, -1, groups, -1, -1).flatten(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, h, Sq, Sk)
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores + mask
    if sinks is not None:
        b, h, sq, _ = scores.shape
        rows = torch.cat([scores, sinks.view(1, h, 1, 1).expand(b, h, sq, 1)], dim=-1)  # (B, h, Sq, Sk + 1)
        probs = F.softmax(rows, dim=-1)[..., :-1]
    else:
        probs = F.softmax(scores, dim=-1)
    return torch.matmul(probs, v)  # (B, h, Sq, d)


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


class SelfAttention(nn.Module):
    """Multi-head self-attention: q/k/v projections (fused `qkv` or `q`, `k`, `v`), optional `q_norm` and
    `k_norm`, `rope` and `rel_pos`, SDPA (causal, grouped-query) or eager attention (soft-capping,
    sinks), `proj`; optionally within windows of a token grid."""

    def __init__(self, dim: int, heads: int, head_dim: int, qkv_bias: bool = True, proj_bias: bool = True,
                 fused_qkv: bool = True, kv_heads: int | None = None, gqa: bool = False, window: int = 0,
                 grid: tuple[int, int] | None = None, rel_pos: bool = False, rope: bool = False,
                 rope_len: int = 0, causal: bool = False, qkv_biases: tuple[bool, bool, bool] | None = None,
                 rope_dims: int = 0, sliding_window: int = 0, queries: int = 0,
                 rel_bias: tuple | None = None, unscaled: bool = False, shift: int = 0, cross: int = 0,
                 scores: Scores = Scores(), qk_norm: QKNorm | None = None, cache: tuple[int, int] | None = None,
                 memory: tuple[int, int] | None = None):
        super().__init__()
        self.eager, self.softcap, self.math = scores.eager, scores.softcap, scores.math
        q_len = scores.q_len or rope_len
        self.heads, self.head_dim, self.fused_qkv = heads, head_dim, fused_qkv
        self.kv_heads, self.gqa, self.causal = kv_heads or heads, gqa, causal
        self.window, self.grid = window, grid
        self.rope_dims = rope_dims or head_dim
        self.scale = 1.0 if unscaled else None
        qb, kb, vb = qkv_biases or (qkv_bias,) * 3
        inner, kv_inner = heads * head_dim, self.kv_heads * head_dim
        self.split = (inner, kv_inner, kv_inner)
        if memory is not None:
            # cross-attention over a cache (an encoder-decoder's decode step): the encoder's keys and values of
            # `tokens` positions were projected at prefill, buffers of random values here; only q projects
            batch, tokens = memory
            self.q = nn.Linear(dim, inner, bias=qb)
            shape = (batch, self.kv_heads, tokens, head_dim)
            self.register_buffer("k_memory", torch.randn(shape), persistent=False)
            self.register_buffer("v_memory", torch.randn(shape), persistent=False)
            rope_len = tokens  # the keys the queries see
        elif queries or cross:  # learned query tokens, or cross-attention: k and v (fused: `kv`) project another
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
        self.qk_norm_over = qk_norm.over if qk_norm is not None else ""
        if qk_norm is not None:
            self.q_norm = qk_norm.make(heads, head_dim)
            self.k_norm = qk_norm.make(self.kv_heads, head_dim)
        if rope:  # q and k rotated in one call; with fewer keys than queries (cross-attention), per position
            positions = None
            if q_len != rope_len:
                positions = torch.cat([torch.arange(q_len).repeat(heads), torch.arange(rope_len).repeat(self.kv_heads)])
            self.rope = Rotary(self.rope_dims, rope_len, positions=positions)
        if rel_pos:
            self.rel_pos = RelPosBias(head_dim, (window, window) if window else grid)
        # ("shared", ...): the bias of an earlier layer's table, (table, slot) set by Attention.link
        self.bias_source: tuple[RelBiasTable, int] | None = None
        if rel_bias is not None and rel_bias[0] != "shared":
            self.rel_bias = RelBiasTable(heads, *rel_bias)
            if rel_bias[0] == "t5":  # a causal layer (T5's decoder) buckets one direction
                self.rel_bias.set_tokens(rope_len, bidirectional=not causal)
        self.reads_bias = rel_bias is not None and rel_bias[0] == "shared"
        # T5's decoder: its bias (own or read) is masked causally by a where before the SDPA call
        self.causal_bias = causal and rel_bias is not None
        if self.causal_bias:  # which keys each query sees: positions only (a buffer, as transformers' is a constant)
            allowed = torch.arange(rope_len)[:, None] >= torch.arange(rope_len)[None, :]
            self.register_buffer("allowed", allowed, persistent=False)
        if cache is not None:
            # decode: one new token per sequence after `cached` earlier ones (a sliding window's cache holds
            # at most w - 1, so the new query sees every key: no mask); their k and v, already normed and
            # rotated, are buffers of random values (never zeros: a GPU can run zeros faster)
            batch, cached = cache
            shape = (batch, self.kv_heads, cached, head_dim)
            self.register_buffer("k_cache", torch.randn(shape), persistent=False)
            self.register_buffer("v_cache", torch.randn(shape), persistent=False)
            self.causal = False  # (the op's rules refuse ALiBi with a cache)
            if hasattr(self, "rel_bias") and rel_bias is not None and rel_bias[0] == "t5":
                # T5's decoder: the new token (position `cached`) over keys 0..cached, as compute_bias makes it
                index = self.rel_bias.t5_index(cached + 1, bidirectional=False)[-1:]
                self.rel_bias.register_buffer("index", index, persistent=False)
        elif scores.zero_bias:  # T5's cross-attention: its zero position bias, passed as the float mask
            self.register_buffer("window_mask", torch.zeros(1, heads, q_len, rope_len), persistent=False)
        elif scores.alibi:  # the causal mask folded into ALiBi's bias: one float mask
            self.register_buffer("window_mask", alibi_bias(heads, q_len, rope_len, causal), persistent=False)
        elif sliding_window or scores.local_window or (causal and scores.eager and not self.causal_bias):
            # an additive mask, built once
            self.register_buffer("window_mask", band_mask(q_len, rope_len, causal, sliding_window, scores.local_window),
                                 persistent=False)
        if scores.sinks:
            self.sinks = nn.Parameter(torch.zeros(heads))
        self.shift = shift
        if shift:  # Swin's mask: tokens of a shifted window see only those of their own region
            self.register_buffer("shift_mask", shift_window_mask(grid, window, shift), persistent=False)
        self.proj = nn.Linear(inner, dim, bias=proj_bias)

    def _heads(self, t: torch.Tensor, heads: int) -> torch.Tensor:  # (B, S, heads*d) -> (B, heads, S, d)
        b, s, _ = t.shape
        return t.view(b, s, heads, self.head_dim).transpose(1, 2)

    def _rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k rotated in one call, as fused RoPE kernels do (and one tensor in and out gives the module
        one backward scope; a two-output module's opens only once both gradients are ready): stacked on the
        heads, or with fewer keys than queries (cross-attention) flattened to one row per (head, position)."""
        b, r, d = q.shape[0], self.rope_dims, self.head_dim
        (sq, sk), split = (q.shape[2], k.shape[2]), (self.heads, self.kv_heads)
        rest = None
        if r < d:  # partial rotary: the first rope_dims dims, the rest pass
            (q, q_rest), (k, k_rest) = q.split((r, d - r), dim=-1), k.split((r, d - r), dim=-1)
            rest = (q_rest, k_rest)
        if sq == sk:
            q, k = self.rope(torch.cat([q, k], dim=1)).split(split, dim=1)
        else:
            qk = self.rope(torch.cat([q.flatten(1, 2), k.flatten(1, 2)], dim=1))  # (B, h*Sq + kv*Sk, r)
            q, k = qk.split((self.heads * sq, self.kv_heads * sk), dim=1)
            q, k = q.view(b, self.heads, sq, r), k.view(b, self.kv_heads, sk, r)
        if rest is not None:
            q, k = torch.cat([q, rest[0]], dim=-1), torch.cat([k, rest[1]], dim=-1)
        return q, k

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None) -> torch.Tensor:  # x: (B, S, C)
        b, s, c = x.shape
        if self.window:
            x = x.view(b, *self.grid, c)
            if self.shift:
                x = torch.roll(x, (-self.shift, -self.shift), dims=(1, 2))
            x, padded = window_partition(x, self.window)  # (B*nW, w*w, C)
        if hasattr(self, "k_memory"):  # cross-attention over cached keys and values
            q, k, v = self.q(x), self.get_buffer("k_memory"), self.get_buffer("v_memory")
        elif kv is not None:  # cross-attention: k, v first (q's backward, run first, closes before theirs opens)
            if self.fused_qkv:
                k, v = self.kv(kv).split(self.split[1:], dim=-1)
            else:
                k, v = (lin(alias(kv)) for lin in (self.k, self.v))
            q = self.q(alias(x))
        elif hasattr(self, "queries"):
            # k, v first: q's backward (created last, run first) then closes before theirs opens
            if self.fused_qkv:
                k, v = self.kv(x).split(self.split[1:], dim=-1)
            else:
                k, v = (lin(alias(x)) for lin in (self.k, self.v))
            q = self.q(self.queries.expand(b, -1, -1))  # (B, n, h*d)
        elif self.fused_qkv:
            q, k, v = self.qkv(x).split(self.split, dim=-1)  # (B, S, h*d), (B, S, kv*d) x 2
        else:
            # x feeds three projections: each reads its own alias (see alias); autograd sums their
            # three input gradients in this module's scope (the `sdpa` part's 2 adds per element).
            q, k, v = (lin(alias(x)) for lin in (self.q, self.k, self.v))
        # each norm reads its own alias: its backward scope closes with its own input gradient (q and k
        # are siblings, split from one projection or both done by the SDPA's backward at once)
        if self.qk_norm_over == "all":  # over the whole projected width (OLMo-2)
            q, k = self.q_norm(alias(q)), self.k_norm(alias(k))
        q = self._heads(q, self.heads)
        if not hasattr(self, "k_memory"):  # (the cached ones are (B, kv, S, d) already)
            k, v = self._heads(k, self.kv_heads), self._heads(v, self.kv_heads)
        if self.qk_norm_over == "head":  # over each head's d dims (Qwen3, Cohere)
            q, k = self.q_norm(alias(q)), self.k_norm(alias(k))
        if hasattr(self, "rope"):
            q, k = self._rotate(q, k)
        if hasattr(self, "k_cache"):  # the new key and value appended to the cached ones
            k_cache, v_cache = self.get_buffer("k_cache"), self.get_buffer("v_cache")
            k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        mask = self.rel_pos(alias(q)) if hasattr(self, "rel_pos") else None  # (B, h, S, S)
        if hasattr(self, "rel_bias"):
            mask = self.rel_bias()  # (1, h, S, S), broadcast over the problems
        elif self.reads_bias:  # an earlier layer's (its table made it in this forward)
            if self.bias_source is None or not self.bias_source[0].shared:
                raise RuntimeError("a shared bias read before the layer with its table made it")
            table, slot = self.bias_source
            mask = table.shared[slot]
        if self.shift:  # (nW, t, t) per window, repeated over the batch: (B*nW, 1, t, t)
            shifted = self.shift_mask.unsqueeze(0).expand(b, -1, -1, -1).reshape(-1, 1, *self.shift_mask.shape[1:])
            mask = shifted if mask is None else shifted + mask  # + the bias table (1, h, t, t)
        causal = self.causal
        if self.causal_bias and mask is not None:  # (one token sees only itself: no where, as transformers)
            if mask.shape[-2] > 1:
                mask = causal_bias_mask(mask, self.get_buffer("allowed"))
            causal = False
        if hasattr(self, "window_mask"):
            mask, causal = self.window_mask, False
        if self.eager:
            scale = self.scale if self.scale is not None else self.head_dim ** -0.5
            o = eager_attention(q, k, v, mask, scale, self.softcap, getattr(self, "sinks", None))
        else:
            extra = {"enable_gqa": True} if self.gqa else {}
            o = sdpa(q, k, v, self.math, attn_mask=mask, is_causal=causal, scale=self.scale,
                     **extra)  # (B, h, S, d)
        o = o.transpose(1, 2).reshape(o.shape[0], o.shape[2], self.heads * self.head_dim)  # (B, S, h*d)
        o = self.proj(o)  # (B, S, C)
        if self.window:
            o = window_unpartition(o, self.window, padded, self.grid, b)  # (B, H*W, C), padding cropped
            if self.shift:
                o = torch.roll(o.view(b, *self.grid, -1), (self.shift, self.shift), dims=(1, 2)).reshape(b, s, -1)
        return o
