"""Vision towers of larger models: CLIP's image encoder with its projection, SAM's image encoder."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, count, heads, layers, size, under
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import (
    GELU_NEW_NOTE,
    VISION_TOWER_KEYS,
    activation,
    check_divides,
    check_whole_patches,
    qkv_grad_ignore,
    square_size,
)

TEXT_TOWER = "the spec is the image tower (CLIPModel.get_image_features); the text tower is another model"
SAM_PROMPT = "the spec is SAM's image encoder (SamVisionModel); the prompt encoder and mask decoder run per prompt"


def _tower(cfg: HFConfig, key: str, own_type: str) -> HFConfig:
    """The vision config: the config itself (model_type `own_type`) or its nested `key`."""
    return cfg if cfg.model_type == own_type else cfg.sub(key)


# ----------------------------------------------------------------------------------------------
# CLIP
# ----------------------------------------------------------------------------------------------
def build_clip(cfg: HFConfig) -> str:
    vision = _tower(cfg, "vision_config", "clip_vision_model")
    composite = vision is not cfg
    # CLIPModel projects with the top-level projection_dim; CLIPVisionModelWithProjection with its own
    E = cfg.get_int("projection_dim", 512)
    if composite:
        vision.get("projection_dim")  # read: the composite's projection_dim is the one CLIPModel uses
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "CLIPVisionModelWithProjection)")
    img = square_size(vision, "image_size", 224)
    patch = square_size(vision, "patch_size", 32)
    check_whole_patches(vision, img, patch)
    C = vision.get_int("hidden_size", 768)
    heads = vision.get_int("num_attention_heads", 12)
    check_divides(vision, "hidden_size", C, "num_attention_heads", heads)
    p = "vision_config." if composite else ""
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", p + "image_size")
    spec.dim("patch", patch, "patch side in pixels", p + "patch_size")
    spec.dim("C", C, "width", p + "hidden_size")
    spec.dim("heads", heads, "attention heads", p + "num_attention_heads")
    spec.dim("L", vision.get_int("num_hidden_layers", 12), "depth (encoder layers)", p + "num_hidden_layers")
    spec.dim("F", vision.get_int("intermediate_size", 3072), "MLP hidden width", p + "intermediate_size")
    spec.dim("E", E, "output embedding dim (visual_projection)", "projection_dim")
    spec.derived("S", "(img // patch)**2 + 1", "tokens (patches + class token)")
    fn = activation(vision, "hidden_act", "quick_gelu")
    if vision.get("hidden_act") == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", str(vision.get_int("num_channels", 3)), "img", "img"], p + "num_channels")
    spec.doc = (f"CLIP vision tower imported from a Hugging Face config: patch {patch} (no conv bias), class token, "
                f"learned position embedding, pre_layrnorm, {heads}-head pre-LN layers of width {C} with a {fn} "
                f"MLP, post_layernorm on the class token and the {C} -> {E} projection (get_image_features)")
    spec.block("clip_block", f"""\
- residual:
    - layernorm: {{}}  # layer_norm1
      source: layer_norm1
    - attention: {{heads: heads}}  # q/k/v/out projections, all with bias
      source: self_attn
- residual:
    - layernorm: {{}}  # layer_norm2
      source: layer_norm2
    - mlp: {{hidden: F, fn: {fn}}}  # fc1 -> hidden_act -> fc2
      source: mlp
""")
    spec.header.append("# `source:` and `ignore:` name modules of transformers' CLIPVisionModelWithProjection")
    spec.ignore(qkv_grad_ignore("vision_model.encoder.layers.*.self_attn"))
    spec.layers("""\
- patch_embed: {patch: patch, dim: C, cls_token: true, pos_embed: true, bias: false}  # patch_embedding: no bias
  source: vision_model.embeddings
- layernorm: {}  # CLIP's extra LayerNorm before the encoder
  name: ln_pre
  source: vision_model.pre_layrnorm
- repeat: L
  name: blocks
  body: clip_block
  source: vision_model.encoder.layers
- take_token: {index: 0}  # pooled output: the class token
- layernorm: {}
  name: ln_post
  source: vision_model.post_layernorm
- linear: {out: E, bias: false}
  name: proj
  source: visual_projection
""")
    cfg.check_understood({"text_config": TEXT_TOWER, "logit_scale_init_value": TEXT_TOWER,
                          "initializer_factor": "initialisation only"})
    return spec.render()


SAM_KEYS = (size("hidden_size"), size("output_channels"), layers("num_hidden_layers"),
            heads("num_attention_heads", "hidden_size"), size("num_channels"), size("image_size", items=True),
            size("patch_size", items=True), count("window_size"), count("global_attn_indexes", items=True),
            size("mlp_dim"))
CLIP = Family(("clip", "clip_vision_model"), "CLIPVisionModelWithProjection", build_clip,
              "CLIP vision tower with its projection (a full CLIP config: its vision_config and projection_dim)",
              architectures=("CLIPModel", "CLIPVisionModel"), keys=VISION_TOWER_KEYS)


# ----------------------------------------------------------------------------------------------
# SAM
# ----------------------------------------------------------------------------------------------
def build_sam(cfg: HFConfig) -> str:
    vision = _tower(cfg, "vision_config", "sam_vision_model")
    p = "vision_config." if vision is not cfg else ""
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "SamVisionModel)")
    img = square_size(vision, "image_size", 1024)
    patch = square_size(vision, "patch_size", 16)
    check_whole_patches(vision, img, patch)
    C = vision.get_int("hidden_size", 768)
    heads = vision.get_int("num_attention_heads", 12)
    check_divides(vision, "hidden_size", C, "num_attention_heads", heads)
    L = vision.get_int("num_hidden_layers", 12)
    ratio = vision.get("mlp_ratio", 4.0)
    mlp = vision.get("mlp_dim")
    if mlp is None:  # SamVisionConfig: mlp_dim = int(hidden_size * mlp_ratio)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
            raise ImportProblem(f"{vision.where('mlp_ratio')} = {ratio!r}: expected a positive number")
        mlp = int(C * ratio)
    mlp = vision.get_int("mlp_dim", mlp)
    win = vision.get_int("window_size", 14, minimum=0)
    glob = vision.get("global_attn_indexes", [])
    if not isinstance(glob, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < L
                                             for i in glob) or len(set(glob)) != len(glob):
        raise ImportProblem(f"{vision.where('global_attn_indexes')} = {glob!r}: expected distinct block indices "
                            f"0 .. {L - 1} (num_hidden_layers = {L})")
    rel_pos = vision.get_bool("use_rel_pos", True)
    abs_pos = vision.get_bool("use_abs_pos", True)
    N = vision.get_int("output_channels", 256)
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", p + "image_size")
    spec.dim("patch", patch, "patch side in pixels", p + "patch_size")
    spec.dim("C", C, "model width", p + "hidden_size")
    spec.dim("heads", heads, "attention heads", p + "num_attention_heads")
    spec.dim("L", L, "depth (encoder blocks)", p + "num_hidden_layers")
    spec.dim("F", mlp, "MLP hidden width", p + "mlp_dim")
    windowed = win > 0 and len(glob) < L
    if windowed:
        spec.dim("win", win, "window side in tokens (windowed blocks)", p + "window_size")
    spec.dim("N", N, "neck channels", p + "output_channels")
    spec.derived("G", "img // patch", "token grid side")
    spec.derived("S", "G**2", "tokens (the G x G grid; no class token)")
    fn = activation(vision, "hidden_act", "gelu")
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", str(vision.get_int("num_channels", 3)), "img", "img"], p + "num_channels")
    where = (f"{win}x{win} windowed attention" + (f" and global attention at blocks {', '.join(map(str, glob))}"
                                                  if glob else "") if windowed else "global attention")
    spec.doc = (f"SAM image encoder imported from a Hugging Face config: patch {patch}, width {C}, {L} pre-LN "
                f"blocks with {where}" + (", decomposed relative positions" if rel_pos else "")
                + f", {fn} MLP; neck conv1x1 -> LayerNorm2d -> conv3x3 -> LayerNorm2d to {N} channels")
    qkv = "" if vision.get_bool("qkv_bias", True) else ", qkv_bias: false"
    rel = ", rel_pos: true" if rel_pos else ""
    attention = (f"- attention: {{heads: heads, window: window, grid: [G, G]{rel}{qkv}}}  # window_size, use_rel_pos"
                 if windowed else f"- attention: {{heads: heads, grid: [G, G]{rel}{qkv}}}  # use_rel_pos")
    body = f"""\
- residual:
    - layernorm: {{}}  # layer_norm1
      source: layer_norm1
    # with a window, SAM pads the grid to a multiple of it and runs qkv, the attention and proj on the
    # padded windows: charged as executed
    {attention}
      source: attn
- residual:
    - layernorm: {{}}  # layer_norm2
      source: layer_norm2
    - mlp: {{hidden: F, fn: {fn}}}  # lin1 -> hidden_act -> lin2
      source: mlp
"""
    if windowed:
        spec.block("sam_block", "params: {window: win}  # window side; 0 = global attention\nlayers:\n"
                   + "\n".join("  " + line if line else "" for line in body.splitlines()) + "\n")
    else:
        spec.block("sam_block", body)
    spec.header.append("# `source:` and `ignore:` name modules of transformers' SamVisionModel")
    if rel_pos:
        spec.ignore("""\
- module: "vision_encoder.layers.*.attn"
  kinds: [unknown:aten.upsample_linear1d, unknown:aten.upsample_linear1d_backward]
  reason: >-
    transformers' get_rel_pos always resizes the relative-position tables with F.interpolate (to
    2*size-1 rows, the size they already have); the spec reads the tables as they are
""")
    pos = ", pos_embed: true" if abs_pos else ""
    at = (f"\n  at:\n    - {{indices: [{', '.join(map(str, glob))}], name: global, args: {{window: 0}}}}"
          "  # global_attn_indexes" if windowed and glob else "")
    spec.layers(f"""\
- patch_embed: {{patch: patch, dim: C{pos}}}  # use_abs_pos: a (G, G, C) table added on the grid
  source: vision_encoder.patch_embed
- repeat: L
  name: blocks
  body: sam_block
  source: vision_encoder.layers{at}
""")
    spec.layers("""\
- transpose: {axis0: 1, axis1: 2}  # [B, C, S]
- reshape: {shape: [B, C, G, G]}
- sequence:
    - conv2d: {out: N, kernel: 1, bias: false}  # conv1
    - layernorm2d: {}  # layer_norm1
    - conv2d: {out: N, kernel: 3, padding: 1, bias: false}  # conv2
    - layernorm2d: {}  # layer_norm2
  name: neck
  source: vision_encoder.neck
""")
    cfg.check_understood({
        "num_pos_feats": SAM_PROMPT, "scale": SAM_PROMPT, "prompt_encoder_config": SAM_PROMPT,
        "mask_decoder_config": SAM_PROMPT, "tie_word_embeddings": SAM_PROMPT,
        **({} if mlp is None else {}),
    })
    return spec.render()


SAM = Family(("sam", "sam_vision_model"), "SamVisionModel", build_sam,
             "SAM's image encoder: windowed and global attention, relative positions, the neck "
             "(a full SAM config: its vision_config)", architectures=("SamModel",),
             refused=("global_attn_indexes that are not distinct block indices below num_hidden_layers",),
             keys=SAM_KEYS + under("vision_config", SAM_KEYS))

FAMILY_LIST = (CLIP, SAM)
