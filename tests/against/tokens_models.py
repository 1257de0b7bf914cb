"""Targets for `validate --against` that need more than a config: transformers' ViTModel called with
interpolate_pos_encoding=True on an image of another size than its config's."""
from __future__ import annotations

import torch
from transformers import ViTConfig, ViTModel


def vit_interpolated(B: int, C: int, heads: int, F: int, L: int, patch: int, g: int, img_h: int, img_w: int):
    """ViTModel (no pooler) for a g x g patch grid, run on a B x 3 x img_h x img_w image with its position
    table interpolated (ViTEmbeddings.interpolate_pos_encoding)."""
    config = ViTConfig(hidden_size=C, num_attention_heads=heads, intermediate_size=F, num_hidden_layers=L,
                       patch_size=patch, image_size=g * patch)
    model = ViTModel(config, add_pooling_layer=False)
    pixels = torch.randn(B, 3, img_h, img_w)
    return model, {"pixel_values": pixels, "interpolate_pos_encoding": True}
