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
