"""ModernBERT imported (ModernBertModel: global and local layers, layer 0 without its attention norm) against
transformers on meta: forward and train, no failing row, matmul FLOPs and parameters exactly equal. Then the
published ModernBERT-base config (the older global_attn_every_n_layers form), refusals, hostile values and
random valid configs (hypothesis, slow)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from costspec.importer import import_hf
from costspec.importer.config import ImportProblem
from costspec.model import loads
from tests.importer.check import assert_exact, assert_refused, hostile_sweep, import_and_check, write_config

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SMALL = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96,
         "vocab_size": 100, "local_attention": 8, "max_position_embeddings": 32, "pad_token_id": 0,
         "eos_token_id": 1, "bos_token_id": 2, "cls_token_id": 2, "sep_token_id": 1}


def test_modernbert_matches_the_transformers_model(tmp_path):
    """4 layers: 0 and 3 global, 1 and 2 local (global_attn_every_n_layers 3)."""
    model, results = import_and_check(transformers.ModernBertConfig(**SMALL), tmp_path, batch=1)
    totals = assert_exact(results)
    S, C, F, L = 32, 64, 96, 4
    # Wqkv, QK^T and AV over all S x S pairs (a masked kernel computes them all), Wo, Wi (C -> 2F), Wo
    per_layer = 2 * S * C * 3 * C + 2 * 2 * S * S * C + 2 * S * C * C + 2 * S * C * 2 * F + 2 * S * F * C
    assert totals["forward"]["spec_matmul"] == L * per_layer
    rows = {row.name: row for row in model.report("forward", model.bind(1)).rows}
    assert rows["layers[full]"].count == 1 and rows["layers[others]"].count == 2  # layer 3; layers 1 and 2


@pytest.mark.slow
@pytest.mark.parametrize("change", [
    {"num_hidden_layers": 1},
    {"num_hidden_layers": 3, "layer_types": ["sliding_attention", "full_attention", "full_attention"]},
    {"norm_bias": True, "attention_bias": True, "mlp_bias": True, "hidden_activation": "silu"},
])
def test_modernbert_variants_match(tmp_path, change):
    assert_exact(import_and_check(transformers.ModernBertConfig(**{**SMALL, **change}), tmp_path, batch=2)[1])


MODERNBERT_BASE = {  # answerdotai/ModernBERT-base's config.json
    "architectures": ["ModernBertForMaskedLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 50281, "classifier_activation": "gelu", "classifier_bias": False, "classifier_dropout": 0.0,
    "classifier_pooling": "mean", "cls_token_id": 50281, "decoder_bias": True, "deterministic_flash_attn": False,
    "embedding_dropout": 0.0, "eos_token_id": 50282, "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0,
    "gradient_checkpointing": False, "hidden_activation": "gelu", "hidden_size": 768, "initializer_cutoff_factor": 2.0,
    "initializer_range": 0.02, "intermediate_size": 1152, "layer_norm_eps": 1e-05, "local_attention": 128,
    "local_rope_theta": 10000.0, "max_position_embeddings": 8192, "mlp_bias": False, "mlp_dropout": 0.0,
    "model_type": "modernbert", "norm_bias": False, "norm_eps": 1e-05, "num_attention_heads": 12,
    "num_hidden_layers": 22, "pad_token_id": 50283, "position_embedding_type": "absolute", "sep_token_id": 50282,
    "tie_word_embeddings": True, "torch_dtype": "float32", "transformers_version": "4.47.0.dev0",
    "vocab_size": 50368}


def test_modernbert_base_published_config(tmp_path):
    """149,014,272 parameters (ModernBertModel of ModernBERT-base); 8 global layers (0, 3, ..., 21), 14 local."""
    text = import_hf(write_config(MODERNBERT_BASE, tmp_path)).text
    model = loads(text)
    assert model.report("forward", model.bind(1)).params == 149_014_272
    assert "{indices: [2, 5, 8, 11, 14, 17, 20], name: full" in text and "S: {value: 4096" in text
    assert model.precision.dtype == "fp32"  # the config's torch_dtype
    with pytest.raises(ImportProblem, match="key rotary_dim not understood by the modernbert importer"):
        import_hf(write_config({**MODERNBERT_BASE, "rotary_dim": 32}, tmp_path))


@pytest.mark.parametrize("key, value, says", [
    ("layer_types", ["full_attention"], "layer_types = ['full_attention']: expected a list of 22 entries"),
    ("layer_types", ["chunked_attention"] * 22, "each full_attention or sliding_attention"),
    ("rope_parameters", {"full_attention": {"rope_type": "dynamic"}}, "only default RoPE"),
    ("hidden_activation", "gelu_fast", "hidden_activation = 'gelu_fast': not supported by this importer"),
    ("num_attention_heads", 7, "hidden_size = 768 is not a multiple of num_attention_heads = 7"),
    ("local_attention", 0, "local_attention = 0: expected a whole number >= 1"),
])
def test_refusals_name_the_key(tmp_path, capsys, key, value, says):
    assert_refused(tmp_path, capsys, {**MODERNBERT_BASE, key: value}, says, key)


def test_every_key_mutated_is_a_spec_or_a_named_refusal(tmp_path):
    base = transformers.ModernBertConfig(**SMALL).to_dict()
    refused, _ = hostile_sweep(base, tmp_path)
    assert refused > 0


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(heads=st.integers(1, 4), head_dim=st.sampled_from([4, 8]), layers=st.integers(1, 4), ffn=st.integers(4, 40),
       window=st.integers(2, 40), every=st.integers(1, 4), positions=st.integers(4, 40), bias=st.booleans(),
       batch=st.integers(1, 2))
def test_random_modernbert(heads, head_dim, layers, ffn, window, every, positions, bias, batch):
    config = transformers.ModernBertConfig(
        num_hidden_layers=layers, hidden_size=heads * head_dim, num_attention_heads=heads, intermediate_size=ffn,
        vocab_size=100, local_attention=window, max_position_embeddings=positions, global_attn_every_n_layers=every,
        norm_bias=bias, attention_bias=bias, mlp_bias=bias, pad_token_id=0, eos_token_id=1, bos_token_id=2,
        cls_token_id=2, sep_token_id=1)
    with tempfile.TemporaryDirectory() as folder:
        assert_exact(import_and_check(config, Path(folder), batch=batch)[1])
