"""Saved activations of decoders outside the zoo with q/k norms against transformers' models: Qwen3 (an RMSNorm
over each head's q and k) and OLMo-2 (over the whole projected q and k, its rotary tables in fp32), small configs
through `costspec import hf`, two layers, saved_tensors_hooks on meta in bf16: every row exact after the named
rules, each rule's bytes a formula of the dims."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.against.test_saved_encdec_against import BF16, FP32, B, compared, exact_after_rules  # noqa: E402

BASE = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
            vocab_size=100, max_position_embeddings=16, pad_token_id=0, bos_token_id=1, eos_token_id=1)


def test_qwen3_against_transformers(tmp_path):
    """Qwen3RMSNorm is written out (x in fp32, rstd, the normalised x at the dtype): the two norms a layer and the
    final one in place of the spec's, and in each attention layer q_norm and k_norm keep their normalised values at
    the dtype where the spec's keep them in fp32 (T*h*d and T*kv*d values); the rotary tables once."""
    comparison, d = compared(transformers.Qwen3Config(**BASE, head_dim=16), tmp_path)
    S, C, L, h, kv, D, b = d["S"], d["C"], d["L"], d["heads"], d["KV"], d["D"], BF16
    T = B * S
    rows = {r: (s, m) for r, s, m, _ in comparison.rows}
    norms = [r for r in rows if "norm" in r]
    assert len(norms) == 3
    assert sum(rows[r][1] for r in norms) == (2 * L + 1) * T * (FP32 * C + FP32 + b * C)
    qk = -L * T * (h + kv) * D * (FP32 - b)
    written = sum(rows[r][1] - rows[r][0] for r in norms) + qk
    exact_after_rules(comparison, {"rmsnorm-written-out": written, "rope-tables-per-forward": 2 * S * D * b})


def test_olmo2_against_transformers(tmp_path):
    """OLMo-2's rotary module returns cos and sin in fp32 (2*S*d*4 bytes, not at the dtype); its RMSNorms (the
    post-norms and the q/k norms over the whole width) keep what the spec's do."""
    comparison, d = compared(transformers.Olmo2Config(**BASE), tmp_path)
    S, D, b = d["S"], d["D"], BF16
    assert all(m == s for r, s, m, _ in comparison.rows if "norm" in r)
    found = exact_after_rules(comparison, {"rope-tables-per-forward": 2 * S * D * b,
                                           "rope-tables-fp32": 2 * S * D * (FP32 - b)})
    assert "rmsnorm-written-out" not in found
