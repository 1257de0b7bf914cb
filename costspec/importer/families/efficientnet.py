"""EfficientNet (transformers' EfficientNetModel, with its pooler): the stem, the MBConv blocks of every
stage (expansion, depthwise conv, squeeze-excitation, projection; the residual on a stage's later blocks)
and the head conv, widths and repeats scaled as transformers scales them (round_filters with
width_coefficient and depth_divisor, ceil(depth_coefficient x repeats)), TF "same" padding of the
stride-2 depthwise convs as transformers pads them (depthwise_padding). The layout follows
specs/efficientnet_b0.yaml (the zoo's EfficientNet-B0)."""
from __future__ import annotations

import math

from costspec.importer.config import MAX_CONFIG_LAYERS, HFConfig, ImportProblem, count, ratio, size
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, Family, Variant
from costspec.importer.families.common import activation, square_size
from costspec.importer.families.modern_template import precision

STAGE_LISTS = ("kernel_sizes", "in_channels", "out_channels", "strides", "num_block_repeats", "expand_ratios")
DEFAULTS = {"kernel_sizes": [3, 3, 5, 3, 5, 5, 3], "in_channels": [32, 16, 24, 40, 80, 112, 192],
            "out_channels": [16, 24, 40, 80, 112, 192, 320], "strides": [1, 2, 2, 2, 1, 2, 1],
            "num_block_repeats": [1, 2, 2, 3, 3, 4, 1], "expand_ratios": [1, 6, 6, 6, 6, 6, 6]}
IGNORED = {"num_hidden_layers": "derived by the config class (sum of the repeats x 4); the model never reads it",
           "batch_norm_momentum": "the running statistics' update rate: no arithmetic in eval mode",
           "drop_connect_rate": "stochastic depth (drop-connect): the identity in eval mode, as costspec counts"}


def _lists(cfg: HFConfig) -> dict[str, list[int]]:
    out = {}
    for key in STAGE_LISTS:
        value = cfg.get(key, DEFAULTS[key])
        if (not isinstance(value, list) or not value
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
            raise ImportProblem(f"{cfg.where(key)} = {value!r}: expected a non-empty list of positive whole numbers")
        out[key] = value
    n = len(out["kernel_sizes"])
    for key in STAGE_LISTS:
        if len(out[key]) != n:
            raise ImportProblem(f"{cfg.where(key)} has {len(out[key])} entries, expected {n} (one per stage, as "
                                "kernel_sizes)")
    for i, (k, s) in enumerate(zip(out["kernel_sizes"], out["strides"])):
        if k % 2 == 0:
            raise ImportProblem(f"{cfg.where('kernel_sizes')}[{i}] = {k}: expected an odd kernel (padding='same' "
                                "pads an even one unevenly; not modelled)")
        if s not in (1, 2):
            raise ImportProblem(f"{cfg.where('strides')}[{i}] = {s}: expected 1 or 2 (transformers pads a stride-2 "
                                "conv and runs padding='same' otherwise, which torch refuses with a stride)")
        if s == 2 and k == 1:
            raise ImportProblem(f"{cfg.where('kernel_sizes')}[{i}] = 1 with stride 2: transformers pads a stride-2 "
                                "depthwise conv by (k//2 - 1, k//2), a negative pad that crops (not modelled)")
    return out


def _real(cfg: HFConfig, key: str, default: float) -> float:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1024:
        raise ImportProblem(f"{cfg.where(key)} = {value!r}: expected a number > 0 (at most 1,024)")
    return float(value)


def _sequence(name: str, source: str, layers: str, save: str = "") -> str:
    body = "".join("    " + line + "\n" for line in layers.splitlines())
    return f"- sequence:\n{body}  name: {name}\n  source: {source}\n" + (f"  save: {save}\n" if save else "")


def build_efficientnet(cfg: HFConfig) -> str:
    stages = _lists(cfg)
    width = _real(cfg, "width_coefficient", 2.0)
    depth = _real(cfg, "depth_coefficient", 3.1)
    se_ratio = _real(cfg, "squeeze_expansion_ratio", 0.25)
    divisor = cfg.get_int("depth_divisor", 8)
    img = square_size(cfg, "image_size", 600)
    hidden = cfg.get_int("hidden_dim", 2560)
    fn = activation(cfg, "hidden_act", "swish")
    pooling = cfg.choice("pooling_type", "mean", ("mean", "max"))
    unpadded = cfg.get("depthwise_padding", [])
    if not isinstance(unpadded, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in unpadded):
        raise ImportProblem(f"{cfg.where('depthwise_padding')} = {unpadded!r}: expected a list of block indices")

    def filters(c: int) -> int:  # transformers' round_filters
        scaled = c * width
        new = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
        return int(new + divisor if new < 0.9 * scaled else new)

    if filters(1280) != hidden:
        raise ImportProblem(f"{cfg.where('hidden_dim')} = {hidden} but the head conv has round_filters(1280) = "
                            f"{filters(1280)} channels (width_coefficient {width:g}): transformers' top BatchNorm "
                            "then fails")
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "EfficientNetModel)")
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", "image_size")
    spec.dim("H", hidden, "head channels (also the pooler's kernel)", "hidden_dim")
    precision(spec, cfg)
    spec.input(["B", str(cfg.get_int("num_channels", 3)), "img", "img"], "num_channels")
    bn = "batchnorm: {mode: eval}"
    stem = filters(32)
    side = (img - 2) // 2 + 1 if img >= 2 else 0  # ZeroPad2d(0, 1, 0, 1), 3x3 stride-2 valid conv
    if side < 1:
        raise ImportProblem(f"{cfg.where('image_size')} = {img}: too small for the stem's 3x3 stride-2 conv")
    spec.layers(_sequence("embeddings", "embeddings", f"""\
- pad: {{pads: [0, 1, 0, 1]}}
  source: padding
- conv2d: {{out: {stem}, kernel: 3, stride: 2, bias: false}}
  source: convolution
- {bn}
  source: batchnorm
- activation: {{fn: {fn}}}
  source: activation
"""))
    total = sum(int(math.ceil(depth * r)) for r in stages["num_block_repeats"])
    if total > MAX_CONFIG_LAYERS:
        raise ImportProblem(f"{cfg.where('num_block_repeats')} x depth_coefficient {depth:g}: {total:,} blocks in all "
                            f"(expected at most {MAX_CONFIG_LAYERS:,})")
    blocks, number = [], 0
    for i in range(len(stages["kernel_sizes"])):
        k, e = stages["kernel_sizes"][i], stages["expand_ratios"][i]
        cin, cout = filters(stages["in_channels"][i]), filters(stages["out_channels"][i])
        for j in range(int(math.ceil(depth * stages["num_block_repeats"][i]))):
            stride = stages["strides"][i] if j == 0 else 1
            cin = cout if j > 0 else cin
            if stride == 2:
                adjust = number not in unpadded
                before, after = (k // 2 - 1, k // 2) if adjust else (k // 2, k // 2)
                if side + before + after < k:
                    raise ImportProblem(f"{cfg.where('image_size')} = {img}: block {number}'s grid {side} is too "
                                        f"small for its {k}x{k} stride-2 depthwise conv")
                side = (side + before + after - k) // 2 + 1
                pad = f"- pad: {{pads: [{before}, {after}, {before}, {after}]}}\n  source: depthwise_conv_pad\n"
                conv = f"kernel: {k}, stride: 2"
            else:
                pad, conv = "", f"kernel: {k}, padding: {k // 2}"
            blocks.append(_block(number, cin, cout, e, se_ratio, pad, conv, fn, bn, residual=j > 0, stage=i + 1))
            number += 1
    if side > hidden:
        raise ImportProblem(f"{cfg.where('image_size')} = {img}: the last grid {side} is larger than the pooler's "
                            f"kernel hidden_dim = {hidden} (its output would not be 1 x 1)")
    head = f"""\
- conv2d: {{out: H, kernel: 1, bias: false}}
  source: top_conv
- {bn}
  source: top_bn
- activation: {{fn: {fn}}}
  source: top_activation
"""
    spec.layers(_sequence("encoder", "encoder", "".join(blocks) + head))
    pool = "avg_pool2d" if pooling == "mean" else "max_pool2d"
    if cfg.pooler:
        spec.layers(f"""\
- {pool}: {{kernel: H, ceil_mode: true}}  # pooling_type {pooling}: one window clipped to the {side} x {side} map
  name: pooler
  source: pooler
- flatten: {{start: 1}}
""")
    else:
        spec.ignore(f"""\
- module: pooler
  reason: >-
    the pooler: EfficientNetModel always runs it (the {pooling} pool over the last map, for pooler_output);
    with --no-pooler the spec ends at last_hidden_state, before it, and no gradient reaches it
""")
    spec.doc = (f"EfficientNet (width x{width:g}, depth x{depth:g}) imported from a Hugging Face config: stem (zero "
                f"pad (0, 1, 0, 1) + 3x3/2 conv to {stem}, BatchNorm, {fn}); {number} MBConv blocks in "
                f"{len(stages['kernel_sizes'])} stages (1x1 expansion, kxk depthwise, squeeze-excitation, 1x1 "
                f"projection; the residual on a stage's later blocks); head 1x1 conv to {hidden}, BatchNorm, {fn}; "
                + (f"the {pooling} pooler over the last map (pooler_output)" if cfg.pooler
                   else "its last_hidden_state (--no-pooler: no pooler)") + "; no classifier")
    spec.note("BatchNorm in eval mode (running statistics, as validate --against runs the model); dropout and "
              "drop-connect are identities in eval mode. A stride-2 depthwise conv is zero-padded as transformers "
              "pads it ((k//2 - 1, k//2) per axis, or k//2 on each side for the blocks in depthwise_padding), then "
              "a valid conv; a stride-1 one pads k//2 on each side (padding='same').")
    spec.header.append("# `source:` names modules of transformers' EfficientNetModel; the spec's output is its "
                       + ("pooler_output" if cfg.pooler else "last_hidden_state (imported with --no-pooler)"))
    cfg.check_understood(IGNORED)
    return spec.render()


def _block(number: int, cin: int, cout: int, e: int, se_ratio: float, pad: str, conv: str, fn: str, bn: str,
           residual: bool, stage: int) -> str:
    """One EfficientNetBlock: (expansion,) depthwise, squeeze-excitation on the saved depthwise output,
    projection; x + that for a stage's later blocks."""
    mid = cin * e
    se = max(1, int(cin * se_ratio))
    parts = ""
    if e != 1:
        parts += _sequence("expansion", "expansion", f"""\
- conv2d: {{out: {mid}, kernel: 1, bias: false}}
  source: expand_conv
- {bn}
  source: expand_bn
- activation: {{fn: {fn}}}
  source: expand_act
""")
    parts += _sequence("depthwise_conv", "depthwise_conv", f"""\
{pad}- conv2d: {{out: {mid}, {conv}, groups: {mid}, bias: false}}
  source: depthwise_conv
- {bn}
  source: depthwise_norm
- activation: {{fn: {fn}}}
  source: depthwise_act
""", save=f"dw{number}")
    parts += _sequence("squeeze_excite", "squeeze_excite", f"""\
- adaptive_avg_pool2d: {{size: 1}}
  source: squeeze
- conv2d: {{out: {se}, kernel: 1}}
  source: reduce
- activation: {{fn: {fn}}}
  source: act_reduce
- conv2d: {{out: {mid}, kernel: 1}}
  source: expand
- activation: {{fn: sigmoid}}
  source: act_expand
- mul: {{with: dw{number}}}  # the gate broadcast over the depthwise output
""")
    parts += _sequence("projection", "projection", f"""\
- conv2d: {{out: {cout}, kernel: 1, bias: false}}
  source: project_conv
- {bn}
  source: project_bn
""")
    what = f"stage {stage}, {cin} -> {cout}, expand {e}" + (", residual" if residual else "")
    if residual:
        inner = "".join("    " + line + "\n" for line in parts.splitlines())
        return f"# block {number}: {what}\n- sequence:\n  - residual:\n{inner}  name: block{number}\n" \
               f"  source: blocks.{number}\n"
    return f"# block {number}: {what}\n" + _sequence(f"block{number}", f"blocks.{number}", parts)


KEYS = (size("num_channels"), size("image_size", items=True), ratio("width_coefficient"), ratio("depth_coefficient"),
        ratio("squeeze_expansion_ratio"), size("depth_divisor"), size("hidden_dim"),
        size("kernel_sizes", items=True), size("in_channels", items=True), size("out_channels", items=True),
        size("strides", items=True), size("num_block_repeats", items=True), size("expand_ratios", items=True),
        count("depthwise_padding", items=True))
EFFICIENTNET = Family(("efficientnet",), "EfficientNetModel", build_efficientnet,
                      "EfficientNet: a stem, MBConv stages with squeeze-excitation, a head conv, widths and repeats "
                      "scaled by the coefficients; pooled output (pooler_output)",
                      architectures=("EfficientNetForImageClassification",), options=(POOLER,),
                      variant=lambda cfg: Variant("EfficientNetModel",
                                                  output="pooler_output" if cfg.pooler else "last_hidden_state"),
                      refused=("an even kernel or a stride other than 1 and 2",
                               "hidden_dim other than round_filters(1280) (transformers' top BatchNorm fails)",
                               "an image whose last grid is larger than hidden_dim (the pooler's kernel)"),
                      keys=KEYS)

FAMILY_LIST = (EFFICIENTNET,)
