"""Embedding modules: token ids to table rows (`TokenEmbedding`), a learned position table
(`PositionEmbedding`), one resized to another token grid (`InterpolatedPositions`), a class token
(`ClsToken`), learned tokens inserted (`LearnedTokens`), one token taken out (`TakeToken`)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


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
    """x + table[:S] (a learned (length, C) table added as (1, S, C), broadcast over the batch: its
    gradient is summed over the batch only when B > 1; frozen: no gradient)."""

    def __init__(self, length: int, dim: int, trainable: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(length, dim), requires_grad=trainable)
        if not self.weight.is_meta:
            nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, C)
        return x + self.weight[: x.shape[1]].unsqueeze(0)


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


class LearnedTokens(nn.Module):
    """Insert `count` learned tokens: (B, S, C) -> (B, S + count, C), at the start (after the first `after`
    tokens) or at the end, as YOLOS's detection tokens and DINOv2's registers are."""

    def __init__(self, count: int, dim: int, at_end: bool = False, after: int = 0):
        super().__init__()
        self.tokens = nn.Parameter(torch.zeros(1, count, dim))
        self.at_end, self.after = at_end, after

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, C)
        tokens = self.tokens.expand(x.shape[0], -1, -1)  # (B, count, C)
        if self.at_end:
            return torch.cat([x, tokens], dim=1)
        if self.after:  # two slices of x around the tokens (DINOv2-with-registers' cat)
            return torch.cat([x[:, :self.after], tokens, x[:, self.after:]], dim=1)
        return torch.cat([tokens, x], dim=1)

    def extra_repr(self) -> str:
        return f"{self.tokens.shape[1]}, at={'end' if self.at_end else 'start'}, after={self.after}"


class InterpolatedPositions(nn.Module):
    """A (tables, prefix + gh*gw + suffix, C) position table whose grid rows are resized to (h, w) as
    transformers' interpolate_pos_encoding does (slices, view as an image, F.interpolate, cat), added to
    the tokens (add) or returned as the (tables, prefix + h*w + suffix, C) stack."""

    def __init__(self, tables: int, prefix: int, grid: tuple[int, int], size: tuple[int, int], suffix: int,
                 dim: int, mode: str = "bicubic", skip_native: bool = False, add: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(tables, prefix + grid[0] * grid[1] + suffix, dim))
        self.prefix, self.grid, self.size, self.suffix = prefix, grid, size, suffix
        self.mode, self.skip_native, self.add = mode, skip_native, add

    def table(self) -> torch.Tensor:
        if self.skip_native and self.size == self.grid:
            return self.weight
        n, rows, dim = self.weight.shape
        end = self.prefix + self.grid[0] * self.grid[1]
        grid = self.weight[:, self.prefix:end].transpose(1, 2).reshape(n, dim, *self.grid)  # (n, C, gh, gw)
        grid = F.interpolate(grid, size=self.size, mode=self.mode, align_corners=False)  # (n, C, h, w)
        pieces = [grid.flatten(2).transpose(1, 2)]  # (n, h*w, C)
        if self.prefix:  # only slices that exist: each one read is a gradient autograd sums
            pieces.insert(0, self.weight[:, :self.prefix])
        if self.suffix:
            pieces.append(self.weight[:, end:])
        return torch.cat(pieces, dim=1) if len(pieces) > 1 else pieces[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, C); add: false reads only its width
        return x + self.table() if self.add else self.table()

    def extra_repr(self) -> str:
        return (f"grid={list(self.grid)} -> {list(self.size)}, prefix={self.prefix}, suffix={self.suffix}, "
                f"mode={self.mode}, add={self.add}")
