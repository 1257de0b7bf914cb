"""The ViT-like template (costspec/importer/families/vit_template.py, its table in vision.py): ViT, DeiT, DINOv2,
BEiT and YOLOS are one build driven by per-family switches. Folding BEiT's and YOLOS's own modules into it
changed no number: tests/data/vit_like_totals.json holds the TC and CUDA-core FLOPs and the
parameters (batch 2; forward, backward, train; with and without the pooler) that the modules before the fold
wrote for the configs below (`python -m tests.importer.test_vit_template OUT.json` with that tree on
PYTHONPATH wrote them), and the template writes the same. Then what the table gives every family: --no-pooler
(YOLOS's too), a family without a pooler writing the same layers either way."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from costspec.importer import FAMILIES, import_hf
from costspec.model import loads

transformers = pytest.importorskip("transformers")

DATA = Path(__file__).resolve().parents[1] / "data" / "vit_like_totals.json"
E = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 48}
ONE = {**E, "num_hidden_layers": 1}
CASES = {
    "yolos": ("YolosConfig", {**E, "image_size": [32, 48], "patch_size": 8, "num_detection_tokens": 5}),
    "yolos_nomid": ("YolosConfig", {**E, "image_size": [32, 48], "patch_size": 8, "num_detection_tokens": 3,
                                    "use_mid_position_embeddings": False, "qkv_bias": False, "hidden_act": "relu"}),
    "yolos_l1": ("YolosConfig", {**ONE, "image_size": [16, 16], "patch_size": 8}),
    "yolos_l3": ("YolosConfig", {**E, "num_hidden_layers": 3, "image_size": [24, 16], "patch_size": 8,
                                 "num_channels": 1}),
    "beit": ("BeitConfig", {**E, "image_size": 32, "patch_size": 8}),
    "beit_cls": ("BeitConfig", {**E, "image_size": 32, "patch_size": 8, "use_mean_pooling": False}),
    "beit_abs_mask": ("BeitConfig", {**E, "image_size": 32, "patch_size": 8, "use_absolute_position_embeddings": True,
                                     "use_mask_token": True, "layer_scale_init_value": 0.0}),
    "beit_rel": ("BeitConfig", {**E, "image_size": 32, "patch_size": 8, "use_relative_position_bias": True}),
    "beit_shared": ("BeitConfig", {**E, "image_size": 32, "patch_size": 8, "use_shared_relative_position_bias": True,
                                   "use_mean_pooling": False}),
    "beit_shared_l1": ("BeitConfig", {**ONE, "image_size": 16, "patch_size": 8,
                                      "use_shared_relative_position_bias": True, "hidden_act": "gelu_pytorch_tanh"}),
    "vit": ("ViTConfig", {**E, "image_size": 32, "patch_size": 8}),
    "vit_nobias": ("ViTConfig", {**E, "image_size": 32, "patch_size": 8, "qkv_bias": False,
                                 "pooler_output_size": 20}),
    "deit": ("DeiTConfig", {**E, "image_size": 32, "patch_size": 8, "pooler_act": "gelu"}),
    "dinov2": ("Dinov2Config", {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                "image_size": 28, "patch_size": 7}),
    "dinov2_swiglu": ("Dinov2Config", {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                       "image_size": 28, "patch_size": 7, "use_swiglu_ffn": True,
                                       "use_mask_token": False}),
}
PASSES = ("forward", "backward", "train")


def totals(name: str, folder: Path, pooler: bool) -> dict[str, list[int]]:
    """{pass: [TC FLOPs, CUDA-core FLOPs, parameters]} of the import of CASES[name] at batch 2."""
    cls, keys = CASES[name]
    path = folder / f"{name}.json"
    path.write_text(json.dumps(getattr(transformers, cls)(**keys).to_dict(), default=str))
    model = loads(import_hf(path, pooler=pooler).text)
    reports = {pass_: model.report(pass_, model.bind(2)) for pass_ in PASSES}
    return {pass_: [int(r.tc), int(r.cuda), int(r.params)] for pass_, r in reports.items()}


def variants(name: str) -> tuple[bool, ...]:
    return (True,) if name.startswith("yolos") else (True, False)  # YOLOS took no --no-pooler before the fold


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fold_changed_no_number(name, tmp_path):
    before = json.loads(DATA.read_text())
    for pooler in variants(name):
        assert totals(name, tmp_path, pooler) == before[f"{name}/{pooler}"], (name, pooler)


def test_every_vit_like_family_is_a_table_entry():
    from costspec.importer.families.vision import TOWERS

    for tower in TOWERS:
        family = FAMILIES[tower.model_type]
        assert family.hf_class == tower.hf_class and family.doc == tower.blurb
    assert {t.model_type for t in TOWERS} == {"vit", "deit", "dinov2", "beit", "yolos"}


def test_yolos_no_pooler_drops_the_pooler(tmp_path):
    """YOLOS through the template takes --no-pooler: YolosModel(add_pooling_layer=False), its last_hidden_state;
    the pooler's C x C dense (and bias) and its 2*B*C*C forward FLOPs are what the two specs differ by."""
    whole, bare = totals("yolos", tmp_path, True), totals("yolos", tmp_path, False)
    C, B = E["hidden_size"], 2
    assert whole["forward"][2] - bare["forward"][2] == C * C + C
    assert whole["forward"][0] - bare["forward"][0] == 2 * B * C * C
    text = import_hf(tmp_path / "yolos.json", pooler=False).text
    assert "--config-set add_pooling_layer=false --output-field last_hidden_state" in text


if __name__ == "__main__":  # write the totals of the tree on PYTHONPATH (the data file, from the code before the fold)
    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        for case in CASES:
            for with_pooler in variants(case):
                out[f"{case}/{with_pooler}"] = totals(case, Path(scratch), with_pooler)
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(out.items()))
    Path(sys.argv[1]).write_text("{\n" + lines + "\n}\n")
