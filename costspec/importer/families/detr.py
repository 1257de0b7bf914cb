"""DETR (transformers' DetrModel): refused, each refusal naming the key or the part of the model costspec does
not price exactly. A timm backbone (`use_timm_backbone: true`, or a `backbone_config` of model_type
timm_backbone, DetrConfig's default) is a timm module tree, not a transformers one; a transformers ResNet
backbone (`backbone_config` of model_type resnet) still leaves four parts without an exact spec, listed in
`DETR_GAPS` (docs/import.md says the same)."""
from __future__ import annotations

from typing import Any

from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.families import Family

TIMM = ("a timm backbone: DetrConvEncoder builds it with the timm library (TimmBackbone), a module tree that is not "
        "transformers' and a package costspec does not use; describe the same network with use_timm_backbone: false "
        "and a backbone_config of model_type resnet (transformers' ResNetBackbone)")
DETR_GAPS = (
    "DetrModel does not run on meta: its encoder's attention mask (create_bidirectional_mask) tests "
    "padding_mask.all(), a data-dependent value, so `validate --against` cannot count it on meta",
    "q and k project x + a position embedding while v projects x (the sine positions in the encoder, the object-query "
    "positions in the decoder, the spatial positions added to the encoder output for the cross-attention's keys): "
    "the attention op projects q, k and v from one input, or k and v from one `kv:` value",
    "DetrConvEncoder freezes the ResNet stem and first stage (requires_grad false: a training step runs no backward "
    "there); a spec has no frozen layers besides quantised and LoRA weights",
    "the sine position embedding is computed from the pixel mask on every forward (a nearest interpolation, cumsums, "
    "divisions, sin and cos over the feature map): no op prices it",
)


def _backbone(cfg: HFConfig) -> dict[str, Any]:
    if cfg.get_bool("use_timm_backbone", False):
        raise cfg.refuse("use_timm_backbone", TIMM)
    backbone = cfg.get("backbone_config")
    if not isinstance(backbone, dict):
        raise ImportProblem(f"{cfg.where('backbone_config')} = {backbone!r}: expected the backbone's config (a "
                            "mapping with its model_type; DETR's is a ResNet)")
    kind = backbone.get("model_type")
    if kind == "timm_backbone":
        raise ImportProblem(f"{cfg.where('backbone_config')}.model_type = 'timm_backbone': {TIMM}")
    if kind != "resnet":
        raise ImportProblem(f"{cfg.where('backbone_config')}.model_type = {kind!r}: expected resnet (DETR's "
                            "ResNet-50 / 101 backbones)")
    return backbone


def build_detr(cfg: HFConfig) -> str:
    _backbone(cfg)
    gaps = "; ".join(f"({i}) {gap}" for i, gap in enumerate(DETR_GAPS, 1))
    raise ImportProblem(f"{cfg.where('model_type')} = 'detr': DetrModel with a ResNet backbone is not imported: "
                        f"{gaps}")


DETR = Family(("detr",), "DetrModel", build_detr,
              "DETR: refused (a timm backbone; with a transformers ResNet backbone, the parts listed below have no "
              "exact spec yet)",
              architectures=("DetrForObjectDetection", "DetrForSegmentation"),
              refused=("use_timm_backbone: true, or a backbone_config of model_type timm_backbone (DetrConfig's "
                       "default): " + TIMM,
                       "a backbone other than a ResNet",
                       *DETR_GAPS))

FAMILY_LIST = (DETR,)
