"""SegFormer (MiT) written by hand against transformers' SegformerModel on meta, forward and train: every row
PASS. Efficient self-attention (k and v from tokens reduced by a kernel = stride = sr conv + LayerNorm) is the
`attention` op's cross-attention (`kv:` the reduced tokens, q from the saved normed tokens); the Mix-FFN is
linear, 3x3 depthwise conv on the token grid, GELU, linear. The spec: tests/against/specs/segformer_small.yaml.
SegformerForSemanticSegmentation's all-MLP decode head (each stage's map projected, resized bilinearly to stage 1's
grid, concatenated last stage first, fused by a 1x1 conv + BatchNorm + ReLU, classified by a 1x1 conv) is written
after the same encoder in segformer_small_segmentation.yaml (`save:` each stage, `input:` it in the head).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import load  # noqa: E402

SPECS = Path(__file__).resolve().parent / "specs"
SEGFORMER = dict(num_encoder_blocks=2, depths=[1, 2], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
                 strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[4, 4], image_size=64)


def check(spec: str, target: str, pass_: str, folder: Path, **keys):
    path = folder / "config.json"
    path.write_text(json.dumps(transformers.SegformerConfig(**SEGFORMER, **keys).to_dict()))
    model = load(SPECS / spec)
    values = model.bind()
    result = validate_against(model, values, load_target(target, model, values, "meta", str(path), {}), pass_)
    assert result.ok, "\n".join(result.failures())
    assert not result.rowmap.unmatched_real
    for totals in summary(result).values():
        assert totals["real_reconciled"] == totals["spec_matmul"] and totals["real_params"] == totals["spec_params"]
    return result


def row(result, phase: str, name: str):
    return next(r for r in result.phases[phase].rows if r.name == name)


@pytest.mark.slow  # tests/importer/test_segformer.py checks the imported spec of the same config, fast
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_segformer_spec_matches_segformermodel(pass_, tmp_path):
    result = check("segformer_small.yaml", "hf:SegformerModel", pass_, tmp_path)
    B, G1, G2, C1, C2 = 2, 16, 8, 16, 32
    N1, R1 = G1 * G1, (G1 // 2) ** 2  # stage 1's tokens, and its k/v tokens after the 2x2 reduction
    attn = row(result, "forward", "stage1.blocks.attn_sr.attn")
    # q and o on every token, k and v on the reduced ones, QK^T and AV over N1 x R1 scores (one head of C1)
    assert attn.spec_matmul == attn.real_matmul == 2 * B * (2 * N1 * C1 * C1 + 2 * R1 * C1 * C1 + 2 * N1 * R1 * C1)
    reduce = row(result, "forward", "stage1.blocks.attn_sr.reduce.conv")
    assert reduce.spec_matmul == reduce.real_matmul == 2 * B * R1 * C1 * C1 * 4  # 2x2 kernel, C1 -> C1
    dw = row(result, "forward", "stage2.blocks.mixffn.conv")
    assert dw.spec_matmul == dw.real_matmul == 2 * 2 * B * G2 * G2 * 4 * C2 * 9  # 2 blocks, depthwise 3x3 on 4*C2


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_segformer_decode_head_matches_semantic_segmentation(pass_, tmp_path):
    result = check("segformer_small_segmentation.yaml", "hf:SegformerForSemanticSegmentation", pass_, tmp_path,
                   decoder_hidden_size=24, num_labels=5)
    B, G1, G2, C1, C2, Dd, labels = 2, 16, 8, 16, 32, 24, 5
    head = row(result, "forward", "decode_head")
    # the two projections on each stage's tokens, the fuse (2*Dd -> Dd) and the classifier on stage 1's grid
    assert head.spec_matmul == head.real_matmul == 2 * B * (G1 * G1 * C1 * Dd + G2 * G2 * C2 * Dd
                                                            + G1 * G1 * 2 * Dd * Dd + G1 * G1 * Dd * labels)
    assert head.spec_params == head.real_params == (C1 * Dd + Dd) + (C2 * Dd + Dd) + 2 * Dd * Dd + 2 * Dd + (
        Dd * labels + labels)
