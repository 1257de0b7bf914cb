"""ResNet (transformers' ResNetModel): stem, bottleneck or basic stages with projection shortcuts,
global average pool (with `--no-pooler`: none, the spec ends at the model's last_hidden_state). Each stage's
first block is written once (with its shortcut when it changes the
channels or the stride) and its identity blocks as one repeat."""
from __future__ import annotations

import textwrap

from costspec.importer import config as rules
from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, Family, Variant
from costspec.importer.families.common import activation

# transformers' ResNetBottleNeckLayer: the inner width is out_channels // reduction
REDUCTION = 4
# The stem conv (stride 2) and max-pool (stride 2) each map a side n to ceil(n / 2), as does every
# stride-2 stage; the final side is ceil(img / 2**steps).
STEM_STEPS = 2

RESNET_IGNORED = {
    "out_features": "backbone outputs (ResNetBackbone): ResNetModel runs every stage either way",
    "out_indices": "backbone outputs (ResNetBackbone)",
    "stage_names": "backbone stage names",
}
POOL_REASON = (
    "ResNetModel returns last_hidden_state (before the pool) as its first output, which `validate` "
    "differentiates, so the real model runs no backward through its pooler; the spec's output is the pooled "
    "[B, C] and its backward divides the pool's gradient over the final G x G positions (a scale per input "
    "element)")
LEFT_OUT = (
    "the pooler: ResNetModel always runs it (AdaptiveAvgPool2d for pooler_output); with --no-pooler the spec "
    "ends at last_hidden_state, before it, and no gradient reaches it")


def _conv_layer(kernel: int, out: str, stride: str, act: str | None, source: str) -> str:
    """transformers' ResNetConvLayer: conv (kernel k, padding k // 2, no bias), BatchNorm, activation."""
    lines = f"""\
- sequence:
    - conv2d: {{out: {out}, kernel: {kernel}, stride: {stride}, padding: {kernel // 2}, bias: false}}
      source: convolution
    - batchnorm: {{mode: eval}}
      source: normalization
"""
    if act is not None:
        lines += f"    - activation: {{fn: {act}}}\n"
    return lines + f"  name: {source.replace('.', '')}\n  source: {source}\n"


def _body(bottleneck: bool, in_bottleneck: bool, out: str, stride: str) -> str:
    """The block's main path (its `layer` Sequential). Inner conv layers use ResNetConvLayer's default
    activation, relu, whatever hidden_act says (only the stem and each block's output use it)."""
    if bottleneck:
        w = f"{out} // {REDUCTION}"
        s1, s2 = (stride, "1") if in_bottleneck else ("1", stride)
        return (_conv_layer(1, w, s1, "relu", "layer.0") + _conv_layer(3, w, s2, "relu", "layer.1")
                + _conv_layer(1, out, "1", None, "layer.2"))
    return _conv_layer(3, out, stride, "relu", "layer.0") + _conv_layer(3, out, "1", None, "layer.1")


def _folded(text: str) -> str:
    return "\n".join("    " + line for line in textwrap.wrap(text, 100))


def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + line + "\n" if line else "\n" for line in text.splitlines())


def _blocks(spec: SpecText, bottleneck: bool, in_bottleneck: bool, act: str) -> None:
    body = _body(bottleneck, in_bottleneck, "out", "stride")
    spec.block("block_proj", "doc: >-\n  a stage's first block, act(shortcut(x) + layer(x)): the shortcut projects "
               "(1x1 conv,\n  BatchNorm) to the stage's channels at its stride\n"
               "params: {out: 256, stride: 2}\nlayers:\n  - residual:\n      body:\n"
               + _indent(body, "        ")
               + "      shortcut:\n"
               + _indent(_conv_layer(1, "out", "stride", None, "shortcut"), "        ")
               + f"  - activation: {{fn: {act}}}  # hidden_act\n")
    spec.block("block", "doc: \"an identity block, act(x + layer(x))\"\nparams: {out: 256}\nlayers:\n  - residual:\n"
               + _indent(_body(bottleneck, in_bottleneck, "out", "1"), "      ")
               + f"  - activation: {{fn: {act}}}  # hidden_act\n")


def build_resnet(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "ResNetModel)")
    layer_type = cfg.choice("layer_type", "bottleneck", ("bottleneck", "basic"))
    bottleneck = layer_type == "bottleneck"
    in_bottleneck = cfg.get_bool("downsample_in_bottleneck", False)
    first_stride = 2 if cfg.get_bool("downsample_in_first_stage", False) else 1
    act = activation(cfg, "hidden_act", "relu")
    stem = cfg.get_int("embedding_size", 64)
    sizes = cfg.get("hidden_sizes", [256, 512, 1024, 2048])
    depths = cfg.get("depths", [3, 4, 6, 3])
    for key, values in (("hidden_sizes", sizes), ("depths", depths)):
        if not isinstance(values, list) or not values or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise ImportProblem(f"{cfg.where(key)} = {values!r}: expected a list of whole numbers >= 1")
    if len(sizes) != len(depths):
        raise ImportProblem(f"{cfg.where('depths')} has {len(depths)} stages but hidden_sizes has {len(sizes)}")
    if bottleneck and any(s < REDUCTION for s in sizes):
        raise ImportProblem(f"{cfg.where('hidden_sizes')} = {sizes!r}: a bottleneck stage needs at least "
                            f"{REDUCTION} channels (its inner width is hidden_size // {REDUCTION})")
    strides = [first_stride] + [2] * (len(sizes) - 1)
    same_first = first_stride == 1 and sizes[0] == stem
    channels = ["E" if i == 0 and same_first else f"C{i + 1}" for i in range(len(sizes))]
    steps = STEM_STEPS + sum(1 for s in strides if s == 2)

    spec.dim("B", 1, "batch size (images)")
    spec.dim("img", 224, "image side in pixels (not in the config: ImageNet's 224)")
    spec.dim("E", stem, "stem channels", "embedding_size")
    for i, (size, depth) in enumerate(zip(sizes, depths), 1):
        if i == 1 and same_first:  # identity blocks only: stage 1 keeps the stem's channels, dim E
            spec.dim("D1", depth, "stage 1 blocks (hidden_sizes[0] = embedding_size: E channels)", "depths[0]")
            continue
        spec.dim(f"C{i}", size, f"stage {i} output channels" + (f" (bottleneck width C{i} // {REDUCTION})"
                                                                 if bottleneck else ""), f"hidden_sizes[{i - 1}]")
        spec.dim(f"D{i}", depth, f"stage {i} blocks", f"depths[{i - 1}]")
    spec.derived("G", f"(img + {2**steps - 1}) // {2**steps}",
                 f"side of the last feature map: img / {2**steps} rounded up ({steps} stride-2 steps)")
    if cfg.dtype == "fp32" and not cfg.dtype_source.startswith("--dtype"):
        spec.precision("tf32", f"{cfg.dtype_source}; PyTorch runs cuDNN convolutions in TF32 on Tensor Cores by "
                       "default (torch.backends.cudnn.allow_tf32)")
    else:
        spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", str(cfg.get_int("num_channels", 3)), "img", "img"], "num_channels")
    n = len(sizes)
    widths = ", ".join(str(s // REDUCTION if bottleneck else s) for s in sizes)
    spec.doc = (f"ResNet imported from a Hugging Face config: stem conv 7x7/2 ({stem}) + BatchNorm + {act} + "
                f"max-pool 3x3/2; {n} {layer_type} stages of {', '.join(map(str, depths))} blocks"
                + (f" (widths {widths}, expanded x{REDUCTION} to {', '.join(map(str, sizes))})" if bottleneck
                   else f" ({', '.join(map(str, sizes))} channels)")
                + ", projection shortcuts where a block changes the channels or the stride; "
                + ("global average pool" if cfg.pooler else "its last_hidden_state (--no-pooler: no pool)")
                + "; BatchNorm in eval mode (running statistics); no classifier")
    _blocks(spec, bottleneck, in_bottleneck, act)
    spec.header.append("# `source:` and `ignore:` name modules of transformers' ResNetModel"
                       + ("" if cfg.pooler else "; the spec's output is its last_hidden_state (imported with "
                          "--no-pooler)"))
    spec.note("BatchNorm in eval mode (a per-channel scale and shift with the running statistics), as inference "
              "runs it and as validate --against runs the real model; write `mode: train` for the batch "
              "statistics of a training step. No classifier (ResNetForImageClassification adds flatten + linear).")
    spec.ignore(f"""\
- module: pooler
  extra: {{scale: "-B*{channels[-1]}*G**2"}}
  pass: backward
  reason: >-
{_folded(POOL_REASON)}
""" if cfg.pooler else f"""\
- module: pooler
  reason: >-
{_folded(LEFT_OUT)}
""")
    stages = []
    in_channels = "E"
    for i, stride in enumerate(strides, 1):
        out = channels[i - 1]
        # ResNetBottleNeckLayer / ResNetBasicLayer: a shortcut when the channels or the stride change
        projects = stride != 1 or (sizes[i - 2] if i > 1 else stem) != sizes[i - 1]
        lines = []
        rest = f"D{i}"
        if projects:
            lines.append(f"""\
- block: block_proj
  name: first
  args: {{out: {out}, stride: {stride}}}  # {in_channels} -> {out} channels
  source: layers.0
""")
            rest = f"D{i} - 1"
        if not projects or depths[i - 1] > 1:
            lines.append(f"""\
- repeat: {rest}
  name: blocks
  body: block
  args: {{out: {out}}}
  source: layers{'  # layers.1 onwards: layers.0 is `first`' if projects else ''}
""")
        stages.append(f"- sequence:\n{_indent(''.join(lines), '    ')}  name: stage{i}\n  source: stages.{i - 1}\n")
        in_channels = out
    spec.layers(f"""\
- sequence:
{_indent(_conv_layer(7, "E", "2", act, "embedder"), "    ")}    - max_pool2d: {{kernel: 3, stride: 2, padding: 1}}
      source: pooler
  name: embedder
  source: embedder
- sequence:
{_indent(''.join(stages), "    ")}  name: encoder
  source: encoder
""" + ("""\
- global_avg_pool: {}  # AdaptiveAvgPool2d((1, 1))
  name: pooler
  source: pooler
""" if cfg.pooler else ""))
    cfg.check_understood(RESNET_IGNORED)
    return spec.render()


RESNET = Family(("resnet",), "ResNetModel", build_resnet,
                "ResNet (bottleneck or basic blocks, projection shortcuts; no classifier)",
                architectures=("ResNetForImageClassification",), options=(POOLER,),
                variant=lambda cfg: Variant("ResNetModel", output=None if cfg.pooler else "last_hidden_state"),
                refused=("hidden_sizes and depths of different lengths",
                         "a bottleneck stage narrower than 4 channels"),
                keys=(rules.size("num_channels"), rules.size("embedding_size"),
                      rules.size("hidden_sizes", items=True), rules.layers("depths", items=True)))

FAMILY_LIST = (RESNET,)
