"""BEiT (transformers' BeitModel, with its pooler): patch embedding with a class token (and, with
use_absolute_position_embeddings, a position table), pre-LN layers whose attention has no key bias and
whose two branches are scaled by learned per-channel lambdas (layer_scale_init_value > 0), then the pooler:
LayerNorm of the mean of the patch tokens (use_mean_pooling) or the class token after a final LayerNorm.
With use_relative_position_bias each layer's attention adds its own relative position bias (`rel_bias: beit`:
a table over the patch grid's offsets plus three class-token entries); with use_shared_relative_position_bias
one table (BeitModel.shared_position_bias) is written in the first layer and read by the others
(rel_bias_readers / rel_bias_shared); both at once are refused, naming the key. use_mask_token holds the
masked-image-modelling token (patch_embed's mask_token: parameters only)."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, Family, Variant
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
REL_BIAS = ("with use_relative_position_bias too, each layer adds its own bias to the shared one (an add per "
            "score and layer the attention op does not have): not imported (either one alone is)")


def build_beit(cfg: HFConfig) -> str:
    shared = cfg.get_bool("use_shared_relative_position_bias", False)
    per_layer = cfg.get_bool("use_relative_position_bias", False)
    if shared and per_layer:
        raise cfg.refuse("use_shared_relative_position_bias", REL_BIAS)
    mask_token = cfg.get_bool("use_mask_token", False)
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
    n_layers = cfg.get_int("num_hidden_layers", 12)
    spec.dim("L", n_layers, "encoder layers", "num_hidden_layers")
    precision(spec, cfg)
    spec.input(["B", str(cfg.get_int("num_channels", 3)), "img", "img"], "num_channels")
    spec.doc = (f"BEiT imported from a Hugging Face config: {patch}x{patch} patches, a class token"
                + (", absolute position embeddings" if absolute else "")
                + (", no position embeddings" if not absolute and not per_layer else "")
                + "; pre-LN layers (no key bias"
                + (", a relative position bias table per layer" if per_layer else "") + f", {fn} MLP"
                + (f", layer scale init {gamma})" if gamma > 0 else ", no layer scale)")
                + (("; the pooler's LayerNorm of the mean patch token" if mean_pool
                    else "; final LayerNorm, the class token") + " (pooler_output); no head" if cfg.pooler
                   else ("; the tokens" if mean_pool else "; final LayerNorm")
                   + " (last_hidden_state: --no-pooler); no head"))
    scale = ("layer_scale: {}  # lambda: a (C,) parameter of the layer itself, so no source of its own" if gamma > 0
             else "scale: {by: 1}  # layer_scale_init_value 0: lambda is the number 1.0, which the layer still "
             "multiplies by")
    grid = "grid: [img // patch, img // patch]"
    plain = "{heads: heads, fused_qkv: false, k_bias: false}  # q_proj, k_proj (no bias), v_proj, o_proj"
    if shared:  # the table in BeitModel.shared_position_bias, written in the first layer, read by the others
        first = (f"{{heads: heads, fused_qkv: false, k_bias: false, {grid},\n"
                 "                     rel_bias: beit, rel_bias_readers: L - 1}  # the shared table's bias, made once "
                 "and read by every layer")
        spec.block("first_layer", layer_text(first, scale, fn, "layers.0.", ", shared_position_bias"))
        if n_layers > 1:
            spec.block("layer", layer_text(f"{{heads: heads, fused_qkv: false, k_bias: false, {grid},\n"
                                           "                     rel_bias: beit, rel_bias_shared: true}  # reads "
                                           "the shared bias", scale, fn))
    elif per_layer:
        spec.block("layer", layer_text(f"{{heads: heads, fused_qkv: false, k_bias: false,\n                     "
                                       f"{grid}, rel_bias: beit}}  # q_proj, k_proj (no bias), v_proj, o_proj; the "
                                       "layer's own relative position bias", scale, fn, "",
                                       ", relative_position_bias"))
    else:
        spec.block("layer", layer_text(plain, scale, fn))
    spec.header.append("# `source:` names modules of transformers' BeitModel; the spec's output is its pooler_output"
                       if cfg.pooler else "# `source:` names modules of transformers' BeitModel(add_pooling_layer="
                       "False); the spec's output is its last_hidden_state (imported with --no-pooler)")
    if per_layer:
        spec.ignore(table_rule("layers.*.relative_position_bias", "L"))
    if shared:
        spec.ignore(table_rule("shared_position_bias", "1"))
    pos = (", pos_embed: true" if absolute else "") + (", mask_token: true" if mask_token else "")
    spec.layers(f"""\
- patch_embed: {{patch: patch, dim: C, cls_token: true{pos}}}
  source: embeddings
""")
    if shared:
        spec.layers("- block: first_layer  # layers.0, with the shared table\n  name: layer0\n")
    if not shared or n_layers > 1:
        spec.layers(f"""\
- repeat: {"L - 1" if shared else "L"}
  name: layers
  body: layer
  source: layers
""")
    if not cfg.pooler:
        if not mean_pool:  # with mean pooling, BeitModel's layernorm is the identity, and its pooler is not built
            spec.layers("- layernorm: {}\n  source: layernorm\n")
    elif mean_pool:
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


def layer_text(attention: str, scale: str, fn: str, prefix: str = "", table: str = "") -> str:
    """One BEiT layer; `prefix`: its modules' path when the layer is not a repeat instance (the first layer
    of a shared table, written from the model's root); `table`: the module holding its attention's table."""
    attention_source = f"{prefix}attention{table}"
    if table:
        attention_source = f"[{attention_source}]"
    return f"""\
doc: "x + lambda_1 * attn(LN(x)), then x + lambda_2 * mlp(LN(x))"
layers:
  - residual:
      - layernorm: {{}}
        source: {prefix}layernorm_before
      - attention: {attention}
        source: {attention_source}
      - {scale}
  - residual:
      - layernorm: {{}}
        source: {prefix}layernorm_after
      - mlp: {{hidden: F, fn: {fn}}}  # fc1, hidden_act, fc2
        source: {prefix}mlp
      - {scale}
"""


def table_rule(module: str, tables: str) -> str:
    """What BeitRelativePositionBias runs beside the gather the spec prices, for `tables` tables."""
    offsets = "(2*(img // patch) - 1)**2*heads"
    return f"""\
- module: "{module}"
  extra: {{bilinear: "{tables}*{offsets}"}}
  pass: forward
  reason: >-
    BeitRelativePositionBias resizes the table's (2H-1)(2W-1) offset rows (per head) with a bilinear
    interpolate to the size they already have (transformers always resizes them) before it concatenates
    the three class-token rows and gathers the bias: one bilinear per element
- module: "{module}"
  extra: {{bilinear_backward: "{tables}*{offsets}", add: "{tables}*({offsets} + 3*heads)"}}
  pass: backward
  reason: >-
    the interpolate's backward, and the table's gradient assembled from the two slices it was read by
    (the offset rows through the interpolate, the class-token rows directly): one add per table element
"""


KEYS = (size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
        heads("num_attention_heads", "hidden_size"), size("image_size", items=True), size("patch_size", items=True),
        size("num_channels"))
BEIT = Family(("beit",), "BeitModel", build_beit,
              "BEiT image encoder with its pooler (mean of the patch tokens + LayerNorm, or the class token): no key "
              "bias, layer scale, optional relative position bias (per layer or shared) (pooler_output)",
              architectures=("BeitForImageClassification",), options=(POOLER,),
              variant=lambda cfg: (Variant("BeitModel", output="pooler_output") if cfg.pooler else
                                   Variant("BeitModel", {"add_pooling_layer": "false"}, "last_hidden_state")),
              refused=("use_shared_relative_position_bias and use_relative_position_bias both true (" + REL_BIAS
                       + ")",), keys=KEYS)

FAMILY_LIST = (BEIT,)
