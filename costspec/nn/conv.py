"""`PatchEmbed`: the `patch_embed` module (a stride-patch conv flattened to tokens, optional class
token and position embedding)."""
from __future__ import annotations

import torch
import torch.nn as nn


class PatchEmbed(nn.Module):
    """Image -> tokens: conv with kernel = stride = patch, flattened; optional class token and
    learned position embedding (the `proj` / `cls_token` / `pos_embed` parts of `patch_embed`)."""

    def __init__(self, in_chans: int, dim: int, patch: int, num_patches: int, cls_token: bool, pos_embed: bool,
                 bias: bool = True, mask_token: bool = False):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch, bias=bias)
        tokens = num_patches + (1 if cls_token else 0)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if cls_token else None
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, dim)) if pos_embed else None
        # masked image modelling's token: held, never read by this forward (no mask)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim)) if mask_token else None
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
