"""SigLIP 2 (transformers' Siglip2Model, Siglip2VisionModel): refused, with the reasons. Its vision tower is a
NaFlex tower: flattened patches of any grid, a per-image resize of the position table to that grid, and a
model that does not run on meta, so no spec of it could be checked (`SIGLIP2_GAPS`; docs/import.md says the
same). Its text tower alone is not written either: Siglip2Model's logits need the vision tower's pooled
output, and no `--tower text` import is offered yet."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.families import Family

SIGLIP2_GAPS = (
    "Siglip2VisionModel does not run on meta: its position-embedding resize reads spatial_shapes as data "
    "(spatial_shapes[i].tolist() for each image: 'Cannot copy out of meta tensor'), so `validate --against` "
    "cannot count it",
    "its NaFlex patch embedding has no spec construct: pixel_values come as flattened patches "
    "(B, max_num_patches, channels * patch**2) with a mask, each image with its own grid (spatial_shapes), and "
    "the (sqrt(num_patches), sqrt(num_patches), C) position table is resized to every image's grid by a "
    "bilinear, antialiased interpolation per image before it is added",
)
TEXT_ONLY = ("the text tower alone (Siglip2TextModel) is not imported: no family writes it yet, and Siglip2Model's "
             "logits need the vision tower above")


def build_siglip2(cfg: HFConfig) -> str:
    gaps = "; ".join(f"({i}) {gap}" for i, gap in enumerate(SIGLIP2_GAPS, 1))
    if cfg.model_type == "siglip2_text_model":
        raise ImportProblem(f"{cfg.where('model_type')} = 'siglip2_text_model': {TEXT_ONLY}")
    raise ImportProblem(f"{cfg.where('model_type')} = {cfg.model_type!r}: SigLIP 2 is not imported: {gaps}")


SIGLIP2 = Family(("siglip2", "siglip2_vision_model", "siglip2_text_model"), "Siglip2Model", build_siglip2,
                 "SigLIP 2: refused (its NaFlex vision tower does not run on meta and has no spec construct)",
                 architectures=("Siglip2Model", "Siglip2VisionModel", "Siglip2TextModel",
                                "Siglip2ForImageClassification"),
                 refused=(*SIGLIP2_GAPS, "siglip2_text_model: " + TEXT_ONLY))

FAMILY_LIST = (SIGLIP2,)
