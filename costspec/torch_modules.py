"""Small nn.Modules the op builders return, and the containers `torch_build` assembles them in.

Imported only by op `build()` methods and `torch_build` (torch stays out of eval/check). Each
module computes exactly the work its op definition costs, with the aten ops the runtime
counter maps to cost-table kinds; shape comments use the op's names (B, S, C, h, d).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

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


class SelfAttention(nn.Module):
    """Multi-head self-attention: q/k/v projections (fused `qkv` or `q`, `k`, `v`), SDPA, `proj`."""

    def __init__(self, dim: int, heads: int, head_dim: int, qkv_bias: bool = True, proj_bias: bool = True,
                 fused_qkv: bool = True):
        super().__init__()
        self.heads, self.head_dim, self.fused_qkv = heads, head_dim, fused_qkv
        inner = heads * head_dim
        if fused_qkv:
            self.qkv = nn.Linear(dim, 3 * inner, bias=qkv_bias)
        else:
            self.q = nn.Linear(dim, inner, bias=qkv_bias)
            self.k = nn.Linear(dim, inner, bias=qkv_bias)
            self.v = nn.Linear(dim, inner, bias=qkv_bias)
        self.proj = nn.Linear(inner, dim, bias=proj_bias)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:  # (B, S, h*d) -> (B, h, S, d)
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, C)
        b, s, _ = x.shape
        if self.fused_qkv:
            qkv = self.qkv(x)  # (B, S, 3*h*d)
            q, k, v = qkv.view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, h, S, d)
        else:
            # x feeds three projections: each reads its own alias (see _alias); autograd sums their
            # three input gradients in this module's scope (the `sdpa` part's 2 adds per element).
            q, k, v = (self._split_heads(lin(_alias(x))) for lin in (self.q, self.k, self.v))  # 3 x (B, h, S, d)
        o = F.scaled_dot_product_attention(q, k, v)  # (B, h, S, d): softmax(q k^T / sqrt(d)) v
        o = o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)  # (B, S, h*d)
        return self.proj(o)  # (B, S, C)


class Mlp(nn.Module):
    """fc1 -> act -> fc2 (the `fc1` / `act` / `fc2` parts of `mlp`)."""

    def __init__(self, dim: int, hidden: int, out: int, fn: str, bias: bool = True):
        super().__init__()
        from .ops.pointwise import build_activation

        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.act = build_activation(fn)
        self.fc2 = nn.Linear(hidden, out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., C)
        return self.fc2(self.act(self.fc1(x)))  # (..., hidden) -> (..., out)


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


class ResidualAdd(nn.Module):
    """The add that closes a `residual:` block, and the fork that opens it.

    `fork(x)` (a call with one argument) returns an alias of x for the body; `add(skip, h)` returns
    skip + h, where the caller passes a fresh alias of x as `skip`. The fork being this module's
    own call, autograd's sum of the two branch gradients of x (one add per element) runs in this
    module's backward scope, where the `add` op's backward costs it. The skip alias is made just
    before the add, so that autograd (which runs later-created nodes first) finishes the add's
    backward scope before it starts on the body.
    """

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        if h is None:  # fork: the body's input, a view of x
            return _alias(x)
        return x + h


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


# ----------------------------------------------------------------------------------------------
# Containers (torch_build): a scope runs its steps in order
# ----------------------------------------------------------------------------------------------
class Call(NamedTuple):
    """Run the child module `name` on the running tensor."""

    name: str


class Residual(NamedTuple):
    """x + body(x): fork with the ResidualAdd child `add`, run `body`, add."""

    add: str
    body: tuple


class Repeat(NamedTuple):
    """Run every module of the ModuleList child `name` in order."""

    name: str


class Scope(nn.Module):
    """A named scope of the spec (model root, named sequence, block, one repeat instance).

    Its children are the scope's layers under their local names; `steps` says how to run them
    (residuals are transparent in names, so their layers are children of the scope itself).
    """

    def __init__(self):
        super().__init__()
        self.steps: tuple = ()

    def _run(self, steps, x):
        for step in steps:
            if isinstance(step, Call):
                x = getattr(self, step.name)(x)
            elif isinstance(step, Residual):
                add = getattr(self, step.add)
                h = self._run(step.body, add(x))  # body(fork(x))
                x = add(_alias(x), h)  # x + body(x)
            else:
                for instance in getattr(self, step.name):
                    x = instance(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(self.steps, x)


class CostspecModel(Scope):
    """The root module built from a spec (`costspec.load(path).to_torch()`)."""

    def __init__(self, spec_name: str = "", input_shape: Sequence[int] = ()):
        super().__init__()
        self.spec_name, self.input_shape = spec_name, tuple(input_shape)

    def extra_repr(self) -> str:
        return f"{self.spec_name}, input {list(self.input_shape)}"


__all__ = ["PatchEmbed", "SelfAttention", "Mlp", "LayerNorm2d", "QuickGELU", "GELUTanh", "ResidualAdd",
           "Reshape", "Transpose", "Scope", "CostspecModel", "Call", "Residual", "Repeat"]
