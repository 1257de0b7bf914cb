"""What a layer's precision adds to its weight GEMMs (costspec.tree.weights), against hand formulas: the
dequantisation of quantised weights on CUDA cores per use (forward GEMM, backward dX GEMM; the native fp8
path's rescale per output and k-group), frozen weight matrices (no dW; no backward before the first
trainable layer), LoRA adapters (`precision: {lora: r}`, QLoRA with nf4) and their FLOPs against a PEFT-style
torch module under FlopCounterMode, `memory` by trainable parameters, and the generated module's validation.
"""
from __future__ import annotations

import math

import pytest

import costspec
from costspec.analysis.memory import memory_kinds
from costspec.runtime.validate import validate

M, C, F = 2 * 8, 256, 96  # B*S rows, linear C -> C then C -> F

SPEC = """\
costspec: 1
name: w
dims: {B: 2, S: 8, C: 256, F: 96}
precision: PRECISION
input: [B, S, C]
layers:
  - linear: {out: C, bias: false}
    name: first
    FIRST
  - linear: {out: F, bias: false}
    name: second
"""


def model(precision: str, first: str = ""):
    return costspec.loads(SPEC.replace("PRECISION", precision).replace("FIRST", first), "w.yaml")


def rows(m, pass_: str) -> dict:
    return {r.name: r for r in m.report(pass_, m.bind()).rows}


def kinds(m, pass_: str) -> dict[str, int]:
    values = m.bind()
    return {k: int(v.xreplace(values)) for k, v in m.cost(pass_).pointwise.items() if v != 0}


@pytest.mark.parametrize("weights, kind, flops", [("int4", "dequant_zero", 2), ("int8", "dequant", 1),
                                                  ("fp8", "dequant", 1), ("nf4", "dequant", 1)])
def test_forward_dequantises_each_weight_value_once(weights, kind, flops):
    m = model(f"{{weights: {weights}, group: 64, compute: bf16}}")
    r = rows(m, "forward")
    assert r["first"].cuda_flops == flops * C * C and r["second"].cuda_flops == flops * C * F
    assert r["first"].tc_flops == 2 * M * C * C  # the GEMM itself unchanged, at the compute dtype
    assert kinds(m, "forward") == {kind: C * C + C * F}


def test_native_fp8_gemm_rescales_each_output_per_k_group():
    # group 96 along k = 256: ceiling(256 / 96) = 3 partial sums per output, each a multiply and an add
    m = model("{weights: fp8, group: 96, compute: fp8}")
    assert kinds(m, "forward") == {"group_rescale": M * C * 3 + M * F * 3}
    assert rows(m, "forward")["second"].cuda_flops == 2 * M * F * math.ceil(C / 96)


def test_frozen_weights_run_dx_with_a_second_dequantisation_and_no_dw():
    """first trains (weights: none); second is frozen int4: its backward is dX = dY W only, with W dequantised
    again; first computes its dW (no dX: the model input needs no gradient)."""
    m = model("{weights: int4, group: 64}", "precision: {weights: none}")
    back = rows(m, "backward")
    assert back["second"].tc_flops == 2 * M * F * C  # dX, no dW
    assert back["second"].cuda_flops == 2 * C * F  # (q - zero) * scale per value, again
    assert back["first"].tc_flops == 2 * M * C * C and back["first"].cuda_flops == 0  # dW only, unquantised
    # a frozen layer with no trainable parameters first: nothing before the second layer runs backward
    frozen = model("{weights: int4, group: 64}")
    assert m.trains and frozen.cost("backward").tc == 0 and frozen.cost("backward").cuda == 0


def test_lora_adds_its_adapters_to_every_weight_gemm():
    """QLoRA: nf4 base frozen, rank-4 adapters on both linears. first's input needs no gradient (no dX);
    second's does (first's adapters train)."""
    r = 4
    m = model(f"{{weights: nf4, group: 64, compute: bf16, lora: {r}}}")
    fwd, back = rows(m, "forward"), rows(m, "backward")
    assert fwd["first"].params == C * C + r * (C + C) and fwd["second"].params == C * F + r * (C + F)
    assert fwd["second"].tc_flops == 2 * M * C * F + 2 * M * r * (C + F)
    # forward CUDA: dequant n*k, the scaling and the add per output
    assert fwd["second"].cuda_flops == C * F + 2 * M * F
    # backward: first: dB, dh, dA (no dX); second: frozen dX + dB, dh, dA, the adapter's dX
    assert back["first"].tc_flops == 2 * M * r * (2 * C + C)
    assert back["second"].tc_flops == 2 * M * F * C + 2 * M * r * (2 * F + 2 * C)
    # second backward CUDA: dequant again (n*k), the scaling's backward (M*F), the two dX summed (M*C)
    assert back["second"].cuda_flops == C * F + M * F + M * C
    assert "2 layers (first, second): LoRA adapters of rank 4" in "\n".join(m.report("forward", m.bind()).notes)


def test_lora_flops_match_a_frozen_linear_with_adapters_under_flop_counter_mode():
    """A PEFT-style module (frozen nn.Linear, lora_A and lora_B, out = base(x) + B(A(x)) * scaling) after a
    trainable linear, counted by FlopCounterMode forward and backward, against the spec of the same layers."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    r = 8
    spec = model(f"{{dtype: bf16, lora: {r}}}", "precision: {lora: 0}")

    class Lora(torch.nn.Module):
        def __init__(self, k: int, n: int):
            super().__init__()
            self.base = torch.nn.Linear(k, n, bias=False).requires_grad_(False)
            self.lora_A = torch.nn.Linear(k, r, bias=False)
            self.lora_B = torch.nn.Linear(r, n, bias=False)

        def forward(self, x):
            return self.base(x) + self.lora_B(self.lora_A(x)) * 2.0

    with torch.device("meta"):
        net = torch.nn.Sequential(torch.nn.Linear(C, C, bias=False), Lora(C, F))
        x = torch.empty(2, 8, C)
    with FlopCounterMode(display=False) as forward:
        out = net(x)
    with FlopCounterMode(display=False) as backward:
        out.sum().backward()
    assert forward.get_total_flops() == spec.cost("forward").tc.xreplace(spec.bind())
    assert backward.get_total_flops() == spec.cost("backward").tc.xreplace(spec.bind())
    # and the spec's numbers by hand: the adapter's forward 2*M*r*(C + F); backward dB, dh, dA and its dX
    assert backward.get_total_flops() == 2 * M * C * C + 2 * M * F * C + 2 * M * r * (2 * F + 2 * C)


def test_memory_counts_gradients_and_optimizer_state_of_trainable_parameters_only():
    r = 4
    m = model(f"{{weights: nf4, group: 64, compute: bf16, lora: {r}}}")
    got = {k.name: int(k.bytes.xreplace(m.bind())) for k in memory_kinds(m, "train", "adamw")}
    adapters = r * (C + C) + r * (C + F)
    # nf4: half a byte per value plus a 4-byte absmax per 64 values, per row; adapters at bf16
    assert got["weights"] == (C * C + C * F) // 2 + (C + F) * (C // 64) * 4 + 2 * adapters
    assert got["gradients"] == 2 * adapters
    assert got["optimizer state (adamw)"] == 2 * 2 * adapters


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_generated_module_freezes_the_base_and_runs_the_adapters(pass_):
    """validate: a QLoRA decoder block (fused qkv, gated MLP) PASSes; the dequantisation is the named rule."""
    pytest.importorskip("torch")
    text = """\
costspec: 1
name: qlora
dims: {B: 2, S: 16, C: 64, heads: 4, F: 96, V: 100}
precision: {weights: nf4, group: 32, compute: bf16, lora: 4}
input: [B, S]
layers:
  - embedding: {vocab: V, dim: C}
  - residual: [{rmsnorm: {}}, {attention: {heads: heads, causal: true, rope: true, qkv_bias: false,
                                           proj_bias: false}}]
  - residual: [{rmsnorm: {}}, {mlp: {hidden: F, gated: true, fn: silu, bias: false}}]
  - lm_head: {vocab: V}
    precision: {weights: none, lora: 0}
"""
    m = costspec.loads(text, "qlora.yaml")
    result = validate(m, m.bind(), pass_, "meta")
    assert result.ok, result.failures()
    rules = {(a.rule, a.row, a.phase) for a in result.reconciliations}
    assert ("quantised-weights-run-unquantised", "attn.qkv", "forward") in rules
    dequant = sum(a.pointwise.get("dequant", 0) for a in result.reconciliations)
    C, F = 64, 96
    weights = 3 * C * C + C * C + 3 * C * F
    assert dequant == -weights * (2 if pass_ == "train" else 1)  # forward, and again in the backward's dX


def test_validate_refuses_adapters_it_cannot_build(write_spec, cli):
    path = write_spec("""\
costspec: 1
name: moe_lora
dims: {B: 1, S: 8, C: 32, F: 16, E: 4, K: 2}
precision: {dtype: bf16, lora: 2}
input: [B, S, C]
layers:
  - moe: {experts: E, top_k: K, hidden: F}
""")
    out = cli("validate", path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "moe 'moe': costspec builds LoRA adapters on nn.Linear layers only" in out.stderr
    assert cli("eval", path, "--pass", "train").returncode == 0


def test_a_bad_rank_is_a_spec_error(write_spec, cli):
    out = cli("check", write_spec(SPEC.replace("PRECISION", "{lora: -1}").replace("FIRST", "")))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "$.precision.lora: -1 is too small (expected at least 0)" in out.stdout


def test_formula_shows_the_dequantisation_and_the_adapters(write_spec, cli):
    import json

    path = write_spec(SPEC.replace("PRECISION", "{weights: int4, group: 64, lora: 4}").replace("FIRST", ""))
    out = cli("formula", path, "--per-layer", "--format", "json")
    assert out.returncode == 0, out.stderr
    forms = {r["name"]: r for r in json.loads(out.stdout)["rows"]}
    # second: (q - zero) * scale per weight value, the adapter's scaling and add per output
    assert forms["second"]["cuda"]["expr"] == "2*B*S*F + 2*C*F"
    assert forms["second"]["params"]["expr"] == "C*F + 4*C + 4*F"


def test_inner_parts_of_an_adapted_op_run_their_dx_whatever_the_op_input():
    """mla on the model input (no gradient): q_a and kv_a compute no dX, but q_b, kv_b and the output
    projection read what a part with trainable adapters made, so their frozen dX (dequantised again) and
    their adapters' dX run; the generated module agrees (validate, train)."""
    pytest.importorskip("torch")
    text = """\
costspec: 1
name: mla_lora
dims: {B: 1, S: 16, C: 64, heads: 4, RQ: 24, R: 16, DN: 8, DR: 4, DV: 8}
precision: {weights: int8, compute: bf16, lora: 2}
input: [B, S, C]
layers:
  - mla: {heads: heads, q_lora_rank: RQ, kv_lora_rank: R, qk_nope_head_dim: DN, qk_rope_head_dim: DR,
          v_head_dim: DV, causal: true}
"""
    m = costspec.loads(text, "mla_lora.yaml")
    (op,) = m.op_nodes()
    assert [p for p in op.weight_gemms if op.part_input_grad(p, False)] == ["q_b", "kv_b", "proj"]
    back = rows(m, "backward")
    assert back["attn.q_a"].cuda_flops == 16 * 24  # its adapter's scaling backward only: no dX, no dequant
    assert back["attn.q_b"].cuda_flops == 24 * 4 * 12 + 16 * 4 * 12 + 16 * 24  # dequant, scaling, dX sum
    result = validate(m, m.bind(), "train", "meta")
    assert result.ok, result.failures()
