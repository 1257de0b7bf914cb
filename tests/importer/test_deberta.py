"""DeBERTa-v2/v3 imported (DebertaV2Model: disentangled attention over a shared relative-position table) against
transformers on meta: forward and train, no failing row, matmul FLOPs and parameters exactly equal. Then the
published DeBERTa-v3-base shape by hand, refusals, hostile values and random valid configs (hypothesis, slow)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from costspec.importer import import_hf
from costspec.model import loads
from tests.importer.check import assert_exact, assert_refused, hostile_sweep, import_and_check, write_config

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

V3 = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96,
      "vocab_size": 100, "max_position_embeddings": 32, "relative_attention": True, "position_buckets": 4,
      "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": "p2c|c2p", "position_biased_input": False,
      "type_vocab_size": 0}
VARIANTS = {
    "c2p_only": {"pos_att_type": "c2p"},
    "p2c_unshared_unnormed": {"pos_att_type": ["p2c"], "share_att_key": False, "norm_rel_ebd": "none"},
    "v2_positions_types_projection": {"position_biased_input": True, "type_vocab_size": 2, "embedding_size": 32},
}


def test_deberta_v3_matches_the_transformers_model(tmp_path):
    model, results = import_and_check(transformers.DebertaV2Config(**V3), tmp_path, batch=2)
    totals = assert_exact(results)
    B, S, C, h, d, K2, L, F = 2, 32, 64, 4, 16, 8, 2, 96
    # q, k, v on the tokens; the table's 2K rows through k (c2p) and q (p2c); QK^T, AV, c2p, p2c; o; the MLP
    per_layer = (3 * 2 * B * S * C * C + 2 * 2 * K2 * C * C + 2 * 2 * B * h * S * S * d + 2 * 2 * B * h * S * K2 * d
                 + 2 * B * S * C * C + 2 * 2 * B * S * C * F)
    assert totals["forward"]["spec_matmul"] == totals["forward"]["real_reconciled"] == L * per_layer


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_deberta_variants_match(name, tmp_path):
    _, results = import_and_check(transformers.DebertaV2Config(**{**V3, **VARIANTS[name]}), tmp_path, batch=1)
    assert_exact(results)


DEBERTA_V3_BASE = {  # microsoft/deberta-v3-base's config.json
    "model_type": "deberta-v2", "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 512, "relative_attention": True, "position_buckets": 256, "norm_rel_ebd": "layer_norm",
    "share_att_key": True, "pos_att_type": "p2c|c2p", "layer_norm_eps": 1e-7, "max_relative_positions": -1,
    "position_biased_input": False, "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 0,
    "vocab_size": 128100}


def test_deberta_v3_base_parameters(tmp_path):
    """DebertaV2Model of deberta-v3-base: 128100 x 768 embeddings, 12 layers of 7,087,872 parameters, the
    embeddings' and the table's LayerNorms, 512 x 768 table rows: 183,831,552 (what transformers builds)."""
    imported = import_hf(write_config(DEBERTA_V3_BASE, tmp_path))
    model = loads(imported.text)
    C, F, L = 768, 3072, 12
    layer = 4 * (C * C + C) + 2 * C + (C * F + F) + (F * C + C) + 2 * C
    assert model.report("forward", model.bind(1)).params == 128100 * C + 2 * C + L * layer + 512 * C + 2 * C
    assert model.precision.dtype == "bf16"
    assert "--against hf:DebertaV2Model" in imported.text and "--config-set pad_token_id=null" in imported.text


def test_deberta_without_relative_attention_is_content_only_eager_attention(tmp_path):
    """DebertaV2Config's default (relative_attention false): no table, no position terms; QK^T and AV as bmm."""
    config = transformers.DebertaV2Config(**{**V3, "relative_attention": False, "norm_rel_ebd": "none",
                                             "position_biased_input": True})
    model, results = import_and_check(config, tmp_path, batch=2)
    totals = assert_exact(results)
    B, S, C, h, d, L, F = 2, 32, 64, 4, 16, 2, 96
    per_layer = 4 * 2 * B * S * C * C + 2 * 2 * B * h * S * S * d + 2 * 2 * B * S * C * F
    assert totals["forward"]["spec_matmul"] == totals["forward"]["real_reconciled"] == L * per_layer
    text = import_hf(tmp_path / "config.json").text
    assert "rel_embeddings" not in text and "backend: eager" in text


@pytest.mark.parametrize("key, value, says", [
    ("position_buckets", -1, "position_buckets = -1: expected a positive number of log buckets"),
    ("conv_kernel_size", 3, "conv_kernel_size = 3: DeBERTa-v2's ConvLayer"),
    ("pos_att_type", "p2p|c2p", "pos_att_type = 'p2p|c2p': expected c2p and / or p2c"),
    ("norm_rel_ebd", "layer_norm|abs", "norm_rel_ebd = 'layer_norm|abs': expected none or layer_norm"),
    ("attention_head_size", 32, "attention_head_size = 32: expected hidden_size / num_attention_heads = 64"),
    ("num_attention_heads", 7, "hidden_size = 768 is not a multiple of num_attention_heads = 7"),
    ("rope_theta", 10000, "key rope_theta not understood by the deberta-v2 importer"),
])
def test_refusals_name_the_key(tmp_path, capsys, key, value, says):
    assert_refused(tmp_path, capsys, {**DEBERTA_V3_BASE, key: value}, says, key)


def test_a_table_norm_without_relative_attention_is_refused(tmp_path, capsys):
    """DebertaV2Encoder builds the LayerNorm of norm_rel_ebd but never runs it without relative_attention."""
    assert_refused(tmp_path, capsys, {**DEBERTA_V3_BASE, "relative_attention": False},
                   "norm_rel_ebd = 'layer_norm': without relative_attention", "norm_rel_ebd")


def test_every_key_mutated_is_a_spec_or_a_named_refusal(tmp_path):
    base = transformers.DebertaV2Config(**V3).to_dict()
    refused, _ = hostile_sweep(base, tmp_path, [k for k, v in base.items() if not isinstance(v, dict)])
    assert refused > 0


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(heads=st.integers(1, 4), head_dim=st.sampled_from([4, 8]), layers=st.integers(1, 2), ffn=st.integers(4, 40),
       buckets=st.integers(2, 8), positions=st.integers(4, 24), terms=st.sampled_from(["c2p", "p2c", "p2c|c2p"]),
       share=st.booleans(), norm=st.sampled_from(["none", "layer_norm"]), biased=st.booleans(),
       types=st.integers(0, 2))
def test_random_deberta(heads, head_dim, layers, ffn, buckets, positions, terms, share, norm, biased, types):
    config = transformers.DebertaV2Config(
        num_hidden_layers=layers, hidden_size=heads * head_dim, num_attention_heads=heads, intermediate_size=ffn,
        vocab_size=50, max_position_embeddings=positions, relative_attention=True, position_buckets=buckets,
        norm_rel_ebd=norm, share_att_key=share, pos_att_type=terms, position_biased_input=biased,
        type_vocab_size=types)
    with tempfile.TemporaryDirectory() as folder:
        assert_exact(import_and_check(config, Path(folder), batch=1)[1])
