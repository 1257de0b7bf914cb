"""Saved activations of whole encoder-decoders against transformers' models: BART, T5 and Whisper
(...ForConditionalGeneration, small configs through `costspec import hf`, two encoder and two decoder layers,
saved_tensors_hooks on meta in bf16). Every row exact after the named rules of `costspec.against.saved_rules`,
each rule's bytes written out here from the dims, and the total within 1% with the as-run rules."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.saved import compare_saved_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.model import load  # noqa: E402
from tests.against.test_saved_against import AS_RUN, kernel, used  # noqa: E402
from tests.importer.check import write_config  # noqa: E402

B, FP32, BF16 = 2, 4, 2
IDS = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2}
BART = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=40, decoder_ffn_dim=48, vocab_size=50, max_position_embeddings=32,
            forced_eos_token_id=2, **IDS)
T5 = dict(d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4, vocab_size=100)
WHISPER = dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=96, decoder_layers=2,
               decoder_attention_heads=4, decoder_ffn_dim=80, num_mel_bins=16, max_source_positions=30,
               max_target_positions=12, vocab_size=100, **{**IDS, "pad_token_id": 0, "bos_token_id": 1,
                                                           "eos_token_id": 1})


def compared(config, folder, dims: dict | None = None):
    """The comparison (the attention kernels' specs as candidates) and the bound dims."""
    imported = import_hf(write_config(config, folder))
    path = folder / "spec.yaml"
    path.write_text(imported.text)
    model = load(path)
    values = model.bind(B, dims)
    real = load_target(f"hf:{imported.described}", model, values, "meta", str(folder / "config.json"),
                       dict(imported.family.hf_kwargs), output=imported.output)
    rowmap = validate_against(model, values, real, "forward").rowmap
    comparison = compare_saved_against(model, values, real, rowmap, kernel(path, "math", None),
                                       kernel(path, "eager", None))
    return comparison, {str(k): int(v) for k, v in values.items()}


def exact_after_rules(comparison, expected: dict[str, int]) -> dict[str, int]:
    """Every row exact after the rules; the rules' bytes are `expected` (besides the SDPA kernel meta ran, whose
    bytes are the spec's at backend math, returned); within 1% with the as-run rules."""
    assert not comparison.failures(), comparison.failures()
    found = used(comparison)
    assert found.get("sdpa-kernel-on-meta", 0) > 0
    assert {k: v for k, v in found.items() if k != "sdpa-kernel-on-meta"} == expected
    spec, real, rules = comparison.totals
    assert spec + rules == real
    assert abs(real - (spec + sum(v for k, v in found.items() if k in AS_RUN))) / real < 0.01
    return found


def test_bart_against_transformers(tmp_path):
    """BART's learned positions: the encoder looks its up without position ids, so it expands arange(S) over the
    batch and adds the offset 2 (B x S ids of its own); the decoder passes [1, T] ids. Layer norms: the embedding's
    and two an encoder layer over B*S rows, the embedding's and three a decoder layer over B*T rows."""
    comparison, d = compared(transformers.BartConfig(**BART), tmp_path)
    S, T, L, LD, b = d["S"], d["T"], d["L"], d["LD"], BF16
    rows = {r: (s, m) for r, s, m, _ in comparison.rows}
    assert rows["encoder_positions"] == (0, 8 * B * S) and rows["decoder_positions"] == (0, 8 * T)
    norms = (1 + 2 * L) * B * S + (1 + 3 * LD) * B * T
    exact_after_rules(comparison, {"layernorm-fp32-statistics": 2 * norms * (FP32 - b), "index-tensors": 8 * (S + T),
                                   "position-ids-per-batch-row": 8 * (B - 1) * S})
    assert [u.row for u in comparison.rules if u.rule == "position-ids-per-batch-row"] == ["encoder_positions"]


def test_t5_against_transformers(tmp_path):
    """T5ForConditionalGeneration: the first encoder block's and the first decoder block's bucket ids (S x S and
    T x T int64); each causal decoder self-attention's bool mask (T x T) that SDPA's position-bias mask keeps; the
    cross-attention's zero bias and the decoder's output scale keep what the spec's do. T5LayerNorm keeps what the
    spec's RMSNorm does (x in fp32, rstd, the normalised x in fp32): no norm rule."""
    comparison, d = compared(transformers.T5Config(**T5), tmp_path, {"S": 32, "T": 24})
    S, T, LD = d["S"], d["T"], d["LD"]
    rows = {r: (s, m) for r, s, m, _ in comparison.rows}
    assert rows["decoder[others].attn1"][1] - rows["decoder[others].attn1"][0] == T * T
    assert rows["decoder[first].attn1"][1] - rows["decoder[first].attn1"][0] == T * T + 8 * T * T
    assert all(m == s for r, (s, m) in rows.items() if "norm" in r)
    exact_after_rules(comparison, {"t5-bucket-ids": 8 * (S * S + T * T), "causal-bias-mask": LD * T * T})
    assert "rmsnorm-written-out" not in used(comparison)


def test_whisper_against_transformers(tmp_path):
    """WhisperForConditionalGeneration: the decoder repeats its position ids over the batch (B x T int64); the
    encoder's positions are a slice of its table (no ids). Layer norms: two an encoder layer and the final one over
    B*S rows, three a decoder layer and the final one over B*T rows."""
    comparison, d = compared(transformers.WhisperConfig(**WHISPER), tmp_path)
    S, T, L, LD, b = d["S"], d["T"], d["L"], d["LD"], BF16
    norms = (2 * L + 1) * B * S + (3 * LD + 1) * B * T
    exact_after_rules(comparison, {"layernorm-fp32-statistics": 2 * norms * (FP32 - b), "index-tensors": 8 * T,
                                   "position-ids-per-batch-row": 8 * (B - 1) * T})
