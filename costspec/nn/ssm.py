"""State-space mixers as transformers runs them without the CUDA kernels: Mamba's selective scan
(`Mamba`: transformers' MambaMixer with `mamba_selective_scan`'s sequential loop) and Mamba-2's
chunked state-space duality (`Mamba2`: Mamba2Mixer with `mamba2_chunk_scan`), with the gated
RMSNorm Mamba-2 ends in (`MambaRMSNormGated`, named as transformers names it so that the runtime
counter prices both alike: one fused kind per element).

Each forward runs the same aten ops, on the same shapes, as transformers 5.23's torch path does
(no cache, no attention mask): the op definitions in costspec/ops/ssm.py count exactly these.
Names: B batch, S sequence, C width, E inner width (expand * C), N state size, r dt rank, K conv
kernel; Mamba-2: H heads of P channels, G groups, Q chunk length, c = ceil(S / Q) chunks.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from costspec.nn.autograd import alias


def causal_conv1d(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """transformers' causal_conv1d_fn fallback: a depthwise conv padded by K - 1 on both sides, its first S
    outputs kept (the K - 1 trailing ones are computed and dropped), then SiLU. x: (B, channels, S)."""
    seq = x.shape[-1]
    k = conv.weight.shape[-1]
    out = F.conv1d(x, conv.weight, conv.bias, padding=k - 1, groups=x.shape[1])[:, :, :seq]  # (B, ch, S)
    return F.silu(out)


class Mamba(nn.Module):
    """Mamba's mixer (Gu & Dao 2023, Algorithm 2): in_proj to x and z, causal depthwise conv + SiLU on x,
    x_proj to (dt, B, C) (with `inner_norms` each RMSNorm'd, as Jamba's mixer does), dt_proj, the selective
    scan (softplus(dt + bias), exp(A dt), dt B x, a python loop over S of h = dA h + dBx and y = h C), the D
    skip, gating by SiLU(z), out_proj.

    conv1d and dt_proj hold parameters only: their weights are applied functionally in this module's
    own forward, as transformers does (F.conv1d, `dt_proj.weight @ dt`)."""

    def __init__(self, dim: int, inner: int, state: int, conv: int, dt_rank: int, bias: bool, conv_bias: bool,
                 inner_norms: bool = False):
        super().__init__()
        self.inner, self.state, self.dt_rank = inner, state, dt_rank
        self.in_proj = nn.Linear(dim, 2 * inner, bias=bias)
        self.conv1d = nn.Conv1d(inner, inner, conv, groups=inner, padding=conv - 1, bias=conv_bias)
        self.x_proj = nn.Linear(inner, dt_rank + 2 * state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, inner, bias=True)
        self.A_log = nn.Parameter(torch.zeros(inner, state))
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, dim, bias=bias)
        self.inner_norms = inner_norms
        if inner_norms:  # Jamba: dt, B and C normalised after x_proj
            self.dt_layernorm, self.b_layernorm, self.c_layernorm = (nn.RMSNorm(w) for w in (dt_rank, state, state))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, C)
        xz = self.in_proj(x).transpose(1, 2)  # (B, 2E, S)
        a = -torch.exp(self.A_log.float())  # (E, N)
        h, z = xz.chunk(2, dim=1)  # (B, E, S) each
        # (B, S, E): x_proj reads this view itself and the scan a view of it, as transformers wires them (the
        # add of the two gradients then runs when x_proj's input gradient is complete, in x_proj's scope)
        h = causal_conv1d(h, self.conv1d).transpose(1, 2)
        dt, b, c = torch.split(self.x_proj(h), [self.dt_rank, self.state, self.state], dim=-1)
        if self.inner_norms:
            # each norm reads its own alias: its backward scope closes with its own input gradient (the three are
            # siblings split from one output, their gradients joined by one backward node)
            dt, b, c = self.dt_layernorm(alias(dt)), self.b_layernorm(alias(b)), self.c_layernorm(alias(c))
        dt = self.dt_proj.weight @ dt.transpose(1, 2)  # (E, r) @ (B, r, S) -> (B, E, S): no bias here
        y = selective_scan(h.transpose(1, 2), dt, a, b, c, self.D.float(), z, self.dt_proj.bias.float())  # (B, E, S)
        return self.out_proj(y.transpose(1, 2).to(x.dtype))  # (B, S, C); in 16 bits the scan's fp32 y cast back


def selective_scan(x, dt, a, b, c, d, z, dt_bias):
    """transformers' mamba_selective_scan, its recurrent path. x, dt, z: (B, E, S); a: (E, N); b, c: (B, S, N).

    Its dtypes as transformers' (in 16 bits): dt stays in x's dtype (the fp32 bias cast to it); exp(A dt), dt B
    and the states are fp32 (B and x upcast), the zero start in x's dtype; each state is cast to x's dtype for
    its contraction with C; the D skip (fp32 D) and the gate make y fp32. In fp32 every cast is the tensor itself."""
    batch, inner, seq = x.shape
    dtype = x.dtype
    dt = F.softplus(dt + dt_bias.to(dt.dtype)[..., None])  # (B, E, S)
    da = torch.exp(a[None, :, None, :] * dt[:, :, :, None])  # (B, E, S, N)
    dbx = dt[:, :, :, None] * b[:, None, :, :].float() * x[:, :, :, None].float()  # (B, E, S, N): (dt B) x
    h = torch.zeros(batch, inner, a.shape[-1], dtype=dtype, device=x.device)  # (B, E, N)
    ys = []
    for i in range(seq):
        h = da[:, :, i] * h + dbx[:, :, i]  # (B, E, N)
        ys.append(torch.matmul(h.to(dtype), c[:, i, :].unsqueeze(-1))[:, :, 0])  # (B, E, N) @ (B, N, 1) -> (B, E)
    y = torch.stack(ys, dim=-1)  # (B, E, S)
    y = y + x * d[None, :, None]
    return y * F.silu(z)


class MambaRMSNormGated(nn.Module):
    """transformers' MambaRMSNormGated: y = w * RMSNorm_groups(x * silu(gate)), the RMS over each of
    `groups` equal slices of the last dim. (Its name is transformers': the counter prices both as one
    fused `rmsnorm_gated` kind per element, as mamba_ssm's Triton kernel runs it.)"""

    def __init__(self, dim: int, groups: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.group_size, self.eps = dim // groups, eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:  # x, gate: (B, S, E)
        dtype = x.dtype  # (in fp32, as transformers runs it; each cast is the tensor itself in fp32)
        x = x.to(torch.float32) * F.silu(gate.to(torch.float32))
        *lead, dim = x.shape
        g = x.view(*lead, dim // self.group_size, self.group_size)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * g.view(*lead, dim).to(dtype)


class Mamba2(nn.Module):
    """Mamba-2's mixer (Dao & Gu 2024, the SSD layer): in_proj to (z, xBC, dt), causal depthwise conv +
    SiLU on xBC, the chunked SSD scan (`ssd_chunk_scan`), the gated RMSNorm by z, out_proj."""

    def __init__(self, dim: int, inner: int, state: int, conv: int, heads: int, groups: int, chunk: int,
                 bias: bool, conv_bias: bool, eps: float):
        super().__init__()
        self.inner, self.state, self.heads, self.groups, self.chunk = inner, state, heads, groups, chunk
        self.conv_dim = inner + 2 * groups * state
        self.in_proj = nn.Linear(dim, inner + self.conv_dim + heads, bias=bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, conv, groups=self.conv_dim, padding=conv - 1,
                                bias=conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(heads))
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.D = nn.Parameter(torch.ones(heads))
        self.norm = MambaRMSNormGated(inner, groups, eps)
        self.out_proj = nn.Linear(inner, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, C)
        batch, seq, _ = x.shape
        proj = self.in_proj(x)  # (B, S, E + conv_dim + H)
        a = -torch.exp(self.A_log.float())  # (H,)
        gate, xbc, dt = proj.split([self.inner, self.conv_dim, self.heads], dim=-1)
        xbc = causal_conv1d(xbc.transpose(1, 2), self.conv1d).transpose(1, 2)  # (B, S, conv_dim)
        gn = self.groups * self.state
        h, b, c = torch.split(xbc, [self.inner, gn, gn], dim=-1)
        y = ssd_chunk_scan(h.view(batch, seq, self.heads, -1), dt, a, b.view(batch, seq, self.groups, -1),
                           c.view(batch, seq, self.groups, -1), self.chunk, self.D, self.dt_bias)
        # the norm reads aliases: its backward scope then closes with its own inputs' gradients (gate is one
        # output of in_proj's split, whose other outputs' gradients arrive only after the whole scan's backward)
        y = self.norm(alias(y.reshape(batch, seq, -1)), alias(gate))  # (B, S, E)
        return self.out_proj(y.to(x.dtype))  # (B, S, C): in 16 bits the scan's fp32 output cast back


def _segment_sum(x: torch.Tensor) -> torch.Tensor:
    """transformers' segment_sum: out[..., i, j] = x[..., j+1] + ... + x[..., i] for j < i, 0 on the
    diagonal, -inf above it. x: (..., T) -> (..., T, T)."""
    t = x.size(-1)
    x = x[..., None].expand(*x.size(), t)  # (..., T, T): x[..., i] along row i
    below = torch.tril(torch.ones(t, t, device=x.device, dtype=torch.bool), diagonal=-1)
    x = torch.cumsum(x.masked_fill(~below, 0), dim=-2)
    on_or_below = torch.tril(torch.ones(t, t, device=x.device, dtype=torch.bool), diagonal=0)
    return x.masked_fill(~on_or_below, -torch.inf)


def _chunks(x: torch.Tensor, pad: int, chunk: int) -> torch.Tensor:
    """(B, S, ...) -> (B, c, Q, ...), zero-padding S to a multiple of Q (transformers' reshape_into_chunks)."""
    x = _pad_seq(x, pad)
    return x.reshape(x.shape[0], -1, chunk, *x.shape[2:])


def _pad_seq(x: torch.Tensor, pad: int) -> torch.Tensor:
    return F.pad(x, (0, 0) * (x.dim() - 2) + (0, pad), mode="constant", value=0)


def ssd_chunk_scan(x, dt, a, b, c, chunk: int, d, dt_bias):
    """transformers' mamba2_chunk_scan (no initial state). x: (B, S, H, P); dt: (B, S, H); a, d, dt_bias: (H,);
    b, c: (B, S, G, N). Returns (B, S, H, P)."""
    batch, seq, heads, _ = x.shape
    # (B, S, H), in the layer's dtype: the default dt_limit
    dt = torch.clamp(F.softplus(dt + dt_bias.to(dt.dtype)), min=0.0, max=float("inf"))
    x = x.float()
    b = b.float().repeat_interleave(heads // b.shape[2], dim=2, output_size=heads)  # (B, S, H, N)
    c = c.float().repeat_interleave(heads // c.shape[2], dim=2, output_size=heads)
    pad = (chunk - seq % chunk) % chunk
    d_residual = d[..., None] * _pad_seq(x, pad)  # (B, S + pad, H, P)
    x = x * dt[..., None].float()  # (B, S, H, P); x, B, C and dt in fp32, as transformers casts them
    a = a.to(x.dtype) * dt.float()  # (B, S, H)
    x, a, b, c = (_chunks(t, pad, chunk) for t in (x, a, b, c))  # (B, c, Q, H, ...)
    a = a.permute(0, 3, 1, 2)  # (B, H, c, Q)
    a_cumsum = torch.cumsum(a, dim=-1)
    decay = torch.exp(_segment_sum(a))  # (B, H, c, Q, Q)
    scores = torch.einsum("bclhn,bcshn->bclsh", c, b)  # C B^T within each chunk
    y_diag = torch.einsum("bclsh,bcshp->bclhp", scores * decay.permute(0, 2, 3, 4, 1), x)
    decay_states = torch.exp(a_cumsum[:, :, :, -1:] - a_cumsum)  # (B, H, c, Q)
    b_decay = b * decay_states.permute(0, -2, -1, 1)[..., None]
    states = torch.einsum("bclhn,bclhp->bchpn", b_decay, x)  # each chunk's final state (B, c, H, P, N)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)  # (B, c + 1, H, P, N)
    decay_chunk = torch.exp(_segment_sum(F.pad(a_cumsum[:, :, :, -1], (1, 0)))).transpose(1, 3)
    states = torch.einsum("bzch,bzhpn->bchpn", decay_chunk, states)[:, :-1]  # each chunk's initial state
    y_off = torch.einsum("bclhn,bchpn->bclhp", c, states) * torch.exp(a_cumsum).permute(0, 2, 3, 1)[..., None]
    y = (y_diag + y_off).contiguous().reshape(batch, -1, heads, x.shape[-1]) + d_residual  # (B, c*Q, H, P)
    return y[:, :seq] if pad > 0 else y
