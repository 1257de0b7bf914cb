"""`costspec import torch hf:ModelClass`: transformers models traced on meta.

The vision architectures of the acceptance list, as transformers builds them (timm cannot be installed
beside the CPU torch of CI: every timm imports torchvision): ResNet, ConvNeXt, EfficientNet, ViT and Swin,
exact in matmul-class FLOPs and parameters at two batch sizes, forward and train (after the named rules);
small configs here, the published sizes under `-m slow`. And Llama: `import torch hf:LlamaModel` of a
config gives the totals `import hf` of that config gives (TC FLOPs, CUDA-core FLOPs, parameters).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from costspec.importer import import_hf
from costspec.model import loads
from costspec.trace import import_torch

from .torch_check import against, assert_exact

ROOT = Path(__file__).resolve().parents[2]
POOLED = "pooler_output"  # the spec ends at the model's pooling head: that output is the one differentiated
SMALL = {
    "ResNetModel": ({"depths": "[1, 2]", "hidden_sizes": "[16, 32]", "embedding_size": "8"}, POOLED),
    "ConvNextModel": ({"depths": "[1, 2]", "hidden_sizes": "[16, 32]", "num_stages": "2"}, POOLED),
    "EfficientNetModel": ({"width_coefficient": "0.5", "depth_coefficient": "0.5", "image_size": "64",
                           "hidden_dim": "640"}, POOLED),
    "ViTModel": ({"hidden_size": "32", "num_hidden_layers": "2", "num_attention_heads": "4",
                  "intermediate_size": "64", "image_size": "32", "patch_size": "8", "add_pooling_layer": "false"},
                 None),
    "SwinModel": ({"embed_dim": "16", "depths": "[2, 2]", "num_heads": "[2, 4]", "image_size": "56"}, POOLED),
}
PUBLISHED = {  # resnet50, convnext_tiny, efficientnet_b0, vit_base_patch16_224, swin_tiny_patch4_window7_224
    "ResNetModel": ({}, POOLED),
    "ConvNextModel": ({}, POOLED),
    "EfficientNetModel": ({"width_coefficient": "1.0", "depth_coefficient": "1.0", "image_size": "224",
                           "hidden_dim": "1280"}, POOLED),
    "ViTModel": ({"add_pooling_layer": "false"}, None),
    "SwinModel": ({}, POOLED),
}


def check_vision(cls: str, sets: dict[str, str], field: str | None) -> None:
    imported = import_torch(f"hf:{cls}", config_sets=sets, output_field=field)
    assert imported.unmapped == []
    for batch in (1, 3):
        assert_exact(against(imported.text, f"hf:{cls}", {"B": batch}, None, sets, field))


@pytest.mark.parametrize("cls", sorted(SMALL))
def test_vision_architectures_are_exact(cls):
    check_vision(cls, *SMALL[cls])


@pytest.mark.slow
@pytest.mark.parametrize("cls", sorted(PUBLISHED))
def test_vision_architectures_at_their_published_sizes(cls):
    check_vision(cls, *PUBLISHED[cls])


def test_swin_reads_as_windowed_attention_and_everything_agrees():
    text = import_torch("hf:SwinModel", config_sets=SMALL["SwinModel"][0], output_field=POOLED).text
    assert "window: 7, rel_bias: swin" in text and "shift: 3" in text
    assert "- permute: {order: [0, 1, 3, 2, 4, 5]}" in text  # patch merging's strided slices
    assert "  - module: encoder.layers.0.downsample\n    extra: {add: \"9408*B\"}\n    pass: backward" in text
    sets, field = SMALL["SwinModel"]
    outcome = against(text, "hf:SwinModel", {"B": 2}, None, sets, field)
    assert outcome.ok, outcome.failures()  # the slices' gradient sums are the spec's named rule


def test_vit_embeddings_are_a_patch_embedding_and_everything_agrees():
    sets, field = SMALL["ViTModel"]
    text = import_torch("hf:ViTModel", config_sets=sets, output_field=field).text
    assert "- patch_embed: {patch: 8, dim: C, cls_token: true, pos_embed: true}\n    name: embeddings" in text
    outcome = against(text, "hf:ViTModel", {"B": 1}, None, sets, field)
    assert outcome.ok, outcome.failures()  # CUDA-core work too, at batch 1 (broadcast-grad-batch-1 applies)


def same_totals(config: Path) -> None:
    hf = loads(import_hf(config, backbone=True).text)  # LlamaModel, as traced
    traced = import_torch("hf:LlamaModel", config=str(config))
    assert traced.unmapped == []
    assert "  - module: layers.*.self_attn\n    extra: {scale: B*D*L*S*(KV + heads)/2}" in traced.text
    outcome = against(traced.text, "hf:LlamaModel", {}, str(config))
    assert outcome.ok, outcome.failures()  # rotate-half's extra work is written as ignore: rules
    torch_spec = loads(traced.text)
    assert {str(s) for s in torch_spec.dims.symbols} == {"B", "S", "C", "F", "heads", "KV", "D", "L", "V"}
    # the trace runs at S = max_position_embeddings, import hf's default is min(4096, it): compared at the trace's
    for sets in ({"S": int(torch_spec.dims.dims["S"].default)}, {"B": 2, "S": 256}):
        for pass_ in ("forward", "train"):
            a, b = hf.evaluate(pass_, **sets), torch_spec.evaluate(pass_, **sets)
            assert (a.tc, a.cuda, a.params) == (b.tc, b.cuda, b.params), (sets, pass_)


def test_llama_gives_the_totals_of_import_hf(tmp_path):
    config = json.loads((ROOT / "tests/data/hf_configs/llama_1b.json").read_text())
    config.update(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  num_hidden_layers=2, vocab_size=128, max_position_embeddings=32)
    path = tmp_path / "llama_small.json"
    path.write_text(json.dumps(config))
    same_totals(path)


@pytest.mark.slow
def test_llama_1b_gives_the_totals_of_import_hf():
    same_totals(ROOT / "tests/data/hf_configs/llama_1b.json")
