"""Vision transformers: ViT, DeiT, DINOv2 (ViT-style encoders), CLIP's vision tower, SAM's image encoder."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, Family, Variant
from costspec.importer.families.common import (
    ENCODER_KEYS,
    GELU_NEW_NOTE,
    activation,
    check_divides,
    check_whole_patches,
    qkv_grad_ignore,
    square_size,
)

LAST = "last_hidden_state"
BARE = "; the spec's output is its last_hidden_state (imported with --no-pooler)"


def bare_variant(hf_class: str, sets: dict[str, str]):
    """A family that already writes its model without the pooler: --no-pooler describes the same class (built
    with `sets`), its last_hidden_state named as the output."""
    def variant(cfg: HFConfig) -> Variant:
        return Variant(hf_class, dict(sets), None if cfg.pooler else LAST)
    return variant


def _vit_dims(spec: SpecText, cfg: HFConfig, mlp: int | None, patch_default: int = 16) -> tuple[int, int]:
    """img, patch, C, heads, L (and F when `mlp` is given); returns (C, heads). Defaults: the config
    class's (ViTConfig, DeiTConfig: patch 16; Dinov2Config: patch 14)."""
    img = square_size(cfg, "image_size", 224)
    patch = square_size(cfg, "patch_size", patch_default)
    check_whole_patches(cfg, img, patch)
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
VIT_IGNORED = {"encoder_stride": "ViTForMaskedImageModeling's decoder only"}
POOLER_DROPPED = "the pooler's (--no-pooler: the spec stops at the last hidden state)"
POOLED = "pooler_output"


def dense_pooler(spec: SpecText, cfg: HFConfig, C: int, ignored: dict[str, str]) -> None:
    """ViTPooler / DeiTPooler: dense (hidden_size -> pooler_output_size) and pooler_act on the class token,
    the spec's output then the model's pooler_output; with --no-pooler its keys are ignored, named."""
    if not cfg.pooler:
        ignored.update(pooler_output_size=POOLER_DROPPED, pooler_act=POOLER_DROPPED)
        return
    size = cfg.get("pooler_output_size", C)
    out = C if size == 0 and not isinstance(size, bool) else cfg.get_int("pooler_output_size", C)  # 0: hidden_size
    if out != C:
        spec.dim("Cp", out, "pooler output width", "pooler_output_size")
    fn = activation(cfg, "pooler_act", "tanh")
    spec.layers(f"""\
- sequence:
    - take_token: {{index: 0}}  # the class token
    - linear: {{out: {"Cp" if out != C else "C"}}}  # pooler_output_size
      source: dense
    - activation: {{fn: {fn}}}  # pooler_act
      source: activation
  name: pooler
  source: pooler
""")


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
                f"{square_size(cfg, 'patch_size', 16)}, width {C}, {heads} heads, pre-LN blocks, {fn} MLP, final "
                "LayerNorm" + (", class and distillation tokens" if deit else ", class token")
                + ("; the pooler (dense + pooler_act on the class token, pooler_output)" if cfg.pooler
                   else "; no pooler (--no-pooler)") + ", no head")
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
    spec.header.append(f"# `source:` and `ignore:` name modules of transformers' {hf}"
                       + ("; the spec's output is its pooler_output" if cfg.pooler else
                          " (add_pooling_layer=false)" + BARE))
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
    ignored = dict(VIT_IGNORED)
    dense_pooler(spec, cfg, C, ignored)
    cfg.check_understood(ignored)
    return spec.render()


NO_POOLER = {"add_pooling_layer": "false"}


def pooled_variant(hf_class: str):
    """A class whose pooler the spec keeps by default (its pooler_output); --no-pooler: the class built with
    add_pooling_layer=False, its last_hidden_state."""
    def variant(cfg: HFConfig) -> Variant:
        return Variant(hf_class, {}, POOLED) if cfg.pooler else Variant(hf_class, dict(NO_POOLER), LAST)
    return variant


VIT = Family(("vit",), "ViTModel", build_vit, "ViT image encoder with the pooler ViTModel builds (pooler_output)",
             keys=ENCODER_KEYS, architectures=("ViTForImageClassification",), options=(POOLER,),
             hf_output=lambda cfg: POOLED, variant=pooled_variant("ViTModel"))
DEIT = Family(("deit",), "DeiTModel", lambda cfg: build_vit(cfg, deit=True),
              "DeiT image encoder: class and distillation tokens, the pooler DeiTModel builds (pooler_output)",
              keys=ENCODER_KEYS, architectures=("DeiTForImageClassificationWithTeacher",), options=(POOLER,),
              hf_output=lambda cfg: POOLED, variant=pooled_variant("DeiTModel"))


# ----------------------------------------------------------------------------------------------
# DINOv2
# ----------------------------------------------------------------------------------------------
BACKBONE_ONLY = "Dinov2Backbone's feature-map outputs only (Dinov2Model returns the last hidden state)"
DINOV2_IGNORED = {
    "layerscale_value": "the initial value of the layer scales (their cost is the same)",
    "drop_path_rate": "stochastic depth is the identity at inference",
    "apply_layernorm": BACKBONE_ONLY, "reshape_hidden_states": BACKBONE_ONLY, "out_features": BACKBONE_ONLY,
    "out_indices": BACKBONE_ONLY, "stage_names": BACKBONE_ONLY,
}


def build_dinov2(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type dinov2, transformers' Dinov2Model)")
    C, heads = _vit_dims(spec, cfg, None, patch_default=14)
    ratio = cfg.get("mlp_ratio", 4)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
        raise ImportProblem(f"{cfg.where('mlp_ratio')} = {ratio!r}: expected a positive number")
    hidden = int(C * ratio)  # Dinov2MLP: int(hidden_size * mlp_ratio)
    swiglu = cfg.get_bool("use_swiglu_ffn", False)
    if swiglu:  # Dinov2SwiGLUFFN: 2/3 of it, rounded up to a multiple of 8; one fused (gate, up) Linear
        hidden = (int(hidden * 2 / 3) + 7) // 8 * 8
        spec.dim("F", hidden, "SwiGLU hidden width", "(int(int(hidden_size * mlp_ratio) * 2 / 3) + 7) // 8 * 8")
    else:
        spec.dim("F", hidden, "MLP hidden width", "int(hidden_size * mlp_ratio)")
    spec.derived("S", "(img // patch)**2 + 1", "tokens (patches + class token)")
    fn = "silu" if swiglu else _mlp_fn(spec, cfg)
    if swiglu:
        cfg.get("hidden_act")  # read: the SwiGLU FFN always uses silu, whatever hidden_act says
    mask = cfg.get_bool("use_mask_token", True)
    _precision(spec, cfg)
    spec.input(["B", _channels(cfg), "img", "img"], "num_channels")
    patch = square_size(cfg, "patch_size", 14)
    spec.doc = (f"DINOv2 image encoder imported from a Hugging Face config: patch {patch}, "
                f"width {C}, {heads} heads, pre-LN blocks with layer scale, "
                + ("SwiGLU MLP" if swiglu else f"{fn} MLP") + ", final LayerNorm; no pooler, no head")
    mlp = ("{hidden: F, gated: true, fn: silu}  # use_swiglu_ffn: weights_in (gate and up in one Linear), "
           "weights_out" if swiglu else f"{{hidden: F, fn: {fn}}}  # hidden_act")
    spec.block("dinov2_block", f"""\
- residual:
    - layernorm: {{}}  # norm1
      source: norm1
    - attention: {{heads: heads{_qkv_bias(cfg)}}}  # qkv_bias
      source: attention
    - layer_scale: {{}}  # layer_scale1 (initial value layerscale_value does not change the cost)
      source: layer_scale1
- residual:
    - layernorm: {{}}  # norm2
      source: norm2
    - mlp: {mlp}
      source: mlp
    - layer_scale: {{}}
      source: layer_scale2
""")
    spec.header.append("# `source:` and `ignore:` name modules of transformers' Dinov2Model"
                       + ("" if cfg.pooler else BARE))
    spec.ignore(qkv_grad_ignore("encoder.layer.*.attention"))
    token = (", mask_token: true}  # use_mask_token: masked image modelling's token, held, not run (C params)"
             if mask else "}")
    spec.layers(f"""\
- patch_embed: {{patch: patch, dim: C, cls_token: true, pos_embed: true{token}
  source: embeddings
- repeat: L
  name: blocks
  body: dinov2_block
  source: encoder.layer
- layernorm: {{}}
  source: layernorm
""")
    cfg.check_understood(DINOV2_IGNORED)
    return spec.render()


DINOV2 = Family(("dinov2",), "Dinov2Model", build_dinov2, "DINOv2 image encoder (layer scale, optional SwiGLU)",
                keys=ENCODER_KEYS, options=(POOLER,), variant=bare_variant("Dinov2Model", {}),
                refused=("mlp_ratio that is not a positive number",))

FAMILY_LIST = (VIT, DEIT, DINOV2)
