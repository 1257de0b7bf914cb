"""Learned tokens and position tables resized to another token grid, against transformers on meta (small
widths, forward and train): YolosModel with its detection tokens on an image of another size than its
config's (the initial table resized and added; with mid position embeddings, the stack resized once and
added after every layer but the last), Dinov2Model at a non-native, non-square resolution (and at its
native one, where the table is used as it is), and ViTModel with interpolate_pos_encoding=True."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import loads  # noqa: E402
from costspec.tree.walk import walk  # noqa: E402

VIT_LAYER = """\
  layer:
    - residual:
        - layernorm: {eps: 1.0e-12}
          source: layernorm_before
        - attention: {heads: heads, fused_qkv: false}
          source: attention
    - residual:
        - layernorm: {eps: 1.0e-12}
          source: layernorm_after
        - mlp: {hidden: F, fn: gelu}
          source: %s
"""

YOLOS = """\
costspec: 1
name: yolos
dims: {B: 2, C: 32, heads: 2, F: 64, L: 3, det: 5, patch: 16, img_h: 80, img_w: 128, gh: 4, gw: 6,
       h: img_h // patch, w: img_w // patch}
input: [B, 3, img_h, img_w]
blocks:
%s  layer_mid:
    - block: layer
      save: y
    - slice: {axis: 0, start: 0, end: 1}
      input: mid
    - add: {with: y}
layers:
  - sequence:
      - patch_embed: {patch: patch, dim: C, cls_token: true}
        source: patch_embeddings
      - learned_tokens: {count: det, at: end}
      - interpolated_positions: {grid: [gh, gw], size: [h, w], prefix: 1, suffix: det}
        source: interpolation
    name: embeddings
    source: embeddings
    save: x
  - sequence:
%s    name: encoder
    source: encoder
  - layernorm: {eps: 1.0e-12}
    source: layernorm
"""

MID = """\
      - interpolated_positions: {grid: [gh, gw], size: [h, w], prefix: 1, suffix: det, tables: L - 1, add: false}
        source: interpolation
        save: mid
      - repeat: L - 1
        name: layer
        input: x
        source: layer
        body: layer_mid
      - repeat: 1
        name: last
        body: layer
        source: layer
"""

NO_MID = """\
      - repeat: L
        name: layer
        source: layer
        body: layer
"""

YOLOS_CONFIG = {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 64,
                "image_size": "[64, 96]", "num_detection_tokens": 5, "add_pooling_layer": False}


def run_against(model, target: str, pass_: str, config: dict | None = None):
    values = model.bind()
    real = load_target(target, model, values, "meta", None, {k: str(v) for k, v in (config or {}).items()})
    return validate_against(model, values, real, pass_)


def assert_matches(result) -> None:
    """Every phase agrees: matmul FLOPs after the named rules, parameters, and every pointwise kind."""
    assert result.ok, "\n".join(result.failures())
    for phase in summary(result).values():
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    assert not result.rowmap.unmatched_real


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("mid", [True, False])
def test_yolos_with_detection_tokens_and_resized_position_tables(mid, pass_):
    text = YOLOS % (VIT_LAYER % "[intermediate, output.dense]", MID if mid else NO_MID)
    model = loads(text)
    config = {**YOLOS_CONFIG, "use_mid_position_embeddings": mid}
    assert_matches(run_against(model, "hf:YolosModel", pass_, config))
    # the 4 x 6 grid rows resized to the image's 5 x 8: C*5*8 bicubic outputs, once for the initial table
    # and once per mid table (L - 1 = 2 of them, one call)
    values = model.bind()
    resized = [step.node for step in walk(model.root) if step.node.name.endswith("pos_embed")]
    counts = sorted(int(node.forward().pointwise["bicubic"].xreplace(values)) for node in resized)
    assert counts == ([32 * 40, 2 * 32 * 40] if mid else [32 * 40])


DINOV2 = """\
costspec: 1
name: dinov2
dims: {B: 2, C: 32, heads: 2, L: 2, patch: 14, g: 4, img_h: 70, img_w: 42, h: img_h // patch, w: img_w // patch}
input: [B, 3, img_h, img_w]
blocks:
  layer:
    - residual:
        - layernorm: {}
          source: norm1
        - attention: {heads: heads, fused_qkv: false}
          source: attention
        - layer_scale: {}
          source: layer_scale1
    - residual:
        - layernorm: {}
          source: norm2
        - mlp: {hidden: 4*C, fn: gelu}
          source: mlp
        - layer_scale: {}
          source: layer_scale2
layers:
  - sequence:
      - patch_embed: {patch: patch, dim: C, cls_token: true}
        source: patch_embeddings
      - interpolated_positions: {grid: [g, g], size: [h, w], native: skip}
    name: embeddings
    source: embeddings
  - repeat: L
    name: layer
    source: encoder.layer
    body: layer
  - layernorm: {}
    source: layernorm
"""

DINOV2_CONFIG = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 56,
                 "patch_size": 14, "use_mask_token": False}  # the mask token: only for masked pre-training


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("image", ["70x42", "56x56"])
def test_dinov2_at_another_and_at_its_native_resolution(image, pass_):
    img_h, img_w = image.split("x")
    model = loads(DINOV2.replace("img_h: 70, img_w: 42", f"img_h: {img_h}, img_w: {img_w}"))
    assert_matches(run_against(model, "hf:Dinov2Model", pass_, DINOV2_CONFIG))
    node = next(step.node for step in walk(model.root) if step.node.name.endswith("pos_embed"))
    resized = node.forward().pointwise["bicubic"].xreplace(model.bind())
    # 70 x 42 px is a 5 x 3 grid: the 4 x 4 table resized (C*5*3 outputs); at 56 x 56 it is used as it is
    assert resized == (32 * 5 * 3 if image == "70x42" else 0)


VIT = """\
costspec: 1
name: vit
dims: {B: 2, C: 32, heads: 2, F: 64, L: 2, patch: 8, g: 4, img_h: 48, img_w: 40, h: img_h // patch, w: img_w // patch}
input: [B, 3, img_h, img_w]
blocks:
%slayers:
  - sequence:
      - patch_embed: {patch: patch, dim: C, cls_token: true}
        source: patch_embeddings
      - interpolated_positions: {grid: [g, g], size: [h, w], native: skip}
    name: embeddings
    source: embeddings
  - repeat: L
    name: layers
    source: layers
    body: layer
  - layernorm: {eps: 1.0e-12}
    source: layernorm
"""


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_vit_with_interpolate_pos_encoding(pass_):
    model = loads(VIT % (VIT_LAYER % "mlp"))
    assert_matches(run_against(model, "tests.against.tokens_models:vit_interpolated", pass_))
