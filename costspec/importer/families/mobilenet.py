"""MobileNetV2 (transformers' MobileNetV2Model, with its pooler): the stem, the 16 inverted residuals and
the 1x1 conv to the output width, every width computed from the config as transformers computes it
(depth multiplier, rounding to depth_divisible_by, min_depth, expand_ratio), TensorFlow "SAME" padding
(tf_padding) or symmetric padding, and the dilated depthwise convs an output_stride below 32 asks for.
The layout follows specs/mobilenet_v2.yaml (the zoo's MobileNetV2 1.0)."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, ratio, size
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, Family, Variant
from costspec.importer.families.common import ACTIVATIONS, square_size
from costspec.importer.families.modern_template import precision

# MobileNetV2Model's fixed layout: the projection widths before the depth multiplier, the depthwise strides
WIDTHS = [16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160, 320]
STRIDES = [2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1]
MOBILENET_ACTIVATIONS = {"relu6": "relu6", **{k: v for k, v in ACTIVATIONS.items() if k != "gelu_new"}}
IGNORED = {"semantic_loss_ignore_index": "the segmentation head's loss only"}


def make_divisible(value: int, divisor: int, min_value: int | None) -> int:
    """transformers' make_divisible: round to a multiple of `divisor`, at least min_value, never more than
    10% below `value`."""
    low = divisor if min_value is None else min_value
    new = max(low, int(value + divisor / 2) // divisor * divisor)
    return int(new + divisor if new < 0.9 * value else new)


def _number(cfg: HFConfig, key: str, default: float) -> float:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1024:
        raise ImportProblem(f"{cfg.where(key)} = {value!r}: expected a number > 0 (at most 1,024)")
    return float(value)


def _layout(output_stride: int) -> list[tuple[int, int]]:
    """(stride, dilation) of each inverted residual's depthwise conv, as MobileNetV2Model builds them."""
    current, dilation, out = 2, 1, []
    for stride in STRIDES:
        if current == output_stride:
            out.append((1, dilation))
            dilation *= stride
        else:
            out.append((stride, 1))
            current *= stride
    return out


def _conv(out: str, kernel: int, stride: int, groups: str, side: str, dilation: int, act: str | None,
          tf: bool, source: str, name: str) -> str:
    """One MobileNetV2ConvLayer: (TF SAME pad,) bias-free conv, eval-mode BatchNorm, (activation)."""
    lines = ["- sequence:"]
    pad = ""
    if kernel == 3 and tf and stride == 2:
        before = f"2*ceil({side} / 2) - {side}"
        pad = f"    - pad: {{pads: [{before}, 1, {before}, 1]}}  # TF SAME: {side} % 2 before, 1 after\n"
    elif kernel == 3 and tf:
        pad = f"    - pad: {{pads: [{dilation}, {dilation}, {dilation}, {dilation}]}}  # TF SAME\n"
    padding = f", padding: {dilation}" if kernel == 3 and not tf else ""
    extra = (f", stride: {stride}" if stride > 1 else "") + (f", dilation: {dilation}" if dilation > 1 else "")
    extra += f", groups: {groups}" if groups != "1" else ""
    lines.append(pad.rstrip("\n") if pad else "")
    lines.append(f"    - conv2d: {{out: {out}, kernel: {kernel}{extra}{padding}, bias: false}}\n"
                 "      source: convolution")
    lines.append("    - batchnorm: {mode: eval}\n      source: normalization")
    if act:
        lines.append(f"    - activation: {{fn: {act}}}\n      source: activation")
    lines.append(f"  name: {name}\n  source: {source}")
    return "\n".join(line for line in lines if line) + "\n"


def build_mobilenet_v2(cfg: HFConfig) -> str:
    multiplier = _number(cfg, "depth_multiplier", 1.0)
    expand = _number(cfg, "expand_ratio", 6.0)
    divisor = cfg.get_int("depth_divisible_by", 8)
    min_depth = cfg.get_int("min_depth", 8)
    output_stride = cfg.get_int("output_stride", 32)
    tf = cfg.get_bool("tf_padding", True)
    first_is_expansion = cfg.get_bool("first_layer_is_expansion", True)
    finegrained = cfg.get_bool("finegrained_output", True)
    act = MOBILENET_ACTIVATIONS[cfg.choice("hidden_act", "relu6", MOBILENET_ACTIVATIONS)]
    img = square_size(cfg, "image_size", 224)
    channels_in = cfg.get_int("num_channels", 3)

    def scaled(c: int) -> int:
        return make_divisible(int(round(c * multiplier)), divisor, min_depth)

    widths = [scaled(c) for c in WIDTHS]
    stem = scaled(32)
    last = 1280 if finegrained and multiplier < 1.0 else scaled(1280)
    layout = _layout(output_stride)
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "MobileNetV2Model)")
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", "image_size")
    sides = ["img"]  # the grid side before each stride-2 conv
    for n in range(1 + sum(s == 2 for s, _ in layout)):
        spec.derived(f"G{n + 1}", f"ceil({sides[-1]} / 2)", f"grid side after stride-2 conv {n + 1}")
        sides.append(f"G{n + 1}")
    precision(spec, cfg)
    spec.input(["B", str(channels_in), "img", "img"], "num_channels")
    spec.note(f"Widths from depth_multiplier {multiplier:g}, depth_divisible_by {divisor}, min_depth {min_depth}, "
              f"expand_ratio {expand:g} as transformers' make_divisible rounds them: stem {stem}, projections "
              f"{', '.join(map(str, widths))}, output {last}. Every conv is bias-free and followed by BatchNorm "
              "in eval mode (running statistics, as validate --against runs the model); "
              + ("TensorFlow SAME padding (tf_padding): an F.pad before each 3x3 conv." if tf
                 else "symmetric padding inside the 3x3 convs (tf_padding false)."))
    dilated = [i for i, (_, d) in enumerate(layout) if d > 1]
    spec.doc = (f"MobileNetV2 (depth multiplier {multiplier:g}) imported from a Hugging Face config: a stem (3x3/2 "
                f"conv to {stem}, {'' if first_is_expansion else '1x1 expansion, '}3x3 depthwise, 1x1 to "
                f"{widths[0]}), 16 inverted residuals (1x1 expansion x{expand:g}, 3x3 depthwise, 1x1 linear "
                "projection; the residual where the stride is 1 and the width stays)"
                + (f", dilated depthwise convs from layer {dilated[0]} (output_stride {output_stride})" if dilated
                   else "")
                + f", a 1x1 conv to {last} with {act}"
                + (" and the global average pool (pooler_output)" if cfg.pooler
                   else " (last_hidden_state: --no-pooler)")
                + "; no classifier")
    spec.header.append("# `source:` names modules of transformers' MobileNetV2Model; the spec's output is its "
                       "pooler_output" if cfg.pooler else "# `source:` names modules of transformers' "
                       "MobileNetV2Model(add_pooling_layer=False); the spec's output is its last_hidden_state "
                       "(imported with --no-pooler)")
    stem_layers = _conv(str(stem), 3, 2, "1", sides[0], 1, act, tf, "first_conv", "first_conv")
    level = 1
    if not first_is_expansion:
        stem_layers += _conv(str(stem), 1, 1, "1", sides[1], 1, act, tf, "expand_1x1", "expand")
    stem_layers += _conv(str(stem), 3, 1, str(stem), sides[1], 1, act, tf, "conv_3x3", "dw")
    stem_layers += _conv(str(widths[0]), 1, 1, "1", sides[1], 1, None, tf, "reduce_1x1", "project")
    spec.layers("- sequence:\n" + _indent(stem_layers, "    ") + "  name: conv_stem\n  source: conv_stem\n")
    for i, (stride, dilation) in enumerate(layout):
        cin, cout = widths[i], widths[i + 1]
        e = make_divisible(int(round(cin * expand)), divisor, min_depth)
        body = _conv(str(e), 1, 1, "1", sides[level], 1, act, tf, "expand_1x1", "expand")
        body += _conv(str(e), 3, stride, str(e), sides[level], dilation, act, tf, "conv_3x3", "dw")
        if stride == 2:
            level += 1
        body += _conv(str(cout), 1, 1, "1", sides[level], 1, None, tf, "reduce_1x1", "project")
        if stride == 1 and cin == cout:
            spec.layers(f"- sequence:\n    - residual:\n{_indent(body, '        ')}  name: layer{i}\n"
                        f"  source: layer.{i}\n")
        else:
            spec.layers(f"- sequence:  # no residual: {'stride 2' if stride == 2 else f'{cin} -> {cout} channels'}\n"
                        f"{_indent(body, '    ')}  name: layer{i}\n  source: layer.{i}\n")
    spec.layers(_conv(str(last), 1, 1, "1", sides[level], 1, act, tf, "conv_1x1", "conv_1x1"))
    if cfg.pooler:
        spec.layers("""\
- global_avg_pool: {}  # AdaptiveAvgPool2d((1, 1)), flattened
  name: pooler
  source: pooler
""")
    cfg.check_understood(IGNORED)
    return spec.render()


def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + line + "\n" for line in text.splitlines())


KEYS = (size("num_channels"), size("image_size", items=True), ratio("depth_multiplier"), ratio("expand_ratio"),
        size("depth_divisible_by"), size("min_depth"), size("output_stride"))
MOBILENET_V2 = Family(("mobilenet_v2",), "MobileNetV2Model", build_mobilenet_v2,
                      "MobileNetV2: a stem, 16 inverted residuals and a 1x1 conv, widths from the depth multiplier; "
                      "average-pooled output (pooler_output)",
                      architectures=("MobileNetV2ForImageClassification",), options=(POOLER,),
                      variant=lambda cfg: (Variant("MobileNetV2Model", output="pooler_output") if cfg.pooler else
                                           Variant("MobileNetV2Model", {"add_pooling_layer": "false"},
                                                   "last_hidden_state")),
                      keys=KEYS)

FAMILY_LIST = (MOBILENET_V2,)
