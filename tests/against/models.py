"""Small real torch models for tests/against/test_check.py: what a user's own code would build.

Each builder takes the spec's dims it needs as keyword arguments and returns an nn.Module; the
check builds them on `meta`.
"""
from __future__ import annotations

import torch
from torch import nn


class _FcSigmoid(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class ToyMLP(nn.Module):
    """specs/toy_mlp.yaml as plain torch: N x [Linear(D, D) + sigmoid]."""

    def __init__(self, d: int, n: int):
        super().__init__()
        self.layers = nn.ModuleList(_FcSigmoid(d) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def toy_mlp(D: int, N: int) -> nn.Module:
    return ToyMLP(D, N)


def toy_mlp_with_inputs(M: int, D: int, N: int):
    """The same model with its own example input (a (module, inputs) pair)."""
    return ToyMLP(D, N), torch.zeros(M, D)


class ConvBN(nn.Module):
    """conv -> BatchNorm2d -> ReLU (a spec writing the BatchNorm as layernorm2d has the same params)."""

    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(c)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.conv(x)))


def conv_bn(C: int) -> nn.Module:
    return ConvBN(C)


class _ProjectionBlock(nn.Module):
    """out = conv3x3(x) + proj1x1(x): a residual block with a projection shortcut, 8 -> 16 channels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.proj = nn.Conv2d(8, 16, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + self.proj(x)


class ProjectionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _ProjectionBlock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def projection_shortcut() -> nn.Module:
    return ProjectionNet()


class _Mlp(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class _ScaledBlock(nn.Module):
    """x + gamma * mlp(norm(x)): a residual branch with a layer scale (CaiT, DINOv2)."""

    def __init__(self, c: int, layer_scale: bool):
        super().__init__()
        self.norm, self.mlp = nn.LayerNorm(c), _Mlp(c)
        self.gamma = nn.Parameter(torch.ones(c)) if layer_scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.mlp(self.norm(x))
        return x + (self.gamma * y if self.gamma is not None else y)


class ScaledNet(nn.Module):
    def __init__(self, c: int, depth: int, layer_scale: bool):
        super().__init__()
        self.blocks = nn.ModuleList(_ScaledBlock(c, layer_scale) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def layer_scale(C: int, L: int) -> nn.Module:
    return ScaledNet(C, L, layer_scale=True)


class ParallelNet(nn.Module):
    """x + mlp1(norm1(x)) + mlp2(norm2(x)): one parallel residual (GPT-J style)."""

    def __init__(self, c: int):
        super().__init__()
        self.inp = nn.Linear(c, c)
        self.norm1, self.mlp1 = nn.LayerNorm(c), _Mlp(c)
        self.norm2, self.mlp2 = nn.LayerNorm(c), _Mlp(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        return x + self.mlp1(self.norm1(x)) + self.mlp2(self.norm2(x))


def parallel_residual(C: int) -> nn.Module:
    return ParallelNet(C)


def not_a_module() -> int:
    return 3


class DeepEncoder(nn.Module):
    """DeepSeek-OCR's DeepEncoder from transformers parts, as deepseek-ai/DeepSeek-OCR deepencoder.py
    wires them: SAM ViT-B (SamVisionEncoder, its neck included) -> net_2, net_3 (stride-2 3x3 convs,
    256 -> 512 -> 1024) -> the 16 x 16 grid as CLIP's patch embeddings (class token + positions;
    CLIP's own patch conv is built but never runs) -> pre-LayerNorm -> CLIP ViT-L's 24 layers."""

    def __init__(self):
        super().__init__()
        from transformers import CLIPVisionConfig, SamVisionConfig
        from transformers.models.clip.modeling_clip import CLIPEncoder, CLIPVisionEmbeddings
        from transformers.models.sam.modeling_sam import SamVisionEncoder

        clip = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                num_attention_heads=16, patch_size=14, image_size=224, hidden_act="quick_gelu")
        clip._attn_implementation = "sdpa"  # what CLIPVisionModel picks; a bare config says eager
        self.sam = SamVisionEncoder(SamVisionConfig())
        self.net_2 = nn.Conv2d(256, 512, 3, 2, 1, bias=False)
        self.net_3 = nn.Conv2d(512, 1024, 3, 2, 1, bias=False)
        self.embeddings = CLIPVisionEmbeddings(clip)
        self.pre_layrnorm = nn.LayerNorm(1024)
        self.encoder = CLIPEncoder(clip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.net_3(self.net_2(self.sam(x).last_hidden_state))  # (B, 1024, 16, 16)
        patches = features.flatten(2).transpose(1, 2)
        emb = self.embeddings
        tokens = torch.cat([emb.class_embedding.expand(patches.shape[0], 1, -1), patches], dim=1)
        tokens = tokens + emb.position_embedding(emb.position_ids)
        return self.encoder(inputs_embeds=self.pre_layrnorm(tokens)).last_hidden_state


def deepencoder() -> nn.Module:
    return DeepEncoder()
