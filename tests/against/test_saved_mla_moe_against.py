"""Saved activations of DeepSeek-V3's multi-head latent attention and mixture of experts, and of gpt-oss's clamped
experts, against transformers' models (small configs through `costspec import hf`, saved_tensors_hooks on meta in
bf16): the spec's bytes and the real model's per matched row, and each difference written out from the dims --
what transformers computes otherwise than the generated module (its fp32 router, its experts' kernels, its written-out
RMSNorm, its per-forward rotary tables), for the named rules of `costspec.against.saved`."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.saved import compare_saved_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.importer.check import write_config  # noqa: E402

BASE = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
            vocab_size=100, max_position_embeddings=16, pad_token_id=0, bos_token_id=1, eos_token_id=1)
DEEPSEEK = dict(BASE, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, num_key_value_heads=4,
                n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, first_k_dense_replace=1,
                q_lora_rank=24, n_group=4, topk_group=2)
GPT_OSS = dict(BASE, num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8)
B, FP32, BF16 = 2, 4, 2


def rows(config, folder, experts: str, dtype: str = "bf16") -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """{matched row: (spec bytes, real bytes)} with transformers' `experts` implementation, and the dims."""
    imported = import_hf(write_config(config, folder), dtype=dtype)
    model = loads(imported.text)
    values = model.bind(B)
    real = load_target(f"hf:{imported.described}", model, values, "meta", str(folder / "config.json"),
                       dict(imported.family.hf_kwargs), output=imported.output)
    rowmap = validate_against(model, values, real, "forward").rowmap
    real.module.config._experts_implementation = experts
    comparison = compare_saved_against(model, values, real, rowmap)
    return {r: (s, m) for r, s, m, _ in comparison.rows}, {str(k): int(v) for k, v in values.items()}


@pytest.mark.parametrize("experts, dtype", [("grouped_mm", "bf16"), ("batched_mm", "bf16"), ("batched_mm", "fp32")])
def test_deepseek_v3_mla_and_moe_against_transformers(tmp_path, experts, dtype):
    """(torch's grouped_mm takes bf16 only: fp32 runs batched_mm.)"""
    found, d = rows(transformers.DeepseekV3Config(**DEEPSEEK), tmp_path, experts, dtype)
    b, S, C, T = (BF16 if dtype == "bf16" else FP32), d["S"], d["C"], B * d["S"]
    E, K, F = DEEPSEEK["n_routed_experts"], DEEPSEEK["num_experts_per_tok"], DEEPSEEK["moe_intermediate_size"]
    # mla: transformers' RMSNorm keeps the q_a and kv_a norms' normalised values at the dtype, not in fp32; the
    # first layer keeps the per-forward rotary tables (S x d_r at the dtype, cos and sin)
    norms = -T * (DEEPSEEK["q_lora_rank"] + DEEPSEEK["kv_lora_rank"]) * (FP32 - b)
    spec, real = found["layer0.attn"]
    assert real - spec == norms + 2 * S * DEEPSEEK["qk_rope_head_dim"] * b
    spec, real = found["layer1.attn"]
    assert real - spec == norms
    # moe: DeepseekV3TopkRouter's linear in fp32 (copies of the input and the router weight), its scores, top-k
    # weights, sum and final weights in fp32; grouped_mm sorts the T*k rows (three int64 ids a row, E int32
    # offsets); batched_mm gathers each row's gate_up and down weights (C x 2F and F x C)
    router = (FP32 * (T * C + E * C) if b != FP32 else 0) + T * (E + 2 * K + 1) * (FP32 - b)
    kernel = 24 * T * K + 4 * E if experts == "grouped_mm" else T * K * 3 * C * F * b
    spec, real = found["layer1.moe"]
    assert real - spec == router + kernel


@pytest.mark.parametrize("experts", ["grouped_mm", "batched_mm"])
def test_gpt_oss_clamped_experts_against_transformers(tmp_path, experts):
    """gpt-oss's moe rows: the spec's clamped, interleaved experts keep what transformers' do; batched_mm gathers
    each row's weights (C x 2F, F x C); grouped_mm sorts the rows (the three int64 ids, E int32 offsets, and the
    sorted expert ids its bias gathers read), and keeps a sorted copy of the k softmax weights the router keeps too."""
    found, d = rows(transformers.GptOssConfig(**GPT_OSS), tmp_path, experts)
    b, T, C = BF16, B * d["S"], d["C"]
    E, K, F = GPT_OSS["num_local_experts"], GPT_OSS["num_experts_per_tok"], GPT_OSS["intermediate_size"]
    extra = T * K * 3 * C * F * b if experts == "batched_mm" else 24 * T * K + 4 * E + 8 * T * K + T * K * b
    moe = [r for r in found if r.endswith(".moe")]
    assert len(moe) == 2
    for r in moe:
        spec, real = found[r]
        assert real - spec == extra, r
