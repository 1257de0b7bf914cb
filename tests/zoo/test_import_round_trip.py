"""Round trip with the zoo: importing the Hugging Face config of a zoo model reproduces the zoo spec's
numbers exactly (TC FLOPs, CUDA-core FLOPs, parameters; batch 1 and 8; forward and train).

The configs in tests/data/hf_configs/ are written by tools/make_hf_configs.py from the transformers
config classes with each zoo spec's own values (see the comments there). No torch is needed here.

The Llama configs are the models' own config.json (LlamaForCausalLM, 131,072 positions): `import hf`
writes them with the LM head. A decoder is imported at S = min(4096, max_position_embeddings); where the zoo
spec sets another S, the two are compared at the zoo spec's S.
"""
from __future__ import annotations

import json

import pytest

from costspec.importer import import_hf
from costspec.model import load, loads
from tests.common import ROOT

CONFIGS = ROOT / "tests/data/hf_configs"
ZOO = ["vit_b", "vit_l", "vit_h", "clip_vit_l14", "sam_vit_b", "bert_base", "gpt2_small", "llama_1b", "llama3_8b",
       "t5_small_encoder", "whisper_tiny_encoder",
       "mistral_7b", "mixtral_8x7b"]
BACKBONES = {"mistral_7b", "mixtral_8x7b"}  # zoo specs without the LM head: `import hf --backbone`
NO_POOLER = {"vit_b", "vit_l", "vit_h", "bert_base"}  # zoo specs without the pooler: `import hf --no-pooler`
TOWERS = {"t5_small_encoder": "encoder"}  # zoo specs of one part of the model: `import hf --tower`
# imported at S = min(4096, max_position_embeddings), the zoo spec at its own S (Llama 3: 131,072 positions)
OTHER_S = {"llama_1b", "llama3_8b", "mistral_7b", "mixtral_8x7b"}
DEFAULT_S = 4096


# zoo specs of an encoder whose family imports the whole encoder-decoder: the zoo spec is the import's `encoder`
# row, less the gradient sum of the encoder's states over the decoder's cross-attentions (`encoder.enc_fanout`)
ENCODER_OF_WHOLE = {"whisper_tiny_encoder": "encoder"}


def numbers(model, pass_: str, batch: int, sets: dict | None = None,
            scope: str | None = None) -> tuple[int, int, int]:
    """TC FLOPs, CUDA-core FLOPs and parameters; `scope`: that row's, less its enc_fanout row's."""
    report = model.report(pass_, model.bind(batch, sets=sets or {}))
    if scope is not None:
        rows = {row.name: row for row in report.rows}
        part, fanout = rows[scope], rows[f"{scope}.enc_fanout"]
        return part.tc_flops - fanout.tc_flops, part.cuda_flops - fanout.cuda_flops, part.params
    return report.tc, report.cuda, report.params


@pytest.mark.parametrize("name", ZOO)
def test_import_reproduces_the_zoo_spec(name):
    imported = loads(import_hf(CONFIGS / f"{name}.json", backbone=name in BACKBONES, pooler=name not in NO_POOLER,
                               tower=TOWERS.get(name)).text)
    zoo = load(ROOT / f"specs/{name}.yaml")
    assert imported.precision.dtype == zoo.precision.dtype == "bf16"
    sets = None
    if name in OTHER_S:
        most = json.loads((CONFIGS / f"{name}.json").read_text())["max_position_embeddings"]
        assert imported.dims.dims["S"].default == min(DEFAULT_S, most) != zoo.dims.dims["S"].default
        sets = {"S": int(zoo.dims.dims["S"].default)}
    for pass_ in ("forward", "train"):
        for batch in (1, 8):
            assert numbers(imported, pass_, batch, sets, scope=ENCODER_OF_WHOLE.get(name)) == numbers(
                zoo, pass_, batch), (pass_, batch)


def test_every_zoo_spec_with_a_config_is_covered():
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(ZOO)


def test_vit_b_numbers_are_the_known_ones():
    """ViT-B/16 at 224 px, batch 1: the matmul FLOPs by hand (as tests/golden/test_golden.py's), ViTModel's
    pooler (a C x C dense on the class token) included by default and dropped by --no-pooler."""
    S, C, L, F, P = 197, 768, 12, 3072, 196
    per_layer = 2 * S * C * 3 * C + 2 * S * S * C * 2 + 2 * S * C * C + 2 * 2 * S * C * F  # qkv, QK^T+AV, proj, MLP
    patch = 2 * P * C * 3 * 16 * 16
    for pooler, pooler_flops in ((True, 2 * C * C), (False, 0)):
        model = loads(import_hf(CONFIGS / "vit_b.json", pooler=pooler).text)
        assert model.report("forward", model.bind(1)).tc == L * per_layer + patch + pooler_flops


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_zoo_import_matches_its_transformers_model(name):
    """The imported full-size spec against its transformers class built from the same config on meta."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.importer.check import assert_exact, import_and_check_file

    assert_exact(import_and_check_file(CONFIGS / f"{name}.json", batch=1, tower=TOWERS.get(name)))
