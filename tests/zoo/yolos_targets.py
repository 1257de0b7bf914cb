"""transformers' YolosForObjectDetection as a target whose output is both of its predictions, for
`validate --against` in the train pass: a DETR-style loss reads the class logits and the boxes, so both
heads run backward (the model's own first output, the logits, would leave the box head forward-only)."""
from __future__ import annotations

import torch
from transformers import YolosConfig, YolosForObjectDetection


class YolosBothOutputs(YolosForObjectDetection):
    """The same modules; forward returns [B, det, labels + 1 + 4]: the logits and the boxes joined."""

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        out = super().forward(pixel_values)
        return torch.cat([out.logits, out.pred_boxes], dim=-1)


def yolos_detection(C: int, heads: int, F: int, L: int, det: int, labels: int, gh: int, gw: int,
                    patch: int = 16) -> YolosBothOutputs:
    """hustvl/yolos-small's architecture (YolosConfig defaults plus its sizes) at the spec's bound dims."""
    config = YolosConfig(hidden_size=C, num_attention_heads=heads, intermediate_size=F, num_hidden_layers=L,
                         num_detection_tokens=det, num_labels=labels, image_size=[gh * patch, gw * patch],
                         patch_size=patch)
    return YolosBothOutputs(config)
