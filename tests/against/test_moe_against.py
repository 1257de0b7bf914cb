"""The `moe` router variants against transformers' own MoE modules (`validate --against`): two layers
of DeepseekV3MoE, Qwen3MoeSparseMoeBlock, OlmoeSparseMoeBlock and GptOssMLP at small widths on meta
(tests/against/moe_models.py), forward and train, every row exact: matmul FLOPs, parameters and every
pointwise kind.

Two named rules come from transformers' batched_mm experts (the path FlopCounterMode can count on meta):
its per-row weight gather scatter-adds the weight gradients in the backward (as specs/mixtral_8x7b.yaml
says), and with expert biases it adds each row's gathered bias with `add_` after the bmm (the add kind),
where a grouped GEMM adds it in its epilogue (bias_add): the same elements under another kind.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import loads  # noqa: E402

TARGETS = "tests.against.moe_models"

GATHER_RULE = """\
  - module: "layers.*.mlp.experts"
    extra: {scatter_add: "L*B*S*K*3*F*C"}
    pass: backward
    reason: >-
      batched_mm gathers each (token, expert) row's own copy of its expert's weights (gate_up_proj[ids],
      down_proj[ids]); the gather's backward scatter-adds those T*K*3*F*C weight-gradient elements
"""
BIAS_RULE = """\
  - module: "layers.*.mlp.experts"
    extra: {add: "L*B*S*K*(2*F + C)", bias_add: "-L*B*S*K*(2*F + C)"}
    pass: forward
    reason: >-
      batched_mm adds each row's gathered expert bias with add_ after its bmm (the add kind); the spec's
      grouped GEMM adds it in its epilogue (bias_add): T*K*(2F + C) elements either way
"""


def spec(name: str, moe: str, dims: str = "", rules: str = GATHER_RULE) -> str:
    return f"""\
costspec: 1
name: {name}
dims: {{B: 1, S: 6, C: 32, F: 16, E: 8, K: 2, L: 2{dims}}}
precision: {{dtype: fp32}}
input: [B, S, C]
ignore:
{rules}layers:
  - repeat: L
    name: layers
    source: layers
    body:
      - moe: {{experts: E, top_k: K, hidden: F, fused_gate_up: true, {moe}}}
        source: mlp
"""


CASES = {
    # DeepSeek-V3: sigmoid scores, the score-correction bias, 4 groups of 2 (2 kept), norm_topk_prob with its
    # 1e-20, routed_scaling_factor 2.5, one shared expert (separate gate and up projections)
    "deepseek_v3": spec("deepseek_v3_moe", "scoring: sigmoid, score_bias: true, n_group: G, topk_group: TG, "
                        "renorm_eps: true, routed_scaling_factor: 2.5, shared_experts: SH", ", G: 4, TG: 2, SH: 1"),
    # Qwen3-MoE and OLMoE: softmax, top-k, norm_topk_prob true / false
    "qwen3_moe": spec("qwen3_moe", "renorm: true"),
    "olmoe": spec("olmoe", "renorm: false"),
    # gpt-oss: router bias, top-k of the logits then softmax; biased experts, interleaved gate/up, clamped SwiGLU
    "gpt_oss": spec("gpt_oss_moe", "scoring: topk_softmax, renorm: false, router_bias: true, bias: true, "
                    "fn: quick_gelu, interleaved_gate_up: true, swiglu_limit: 7.0", rules=GATHER_RULE + BIAS_RULE),
}


def run(name: str, pass_: str):
    model = loads(CASES[name])
    values = model.bind()
    real = load_target(f"{TARGETS}:{name}", model, values, "meta")
    return validate_against(model, values, real, pass_)


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_moe_layer_matches_transformers(name, pass_):
    result = run(name, pass_)
    assert result.ok, "\n".join(result.failures())
    for phase in result.phases.values():
        assert not phase.failures
        assert all(row.status == "PASS" for row in phase.rows if row.matched), [(r.name, r.status) for r in phase.rows]
    for totals in summary(result).values():
        assert totals["real_reconciled"] == totals["spec_matmul"] and totals["real_params"] == totals["spec_params"]
    assert not result.rowmap.unmatched_real and not result.unknown


def test_deepseek_v3_numbers():
    """Two layers, T = 6 tokens: router C -> E; 2 of 8 experts per token through gate_up (C -> 2F) and down;
    the shared expert (F) on every token."""
    result = run("deepseek_v3", "forward")
    T, C, F, E, K, L = 6, 32, 16, 8, 2, 2
    total = result.phases["forward"].rows[-1]
    assert total.real_matmul == total.spec_matmul == L * 2 * (T * C * E + T * K * 3 * C * F + T * 3 * C * F)
    assert total.real_params == L * (C * E + E * 3 * C * F + 3 * C * F) == 28_160  # the bias is a buffer
    assert result.buffers["layers.0.mlp.gate.e_score_correction_bias"] == E
    assert total.real_pointwise["sigmoid"] == L * T * E
