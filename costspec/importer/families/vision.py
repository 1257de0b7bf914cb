"""The ViT-like towers, one `Tower` entry each of the template (vit_template.py): ViT, DeiT, DINOv2, BEiT and
YOLOS, each imported as the class `AutoModel` builds, its pooler included (--no-pooler: its last_hidden_state).
A new ViT-like family is one entry here plus its test (tests/importer/test_encoders.py and the family's own)."""
from __future__ import annotations

from costspec.importer.config import heads, layers, size
from costspec.importer.families.vit_template import REL_BIAS, Parts, Tower, family

BACKBONE_ONLY = "Dinov2Backbone's feature-map outputs only (Dinov2Model returns the last hidden state)"
BEIT_HEADS = "BeitForSemanticSegmentation's / BeitBackbone's heads and outputs only (BeitModel has none)"
VIT_KEYS = (size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
            heads("num_attention_heads", "hidden_size"), size("image_size", items=True), size("num_channels"))

TOWERS = (
    Tower("vit", "ViTModel", "ViT", "ViT image encoder with the pooler ViTModel builds (pooler_output)",
          pooler="dense", architectures=("ViTForImageClassification",),
          ignored={"encoder_stride": "ViTForMaskedImageModeling's decoder only"}),
    Tower("deit", "DeiTModel", "DeiT",
          "DeiT image encoder: class and distillation tokens, the pooler DeiTModel builds (pooler_output)",
          tokens="distillation", pooler="dense", architectures=("DeiTForImageClassificationWithTeacher",),
          ignored={"encoder_stride": "DeiTForMaskedImageModeling's decoder only"}),
    Tower("dinov2", "Dinov2Model", "DINOv2", "DINOv2 image encoder (layer scale, optional SwiGLU)", mask_default=True,
          patch_default=14, mlp="ratio", layer_scale="modules",
          parts=Parts("norm1", "attention", "norm2", "mlp", ("layer_scale1", "layer_scale2"), "encoder.layer"),
          refused=("mlp_ratio that is not a positive number",),
          ignored={"layerscale_value": "the initial value of the layer scales (their cost is the same)",
                   "drop_path_rate": "stochastic depth is the identity at inference",
                   **{key: BACKBONE_ONLY for key in ("apply_layernorm", "reshape_hidden_states", "out_features",
                                                     "out_indices", "stage_names")}}),
    Tower("beit", "BeitModel", "BEiT",
          "BEiT image encoder with its pooler (mean of the patch tokens + LayerNorm, or the class token): no key "
          "bias, layer scale, optional relative position bias (per layer or shared) (pooler_output)",
          positions_key="use_absolute_position_embeddings", mask_default=False, layer_scale="lambdas",
          fused_qkv=False, k_bias=False, rel_bias=True, pooler="beit", bf16_default=True,
          keys=VIT_KEYS + (size("patch_size", items=True),), architectures=("BeitForImageClassification",),
          refused=("use_shared_relative_position_bias and use_relative_position_bias both true (" + REL_BIAS + ")",),
          ignored={"vocab_size": "the visual-token vocabulary of BeitForMaskedImageModeling's head only",
                   "drop_path_rate": "stochastic depth: the identity in eval mode, as costspec counts",
                   **{key: BEIT_HEADS for key in ("pool_scales", "use_auxiliary_head", "auxiliary_loss_weight",
                                                  "auxiliary_channels", "auxiliary_num_convs",
                                                  "auxiliary_concat_input", "semantic_loss_ignore_index", "add_fpn",
                                                  "reshape_hidden_states", "stage_names", "out_features",
                                                  "out_indices")}}),
    Tower("yolos", "YolosModel", "YOLOS",
          "YOLOS: a ViT encoder with appended detection tokens and resized (mid) position tables; the pooler's "
          "output (pooler_output)", tokens="detection", fused_qkv=False, pooler="tanh", bf16_default=True,
          parts=Parts(mlp="[intermediate, output.dense]", stack="encoder.layer"),
          keys=VIT_KEYS + (size("patch_size"), size("num_detection_tokens")),
          architectures=("YolosForObjectDetection",), refused=("an image_size that is not a multiple of patch_size",),
          ignored={key: "DETR's matching and loss weights (YolosForObjectDetection's training loss only)"
                   for key in ("auxiliary_loss", "class_cost", "bbox_cost", "giou_cost", "bbox_loss_coefficient",
                               "giou_loss_coefficient", "eos_coefficient")}),
)

FAMILY_LIST = tuple(family(t) for t in TOWERS)
