"""Vision transformers: ViT, DeiT, DINOv2 (ViT-style encoders), CLIP's vision tower, SAM's image encoder."""
from __future__ import annotations

from ..config import HFConfig, ImportProblem
from ..emit import SpecText
from . import Family
from .common import GELU_NEW_NOTE, activation, check_divides, qkv_grad_ignore, square_size

DROPPED_HEAD = "the spec stops at the last hidden state (no pooler, no classifier)"


def _vit_dims(spec: SpecText, cfg: HFConfig, mlp: int | None) -> tuple[int, int]:
    """img, patch, C, heads, L (and F when `mlp` is given); returns (C, heads)."""
    img = square_size(cfg, "image_size", 224)
    patch = square_size(cfg, "patch_size", 16)
    if img % patch:
        raise ImportProblem(f"{cfg.where('image_size')} = {img} is not a multiple of patch_size = {patch}")
    C = cfg.get_int("hidden_size", 768)
    heads = cfg.get_int("num_attention_heads", 12)
    check_divides(cfg, "hidden_size", C, "num_attention_heads", heads)
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", "image_size")
    spec.dim("patch", patch, "patch side in pixels", "patch_size")
    spec.dim("C", C, "model width", "hidden_size")
    spec.dim("heads", heads, "attention heads", "num_attention_heads")
    spec.dim("L", cfg.get_int("num_hidden_layers", 12), "depth (encoder blocks)", "num_hidden_layers")
    if mlp is not None:
        spec.dim("F", mlp, "MLP hidden width", "intermediate_size")
    return C, heads


def _mlp_fn(spec: SpecText, cfg: HFConfig, key: str = "hidden_act", default: str = "gelu") -> str:
    fn = activation(cfg, key, default)
    if cfg.get(key, default) == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    return fn


def _precision(spec: SpecText, cfg: HFConfig) -> None:
    spec.precision(cfg.dtype, cfg.dtype_source)


def _channels(cfg: HFConfig) -> str:
    return str(cfg.get_int("num_channels", 3))


def _qkv_bias(cfg: HFConfig) -> str:
    return "" if cfg.get_bool("qkv_bias", True) else ", qkv_bias: false"


# ----------------------------------------------------------------------------------------------
# ViT and DeiT
# ----------------------------------------------------------------------------------------------
VIT_IGNORED = {
    "encoder_stride": "ViTForMaskedImageModeling's decoder only",
    "pooler_output_size": DROPPED_HEAD, "pooler_act": DROPPED_HEAD,
}


def build_vit(cfg: HFConfig, deit: bool = False) -> str:
    hf = "DeiTModel" if deit else "ViTModel"
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' {hf})")
    C, heads = _vit_dims(spec, cfg, cfg.get_int("intermediate_size", 3072))
    tokens = 2 if deit else 1
    spec.derived("S", f"(img // patch)**2 + {tokens}",
                 "tokens (patches + class and distillation tokens)" if deit else "tokens (patches + class token)")
    fn = _mlp_fn(spec, cfg)
    _precision(spec, cfg)
    spec.input(["B", _channels(cfg), "img", "img"], "num_channels")
    spec.doc = (f"{'DeiT' if deit else 'ViT'} image encoder imported from a Hugging Face config: patch "
                f"{spec_value(cfg, 'patch_size')}, width {C}, {heads} heads, pre-LN blocks, {fn} MLP, final "
                "LayerNorm" + (", class and distillation tokens" if deit else ", class token") + "; no pooler, no head")
    spec.block("encoder_block", f"""\
- residual:
    - layernorm: {{}}  # layernorm_before (layer_norm_eps does not change the cost)
      source: layernorm_before
    - attention: {{heads: heads{_qkv_bias(cfg)}}}  # qkv_bias
      source: attention
- residual:
    - layernorm: {{}}
      source: layernorm_after
    - mlp: {{hidden: F, fn: {fn}}}  # hidden_act
      source: mlp
""")
    spec.header.extend([f"# `source:` and `ignore:` name modules of transformers' {hf} (add_pooling_layer=false)"])
    spec.ignore(qkv_grad_ignore("layers.*.attention"))
    if deit:
        # DeiT concatenates [cls, distillation, patches], then adds the (S, C) position table
        spec.layers("""\
- sequence:
    - patch_embed: {patch: patch, dim: C}
      source: patch_embeddings
    - cls_token: {}  # distillation_token (prepended second: the same work)
      name: distillation_token
    - cls_token: {}
    - position_embedding: {}
      name: position_embeddings
  name: embeddings
  source: embeddings
""")
    else:
        spec.layers("""\
- patch_embed: {patch: patch, dim: C, cls_token: true, pos_embed: true}
  source: embeddings
""")
    spec.layers("""\
- repeat: L
  name: blocks
  body: encoder_block
  source: layers
- layernorm: {}
  source: layernorm
""")
    cfg.check_understood(VIT_IGNORED)
    return spec.render()


def spec_value(cfg: HFConfig, key: str) -> object:
    return cfg.get(key)


VIT = Family(("vit",), "ViTModel", build_vit, "ViT image encoder (no pooler)",
             hf_kwargs={"add_pooling_layer": "false"}, architectures=("ViTForImageClassification",))
DEIT = Family(("deit",), "DeiTModel", lambda cfg: build_vit(cfg, deit=True),
              "DeiT image encoder: class and distillation tokens (no pooler)",
              hf_kwargs={"add_pooling_layer": "false"}, architectures=("DeiTForImageClassificationWithTeacher",))

FAMILY_LIST = (VIT, DEIT)
