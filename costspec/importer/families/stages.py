"""Hierarchical vision backbones with pooled outputs: ConvNeXt and ConvNeXt-V2 (convolutional stages) and
Swin (windowed attention stages with patch merging). The specs end in the model's pooling (ConvNeXt: mean +
LayerNorm; Swin: the average over the tokens), so they are checked against the model's `pooler_output`; with
`--no-pooler` they end at its `last_hidden_state` (ConvNeXt: the last stage's feature map; Swin: the final
LayerNorm's tokens, SwinModel built with add_pooling_layer=False)."""
from __future__ import annotations

from fractions import Fraction

from costspec.importer.config import HFConfig, ImportProblem, count, layers, ratio, size
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, Family, Variant
from costspec.importer.families.common import activation, check_divides, square_size
from costspec.importer.families.modern_template import precision

# keys of the backbone API (SwinBackbone / ConvNextBackbone's returned stages) and of heads the spec leaves out
BACKBONE = {
    "stage_names": "names the stages for the Backbone classes; the model runs every stage",
    "out_features": "the Backbone classes' returned stages; the model runs every stage",
    "out_indices": "the Backbone classes' returned stages; the model runs every stage",
    "drop_path_rate": "stochastic depth: the identity in eval mode, as costspec counts",
}
POOLED = "pooler_output"
LAST = "last_hidden_state"


def pooled_variant(hf_class: str, no_pooler: dict[str, str] | None = None):
    """The Variant of a family with a pooled output: `hf_class`'s pooler_output, or with --no-pooler its
    last_hidden_state (`no_pooler`: the constructor arguments that drop the pooler, where the class has them)."""
    def variant(cfg: HFConfig) -> Variant:
        if cfg.pooler:
            return Variant(hf_class, output=POOLED)
        return Variant(hf_class, dict(no_pooler or {}), LAST)
    return variant


def output_line(hf_class: str, cfg: HFConfig, built: str = "") -> str:
    """The header line naming the class and the output the spec stands for."""
    if cfg.pooler:
        return f"# `source:` names modules of transformers' {hf_class}; the spec's output is its pooler_output"
    return (f"# `source:` names modules of transformers' {hf_class}{built}; the spec's output is its "
            "last_hidden_state (imported with --no-pooler)")


def _int_list(cfg: HFConfig, key: str, default: list[int], n: int | None = None) -> list[int]:
    value = cfg.get(key, default)
    if (not isinstance(value, list) or not value
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
        raise ImportProblem(f"{cfg.where(key)} = {value!r}: expected a non-empty list of positive whole numbers")
    if n is not None and len(value) != n:
        raise ImportProblem(f"{cfg.where(key)} has {len(value)} entries, expected {n} (one per stage)")
    return value


def _stage_count(cfg: HFConfig, key: str, n: int) -> None:
    """num_stages / num_layers, when present, must agree with the per-stage lists."""
    if cfg.has(key) and cfg.get_int(key) != n:
        raise ImportProblem(f"{cfg.where(key)} = {cfg.get(key)!r} but the per-stage lists have {n} entries")


# ----------------------------------------------------------------------------------------------
# ConvNeXt
# ----------------------------------------------------------------------------------------------
def build_convnext(cfg: HFConfig) -> str:
    return _convnext(cfg, v2=False)


def build_convnextv2(cfg: HFConfig) -> str:
    return _convnext(cfg, v2=True)


def _convnext(cfg: HFConfig, v2: bool) -> str:
    """ConvNeXt (v2: ConvNeXt-V2, whose block puts a GRN between the MLP's activation and its second
    projection and has no layer scale)."""
    widths = _int_list(cfg, "hidden_sizes", [96, 192, 384, 768])
    n = len(widths)
    depths = _int_list(cfg, "depths", [3, 3, 9, 3], n)
    _stage_count(cfg, "num_stages", n)
    patch = square_size(cfg, "patch_size", 4)
    img = square_size(cfg, "image_size", 224)
    if img % (patch * 2 ** (n - 1)):
        raise ImportProblem(f"{cfg.where('image_size')} = {img} is not a multiple of patch_size x 2^(stages - 1) = "
                            f"{patch * 2 ** (n - 1)} (each stage after the first halves the grid)")
    fn = activation(cfg, "hidden_act", "gelu")
    gamma = 0 if v2 else cfg.get("layer_scale_init_value", 1e-6)  # V2's config has no such key (unread: refused)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or gamma < 0:
        raise ImportProblem(f"{cfg.where('layer_scale_init_value')} = {gamma!r}: expected a number >= 0")
    hf_class = "ConvNextV2Model" if v2 else "ConvNextModel"
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    f"{hf_class})")
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", "image_size")
    spec.dim("patch", patch, "stem patch side", "patch_size")
    for i, c in enumerate(widths):
        spec.dim(f"C{i + 1}", c, f"stage {i + 1} width", f"hidden_sizes[{i}]")
    for i, d in enumerate(depths):
        spec.dim(f"D{i + 1}", d, f"stage {i + 1} blocks", f"depths[{i}]")
    if v2:
        precision(spec, cfg)
    else:
        spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", str(cfg.get_int("num_channels", 3)), "img", "img"], "num_channels")
    scale = f"layer scale (init {gamma})" if gamma > 0 else "no layer scale"
    if v2:
        scale = "GRN after the activation, " + scale
    spec.doc = (f"ConvNeXt{'-V2' if v2 else ''} imported from a Hugging Face config: {patch}x{patch} "
                f"stride-{patch} stem + LayerNorm, "
                f"{n} stages of widths {', '.join(map(str, widths))} and depths {', '.join(map(str, depths))} "
                f"(7x7 depthwise conv, LayerNorm, 4x MLP with {fn}, {scale}, residual), LayerNorm + 2x2 stride-2 "
                "conv between stages, global average pool + LayerNorm (pooler_output); no classifier")
    layer_scale = ("""\
      # layer_scale_parameter: a (C,) parameter of the block itself, so no source of its own
      - layer_scale: {}
""" if gamma > 0 else "" if v2 else "      # layer_scale_init_value 0: no layer scale\n")
    mlp = (f"""\
      - linear: {{out: 4*width}}
        source: pwconv1
      - activation: {{fn: {fn}}}
        source: act
      - grn: {{}}  # global response norm over the 4C channels: gamma * (x * N) + beta + x
        source: grn
      - linear: {{out: width}}
        source: pwconv2
""" if v2 else f"""\
      - mlp: {{hidden: 4*width, fn: {fn}}}  # pwconv1 (C -> 4C), hidden_act, pwconv2 (4C -> C)
        source: [pwconv1, act, pwconv2]
""")
    block_doc = ("x + permute(pwconv2(GRN(act(pwconv1(LN(permute(dwconv7x7(x))))))))" if v2
                 else "x + permute(gamma * pwconv2(act(pwconv1(LN(permute(dwconv7x7(x)))))))")
    spec.block("convnext_block", f"""\
doc: "{block_doc}"
params: {{width: C1}}
layers:
  - residual:
      - conv2d: {{out: width, kernel: 7, padding: 3, groups: width}}  # depthwise 7x7
        source: dwconv
      - permute: {{order: [0, 2, 3, 1]}}  # NCHW -> NHWC: the norm and the MLP run on the last dim
      - layernorm: {{}}
        source: layernorm
{mlp}{layer_scale}      - permute: {{order: [0, 3, 1, 2]}}  # back to NCHW
""")
    if n > 1:
        spec.block("stage", """\
doc: downsampling (LayerNorm over channels, 2x2 stride-2 conv) then `depth` blocks
params: {width: C2, depth: D2}
layers:
  - layernorm2d: {}  # ConvNextLayerNorm channels_first
    source: downsampling_layer.0
  - conv2d: {out: width, kernel: 2, stride: 2}
    source: downsampling_layer.1
  - repeat: depth
    name: layers
    body: convnext_block
    args: {width: width}
    source: layers
""")
    spec.header.append(output_line(hf_class, cfg))
    spec.layers("""\
- conv2d: {out: C1, kernel: patch, stride: patch}
  name: stem
  source: embeddings.patch_embeddings
- layernorm2d: {}
  name: stem_norm
  source: embeddings.layernorm
# stage 1 keeps the stem's width and resolution: no downsampling layer
- sequence:
    - repeat: D1
      name: layers
      body: convnext_block
      args: {width: C1}
      source: layers
  name: stage1
  source: encoder.stages.0
""")
    for i in range(1, n):
        spec.layers(f"""\
- block: stage
  name: stage{i + 1}
  args: {{width: C{i + 1}, depth: D{i + 1}}}
  source: encoder.stages.{i}
""")
    if cfg.pooler:
        spec.layers("""\
- mean: {axes: [2, 3]}  # global average pool: last_hidden_state.mean([-2, -1])
  name: pool
- layernorm: {}
  source: layernorm
""")
    else:
        spec.doc = spec.doc.replace("global average pool + LayerNorm (pooler_output)",
                                    "its last_hidden_state (--no-pooler: no pool, no LayerNorm)")
        side = "img // patch" + (f" // {2 ** (n - 1)}" if n > 1 else "")
        spec.ignore(f"""\
- module: layernorm
  reason: >-
    the pooler's LayerNorm: {hf_class} always pools (last_hidden_state.mean, then this LayerNorm, for
    pooler_output); with --no-pooler the spec ends at last_hidden_state, before it
- module: ""
  extra: {{mean: "B*C{n}*({side})**2"}}
  pass: forward
  reason: >-
    {hf_class}'s forward averages last_hidden_state over the feature map for pooler_output (one mean per
    element of the last stage's map), the pool the spec leaves out with --no-pooler; no gradient reaches it
""")
    cfg.check_understood(BACKBONE)
    return spec.render()


# ----------------------------------------------------------------------------------------------
# Swin
# ----------------------------------------------------------------------------------------------
SWIN_IGNORED = {**BACKBONE, "encoder_stride": "SwinForMaskedImageModeling's decoder only"}


def _mlp_hidden(cfg: HFConfig, widths: list[int]) -> str:
    """int(mlp_ratio * width) for every stage width, as an expression of the block's `width`."""
    ratio = cfg.get("mlp_ratio", 4.0)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
        raise ImportProblem(f"{cfg.where('mlp_ratio')} = {ratio!r}: expected a positive number")
    exact = Fraction(ratio).limit_denominator(64)
    if any((exact.numerator * w) // exact.denominator != int(ratio * w) or int(ratio * w) < 1 for w in widths):
        raise ImportProblem(f"{cfg.where('mlp_ratio')} = {ratio!r}: int(mlp_ratio * width) is not a simple "
                            f"fraction of the widths {widths}")
    if exact.denominator == 1:
        return f"{exact.numerator}*width"
    return f"{exact.numerator}*width // {exact.denominator}"


def _swin_grids(cfg: HFConfig, img: int, patch: int, window: int, depths: list[int]) -> list[int]:
    """The token grid side of every stage; refuses what transformers pads (the spec does not model it)."""
    if img % patch:
        raise ImportProblem(f"{cfg.where('image_size')} = {img} is not a multiple of patch_size = {patch} "
                            "(transformers pads the image; the importer does not model it)")
    grids = [img // patch]
    for i in range(1, len(depths)):
        if grids[-1] % 2:
            raise ImportProblem(f"{cfg.where('image_size')} = {img}: stage {i} has an odd grid {grids[-1]}, which "
                                "patch merging pads (not modelled); choose an image size with even stage grids")
        grids.append(grids[-1] // 2)
    for i, (g, d) in enumerate(zip(grids, depths)):
        if g < window:
            raise ImportProblem(f"{cfg.where('window_size')} = {window}: stage {i + 1}'s grid {g} is smaller than the "
                                "window; transformers' SwinModel shrinks the window to the grid but keeps the "
                                "window's bias table, and fails")
        if g > window and d > 1 and g % window:
            raise ImportProblem(f"{cfg.where('window_size')} = {window}: stage {i + 1}'s grid {g} is not a multiple "
                                "of the window, and transformers pads before shifting (not modelled)")
    return grids


def build_swin(cfg: HFConfig) -> str:
    depths = _int_list(cfg, "depths", [2, 2, 6, 2])
    n = len(depths)
    heads = _int_list(cfg, "num_heads", [3, 6, 12, 24], n)
    _stage_count(cfg, "num_layers", n)
    C = cfg.get_int("embed_dim", 96)
    widths = [C * 2**i for i in range(n)]
    if cfg.has("hidden_size") and cfg.get_int("hidden_size") != widths[-1]:
        raise ImportProblem(f"{cfg.where('hidden_size')} = {cfg.get('hidden_size')!r} but embed_dim x 2^(stages - 1) "
                            f"= {widths[-1]}")
    for i, (w, h) in enumerate(zip(widths, heads)):
        check_divides(cfg, "embed_dim", w, f"num_heads[{i}]", h)
    img = square_size(cfg, "image_size", 224)
    patch = square_size(cfg, "patch_size", 4)
    window = cfg.get_int("window_size", 7)
    grids = _swin_grids(cfg, img, patch, window, depths)
    hidden = _mlp_hidden(cfg, widths)
    fn = activation(cfg, "hidden_act", "gelu")
    qkv = "" if cfg.get_bool("qkv_bias", True) else ", qkv_bias: false"
    absolute = cfg.get_bool("use_absolute_embeddings", False)
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "SwinModel)")
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", "image_size")
    spec.dim("patch", patch, "patch side in pixels", "patch_size")
    spec.dim("C", C, "stage 1 width; stage i has C * 2**(i-1)", "embed_dim")
    spec.dim("win", window, "window side in tokens", "window_size")
    for i, h in enumerate(heads):
        spec.dim(f"H{i + 1}", h, f"stage {i + 1} heads", f"num_heads[{i}]")
    for i, d in enumerate(depths):
        spec.dim(f"D{i + 1}", d, f"stage {i + 1} blocks", f"depths[{i}]")
    spec.derived("G1", "img // patch", f"stage 1 token grid side ({grids[0]})")
    for i in range(1, n):
        spec.derived(f"G{i + 1}", f"G{i} // 2", f"stage {i + 1} token grid side ({grids[i]})")
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", str(cfg.get_int("num_channels", 3)), "img", "img"], "num_channels")
    spec.doc = (f"Swin imported from a Hugging Face config: {patch}x{patch} patch embedding + LayerNorm"
                + (", absolute position embedding" if absolute else "")
                + f", {n} stages of depths {', '.join(map(str, depths))} and heads {', '.join(map(str, heads))} "
                f"(width {C} doubling per stage): pre-LN blocks with {window}x{window} window attention (relative "
                f"position bias table, shifted windows on odd blocks where the grid is larger than the window), "
                f"{fn} MLP; patch merging between stages; final LayerNorm"
                + (" and average pool (pooler_output)" if cfg.pooler else " (last_hidden_state; --no-pooler)"))
    spec.block("swin_block", f"""\
doc: "x + attn(LN(x)) in (shifted) windows, then x + mlp(LN(x))"
params: {{width: C, heads: H1, grid: G1, shift: 0}}
layers:
  - residual:
      - layernorm: {{}}
        source: layernorm_before
      # q_proj, k_proj, v_proj, o_proj; the bias table gathered per window and added to the scores, with
      # the shift mask (positions only) added to it first in the shifted blocks
      - attention: {{heads: heads, window: win, grid: [grid, grid], shift: shift, rel_bias: swin,
                     fused_qkv: false{qkv}}}
        source: attention
  - residual:
      - layernorm: {{}}
        source: layernorm_after
      - mlp: {{hidden: {hidden}, fn: {fn}}}  # int(mlp_ratio * width), hidden_act
        source: mlp
""")
    if n > 1:
        spec.block("patch_merging", """\
doc: "each 2x2 neighbourhood of tokens concatenated (4*width channels), LayerNorm, Linear to 2*width, no bias"
params: {width: C, grid: G1}
layers:
  # token (2i + r, 2j + c) -> [B, i, j, (c, r), width]: transformers' torch.cat of x[:, r::2, c::2]
  - reshape: {shape: [B, grid // 2, 2, grid // 2, 2, width]}
  - permute: {order: [0, 1, 3, 4, 2, 5]}
  - reshape: {shape: [B, (grid // 2)**2, 4*width]}
  - layernorm: {}
    source: norm
  - linear: {out: 2*width, bias: false}
    source: reduction
""")
    spec.header.append(output_line("SwinModel", cfg, "(add_pooling_layer=False)"))
    for i in range(n - 1):
        w = "C" if i == 0 else f"{2**i}*C"
        spec.ignore(f"""\
- module: encoder.layers.{i}.downsample
  extra: {{add: "3*B*G{i + 1}**2*{w}"}}
  pass: backward
  reason: >-
    patch merging gathers the 2x2 neighbourhoods with four strided slices; autograd sums their four
    zero-filled full-size gradients (3 adds per element of the merged input)
""")
    if absolute:  # the table is a parameter of `embeddings` itself: the three layers as that scope
        spec.layers("""\
- sequence:
    - patch_embed: {patch: patch, dim: C}
      source: patch_embeddings
    - layernorm: {}
      name: norm
      source: norm
    - position_embedding: {}  # use_absolute_embeddings: a (1, patches, C) parameter added to the tokens
      name: position_embeddings
  name: embeddings
  source: embeddings
""")
    else:
        spec.layers("""\
- patch_embed: {patch: patch, dim: C}
  source: embeddings.patch_embeddings
- layernorm: {}
  name: embed_norm
  source: embeddings.norm
""")
    for i, (g, d) in enumerate(zip(grids, depths)):
        w = "C" if i == 0 else f"{2**i}*C"
        # a grid of one window: transformers shifts nothing there
        shifted = g > window and window // 2 > 0
        odd = [j for j in range(1, d, 2)]
        variants = (f"""\
      at:
        - {{indices: [{', '.join(map(str, odd))}], name: shifted, args: {{shift: win // 2}}}}
""" if shifted and odd else "")
        merge = (f"""\
    - block: patch_merging
      name: downsample
      args: {{width: {w}, grid: G{i + 1}}}
      source: downsample
""" if i < n - 1 else "")
        note = "" if shifted or g > window else f"# stage {i + 1}: the grid is one window: no shifted blocks\n"
        spec.layers(f"""\
{note}- sequence:
    - repeat: D{i + 1}
      name: blocks
      body: swin_block
      args: {{width: {w}, heads: H{i + 1}, grid: G{i + 1}, shift: 0}}
      source: blocks
{variants}{merge}  name: stage{i + 1}
  source: encoder.layers.{i}
""")
    spec.layers("""\
- layernorm: {}
  source: layernorm
""" + ("""\
- mean: {axes: [1]}  # pooler: AdaptiveAvgPool1d(1) over the tokens (torch runs it as a mean), then flatten
  name: pool
  source: pooler
""" if cfg.pooler else ""))
    cfg.check_understood(SWIN_IGNORED)
    return spec.render()


STAGE_KEYS = (size("num_channels"), size("patch_size", items=True), size("image_size", items=True),
              count("num_stages"), size("hidden_sizes", items=True), layers("depths", items=True), ratio("mlp_ratio"))
SWIN_KEYS = STAGE_KEYS + (size("embed_dim"), size("num_heads", items=True), size("window_size"), count("num_layers"),
                          size("hidden_size"))
CONVNEXT = Family(("convnext",), "ConvNextModel", build_convnext,
                  "ConvNeXt: convolutional stages, pooled and normalised output (pooler_output)",
                  architectures=("ConvNextForImageClassification",), options=(POOLER,),
                  variant=pooled_variant("ConvNextModel"),
                  refused=("image_size not a multiple of patch_size x 2^(stages - 1)",), keys=STAGE_KEYS)
CONVNEXTV2 = Family(("convnextv2",), "ConvNextV2Model", build_convnextv2,
                    "ConvNeXt-V2: ConvNeXt stages with a GRN in each block's MLP, no layer scale; pooled and "
                    "normalised output (pooler_output)",
                    architectures=("ConvNextV2ForImageClassification",), options=(POOLER,),
                    variant=pooled_variant("ConvNextV2Model"),
                    refused=("image_size not a multiple of patch_size x 2^(stages - 1)",), keys=STAGE_KEYS)
SWIN = Family(("swin",), "SwinModel", build_swin,
              "Swin: windowed-attention stages with patch merging, averaged output (pooler_output)",
              architectures=("SwinForImageClassification",), options=(POOLER,),
              variant=pooled_variant("SwinModel", {"add_pooling_layer": "false"}),
              refused=("an image or stage grid transformers pads (not a multiple of the patch, odd before a merge, "
                       "or not a multiple of the window in a stage with shifted blocks)",
                       "a stage grid smaller than the window (transformers keeps the window's bias table and fails)",
                       "an mlp_ratio that is not a simple fraction of the widths"), keys=SWIN_KEYS)

FAMILY_LIST = (CONVNEXT, CONVNEXTV2, SWIN)
