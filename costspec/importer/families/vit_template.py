"""The ViT-like tower template: a patch embedding with a class token, pre-LN encoder layers
(x + attn(LN(x)), then x + mlp(LN(x))), a final LayerNorm and the pooler the `AutoModel` class builds, and a
table of switches (`Tower`, one per family: vision.py) for what differs.

The switches: the extra tokens (DeiT's distillation token; YOLOS's detection tokens appended, its position
tables resized to the patch grid, with use_mid_position_embeddings a resized table added after every layer
but the last, and its [height, width] image), optional absolute positions (BEiT), a mask token held for
masked image modelling (DINOv2, BEiT), the MLP width (intermediate_size, or DINOv2's mlp_ratio and SwiGLU),
layer scale (DINOv2's modules, BEiT's lambdas), the attention's q/k/v (fused with the gradient-add rule, or
separate; BEiT: no key bias and its relative position bias per layer or shared by all), the pooler (ViT's
dense + pooler_act, YOLOS's dense + tanh, BEiT's mean + LayerNorm or class token, none) and the module paths
of the layer's parts. --no-pooler ends at the class's last_hidden_state (built with add_pooling_layer=False).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from costspec.importer.config import HFConfig, ImportProblem, Key
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
from costspec.importer.families.modern_template import precision as bf16_precision

POOLED, LAST = "pooler_output", "last_hidden_state"
NO_POOLER = {"add_pooling_layer": "false"}
BARE = "; the spec's output is its last_hidden_state (imported with --no-pooler)"
POOLER_DROPPED = "the pooler's (--no-pooler: the spec stops at the last hidden state)"
REL_BIAS = ("with use_relative_position_bias too, each layer adds its own bias to the shared one (an add per "
            "score and layer the attention op does not have): not imported (either one alone is)")


@dataclass(frozen=True)
class Parts:
    """The module paths (transformers' names) of one layer's parts and of the stack of layers."""

    norm1: str = "layernorm_before"
    attention: str = "attention"
    norm2: str = "layernorm_after"
    mlp: str = "mlp"
    scales: tuple[str, str] = ("", "")  # the layer scales' modules ("": a parameter of the layer itself)
    stack: str = "layers"


@dataclass(frozen=True)
class Tower:
    """The switches of one ViT-like family (see the module doc)."""

    model_type: str
    hf_class: str  # the class AutoModel builds for this model_type
    title: str
    blurb: str
    tokens: str = "cls"  # cls | distillation (DeiT: + a distillation token) | detection (YOLOS)
    positions_key: str = ""  # a bool key (default false) switching the position table on (BEiT's); "": always
    mask_default: bool | None = None  # use_mask_token's default (a held token, no work); None: not a key
    patch_default: int = 16
    mlp: str = "intermediate"  # intermediate (intermediate_size) | ratio (DINOv2: mlp_ratio, use_swiglu_ffn)
    layer_scale: str = ""  # "" | modules (DINOv2: layer_scale1/2) | lambdas (BEiT: layer_scale_init_value)
    fused_qkv: bool = True  # one qkv GEMM, transformers' three input-gradient adds a named rule; else three
    k_bias: bool = True  # False: no key bias (BEiT; qkv_bias is then not a key)
    rel_bias: bool = False  # BEiT's relative position bias, per layer or shared
    pooler: str = ""  # "" (none) | dense (pooler_output_size, pooler_act) | tanh (dense + tanh) | beit
    parts: Parts = field(default_factory=Parts)
    bf16_default: bool = False  # no dtype in the config: bf16 (else transformers' fp32)
    keys: tuple[Key, ...] = ENCODER_KEYS
    ignored: Mapping[str, str] = field(default_factory=dict)
    refused: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()


@dataclass
class Shape:
    """What the config resolved to."""

    C: int
    heads: int
    L: int
    patch: int
    fn: str
    gated: bool  # DINOv2's SwiGLU FFN
    grid: str  # the patch grid's side for a square image ("" for YOLOS)
    image: tuple[int, int]  # the image's height and width in pixels


def build(t: Tower, cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    f"{t.hf_class})")
    shared, per_layer = _rel_bias(t, cfg)
    s = _dims(t, cfg, spec)
    if t.bf16_default:
        bf16_precision(spec, cfg)
    else:
        spec.precision(cfg.dtype, cfg.dtype_source)
    image = ["img_h", "img_w"] if t.tokens == "detection" else ["img", "img"]
    spec.input(["B", str(cfg.get_int("num_channels", 3)), *image], "num_channels")
    features = _embeddings(t, cfg, spec, s)
    _blocks(t, cfg, spec, s, shared, per_layer)
    _stack(t, cfg, spec, s, shared)
    ignored = dict(t.ignored)
    _pooler(t, cfg, spec, s, ignored)
    features += [f"{s.L} pre-LN layers ({s.heads} heads" + (", no key bias" if not t.k_bias else "")
                 + (", a relative position bias per layer" if per_layer else "")
                 + (", one relative position bias table shared by all" if shared else "")
                 + (", layer scale" if t.layer_scale else "") + f", {'SwiGLU' if s.gated else s.fn} MLP)",
                 _pooler_doc(t, cfg)]
    spec.doc = (f"{t.title} imported from a Hugging Face config: width {s.C}, {s.patch}x{s.patch} patches, "
                + ", ".join(features) + "; no head")
    written = "`source:` and `ignore:` name" if t.fused_qkv or shared or per_layer else "`source:` names"
    if t.pooler and cfg.pooler:
        spec.header.append(f"# {written} modules of transformers' {t.hf_class}; the spec's output is its {POOLED}")
    elif t.pooler:
        spec.header.append(f"# {written} modules of transformers' {t.hf_class} (add_pooling_layer=false){BARE}")
    else:
        spec.header.append(f"# {written} modules of transformers' {t.hf_class}" + ("" if cfg.pooler else BARE))
    cfg.check_understood(ignored)
    return spec.render()


def _blocks(t: Tower, cfg: HFConfig, spec: SpecText, s: Shape, shared: bool, per_layer: bool) -> None:
    """The layer block (BEiT's shared table: the first layer a block of its own) and the rules beside it."""
    scale = _scales(t, cfg)
    mlp = ("{hidden: F, gated: true, fn: silu}  # use_swiglu_ffn: weights_in (gate and up in one Linear), weights_out"
           if s.gated else f"{{hidden: F, fn: {s.fn}}}  # hidden_act")
    attention = "{heads: heads" + ("" if t.fused_qkv else ", fused_qkv: false")
    attention += ", k_bias: false" if not t.k_bias else ("" if cfg.get_bool("qkv_bias", True) else ", qkv_bias: false")
    table = f"{attention}, grid: [{s.grid}, {s.grid}], rel_bias: beit"
    if shared:  # the table in <Model>.shared_position_bias, written in the first layer, read by the others
        spec.block("first_layer", _layer(t, f"{table}, rel_bias_readers: L - 1}}  # the shared table's bias, made "
                                            "once and read by every layer", mlp, scale, "layers.0.",
                                         ", shared_position_bias"))
        if s.L > 1:
            spec.block("layer", _layer(t, f"{table}, rel_bias_shared: true}}  # reads the shared bias", mlp, scale))
        spec.ignore(table_rule("shared_position_bias", "1", s.grid))
    elif per_layer:
        spec.block("layer", _layer(t, f"{table}}}  # the layer's own relative position bias", mlp, scale, "",
                                   ", relative_position_bias"))
        spec.ignore(table_rule("layers.*.relative_position_bias", "L", s.grid))
    else:
        spec.block("layer", _layer(t, attention + "}", mlp, scale))
    if t.fused_qkv:
        spec.ignore(qkv_grad_ignore(f"{t.parts.stack}.*.attention"))


def _rel_bias(t: Tower, cfg: HFConfig) -> tuple[bool, bool]:
    """BEiT's relative position biases: (shared, per layer); both at once refused, naming the key."""
    if not t.rel_bias:
        return False, False
    shared = cfg.get_bool("use_shared_relative_position_bias", False)
    per_layer = cfg.get_bool("use_relative_position_bias", False)
    if shared and per_layer:
        raise cfg.refuse("use_shared_relative_position_bias", REL_BIAS)
    return shared, per_layer


def _dims(t: Tower, cfg: HFConfig, spec: SpecText) -> Shape:
    """B, the image (img, patch; YOLOS: img_h, img_w and its tables' grid), C, heads, L, F."""
    C = cfg.get_int("hidden_size", 768)
    heads = cfg.get_int("num_attention_heads", 12)
    check_divides(cfg, "hidden_size", C, "num_attention_heads", heads)
    spec.dim("B", 1, "batch size (images)")
    if t.tokens == "detection":
        patch = cfg.get_int("patch_size", t.patch_default)
        image = img_h, img_w = _image_pair(cfg, patch)
        spec.dim("img_h", img_h, "image height in pixels", "image_size[0]")
        spec.dim("img_w", img_w, "image width in pixels", "image_size[1]")
    else:
        img = square_size(cfg, "image_size", 224)
        patch = square_size(cfg, "patch_size", t.patch_default)
        check_whole_patches(cfg, img, patch)
        image = img, img
        spec.dim("img", img, "image side in pixels", "image_size")
        spec.dim("patch", patch, "patch side in pixels", "patch_size")
    spec.dim("C", C, "model width", "hidden_size")
    spec.dim("heads", heads, "attention heads", "num_attention_heads")
    L = cfg.get_int("num_hidden_layers", 12)
    spec.dim("L", L, "depth (encoder layers)", "num_hidden_layers")
    gated = False
    if t.mlp == "ratio":
        ratio = cfg.get("mlp_ratio", 4)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
            raise ImportProblem(f"{cfg.where('mlp_ratio')} = {ratio!r}: expected a positive number")
        hidden = int(C * ratio)  # Dinov2MLP: int(hidden_size * mlp_ratio)
        gated = cfg.get_bool("use_swiglu_ffn", False)
        if gated:  # Dinov2SwiGLUFFN: 2/3 of it, rounded up to a multiple of 8; one fused (gate, up) Linear
            spec.dim("F", (int(hidden * 2 / 3) + 7) // 8 * 8, "SwiGLU hidden width",
                     "(int(int(hidden_size * mlp_ratio) * 2 / 3) + 7) // 8 * 8")
        else:
            spec.dim("F", hidden, "MLP hidden width", "int(hidden_size * mlp_ratio)")
    else:
        spec.dim("F", cfg.get_int("intermediate_size", 3072), "MLP hidden width", "intermediate_size")
    if gated:
        fn = "silu"
        cfg.get("hidden_act")  # read: the SwiGLU FFN always uses silu, whatever hidden_act says
    else:
        fn = activation(cfg, "hidden_act", "gelu")
        if cfg.get("hidden_act") == "gelu_new":
            spec.note(GELU_NEW_NOTE)
    return Shape(C, heads, L, patch, fn, gated, "" if t.tokens == "detection" else "img // patch", image)


def _image_pair(cfg: HFConfig, patch: int) -> tuple[int, int]:
    """YOLOS's image_size: a [height, width] pair, each a multiple of patch_size."""
    value = cfg.get("image_size", [512, 864])
    if (not isinstance(value, list) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
        raise ImportProblem(f"{cfg.where('image_size')} = {value!r}: expected a [height, width] pair of positive whole "
                            "numbers (YolosConfig takes no single side)")
    if value[0] % patch or value[1] % patch:
        raise ImportProblem(f"{cfg.where('image_size')} = {value} is not a multiple of patch_size = {patch} "
                            "(the mid position table's length, image area // patch**2, then differs from the "
                            "patch grid's)")
    return value[0], value[1]


def _embeddings(t: Tower, cfg: HFConfig, spec: SpecText, s: Shape) -> list[str]:
    """The patch embedding and its tokens as the spec's first layers; returns the doc's phrases for them."""
    if t.tokens == "detection":
        return _detection_embeddings(cfg, spec, s)
    if t.tokens == "distillation":
        spec.derived("S", "(img // patch)**2 + 2", "tokens (patches + class and distillation tokens)")
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
        return ["class and distillation tokens, learned positions"]
    spec.derived("S", "(img // patch)**2 + 1", "tokens (patches + class token)")
    positions = cfg.get_bool(t.positions_key, False) if t.positions_key else True
    mask = cfg.get_bool("use_mask_token", t.mask_default) if t.mask_default is not None else False
    token = ", mask_token: true}  # use_mask_token: masked image modelling's token, held, not run (C params)"
    spec.layers(f"""\
- patch_embed: {{patch: patch, dim: C, cls_token: true{", pos_embed: true" if positions else ""}\
{token if mask else "}"}
  source: embeddings
""")
    return ["a class token" + (", learned positions" if positions else ", no absolute positions")]


def _detection_embeddings(cfg: HFConfig, spec: SpecText, s: Shape) -> list[str]:
    """YOLOS: patches, the class token, det detection tokens appended, the position table resized to the grid."""
    det = cfg.get_int("num_detection_tokens", 100)
    spec.dim("det", det, "detection tokens", "num_detection_tokens")
    spec.dim("gh", s.image[0] // s.patch, "the position tables' grid height", "image_size[0] // patch_size")
    spec.dim("gw", s.image[1] // s.patch, "the position tables' grid width", "image_size[1] // patch_size")
    spec.derived("h", f"img_h // {s.patch}", "patch rows", "patch_size")
    spec.derived("w", f"img_w // {s.patch}", "patch columns", "patch_size")
    mid = cfg.get_bool("use_mid_position_embeddings", True) and s.L > 1
    spec.layers(f"""\
- sequence:
    - conv2d: {{out: C, kernel: {s.patch}, stride: {s.patch}}}  # patch_size
      source: patch_embeddings.projection
    - flatten: {{start: 2}}
    - transpose: {{axis0: 1, axis1: 2}}  # [B, h*w, C]
    - cls_token: {{}}
    - learned_tokens: {{count: det, at: end}}
      name: detection_tokens
    - interpolated_positions: {{grid: [gh, gw], size: [h, w], prefix: 1, suffix: det}}
      source: interpolation
  name: embeddings
  source: embeddings
""" + ("  save: x\n" if mid else ""))
    return [f"a class token and {det} detection tokens appended, the position table resized (bicubic) to the patch "
            "grid" + (", a resized mid position table added after every layer but the last" if mid else "")]


def _scales(t: Tower, cfg: HFConfig) -> tuple[str, str]:
    """The two branch scales' lines (after attention, after the MLP); ("", "") without layer scale."""
    if t.layer_scale == "modules":  # the initial value (layerscale_value) does not change the cost
        first, second = t.parts.scales
        return f"- layer_scale: {{}}\n  source: {first}", f"- layer_scale: {{}}\n  source: {second}"
    if t.layer_scale != "lambdas":
        return "", ""
    gamma = cfg.get("layer_scale_init_value", 0.1)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or gamma < 0:
        raise ImportProblem(f"{cfg.where('layer_scale_init_value')} = {gamma!r}: expected a number >= 0")
    line = ("- layer_scale: {}  # lambda: a (C,) parameter of the layer itself, so no source of its own" if gamma > 0
            else "- scale: {by: 1}  # layer_scale_init_value 0: lambda is the number 1.0, which the layer still "
            "multiplies by")
    return line, line


def _layer(t: Tower, attention: str, mlp: str, scale: tuple[str, str], prefix: str = "", table: str = "") -> str:
    """One pre-LN layer; `prefix`: its modules' path when the layer is not a repeat instance (BEiT's first
    layer, with the shared table, written from the model's root); `table`: the module holding its attention's
    relative position table."""
    p = t.parts
    attention_source = f"[{prefix}{p.attention}{table}]" if table else f"{prefix}{p.attention}"

    def scaled(line: str) -> str:
        return "".join(f"\n    {part}" for part in line.split("\n")) if line else ""

    return f"""\
- residual:
    - layernorm: {{}}  # layer_norm_eps does not change the cost
      source: {prefix}{p.norm1}
    - attention: {attention}
      source: {attention_source}{scaled(scale[0])}
- residual:
    - layernorm: {{}}
      source: {prefix}{p.norm2}
    - mlp: {mlp}
      source: {prefix}{p.mlp}{scaled(scale[1])}
"""


def _stack(t: Tower, cfg: HFConfig, spec: SpecText, s: Shape, shared: bool) -> None:
    """The layers (BEiT's shared table: the first one apart; YOLOS's mid tables: added after each but the
    last), then the final LayerNorm where the class runs one before its output."""
    if t.tokens == "detection" and cfg.get_bool("use_mid_position_embeddings", True) and s.L > 1:
        spec.block("layer_mid", """\
doc: >-
  a layer, then the mid position table of its index added (slice i of the resized stack `mid`; written as
  slice 0 in every instance: which table a layer slices changes no count)
layers:
  - block: layer
    save: y
  - slice: {axis: 0, start: 0, end: 1}
    name: mid_pos
    input: mid
  - add: {with: y}
""")
        spec.layers("""\
- sequence:
    - interpolated_positions: {grid: [gh, gw], size: [h, w], prefix: 1, suffix: det, tables: L - 1, add: false}
      name: mid_pos
      source: interpolation
      save: mid
    - repeat: L - 1
      name: layers
      body: layer_mid
      source: layer
      input: x
    - repeat: 1
      name: last
      body: layer
      source: layer  # the last of encoder.layer, after the L - 1 above
  name: encoder
  source: encoder
""")
    else:
        if shared:
            spec.layers("- block: first_layer  # layers.0, with the shared table\n  name: layer0\n")
        if not shared or s.L > 1:
            spec.layers(f"""\
- repeat: {"L - 1" if shared else "L"}
  name: layers
  body: layer
  source: {t.parts.stack}
""")
    # BEiT with mean pooling: its layernorm is the identity (the pooler's LayerNorm follows the mean)
    if t.pooler != "beit" or not cfg.get_bool("use_mean_pooling", True):
        spec.layers("- layernorm: {}\n  source: layernorm\n")


def _pooler(t: Tower, cfg: HFConfig, spec: SpecText, s: Shape, ignored: dict[str, str]) -> None:
    """The pooler the class builds, on the final hidden states (the spec's output then its pooler_output)."""
    if t.pooler == "beit":
        mean = cfg.get_bool("use_mean_pooling", True)
        if cfg.pooler and mean:
            spec.layers("""\
- sequence:
    - slice: {axis: 1, start: 1, end: S}  # the patch tokens
    - mean: {axes: [1]}
    - layernorm: {}
      source: layernorm
  name: pooler
  source: pooler
""")
        elif cfg.pooler:
            spec.layers("- take_token: {index: 0}  # the pooler: the class token\n  name: pooler\n")
        return
    if t.pooler == "dense" and not cfg.pooler:
        ignored.update(pooler_output_size=POOLER_DROPPED, pooler_act=POOLER_DROPPED)
    if not t.pooler or not cfg.pooler:
        return
    width, fn, why = "C", "tanh", "nn.Tanh"
    if t.pooler == "dense":  # ViTPooler / DeiTPooler: dense to pooler_output_size (0 or null: hidden_size)
        size = cfg.get("pooler_output_size", s.C)
        out = s.C if size == 0 and not isinstance(size, bool) else cfg.get_int("pooler_output_size", s.C)
        if out != s.C:
            spec.dim("Cp", out, "pooler output width", "pooler_output_size")
            width = "Cp"
        fn, why = activation(cfg, "pooler_act", "tanh"), "pooler_act"
    spec.layers(f"""\
- sequence:
    - take_token: {{index: 0}}  # the class token
    - linear: {{out: {width}}}
      source: dense
    - activation: {{fn: {fn}}}  # {why}
      source: activation
  name: pooler
  source: pooler
""")


def _pooler_doc(t: Tower, cfg: HFConfig) -> str:
    if not t.pooler:
        return "final LayerNorm; no pooler"
    if not cfg.pooler:
        return "last_hidden_state (--no-pooler: no pooler)"
    if t.pooler == "beit":
        return ("the pooler's LayerNorm of the mean patch token" if cfg.get_bool("use_mean_pooling", True)
                else "final LayerNorm, the class token") + " (pooler_output)"
    return "final LayerNorm; the pooler (dense + " + ("pooler_act" if t.pooler == "dense" else "tanh") + \
        " on the class token, pooler_output)"


def table_rule(module: str, tables: str, grid: str) -> str:
    """What BeitRelativePositionBias runs beside the gather the spec prices, for `tables` tables."""
    offsets = f"(2*({grid}) - 1)**2*heads"
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


def variant(t: Tower):
    """The class an import describes: with a pooler, its pooler_output (--no-pooler: the class built with
    add_pooling_layer=False, its last_hidden_state); without one, its last_hidden_state either way."""
    def pick(cfg: HFConfig) -> Variant:
        if not t.pooler:
            return Variant(t.hf_class, {}, None if cfg.pooler else LAST)
        return Variant(t.hf_class, {}, POOLED) if cfg.pooler else Variant(t.hf_class, dict(NO_POOLER), LAST)
    return pick


def family(t: Tower) -> Family:
    return Family((t.model_type,), t.hf_class, lambda cfg: build(t, cfg), t.blurb, architectures=t.architectures,
                  refused=t.refused, keys=t.keys, hf_output=(lambda cfg: POOLED) if t.pooler else None,
                  options=(POOLER,), variant=variant(t))
