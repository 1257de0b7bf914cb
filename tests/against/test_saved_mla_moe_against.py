"""Saved activations of DeepSeek-V3's multi-head latent attention and mixture of experts, and of gpt-oss's sink
attention and clamped experts, against transformers' models (small configs through `costspec import hf`,
saved_tensors_hooks on meta in bf16): the spec's bytes and the real model's per matched row, each raw difference
written out from the dims -- what transformers computes otherwise than the generated module (its fp32 router, its
experts' kernels, its written-out RMSNorm, its per-forward rotary tables, its sinks' row max) -- and every row
exact after the named rules of `costspec.against.saved_rules`, whose bytes are these formulas."""
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

BASE = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
            vocab_size=100, max_position_embeddings=16, pad_token_id=0, bos_token_id=1, eos_token_id=1)
DEEPSEEK = dict(BASE, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, num_key_value_heads=4,
                n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, first_k_dense_replace=1,
                q_lora_rank=24, n_group=4, topk_group=2)
# (layer 0 sliding, layer 1 full: the rotary tables go to the sliding layer, the first the model runs)
GPT_OSS = dict(BASE, num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8,
               layer_types=["sliding_attention", "full_attention"])
B, FP32, BF16 = 2, 4, 2


def compared(config, folder, experts: str, dtype: str = "bf16"):
    """The comparison with transformers' `experts` implementation (the attention kernels' specs as candidates),
    {matched row: (spec bytes, real bytes)} and the dims."""
    imported = import_hf(write_config(config, folder), dtype=dtype)
    path = folder / "spec.yaml"
    path.write_text(imported.text)
    model = load(path)
    values = model.bind(B)
    real = load_target(f"hf:{imported.described}", model, values, "meta", str(folder / "config.json"),
                       dict(imported.family.hf_kwargs), output=imported.output)
    rowmap = validate_against(model, values, real, "forward").rowmap
    real.module.config._experts_implementation = experts
    comparison = compare_saved_against(model, values, real, rowmap, kernel(path, "math", None),
                                       kernel(path, "eager", None))
    return comparison, {r: (s, m) for r, s, m, _ in comparison.rows}, {str(k): int(v) for k, v in values.items()}


def exact_after_rules(comparison, expected: dict[str, int], experts: str) -> None:
    """Every row exact after the rules, the rules' bytes the formulas, and with the default experts (grouped_mm)
    within 1% with the as-run rules (batched_mm's gathered weights are its copies of the experts' weights, many
    times the activations at these widths)."""
    assert not comparison.failures(), comparison.failures()
    assert {k: v for k, v in used(comparison).items() if v} == {k: v for k, v in expected.items() if v}
    spec, real, _ = comparison.totals
    as_run = sum(v for k, v in used(comparison).items() if k in AS_RUN)
    assert experts != "grouped_mm" or abs(real - (spec + as_run)) / real < 0.01


@pytest.mark.parametrize("experts, dtype", [("grouped_mm", "bf16"), ("batched_mm", "bf16"), ("batched_mm", "fp32")])
def test_deepseek_v3_mla_and_moe_against_transformers(tmp_path, experts, dtype):
    """(torch's grouped_mm takes bf16 only: fp32 runs batched_mm.)"""
    comparison, found, d = compared(transformers.DeepseekV3Config(**DEEPSEEK), tmp_path, experts, dtype)
    b, S, C, T = (BF16 if dtype == "bf16" else FP32), d["S"], d["C"], B * d["S"]
    E, K, F = DEEPSEEK["n_routed_experts"], DEEPSEEK["num_experts_per_tok"], DEEPSEEK["moe_intermediate_size"]
    # mla: transformers' RMSNorm keeps the q_a and kv_a norms' normalised values at the dtype, not in fp32; the
    # first layer keeps the per-forward rotary tables (S x d_r at the dtype, cos and sin)
    norms = -T * (DEEPSEEK["q_lora_rank"] + DEEPSEEK["kv_lora_rank"]) * (FP32 - b)
    rope = 2 * S * DEEPSEEK["qk_rope_head_dim"] * b
    spec, real = found["layer0.attn"]
    assert real - spec == norms + rope
    spec, real = found["layer1.attn"]
    assert real - spec == norms
    # moe: DeepseekV3TopkRouter's linear in fp32 (copies of the input and the router weight), its scores, top-k
    # weights, sum and final weights in fp32; grouped_mm sorts the T*k rows (three int64 ids a row, E int32
    # offsets); batched_mm gathers each row's gate_up and down weights (C x 2F and F x C)
    logits = FP32 * (T * C + E * C) if b != FP32 else 0
    routing = T * (E + 2 * K + 1) * (FP32 - b)
    kernel_rule = ("grouped-mm-routing-indices", 24 * T * K + 4 * E) if experts == "grouped_mm" else (
        "batched-mm-gathered-weights", T * K * 3 * C * F * b)
    spec, real = found["layer1.moe"]
    assert real - spec == logits + routing + kernel_rule[1]
    # the five rmsnorm rows (two a layer, the final one) as transformers writes its RMSNorm out, in place of the
    # spec's: x in fp32, rstd, the normalised x at the dtype
    written = sum(T * (FP32 * C + FP32 + b * C) - found[r][0] for r in found if "norm" in r)
    expected = {"rmsnorm-written-out": written + 2 * norms, "rope-tables-per-forward": rope, "router-fp32": routing,
                "router-logits-fp32": logits, kernel_rule[0]: kernel_rule[1]}
    exact_after_rules(comparison, expected, experts)


@pytest.mark.parametrize("experts", ["grouped_mm", "batched_mm"])
def test_gpt_oss_against_transformers(tmp_path, experts):
    """gpt-oss's attention rows: the sinks' row max keeps its int64 indices (B*h*S a layer); the first layer run
    keeps the rotary tables, which gpt-oss makes d/2 wide (cos and sin of the frequencies, not concatenated twice).
    Its moe rows: the spec's clamped, interleaved experts keep what transformers' do; batched_mm gathers each row's
    weights (C x 2F, F x C); grouped_mm sorts the rows (the three int64 ids, E int32 offsets, and the sorted expert
    ids its bias gathers read), and keeps a sorted copy of the k softmax weights the router keeps too."""
    comparison, found, d = compared(transformers.GptOssConfig(**GPT_OSS), tmp_path, experts)
    b, S, T, C, h, D = BF16, d["S"], B * d["S"], d["C"], d["heads"], d["D"]
    E, K, F = GPT_OSS["num_local_experts"], GPT_OSS["num_experts_per_tok"], GPT_OSS["intermediate_size"]
    sinks, rope = 8 * B * h * S, 2 * S * (D // 2) * b
    kernel_rule = ("batched-mm-gathered-weights", T * K * 3 * C * F * b) if experts == "batched_mm" else (
        "grouped-mm-routing-indices", 24 * T * K + 4 * E + 8 * T * K + T * K * b)
    attn, moe = sorted(r for r in found if r.endswith(".attn")), sorted(r for r in found if r.endswith(".moe"))
    assert attn == ["layers[full].attn", "layers[others].attn"] and len(moe) == 2
    for r in attn:
        spec, real = found[r]
        assert real - spec == sinks + (rope if r == "layers[others].attn" else 0), r
    for r in moe:
        spec, real = found[r]
        assert real - spec == kernel_rule[1], r
    assert [u.row for u in comparison.rules if u.rule == "rope-tables-per-forward"] == ["layers[others].attn"]
    # gpt-oss's RMSNorm keeps what torch's does (x in fp32, rstd, the normalised x in fp32): no norm rule
    exact_after_rules(comparison, {"attention-sinks-max-indices": 2 * sinks, "rope-tables-per-forward": rope,
                                   kernel_rule[0]: 2 * kernel_rule[1]}, experts)
