"""BEiT (transformers' BeitModel, with its pooler): patch embedding with a class token (and, with
use_absolute_position_embeddings, a position table), pre-LN layers whose attention has no key bias and
whose two branches are scaled by learned per-channel lambdas (layer_scale_init_value > 0), then the pooler:
LayerNorm of the mean of the patch tokens (use_mean_pooling) or the class token after a final LayerNorm.
BEiT's relative position bias (a table over the whole token grid plus three class-token entries) is an
attention bias costspec's attention op does not have: a config that enables it is refused, naming the key."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import activation, check_divides, check_whole_patches, square_size
from costspec.importer.families.modern_template import precision

HEADS_ONLY = "BeitForSemanticSegmentation's / BeitBackbone's heads and outputs only (BeitModel has none)"
IGNORED = {
    "vocab_size": "the visual-token vocabulary of BeitForMaskedImageModeling's head only",
    "drop_path_rate": "stochastic depth: the identity in eval mode, as costspec counts",
    **{key: HEADS_ONLY for key in ("pool_scales", "use_auxiliary_head", "auxiliary_loss_weight",
                                   "auxiliary_channels", "auxiliary_num_convs", "auxiliary_concat_input",
                                   "semantic_loss_ignore_index", "add_fpn", "reshape_hidden_states", "stage_names",
                                   "out_features", "out_indices")},
}
REL_BIAS = ("BEiT's relative position bias (a (2h-1)(2w-1)+3 x heads table over the whole token grid, the class "
            "token's three entries included) is not an attention bias costspec has (rel_bias covers T5's buckets and "
            "Swin's windows)")


def build_beit(cfg: HFConfig) -> str:
    for key in ("use_relative_position_bias", "use_shared_relative_position_bias"):
        if cfg.get_bool(key, False):
            raise cfg.refuse(key, REL_BIAS)
    if cfg.get_bool("use_mask_token", False):
        raise cfg.refuse("use_mask_token", "a (1, 1, C) mask token only masked image modelling runs; BeitModel holds "
                         "it as a parameter the spec would not have (set it false, as BeitForImageClassification does)")
    C = cfg.get_int("hidden_size", 768)
    n_heads = cfg.get_int("num_attention_heads", 12)
    check_divides(cfg, "hidden_size", C, "num_attention_heads", n_heads)
    img, patch = square_size(cfg, "image_size", 224), square_size(cfg, "patch_size", 16)
    check_whole_patches(cfg, img, patch)
    fn = activation(cfg, "hidden_act", "gelu")
    gamma = cfg.get("layer_scale_init_value", 0.1)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or gamma < 0:
        raise ImportProblem(f"{cfg.where('layer_scale_init_value')} = {gamma!r}: expected a number >= 0")
    absolute = cfg.get_bool("use_absolute_position_embeddings", False)
    mean_pool = cfg.get_bool("use_mean_pooling", True)
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "BeitModel)")
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", "image_size")
    spec.dim("patch", patch, "patch side", "patch_size")
    spec.dim("C", C, "model width", "hidden_size")
    spec.dim("heads", n_heads, "attention heads", "num_attention_heads")
    spec.dim("F", cfg.get_int("intermediate_size", 3072), "MLP hidden width", "intermediate_size")
    spec.dim("L", cfg.get_int("num_hidden_layers", 12), "encoder layers", "num_hidden_layers")
    precision(spec, cfg)
    spec.input(["B", str(cfg.get_int("num_channels", 3)), "img", "img"], "num_channels")
    spec.doc = (f"BEiT imported from a Hugging Face config: {patch}x{patch} patches, a class token"
                + (", absolute position embeddings" if absolute else ", no position embeddings (no relative bias)")
                + f"; pre-LN layers (no key bias, {fn} MLP"
                + (f", layer scale init {gamma})" if gamma > 0 else ", no layer scale)")
                + ("; the pooler's LayerNorm of the mean patch token" if mean_pool
                   else "; final LayerNorm, the class token") + " (pooler_output); no head")
    scale = ("layer_scale: {}  # lambda: a (C,) parameter of the layer itself, so no source of its own" if gamma > 0
             else "scale: {by: 1}  # layer_scale_init_value 0: lambda is the number 1.0, which the layer still "
             "multiplies by")
    spec.block("layer", f"""\
doc: "x + lambda_1 * attn(LN(x)), then x + lambda_2 * mlp(LN(x))"
layers:
  - residual:
      - layernorm: {{}}
        source: layernorm_before
      - attention: {{heads: heads, fused_qkv: false, k_bias: false}}  # q_proj, k_proj (no bias), v_proj, o_proj
        source: attention
      - {scale}
  - residual:
      - layernorm: {{}}
        source: layernorm_after
      - mlp: {{hidden: F, fn: {fn}}}  # fc1, hidden_act, fc2
        source: mlp
      - {scale}
""")
    spec.header.append("# `source:` names modules of transformers' BeitModel; the spec's output is its pooler_output")
    pos = ", pos_embed: true" if absolute else ""
    spec.layers(f"""\
- patch_embed: {{patch: patch, dim: C, cls_token: true{pos}}}
  source: embeddings
- repeat: L
  name: layers
  body: layer
  source: layers
""")
    if mean_pool:
        spec.layers("""\
# the model's layernorm is the identity with mean pooling
- sequence:
    - slice: {axis: 1, start: 1, end: (img // patch)**2 + 1}  # the patch tokens
    - mean: {axes: [1]}
    - layernorm: {}
      source: layernorm
  name: pooler
  source: pooler
""")
    else:
        spec.layers("""\
- layernorm: {}
  source: layernorm
- take_token: {index: 0}  # the pooler: the class token
  name: pooler
""")
    cfg.check_understood(IGNORED)
    return spec.render()


KEYS = (size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
        heads("num_attention_heads", "hidden_size"), size("image_size", items=True), size("patch_size", items=True),
        size("num_channels"))
BEIT = Family(("beit",), "BeitModel", build_beit,
              "BEiT image encoder with its pooler (mean of the patch tokens + LayerNorm, or the class token): no key "
              "bias, layer scale (pooler_output)",
              architectures=("BeitForImageClassification",), hf_output=lambda cfg: "pooler_output",
              refused=("use_relative_position_bias / use_shared_relative_position_bias: true (" + REL_BIAS + ")",
                       "use_mask_token: true (a parameter only masked image modelling runs)"), keys=KEYS)

FAMILY_LIST = (BEIT,)
