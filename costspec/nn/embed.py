"""Embedding modules: token ids to table rows (`TokenEmbedding`), a learned position table
(`PositionEmbedding`), a class token (`ClsToken`), one token taken out (`TakeToken`)."""
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
