"""Plain-torch models written as a user would, for tests/importer/test_import_torch.py: each builder
takes its sizes as keyword arguments (the dims `costspec import torch` finds) and returns the module
with its example inputs."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


# -- a CNN: stem with max-pool, inverted-residual blocks with squeeze-excitation, depthwise convs, BatchNorm,
# projection shortcuts where the width or stride changes, global pool and a linear head ----------------------
class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = x.mean((2, 3), keepdim=True)  # (B, C, 1, 1)
        gate = torch.sigmoid(self.expand(F.relu(self.reduce(gate))))
        return x * gate


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        self.expand = nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                                       nn.BatchNorm2d(hidden), nn.SiLU())
        self.se = SqueezeExcite(hidden, max(1, cin // 4))
        self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
            if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.se(self.depthwise(self.expand(x))))
        return y + self.shortcut(x)


class ConvNet(nn.Module):
    def __init__(self, width: int, depth: int, classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.stage1 = nn.Sequential(*[InvertedResidual(width, width, 1, 4) for _ in range(depth)])
        self.stage2 = nn.Sequential(InvertedResidual(width, 2 * width, 2, 4),
                                    *[InvertedResidual(2 * width, 2 * width, 1, 4) for _ in range(depth - 1)])
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage2(self.stage1(self.stem(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def convnet(B: int = 2, img: int = 32, C: int = 16, L: int = 2, K: int = 10):
    """A small CNN: squeeze-excitation, depthwise convs, projection shortcuts, BatchNorm, max-pool, linear head."""
    return ConvNet(C, L, K), torch.zeros(B, 3, img, img)


# -- a decoder: GQA with repeat_interleave, RMSNorm, SwiGLU, causal SDPA, an untied LM head ----------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)  # (B, h, S, d)
        k = self.wk(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, S, d)
        v = self.wv(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)  # (B, h, S, d)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DecoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.ffn_norm = RMSNorm(dim)
        self.ffn = SwiGLU(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderBlock(dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)  # untied from the embedding

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def decoder(B: int = 2, S: int = 16, C: int = 64, heads: int = 4, KV: int = 2, F: int = 96, L: int = 2,
            V: int = 100):
    """A Llama-style decoder: GQA by repeat_interleave, RMSNorm, SwiGLU, causal SDPA, an untied LM head."""
    return Decoder(V, C, L, heads, KV, F), torch.zeros(B, S, dtype=torch.long)


# -- a U-Net: two levels, skips concatenated to the upsampled features -----------------------------------------
class DoubleConv(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Up(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    def __init__(self, width: int, classes: int):
        super().__init__()
        self.inc = DoubleConv(3, width)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(width, 2 * width))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(2 * width, 4 * width))
        self.up1 = Up(4 * width, 2 * width)
        self.up2 = Up(2 * width, width)
        self.outc = nn.Conv2d(width, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        return self.outc(self.up2(self.up1(x3, x2), x1))


def unet(B: int = 2, img: int = 32, C: int = 8, K: int = 3):
    """A two-level U-Net with concatenated skips."""
    return UNet(C, K), torch.zeros(B, 3, img, img)


# -- what the importer cannot map: a torch function and a module no op describes --------------------------------
class Gapped(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(F.hardswish(self.fc(x)))
        return self.out(h)


def gapped(B: int = 2, S: int = 8, C: int = 16):
    """A linear layer, hardswish and a GRU: two parts no op of the registry describes."""
    return Gapped(C), torch.zeros(B, S, C)


def module_only(C: int = 8):
    return nn.Linear(C, C)


def needs_config(config):
    return nn.Linear(4, 4), torch.zeros(2, 4)
