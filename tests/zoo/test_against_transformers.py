"""The zoo against transformers: each spec checked with `validate --against` the transformers class it
describes, built from its config on `meta` (forward and train): matmul FLOPs and parameters agree exactly and
every other difference is a named rule. DeepEncoder, which has no transformers class, against
tests/against/models.py's wiring of transformers' SAM and CLIP parts. The Llama specs, checked against
LlamaForCausalLM built from their config.json files: tests/zoo/test_llama.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.against.check import summary  # noqa: E402
from costspec.against.report import to_result  # noqa: E402
from costspec.core.render import render  # noqa: E402
from tests.against.helpers import against, failures_text  # noqa: E402
from tests.common import ROOT  # noqa: E402

ZOO = {
    "vit_b": ("hf:ViTModel", {"add_pooling_layer": "false"}),
    "vit_l": ("hf:ViTModel", {"add_pooling_layer": "false", "hidden_size": "1024", "num_hidden_layers": "24",
                              "num_attention_heads": "16", "intermediate_size": "4096"}),
    "vit_h": ("hf:ViTModel", {"add_pooling_layer": "false", "hidden_size": "1280", "num_hidden_layers": "32",
                              "num_attention_heads": "16", "intermediate_size": "5120", "patch_size": "14"}),
    "clip_vit_l14": ("hf:CLIPVisionModelWithProjection", {
        "hidden_size": "1024", "intermediate_size": "4096", "num_hidden_layers": "24", "num_attention_heads": "16",
        "patch_size": "14", "projection_dim": "768", "image_size": "224"}),
    "sam_vit_b": ("hf:SamVisionModel", {}),
    "bert_base": ("hf:BertModel", {"add_pooling_layer": "false"}),
    "gpt2_small": ("hf:GPT2LMHeadModel", {"activation_function": "gelu_pytorch_tanh"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_spec_matches_its_transformers_model(name, pass_):
    pytest.importorskip("transformers")
    target, sets = ZOO[name]
    model, result = against(ROOT / f"specs/{name}.yaml", target, pass_, sets)
    assert result.ok, failures_text(result)
    totals = summary(result)
    for phase in totals.values():  # matmul FLOPs (after the named rules) and parameters agree exactly
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    # every layer with parameters found its real module (by source: or automatically)
    assert not result.rowmap.unmatched_real
    report = render(to_result(result))
    assert "result: PASS" in report


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_deepencoder_matches_its_transformers_parts(pass_):
    """DeepEncoder has no transformers class: tests/against/models.py wires SamVisionEncoder, the two
    compressor convs and CLIP's embeddings and encoder as deepencoder.py does."""
    pytest.importorskip("transformers")
    _, result = against(ROOT / "specs/deepencoder.yaml", "tests.against.models:deepencoder", pass_)
    assert result.ok, failures_text(result)
    (unused,) = [e for e in result.ignored if e.pattern == "embeddings.patch_embedding"]
    assert unused.params == 1024 * 3 * 14 * 14  # CLIP's patch conv (no bias), built but never run
    assert unused.matmul.get("forward", 0) == 0


@pytest.mark.slow
def test_gpt2_default_activation_is_reported_by_name():
    """HF's default gelu_new runs the tanh GELU as python-level ops: --against names each kind (x^3 is `cube`);
    the spec's fn: gelu_new matches them (tests/against/test_activation_against.py)."""
    pytest.importorskip("transformers")
    _, result = against(ROOT / "specs/gpt2_small.yaml", "hf:GPT2LMHeadModel")
    kinds = {kind for row, kind, _, _ in result.phases["forward"].failures if row == "h.mlp"}
    assert {"gelu_tanh", "tanh", "cube"} <= kinds


def test_deepencoder_saved_bytes_match_its_transformers_parts():
    """What a training forward of the full-size DeepEncoder keeps for backward: every row equal to the wired
    transformers parts after the named rules (fp32 norm statistics, meta's math SDPA, SAM's relative-position
    index ids and fused qkv storage), and within 1% once the spec is taken as the real model runs
    (tests/against/test_saved_against.py's AS_RUN rules)."""
    pytest.importorskip("transformers")
    import json

    from tests.against.test_saved_against import AS_RUN
    from tests.common import invoke

    result = invoke("validate", "specs/deepencoder.yaml", "--against", "tests.against.models:deepencoder", "--pass",
                    "train", "--saved-bytes", "--batch", "1", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    saved = json.loads(result.stdout)["saved_for_backward"]
    assert len(saved["rows"]) >= 20
    for row in saved["rows"]:
        assert row["real"] == row["spec"] + row["rules"], row
    as_run = sum(r["bytes"] for r in saved["rules"] if r["used"] and r["rule"] in AS_RUN)
    total = saved["total"]
    assert total["real"] == total["spec"] + total["rules"]
    assert abs(total["real"] - (total["spec"] + as_run)) / total["real"] < 0.01
