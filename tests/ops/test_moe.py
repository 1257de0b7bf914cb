"""costspec.ops.moe: mixture of experts (Mixtral's layer, capacity factor, fused gate/up, shared experts)."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, forward, params

spec = builder(dims="{B: 2}", input_="[B, 4, 10]")


def test_mixtral_layer_params_active_params_and_balanced_expert_flops():
    # Mixtral 8x7B's MoE layer: C = 4096, 8 SwiGLU experts of width 14336, top-2
    model = spec("- moe: {experts: 8, top_k: 2, hidden: 14336}", dims="{B: 1, S: 16}", input_="[B, S, 4096]")
    c, f, e, k, t = 4096, 14336, 8, 2, 16
    expert = 3 * c * f
    assert params(model) == c * e + e * expert
    notes = [n for node in model.op_nodes() for n in node.op.notes(node.call)]
    assert notes[0].startswith(f"{c * e + e * expert} parameters in total, {c * e + k * expert} active per token")
    matmul, pointwise = forward(model)
    rows = t * k  # balanced: every expert t*k/e = 4 rows, the experts together t*k
    assert matmul == {"gemm": 2 * t * c * e + 2 * rows * c * f * 3}
    assert pointwise["mul"] == rows * f + rows * c  # act(gate) * up, then each output times its weight
    assert pointwise["topk"] == pointwise["softmax"] == t * e


def test_moe_capacity_factor_drops_rows_beyond_capacity():
    # T = 10 tokens, k = 2, E = 4: capacity ceil(0.5 * 20 / 4) = 3 rows per expert, R = min(20, 4 * 3) = 12
    model = spec("- moe: {experts: 4, top_k: 2, hidden: 6, gated: false, capacity_factor: 0.5}",
                 dims="{B: 1}", input_="[B, 10, 8]")
    matmul, _ = forward(model)
    assert matmul == {"gemm": 2 * 10 * 8 * 4 + 2 * 12 * 8 * 6 * 2}
    shared = spec("- moe: {experts: 4, top_k: 1, hidden: 6, shared_experts: 2}", dims="{B: 1}", input_="[B, 10, 8]")
    assert params(shared) == 8 * 4 + 4 * 3 * 8 * 6 + 3 * 8 * (2 * 6)  # shared: one MLP of width 2 * 6
    with pytest.raises(SpecError, match=r"top_k 5 is more than the 4 experts"):
        spec("- moe: {experts: 4, top_k: 5, hidden: 6}")


def test_moe_fused_gate_up_drops_the_dx_add_and_shared_gate_adds_a_sigmoid_gate():
    # T = 10 tokens (B = 1), C = 8, E = 4, k = 2, hidden 6: R = T*k = 20 expert rows
    base = "- linear: {out: 8, bias: false}\n- moe: {experts: 4, top_k: 2, hidden: 6%s}"
    split, fused = (spec(base % extra, dims="{B: 1}", input_="[B, 10, 8]") for extra in ("", ", fused_gate_up: true"))
    assert forward(split) == forward(fused) and params(split) == params(fused)  # one C -> 2*hidden GEMM, same work
    (mm_s, pw_s), (mm_f, pw_f) = forward(split, "backward"), forward(fused, "backward")
    assert mm_s == mm_f
    assert pw_s["add"] - pw_f.get("add", 0) == 20 * 8  # gate's and up's dX summed: R*C adds, none when fused
    # Qwen2-MoE's shared expert with its sigmoid gate: sigmoid(x w) * shared(x), w: C -> 1
    plain, gated = (spec("- moe: {experts: 4, top_k: 2, hidden: 6, shared_experts: 1, shared_hidden: 12%s}" % extra,
                         dims="{B: 1}", input_="[B, 10, 8]") for extra in ("", ", shared_gate: true"))
    assert params(gated) - params(plain) == 8
    (mm_p, pw_p), (mm_g, pw_g) = forward(plain), forward(gated)
    assert mm_g["gemm"] - mm_p["gemm"] == 2 * 10 * 8  # the C -> 1 projection on T tokens
    assert pw_g["sigmoid"] == 10 and pw_g["mul"] - pw_p["mul"] == 10 * 8  # T scores, broadcast over C
    with pytest.raises(SpecError, match=r"shared_gate gates the shared experts' output"):
        spec("- moe: {experts: 4, top_k: 2, hidden: 6, shared_gate: true}")
    with pytest.raises(SpecError, match=r"fused_gate_up fuses the gate and up projections of gated experts"):
        spec("- moe: {experts: 4, top_k: 2, hidden: 6, gated: false, fused_gate_up: true}")
