"""Imported BART-like encoder-decoders against their transformers classes on meta: Bart-, MBart-,
PegasusForConditionalGeneration and MarianMTModel, whole (the encoder, the decoder over decoder_input_ids, one token table
shared by both lookups and the LM head). Forward and train: no failing row, matmul FLOPs and parameters
exactly equal. Refusals name the key; random valid configs (slow)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from costspec.against.target import META_MASK_NOTE  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.importer.check import (  # noqa: E402
    assert_exact,
    assert_refused,
    hostile_sweep,
    import_and_check,
    read_keys,
    write_config,
)

IDS = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2, "forced_eos_token_id": 2}
SMALL = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4, "encoder_ffn_dim": 40, "decoder_ffn_dim": 48, "vocab_size": 50,
         "max_position_embeddings": 12, **IDS}
CONFIGS = {
    "bart": lambda: transformers.BartConfig(**SMALL),
    "bart_scaled_relu": lambda: transformers.BartConfig(**{**SMALL, "decoder_layers": 1, "decoder_attention_heads": 2},
                                                        scale_embedding=True, activation_function="relu"),
    "mbart": lambda: transformers.MBartConfig(**SMALL),
    "pegasus": lambda: transformers.PegasusConfig(**SMALL),  # frozen sinusoidal positions, no embedding norm
    "marian": lambda: transformers.MarianConfig(**SMALL, decoder_vocab_size=50),  # the same, post-LN
}


@pytest.mark.parametrize("name", [name if name == "bart" else pytest.param(name, marks=pytest.mark.slow)
                                  for name in sorted(CONFIGS)])
def test_import_matches_the_transformers_model(name, tmp_path):
    _, results = import_and_check(CONFIGS[name](), tmp_path)
    totals = assert_exact(results)
    assert totals["forward"]["spec_matmul"] > 0 and totals["backward"]["spec_matmul"] > 0
    # the decoder's own all-ones padding mask, whose values meta tensors do not hold: taken as all ones, and said
    assert all(META_MASK_NOTE in result.described for result in results.values())


def test_bart_is_the_whole_model_with_one_shared_table(tmp_path):
    """The header names BartForConditionalGeneration and prints the check; bf16 when the config names no dtype;
    the table's V*C parameters counted once (the encoder's lookup), the decoder's lookup and the head share it."""
    imported = import_hf(write_config(transformers.BartConfig(**SMALL), tmp_path))
    text = imported.text
    assert imported.hf_class == "BartForConditionalGeneration"
    assert "#   costspec validate " in text and "--against hf:BartForConditionalGeneration --config" in text and "--pass train" in text
    assert "precision: {dtype: bf16}  # the config names no dtype" in text
    assert "inputs:\n  decoder_input_ids: [B, T]" in text
    model = loads(text)
    rows = {row.name: row for row in model.report("forward", model.bind(1)).rows}
    V, C, P, T = 50, 32, 12, 12
    assert rows["encoder_embed"].params == V * C and rows["decoder_embed"].params == rows["lm_head"].params == 0
    assert rows["encoder_positions"].params == rows["decoder_positions"].params == (P + 2) * C
    assert rows["lm_head"].tc_flops == 2 * T * C * V
    back = {row.name: row for row in model.report("backward", model.bind(1)).rows}
    assert back["decoder_embed"].cuda_flops == T * C + V * C  # its rows scattered, its table gradient added


# facebook/bart-large's config.json on the hub (transformers 4.12): legacy keys its config class no longer reads
BART_LARGE_HUB = {'_name_or_path': 'bart-large',
 'activation_dropout': 0.1,
 'activation_function': 'gelu',
 'add_bias_logits': False,
 'add_final_layer_norm': False,
 'architectures': ['BartModel'],
 'attention_dropout': 0.1,
 'bos_token_id': 0,
 'classif_dropout': 0.1,
 'classifier_dropout': 0.0,
 'd_model': 1024,
 'decoder_attention_heads': 16,
 'decoder_ffn_dim': 4096,
 'decoder_layerdrop': 0.0,
 'decoder_layers': 12,
 'decoder_start_token_id': 2,
 'dropout': 0.1,
 'early_stopping': True,
 'encoder_attention_heads': 16,
 'encoder_ffn_dim': 4096,
 'encoder_layerdrop': 0.0,
 'encoder_layers': 12,
 'eos_token_id': 2,
 'forced_eos_token_id': 2,
 'gradient_checkpointing': False,
 'id2label': {'0': 'LABEL_0', '1': 'LABEL_1', '2': 'LABEL_2'},
 'init_std': 0.02,
 'is_encoder_decoder': True,
 'label2id': {'LABEL_0': 0, 'LABEL_1': 1, 'LABEL_2': 2},
 'max_position_embeddings': 1024,
 'model_type': 'bart',
 'no_repeat_ngram_size': 3,
 'normalize_before': False,
 'num_beams': 4,
 'num_hidden_layers': 12,
 'output_past': False,
 'pad_token_id': 1,
 'scale_embedding': False,
 'task_specific_params': {'summarization': {'length_penalty': 1.0,
                                            'max_length': 128,
                                            'min_length': 12,
                                            'num_beams': 4}},
 'torch_dtype': 'float32',
 'transformers_version': '4.12.0.dev0',
 'use_cache': True,
 'vocab_size': 50265}


def test_bart_large_hub_config_imports_with_its_parameter_count(tmp_path):
    """The hub config's legacy keys are understood; its torch_dtype is kept; the parameters are
    BartForConditionalGeneration's 406,291,456 (the count transformers builds from this file on meta), which
    the dims give: one V*C table, two (P+2)*C position tables, the two embedding LayerNorms, the blocks."""
    model = loads(import_hf(write_config(BART_LARGE_HUB, tmp_path)).text)
    assert model.precision.dtype == "fp32"
    V, C, P, F, L = 50265, 1024, 1024, 4096, 12
    attention, mlp, norm = 4 * (C * C + C), 2 * C * F + F + C, 2 * C
    want = V * C + 2 * (P + 2) * C + 2 * norm + L * (attention + mlp + 2 * norm) + L * (2 * attention + mlp + 3 * norm)
    assert model.evaluate().params == want == 406_291_456


@pytest.mark.parametrize("key, value, message", [
    ("tie_word_embeddings", False, "the untied BartForConditionalGeneration holds four tables"),
    ("activation_function", "mish", "activation_function"),
    ("num_hidden_layers", 3, "num_hidden_layers = 3 differs from encoder_layers = 2"),
    ("d_model", 30, "d_model = 30 is not a multiple of encoder_attention_heads = 4"),
    ("decoder_layers", 0, "decoder_layers = 0: expected a whole number >= 1"),
])
def test_bart_refusals_name_the_key(tmp_path, capsys, key, value, message):
    assert_refused(tmp_path, capsys, {**transformers.BartConfig(**SMALL).to_dict(), key: value}, message, key)


@pytest.mark.parametrize("key, value, message", [
    ("share_encoder_decoder_embeddings", False, "false: the decoder then looks up a table of its own"),
    ("decoder_vocab_size", 60, "decoder_vocab_size = 60 differs from vocab_size = 50"),
])
def test_marian_with_a_decoder_table_of_its_own_is_refused(tmp_path, capsys, key, value, message):
    data = {**transformers.MarianConfig(**SMALL, decoder_vocab_size=50).to_dict(), key: value}
    assert_refused(tmp_path, capsys, data, message, key)


@pytest.mark.parametrize("kind", ["BartConfig"] + [pytest.param(k, marks=pytest.mark.slow)
                                                   for k in ("MBartConfig", "PegasusConfig", "MarianConfig")])
def test_default_config_keys_hostile(kind, tmp_path):
    """Each key of the family's default config, given hostile values in turn: a spec that loads, or an
    ImportProblem naming the file (never another exception)."""
    base = {**getattr(transformers, kind)().to_dict(), "encoder_layers": 2, "decoder_layers": 2}
    keys = read_keys(base)
    refused, _ = hostile_sweep(base, tmp_path, keys, per_key=2)
    assert refused > len(keys) // 2


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(heads=st.integers(1, 4), dheads=st.integers(1, 4), per_head=st.sampled_from([2, 4]),
       layers=st.integers(1, 2), dlayers=st.integers(1, 2), ffn=st.integers(4, 40), vocab=st.integers(8, 64),
       positions=st.integers(4, 12), scaled=st.booleans(), act=st.sampled_from(["gelu", "relu", "silu"]),
       kind=st.sampled_from(["BartConfig", "MBartConfig", "PegasusConfig", "MarianConfig"]), batch=st.integers(1, 3))
def test_random_bart_configs(heads, dheads, per_head, layers, dlayers, ffn, vocab, positions, scaled, act, kind,
                             batch):
    width = heads * dheads * per_head  # both head counts divide it
    config = getattr(transformers, kind)(
        d_model=width, encoder_attention_heads=heads, decoder_attention_heads=dheads, encoder_layers=layers,
        decoder_layers=dlayers, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn + 1, vocab_size=vocab,
        max_position_embeddings=positions, scale_embedding=scaled, activation_function=act, **IDS,
        **({"decoder_vocab_size": vocab} if kind == "MarianConfig" else {}))
    with tempfile.TemporaryDirectory() as folder:
        _, results = import_and_check(config, Path(folder), batch=batch)
        assert_exact(results)
