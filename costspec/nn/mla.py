"""The `mla` module (`LatentAttention`): multi-head latent attention as transformers' DeepseekV3Attention
runs it (kv_b up-projects the latent, SDPA over per-head keys and values), or weight-absorbed (W_UK on
the query, attention over the latent, W_UV on the output); `HeadLinear`: h per-head projections as one
batched GEMM."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from costspec.nn.attention import band_mask, eager_attention, sdpa
from costspec.nn.autograd import alias
from costspec.nn.positions import Rotary


@dataclass(frozen=True)
class MlaShape:
    """dim C, heads h, q_lora_rank r_q (0: one q projection), kv_lora_rank r, d_n, d_r, d_v."""

    dim: int
    heads: int
    q_rank: int
    kv_rank: int
    nope: int
    rope: int
    v: int


class HeadLinear(nn.Module):
    """h projections, one per head, k -> n: (B, h, S, k) -> (B, h, S, n) as one bmm over the heads
    ((h, B*S, k) @ (h, k, n)), so that each weight's gradient needs no sum over the batch."""

    def __init__(self, heads: int, k: int, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(heads, k, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, s, k = x.shape
        y = torch.bmm(x.transpose(0, 1).reshape(h, b * s, k), self.weight)  # (h, B*S, n)
        return y.view(h, b, s, -1).transpose(0, 1)  # (B, h, S, n)


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2/V3) on (B, S, C): q (`q_a`, `q_norm`, `q_b`, or `q`),
    the latent and shared rotary key (`kv_a`, `kv_norm`), `rope` on the rope dims, then `kv_b` and SDPA,
    or (absorb) `uk`, SDPA over the latent and `uv`; `proj`."""

    def __init__(self, shape: MlaShape, seq: int, bias: bool, causal: bool, absorb: bool, eager: bool,
                 scale: float, math: bool = False, cache: tuple[int, int] | None = None):
        super().__init__()
        c, h, rq, r = shape.dim, shape.heads, shape.q_rank, shape.kv_rank
        self.shape, self.causal, self.absorb, self.eager, self.scale = shape, causal, absorb, eager, scale
        if cache is not None:
            # decode: one new token after `cached` earlier ones, whose normed latent and rotated shared key are
            # buffers of random values; the new query sees every key (no mask)
            batch, cached = cache
            self.register_buffer("latent_cache", torch.randn(batch, cached, r), persistent=False)
            self.register_buffer("rope_cache", torch.randn(batch, 1, cached, shape.rope), persistent=False)
            self.causal = causal = False
        self.math = math  # SDPA on PyTorch's math kernel (`backend: math`)
        dq = h * (shape.nope + shape.rope)
        if rq:
            self.q_a = nn.Linear(c, rq, bias=bias)
            self.q_norm = nn.RMSNorm(rq)
            self.q_b = nn.Linear(rq, dq, bias=False)
        else:
            self.q = nn.Linear(c, dq, bias=False)
        self.kv_a = nn.Linear(c, r + shape.rope, bias=bias)
        self.kv_norm = nn.RMSNorm(r)
        self.rope = Rotary(shape.rope, seq)
        if absorb:
            self.uk = HeadLinear(h, shape.nope, r)
        else:
            self.kv_b = nn.Linear(r, h * (shape.nope + shape.v), bias=False)
        if eager and causal:
            self.register_buffer("mask", band_mask(seq, seq, True), persistent=False)
        if absorb:
            self.uv = HeadLinear(h, r, shape.v)
        self.proj = nn.Linear(h * shape.v, c, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, S, C)
        sh = self.shape
        b, s, _ = x.shape
        h, r = sh.heads, sh.kv_rank
        # x feeds the q path and kv_a: each reads its own alias, their gradients summed in this module's scope
        q = self.q_b(self.q_norm(self.q_a(alias(x)))) if sh.q_rank else self.q(alias(x))
        q_nope, q_rot = q.view(b, s, h, -1).transpose(1, 2).split((sh.nope, sh.rope), dim=-1)  # (B, h, S, .)
        latent, k_rot = self.kv_a(alias(x)).split((r, sh.rope), dim=-1)
        latent = self.kv_norm(alias(latent))  # (B, S, r); its own alias: its scope closes with its input's gradient
        # q's and the shared key's rope dims rotated in one call: (B, h + 1, S, d_r)
        q_rot, k_rot = self.rope(torch.cat([q_rot, k_rot.view(b, 1, s, sh.rope)], dim=1)).split((h, 1), dim=1)
        if hasattr(self, "latent_cache"):  # the new latent and shared key appended to the cached ones
            latent = torch.cat([self.get_buffer("latent_cache"), latent], dim=1)
            k_rot = torch.cat([self.get_buffer("rope_cache"), k_rot], dim=2)
        sk = latent.shape[1]  # keys: the cached and the new ones
        if self.absorb:  # attention over the latent: one key/value head of r + d_r (keys) and r (values)
            query = torch.cat([self.uk(alias(q_nope)), q_rot], dim=-1)  # (B, h, S, r + d_r)
            lat = latent.view(b, 1, sk, r)
            key, value = torch.cat([lat, k_rot], dim=-1), lat
        else:  # per-head keys and values from the latent
            kv = self.kv_b(alias(latent))  # its own alias: its scope closes before rope's backward opens
            k_nope, value = kv.view(b, sk, h, -1).transpose(1, 2).split((sh.nope, sh.v), dim=-1)
            query = torch.cat([q_nope, q_rot], dim=-1)  # (B, h, S, d_n + d_r)
            key = torch.cat([k_nope, k_rot.expand(b, h, sk, sh.rope)], dim=-1)
        if self.eager:
            o = eager_attention(query, key, value, getattr(self, "mask", None), self.scale)
        else:
            extra = {"enable_gqa": True} if self.absorb and h > 1 else {}
            o = sdpa(query, key, value, self.math, is_causal=self.causal, scale=self.scale, **extra)
        if self.absorb:
            o = self.uv(o)  # (B, h, S, d_v)
        return self.proj(o.transpose(1, 2).reshape(b, s, h * sh.v))
