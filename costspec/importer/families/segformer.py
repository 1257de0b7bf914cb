"""SegFormer (transformers' SegformerModel, the Mix Transformer encoder): hierarchical stages, each an
overlapping patch embedding (a strided conv with padding kernel // 2, then LayerNorm), blocks of efficient
self-attention and Mix-FFN, a LayerNorm and the tokens back to an NCHW map. Efficient self-attention takes q
from every token and k, v from the tokens reduced by a kernel = stride = sr_ratio conv + LayerNorm: the
`attention` op's cross-attention (`kv:` the reduced tokens). The Mix-FFN is fc1, a 3x3 depthwise conv on the
token grid, the activation, fc2. No decode head (SegformerForSemanticSegmentation's all-MLP decoder)."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, count, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import activation, check_divides, square_size
from costspec.importer.families.modern_template import precision

IGNORED = {
    "drop_path_rate": "stochastic depth: the identity in eval mode, as costspec counts",
    "decoder_hidden_size": "SegformerForSemanticSegmentation's decode head only (SegformerModel has none)",
    "semantic_loss_ignore_index": "the segmentation loss only",
    "downsampling_rates": "in the published MiT configs; no transformers class reads it",
}
# (key, default) of the per-stage lists, one entry per stage (num_encoder_blocks of them)
STAGE_LISTS = (("depths", [2, 2, 2, 2]), ("sr_ratios", [8, 4, 2, 1]), ("hidden_sizes", [32, 64, 160, 256]),
               ("patch_sizes", [7, 3, 3, 3]), ("strides", [4, 2, 2, 2]), ("num_attention_heads", [1, 2, 5, 8]))
DEFAULT_IMAGE = 224  # SegformerConfig has no image size; the MiT checkpoints' image_size


def _stage_list(cfg: HFConfig, key: str, default: list[int], n: int) -> list[int]:
    value = cfg.get(key, default)
    if (not isinstance(value, list)
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
        raise ImportProblem(f"{cfg.where(key)} = {value!r}: expected a list of positive whole numbers, one per stage")
    if len(value) != n:
        raise ImportProblem(f"{cfg.where(key)} has {len(value)} entries but num_encoder_blocks = {n} (one per stage)")
    return value


def _grids(cfg: HFConfig, img: int, patches: list[int], strides: list[int], srs: list[int]) -> list[int]:
    """The token grid side of each stage: (side + 2*(k // 2) - k) // s + 1 after each patch conv (at least 1:
    the padding keeps every kernel inside the padded input)."""
    grids, side = [], img
    for i, (k, s, sr) in enumerate(zip(patches, strides, srs)):
        side = (side + 2 * (k // 2) - k) // s + 1
        if sr > side:
            raise ImportProblem(f"{cfg.where('sr_ratios')}: stage {i + 1}'s {sr}x{sr} sequence reduction does not fit "
                                f"its {side}x{side} token grid (image_size {img}); transformers' conv fails")
        grids.append(side)
    return grids


def _blocks(spec: SpecText, fn: str, reduced: bool, plain: bool) -> None:
    spec.block("mix_ffn", f"""\
doc: "Mix-FFN: fc1, a 3x3 depthwise conv on the token grid, {fn}, fc2"
params: {{width: C1, hidden: F1, grid: G1}}
layers:
  - layernorm: {{}}
    source: layernorm_after
  - linear: {{out: hidden}}
    source: mlp.fc1
  - transpose: {{axis0: 1, axis1: 2}}  # [B, N, F] -> [B, F, N], viewed as the grid
  - reshape: {{shape: [B, hidden, grid, grid]}}
  - conv2d: {{out: hidden, kernel: 3, padding: 1, groups: hidden}}
    source: mlp.dwconv.dwconv
  - flatten: {{start: 2}}
  - transpose: {{axis0: 1, axis1: 2}}
  - activation: {{fn: {fn}}}  # hidden_act
    source: mlp.activation_fn
  - linear: {{out: width}}
    source: mlp.fc2
""")
    if reduced:
        spec.block("reduced_block", """\
doc: >-
  x + attn(LN(x)) with k and v from the normed tokens reduced sr x sr (conv, kernel = stride = sr, then
  LayerNorm) and q from every token; then x + MixFFN(LN(x))
params: {width: C1, heads: H1, hidden: F1, grid: G1, sr: 2}
layers:
  - residual:
      - layernorm: {}
        source: layernorm_before
        save: normed
      - sequence:
          - transpose: {axis0: 1, axis1: 2}
          - reshape: {shape: [B, width, grid, grid]}
          - conv2d: {out: width, kernel: sr, stride: sr}
            source: sequence_reduction
          - flatten: {start: 2}
          - transpose: {axis0: 1, axis1: 2}
          - layernorm: {}
            source: layer_norm
        name: reduce
        source: attention.sequence_reduction
        save: reduced
      - attention: {heads: heads, kv: reduced, fused_qkv: false}  # q_proj on every token, k/v_proj on the reduced
        input: normed
        source: attention
  - residual:
      - block: mix_ffn
        args: {width: width, hidden: hidden, grid: grid}
""")
    if plain:
        spec.block("block", """\
doc: "sr_ratio 1: x + attn(LN(x)) over every token, then x + MixFFN(LN(x))"
params: {width: C1, heads: H1, hidden: F1, grid: G1}
layers:
  - residual:
      - layernorm: {}
        source: layernorm_before
      - attention: {heads: heads, fused_qkv: false}  # q_proj, k_proj, v_proj, o_proj
        source: attention
  - residual:
      - block: mix_ffn
        args: {width: width, hidden: hidden, grid: grid}
""")


def build_segformer(cfg: HFConfig) -> str:
    n = cfg.get_int("num_encoder_blocks", 4)
    depths, srs, widths, patches, strides, heads = (_stage_list(cfg, key, default, n) for key, default in STAGE_LISTS)
    for i, (w, h) in enumerate(zip(widths, heads)):
        check_divides(cfg, f"hidden_sizes[{i}]", w, f"num_attention_heads[{i}]", h)
    # SegformerLayer's Mix-FFN: int(hidden_size * mlp_ratio); SegformerConfig types mlp_ratios as whole numbers
    hidden = [w * r for w, r in zip(widths, _stage_list(cfg, "mlp_ratios", [4] * n, n))]
    img = square_size(cfg, "image_size", DEFAULT_IMAGE)
    grids = _grids(cfg, img, patches, strides, srs)
    fn = activation(cfg, "hidden_act", "gelu")
    reshape_last = cfg.get_bool("reshape_last_stage", True)
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "SegformerModel)")
    spec.dim("B", 1, "batch size (images)")
    spec.dim("img", img, "image side in pixels", "image_size" if cfg.has("image_size") else
             f"not in the config: the MiT checkpoints' {DEFAULT_IMAGE}")
    for i in range(n):
        spec.dim(f"C{i + 1}", widths[i], f"stage {i + 1} width", f"hidden_sizes[{i}]")
        spec.dim(f"H{i + 1}", heads[i], f"stage {i + 1} heads", f"num_attention_heads[{i}]")
        spec.dim(f"D{i + 1}", depths[i], f"stage {i + 1} blocks", f"depths[{i}]")
        spec.dim(f"F{i + 1}", hidden[i], f"stage {i + 1} Mix-FFN width", f"hidden_sizes[{i}] * mlp_ratios[{i}]")
    names: list[str] = []  # each stage's grid side as a dim: the previous one where a stride-1 odd conv keeps it
    for i, (k, s) in enumerate(zip(patches, strides)):
        prev = "img" if i == 0 else names[-1]
        if s == 1 and k % 2:
            names.append(prev)
            continue
        expr = (f"({prev} - 1) // {s} + 1" if k % 2 else f"{prev} // {s} + 1")
        names.append(f"G{i + 1}")
        spec.derived(f"G{i + 1}", expr,
                     f"stage {i + 1} token grid side ({grids[i]}): {k}x{k} conv, stride {s}, padding {k // 2}",
                     f"patch_sizes[{i}], strides[{i}]")
    precision(spec, cfg)
    channels = cfg.get_int("num_channels", 3)
    spec.input(["B", str(channels), "img", "img"], "num_channels")
    spec.doc = (f"SegFormer (Mix Transformer) encoder imported from a Hugging Face config: {n} stages of widths "
                f"{', '.join(map(str, widths))}, depths {', '.join(map(str, depths))}, heads "
                f"{', '.join(map(str, heads))}, sequence reduction {', '.join(map(str, srs))}; each an overlapping "
                "patch embedding (strided conv + LayerNorm), pre-LN blocks of efficient self-attention (k and v "
                f"from the tokens reduced by an sr x sr conv + LayerNorm) and Mix-FFN (fc1, 3x3 depthwise conv, "
                f"{fn}, fc2), a LayerNorm"
                + (", the tokens back to an NCHW map (last_hidden_state)" if reshape_last
                   else "; the last stage's tokens stay [B, N, C] (reshape_last_stage false)")
                + "; no decode head")
    spec.header.append("# `source:` names modules of transformers' SegformerModel; the output is its last_hidden_state")
    _blocks(spec, fn, any(sr > 1 for sr in srs), any(sr == 1 for sr in srs))
    for i in range(n):
        j, g = i + 1, names[i]
        k, s = patches[i], strides[i]
        body, args = (("reduced_block", f"sr: {srs[i]}, ") if srs[i] > 1 else ("block", ""))
        back = (f"""\
    - reshape: {{shape: [B, {g}, {g}, C{j}]}}
    - permute: {{order: [0, 3, 1, 2]}}  # {"NCHW for the next stage's patch conv" if i < n - 1 else "NCHW"}
""" if i < n - 1 or reshape_last else "")
        spec.layers(f"""\
- sequence:
    - conv2d: {{out: C{j}, kernel: {k}, stride: {s}, padding: {k // 2}}}  # patch_sizes[{i}], strides[{i}]
      source: patch_embeddings.proj
    - flatten: {{start: 2}}
    - transpose: {{axis0: 1, axis1: 2}}  # [B, {g}*{g}, C{j}]
    - layernorm: {{}}
      source: patch_embeddings.layer_norm
    - repeat: D{j}
      name: blocks
      body: {body}
      args: {{width: C{j}, heads: H{j}, hidden: F{j}, grid: {g}, {args}}}
      source: blocks
    - layernorm: {{}}
      source: layer_norm
{back}  name: stage{j}
  source: stages.{i}
""".replace(", }", "}"))
    cfg.check_understood(IGNORED)
    return spec.render()


KEYS = (size("num_channels"), size("num_encoder_blocks"), layers("depths", items=True),
        size("sr_ratios", items=True), size("hidden_sizes", items=True), size("patch_sizes", items=True),
        size("strides", items=True), size("num_attention_heads", items=True), size("mlp_ratios", items=True),
        size("image_size", items=True), count("decoder_hidden_size"))
SEGFORMER = Family(("segformer",), "SegformerModel", build_segformer,
                   "SegFormer (Mix Transformer encoder: overlapping patch embeddings, efficient self-attention with "
                   "sequence reduction, Mix-FFN; no decode head)",
                   architectures=("SegformerForSemanticSegmentation", "SegformerForImageClassification"),
                   refused=("per-stage lists whose length differs from num_encoder_blocks",
                            "a sequence reduction larger than its stage's grid"),
                   keys=KEYS)

FAMILY_LIST = (SEGFORMER,)
