"""`Similarity`: a dual-tower model's contrastive logits, as transformers' CLIPModel and SiglipModel compute them."""
from __future__ import annotations

import torch
import torch.nn as nn


class Similarity(nn.Module):
    """logits_per_image = (text / |text| @ (image / |image|)^T * exp(logit_scale) (+ logit_bias))^T.

    `pow_sum`: CLIP's code (the norm as _get_vector_norm writes it: pow, sum, pow 0.5; a 0-d logit_scale); else
    SigLIP's (x.norm(p=2); logit_scale of shape [1])."""

    def __init__(self, bias: bool, pow_sum: bool):
        super().__init__()
        self.pow_sum = pow_sum
        self.logit_scale = nn.Parameter(torch.tensor(2.6592) if pow_sum else torch.zeros(1))
        self.logit_bias = nn.Parameter(torch.zeros(1)) if bias else None

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        if self.pow_sum:
            return torch.pow(torch.sum(torch.pow(x, 2), dim=-1, keepdim=True), 0.5)
        return x.norm(p=2, dim=-1, keepdim=True)

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        image = image / self._norm(image)
        text = text / self._norm(text)
        logits_per_text = torch.matmul(text, image.t()) * self.logit_scale.exp()
        if self.logit_bias is not None:
            logits_per_text = logits_per_text + self.logit_bias
        return logits_per_text.t()

    def extra_repr(self) -> str:
        return f"norm={'pow_sum' if self.pow_sum else 'vector_norm'}, bias={self.logit_bias is not None}"
