"""Imported Whisper against its transformers module (on meta): the whole encoder-decoder with its LM head
(WhisperForConditionalGeneration, the decoder's tokens passed as decoder_input_ids). Forward and train: no
failing row, matmul FLOPs and parameters exactly equal. Fixed small configs (fast), then random valid configs
(slow). T5 is tests/importer/test_t5.py."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from costspec.importer import import_hf  # noqa: E402
from costspec.importer.config import ImportProblem  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from tests.common import ROOT  # noqa: E402
from tests.importer.check import assert_exact, import_and_check, write_config  # noqa: E402

# token ids inside the small vocabulary (WhisperConfig's defaults are whisper-tiny's, 50256 and 50257)
SMALL_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 1, "decoder_start_token_id": 2}
WHISPER_SMALL = {"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 96,
                 "decoder_layers": 2, "decoder_attention_heads": 4, "decoder_ffn_dim": 80, "num_mel_bins": 16,
                 "max_source_positions": 30, "max_target_positions": 12, "vocab_size": 100, **SMALL_IDS}

CONFIGS = {
    "whisper": lambda: transformers.WhisperConfig(**WHISPER_SMALL),
    "whisper_relu_untied": lambda: transformers.WhisperConfig(**WHISPER_SMALL, activation_function="relu",
                                                              tie_word_embeddings=False),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_import_matches_the_transformers_model(name, tmp_path):
    _, results = import_and_check(CONFIGS[name](), tmp_path)
    totals = assert_exact(results)
    assert totals["forward"]["spec_matmul"] > 0 and totals["backward"]["spec_matmul"] > 0


def test_hub_configs_legacy_keys_are_understood(tmp_path):
    """whisper-tiny's config.json on the hub carries a key its config class no longer writes
    (num_hidden_layers): understood, the numbers are the zoo spec's (its `encoder` row, less the gradient sum
    of the encoder's states over the decoder's L cross-attentions; tests/zoo/test_import_round_trip.py checks
    the class defaults' round trip at batch 1 and 8; T5's: tests/importer/test_t5.py)."""
    whisper = {**transformers.WhisperConfig().to_dict(), "num_hidden_layers": 4}
    imported = loads(import_hf(write_config(whisper, tmp_path), dtype="bf16").text)
    zoo = load(ROOT / "specs/whisper_tiny_encoder.yaml")
    got, want = imported.report("train", imported.bind(2)), zoo.report("train", zoo.bind(2))
    rows = {row.name: row for row in got.rows}
    encoder, fanout = rows["encoder"], rows["encoder.enc_fanout"]
    assert (encoder.tc_flops, encoder.cuda_flops - fanout.cuda_flops, encoder.params) == (
        want.tc, want.cuda, want.params)


def test_whisper_is_the_whole_model_with_its_lm_head(tmp_path):
    """WhisperForConditionalGeneration: the encoder, the decoder over T = max_target_positions tokens (a second
    input, decoder_input_ids), proj_out tied to the decoder's token embedding (its V*C counted once)."""
    imported = import_hf(write_config(transformers.WhisperConfig(**WHISPER_SMALL), tmp_path))
    assert "--against hf:WhisperForConditionalGeneration" in imported.text
    assert "inputs:\n  decoder_input_ids: [B, T]" in imported.text
    model = loads(imported.text)
    rows = {row.name: row for row in model.report("forward", model.bind(1)).rows}
    T, C, V = 12, 64, 100
    assert rows["proj_out"].tc_flops == 2 * T * C * V and rows["proj_out"].params == 0
    assert rows["embed_tokens"].params == V * C
    untied = loads(import_hf(write_config(transformers.WhisperConfig(**WHISPER_SMALL, tie_word_embeddings=False),
                                          tmp_path)).text)
    assert {r.name: r for r in untied.report("forward", untied.bind(1)).rows}["proj_out"].params == V * C
    # the cross-attention: q and out_proj over the decoder's T rows, k and v over the encoder's S = 30 states
    S, LD = 30, 2
    assert rows["decoder.attn2"].tc_flops == LD * (2 * (2 * T * C * C) + 2 * (2 * S * C * C) + 2 * 2 * T * S * C)


def test_whisper_layer_alias_must_agree(tmp_path):
    data = {**transformers.WhisperConfig(**WHISPER_SMALL).to_dict(), "num_hidden_layers": 3}
    with pytest.raises(ImportProblem, match="num_hidden_layers = 3 differs from encoder_layers = 2"):
        import_hf(write_config(data, tmp_path))


# ----------------------------------------------------------------------------------------------
# Random valid configs (hypothesis)
# ----------------------------------------------------------------------------------------------
def _check(config, batch: int = 2) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _, results = import_and_check(config, Path(folder), batch=batch)
        assert_exact(results)


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(heads=st.integers(1, 4), head_dim=st.sampled_from([4, 8, 12]), layers=st.integers(1, 3),
       ffn=st.integers(4, 48), mels=st.integers(1, 20), positions=st.integers(2, 40),
       act=st.sampled_from(["gelu", "relu", "silu", "gelu_pytorch_tanh"]), batch=st.integers(1, 3))
def test_random_whisper(heads, head_dim, layers, ffn, mels, positions, act, batch):
    _check(transformers.WhisperConfig(d_model=heads * head_dim, encoder_attention_heads=heads, encoder_layers=layers,
                                      encoder_ffn_dim=ffn, num_mel_bins=mels, max_source_positions=positions,
                                      decoder_attention_heads=heads, decoder_layers=layers, decoder_ffn_dim=ffn + 4,
                                      max_target_positions=positions + 3, activation_function=act, vocab_size=64,
                                      **SMALL_IDS), batch)
