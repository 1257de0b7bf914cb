"""Imported encoder-decoder models against their transformers modules (on meta): T5's encoder
(T5EncoderModel) and Whisper's whole encoder-decoder with its LM head (WhisperForConditionalGeneration, the
decoder's tokens passed as decoder_input_ids). Forward and train: no failing row, matmul FLOPs and
parameters exactly equal. Fixed small configs (fast), then random valid configs per family (slow)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import assume, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from costspec.against.check import summary  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.importer.config import ImportProblem  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from tests.common import ROOT  # noqa: E402
from tests.importer.check import assert_exact, import_and_check, write_config  # noqa: E402

T5_SMALL = {"d_model": 64, "d_kv": 16, "d_ff": 96, "num_layers": 2, "num_heads": 4, "vocab_size": 100}
# token ids inside the small vocabulary (WhisperConfig's defaults are whisper-tiny's, 50256 and 50257)
SMALL_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 1, "decoder_start_token_id": 2}
WHISPER_SMALL = {"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 96,
                 "decoder_layers": 2, "decoder_attention_heads": 4, "decoder_ffn_dim": 80, "num_mel_bins": 16,
                 "max_source_positions": 30, "max_target_positions": 12, "vocab_size": 100, **SMALL_IDS}

CONFIGS = {
    "t5": lambda: transformers.T5Config(**T5_SMALL),
    "t5_one_block": lambda: transformers.T5Config(**{**T5_SMALL, "num_layers": 1}),  # no block reads a shared bias
    "t5_gated_silu": lambda: transformers.T5Config(**T5_SMALL, feed_forward_proj="gated-silu"),
    "t5_wide_heads": lambda: transformers.T5Config(**{**T5_SMALL, "d_kv": 24}, relative_attention_num_buckets=8,
                                                   relative_attention_max_distance=20),  # heads*d_kv != d_model
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
    """t5-small's and whisper-tiny's config.json on the hub carry keys their config classes no longer
    write (n_positions, output_past; num_hidden_layers): understood, the numbers are the zoo specs'
    (whisper's: its `encoder` row, less the gradient sum of the encoder's states over the decoder's L
    cross-attentions; tests/zoo/test_import_round_trip.py checks the class defaults' round trip at batch 1 and 8)."""
    t5 = {**transformers.T5Config().to_dict(), "n_positions": 512, "output_past": True}
    whisper = {**transformers.WhisperConfig().to_dict(), "num_hidden_layers": 4}
    for data, spec in ((t5, "t5_small_encoder"), (whisper, "whisper_tiny_encoder")):
        imported = loads(import_hf(write_config(data, tmp_path), dtype="bf16").text)
        zoo = load(ROOT / f"specs/{spec}.yaml")
        got, want = imported.report("train", imported.bind(2)), zoo.report("train", zoo.bind(2))
        if spec.startswith("whisper"):
            rows = {row.name: row for row in got.rows}
            encoder, fanout = rows["encoder"], rows["encoder.enc_fanout"]
            assert (encoder.tc_flops, encoder.cuda_flops - fanout.cuda_flops, encoder.params) == (
                want.tc, want.cuda, want.params)
        else:
            assert (got.tc, got.cuda, got.params) == (want.tc, want.cuda, want.params)


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


def test_t5_gated_gelu_differs_only_by_gelu_new_ops(tmp_path):
    """feed_forward_proj gated-gelu (Flan-T5, T5 v1.1) runs transformers' gelu_new, python-level ops the
    spec prices as one gelu_tanh (the note in the spec says so): matmul FLOPs and parameters exact, the
    differences only in those kinds."""
    config = transformers.T5Config(**T5_SMALL, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    _, results = import_and_check(config, tmp_path, passes=("train",))
    text = import_hf(tmp_path / "config.json").text
    assert "fn: gelu_tanh" in text and "feed_forward_proj gated-gelu (gelu_new)" in text
    gelu_new = {"gelu_tanh", "gelu_tanh_backward", "tanh", "tanh_backward", "cube", "square", "add", "mul",
                "scale"}
    for phase in results["train"].phases.values():
        total = phase.rows[-1]
        assert total.real_params == total.spec_params
        assert {kind for _, kind, _, _ in phase.failures} <= gelu_new, phase.failures
    assert all(t["real_reconciled"] == t["spec_matmul"] for t in summary(results["train"]).values())


@pytest.mark.parametrize("key, value, message", [
    ("feed_forward_proj", "gated-swish-relu", "expected an activation or gated-<activation>"),
    ("feed_forward_proj", "mish", "an activation the importer does not price"),
    ("relative_attention_max_distance", 4, "a max distance above buckets / 4"),
    ("rotary_dim", 8, "rotary_dim not understood by the t5 importer"),
])
def test_t5_configs_the_importer_cannot_price_are_refused(key, value, message, tmp_path):
    data = {**transformers.T5Config(**T5_SMALL).to_dict(), key: value}
    with pytest.raises(ImportProblem, match=message):
        import_hf(write_config(data, tmp_path))


def test_whisper_layer_alias_must_agree(tmp_path):
    data = {**transformers.WhisperConfig(**WHISPER_SMALL).to_dict(), "num_hidden_layers": 3}
    with pytest.raises(ImportProblem, match="num_hidden_layers = 3 differs from encoder_layers = 2"):
        import_hf(write_config(data, tmp_path))


def test_import_names_the_decoder_it_leaves_out(tmp_path):
    text = import_hf(write_config(transformers.T5Config(**T5_SMALL, num_decoder_layers=3), tmp_path)).text
    assert "num_decoder_layers 3 decoder blocks and the LM head are not imported" in text
    assert json.loads((tmp_path / "config.json").read_text())["num_decoder_layers"] == 3


# ----------------------------------------------------------------------------------------------
# Random valid configs (hypothesis)
# ----------------------------------------------------------------------------------------------
def _check(config, batch: int = 2) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _, results = import_and_check(config, Path(folder), batch=batch)
        assert_exact(results)


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(heads=st.integers(1, 4), d_kv=st.sampled_from([4, 8, 12]), width=st.sampled_from([16, 24, 32]),
       layers=st.integers(1, 3), d_ff=st.integers(4, 48), buckets=st.integers(4, 16), distance=st.integers(5, 40),
       proj=st.sampled_from(["relu", "gated-relu", "gated-silu", "gelu", "silu"]), batch=st.integers(1, 3))
# one head over three layers: the repeated layers' recorded attention runs need not be alike
@example(heads=1, d_kv=4, width=16, layers=3, d_ff=4, buckets=4, distance=5, proj="relu", batch=1)
def test_random_t5(heads, d_kv, width, layers, d_ff, buckets, distance, proj, batch):
    assume(width % heads == 0)  # the importer refuses heads that do not divide d_model (tests/importer/test_hostile_configs.py)
    distance = max(distance, buckets // 4 + 1)
    _check(transformers.T5Config(d_model=width, d_kv=d_kv, num_heads=heads, num_layers=layers, d_ff=d_ff,
                                 vocab_size=64, relative_attention_num_buckets=buckets,
                                 relative_attention_max_distance=distance, feed_forward_proj=proj), batch)


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
