"""YOLOS (transformers' YolosModel, with its pooler): a ViT encoder on the patches with a class token and
num_detection_tokens learned tokens appended, the position table resized (bicubic) to the image's patch
grid and, with use_mid_position_embeddings, a resized table added after every layer but the last; final
LayerNorm and the pooler (dense + tanh on the class token). The image is the config's image_size (the
grid of the position tables), which transformers still resizes. The layout follows specs/yolos_small.yaml
(the zoo's YOLOS-S, there with its detection heads)."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import activation, check_divides
from costspec.importer.families.modern_template import precision

IGNORED = {key: "DETR's matching and loss weights (YolosForObjectDetection's training loss only)"
           for key in ("auxiliary_loss", "class_cost", "bbox_cost", "giou_cost", "bbox_loss_coefficient",
                       "giou_loss_coefficient", "eos_coefficient")}


def _image(cfg: HFConfig) -> tuple[int, int]:
    value = cfg.get("image_size", [512, 864])
    if (not isinstance(value, list) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
        raise ImportProblem(f"{cfg.where('image_size')} = {value!r}: expected a [height, width] pair of positive whole "
                            "numbers (YolosConfig takes no single side)")
    return value[0], value[1]


def build_yolos(cfg: HFConfig) -> str:
    C = cfg.get_int("hidden_size", 768)
    n_heads = cfg.get_int("num_attention_heads", 12)
    check_divides(cfg, "hidden_size", C, "num_attention_heads", n_heads)
    F = cfg.get_int("intermediate_size", 3072)
    L = cfg.get_int("num_hidden_layers", 12)
    det = cfg.get_int("num_detection_tokens", 100)
    patch = cfg.get_int("patch_size", 16)
    img_h, img_w = _image(cfg)
    if img_h % patch or img_w % patch:
        raise ImportProblem(f"{cfg.where('image_size')} = {[img_h, img_w]} is not a multiple of patch_size = {patch} "
                            "(the mid position table's length, image area // patch**2, then differs from the "
                            "patch grid's)")
    fn = activation(cfg, "hidden_act", "gelu")
    mid = cfg.get_bool("use_mid_position_embeddings", True) and L > 1
    qkv = "" if cfg.get_bool("qkv_bias", True) else ", qkv_bias: false"
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "YolosModel)")
    spec.dim("B", 1, "batch size (images)")
    spec.dim("img_h", img_h, "image height in pixels", "image_size[0]")
    spec.dim("img_w", img_w, "image width in pixels", "image_size[1]")
    spec.dim("C", C, "model width", "hidden_size")
    spec.dim("heads", n_heads, "attention heads", "num_attention_heads")
    spec.dim("F", F, "MLP hidden width", "intermediate_size")
    spec.dim("L", L, "encoder layers", "num_hidden_layers")
    spec.dim("det", det, "detection tokens", "num_detection_tokens")
    spec.dim("gh", img_h // patch, "the position tables' grid height", "image_size[0] // patch_size")
    spec.dim("gw", img_w // patch, "the position tables' grid width", "image_size[1] // patch_size")
    spec.derived("h", f"img_h // {patch}", "patch rows", "patch_size")
    spec.derived("w", f"img_w // {patch}", "patch columns", "patch_size")
    precision(spec, cfg)
    spec.input(["B", str(cfg.get_int("num_channels", 3)), "img_h", "img_w"], "num_channels")
    spec.doc = (f"YOLOS imported from a Hugging Face config: a ViT encoder (width {C}, {L} pre-LN layers, {n_heads} "
                f"heads, {fn} MLP {F}) on {patch}x{patch} patches with a class token and {det} learned detection "
                "tokens appended; the position table resized (bicubic) to the patch grid and added"
                + (", and a resized mid position table added after every layer but the last" if mid else "")
                + "; final LayerNorm; the pooler (dense + tanh on the class token, pooler_output); no detection "
                "heads (YolosForObjectDetection's)")
    spec.header.append("# `source:` names modules of transformers' YolosModel; the spec's output is its pooler_output")
    spec.block("layer", f"""\
doc: a pre-LN encoder layer (YolosLayer, ViT's)
layers:
  - residual:
      - layernorm: {{}}
        source: layernorm_before
      - attention: {{heads: heads, fused_qkv: false{qkv}}}  # query / key / value / output dense
        source: attention
  - residual:
      - layernorm: {{}}
        source: layernorm_after
      - mlp: {{hidden: F, fn: {fn}}}  # intermediate.dense, hidden_act, output.dense (+ the residual add)
        source: [intermediate, output.dense]
""")
    if mid:
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
    spec.layers(f"""\
- sequence:
    - conv2d: {{out: C, kernel: {patch}, stride: {patch}}}  # patch_size
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
{"  save: x" if mid else ""}
""".replace("\n\n", "\n"))
    if mid:
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
        spec.layers("""\
- repeat: L
  name: layers
  body: layer
  source: encoder.layer
""")
    spec.layers("""\
- layernorm: {}
  source: layernorm
- sequence:
    - take_token: {index: 0}  # the class token
    - linear: {out: C}
      source: dense
    - activation: {fn: tanh}
      source: activation
  name: pooler
  source: pooler
""")
    cfg.check_understood(IGNORED)
    return spec.render()


KEYS = (size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
        heads("num_attention_heads", "hidden_size"), size("image_size", items=True), size("patch_size"),
        size("num_channels"), size("num_detection_tokens"))
YOLOS = Family(("yolos",), "YolosModel", build_yolos,
               "YOLOS: a ViT encoder with appended detection tokens and resized (mid) position tables; the "
               "pooler's output (pooler_output)",
               architectures=("YolosForObjectDetection",), hf_output=lambda cfg: "pooler_output",
               refused=("an image_size that is not a multiple of patch_size",), keys=KEYS)

FAMILY_LIST = (YOLOS,)
