"""Activations saved for backward with frozen weight matrices (quantised, or under LoRA adapters): autograd keeps a
GEMM's input for the weight gradient only when the weight needs one; a LoRA adapter keeps that input for dA and
its x A^T for dB. The spec's count against saved_tensors_hooks on the generated module, per op row."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.analysis.memory import ACTIVATIONS, memory_kinds, unmodelled_activations  # noqa: E402
from costspec.runtime.saved_bytes import compare_saved  # noqa: E402
from costspec.tree.saved import saved_bytes  # noqa: E402
from tests.common import ROOT  # noqa: E402

TOY = """
costspec: 1
name: frozen
precision: PREC
dims: {B: 2, S: 4, C: 8}
input: [B, S, C]
layers:
  - linear: {out: C}
  - residual: [{layernorm: {}}, {mlp: {hidden: 4*C}}]
  - residual: [{layernorm: {}}, {mlp: {hidden: 4*C, gated: true, fn: silu}}]
  - residual: [{layernorm: {}}, {mlp: {hidden: 4*C, fn: relu}}]
  - residual: [{layernorm: {}}, {attention: {heads: 2, backend: KERNEL}}]
  - residual: [{layernorm: {}}, {attention: {heads: 2, fused_qkv: false, backend: KERNEL}}]
  - residual: [{layernorm: {}}, {attention: {heads: 4, kv_heads: 2, backend: KERNEL, rope: true}}]
  - linear: {out: C}
    name: head
"""
PRECISIONS = ["{dtype: fp32, lora: 2}", "{dtype: bf16, weights: nf4}", "{dtype: bf16, weights: nf4, lora: 4}",
              "{dtype: fp32, weights: int8}", "{dtype: bf16, weights: int4, lora: 2}"]


@pytest.mark.parametrize("kernel", ["flash", "math"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_frozen_and_adapted_weights_equal_autograd(precision, kernel):
    model = costspec.loads(TOY.replace("PREC", precision).replace("KERNEL", kernel))
    comparison = compare_saved(model, model.bind())
    assert not comparison.failures(), comparison.failures()
    assert unmodelled_activations(model) is None


def test_by_hand():
    """fp32, B*S = 8 rows, C = 8, hidden 32, rank 2: a frozen linear keeps nothing for its weight; under LoRA it
    keeps its input (for dA) and x A^T (8 x 2, for dB)."""
    text = """
costspec: 1
name: hand
precision: PREC
dims: {B: 2, S: 4, C: 8}
input: [B, S, C]
layers:
  - activation: {fn: gelu}
  - linear: {out: C}
  - mlp: {hidden: 4*C}
"""
    rows, c, h, r, f = 8, 8, 32, 2, 4

    def counted(precision: str) -> dict[str, int]:
        model = costspec.loads(text.replace("PREC", precision))
        assert not compare_saved(model, model.bind()).failures()
        return {row: int(n.xreplace(model.bind())) for row, n in saved_bytes(model.root).items()}

    # nothing differentiates the gelu's input; the frozen linear's bias needs no input; the mlp keeps fc1's output
    # for its gelu only (its input and fc2's input were there for the frozen weights' gradients)
    assert counted("{dtype: fp32, weights: int8}") == {"mlp": rows * h * f}
    # LoRA: the linear keeps its input (the gelu's output) and x A^T; the mlp its input, x A^T, fc1's output,
    # fc2's input (gelu's output) and its x A^T
    assert counted("{dtype: fp32, lora: 2}") == {"linear": rows * c * f + rows * r * f,
                                                  "mlp": rows * c * f + rows * r * f + 2 * rows * h * f + rows * r * f}


LLAMA, VIT = "B=2 S=8 C=32 heads=4 KV=2 F=64 L=2 V=50", "B=2 img=32 C=32 heads=2 L=2"


@pytest.mark.parametrize("spec, dims, precision", [
    ("llama_1b", LLAMA, "{dtype: bf16, weights: nf4, lora: 8}"), ("llama_1b", LLAMA, "{dtype: bf16, weights: nf4}"),
    # (the generated module has LoRA adapters on linear layers only: vit's patch conv is quantised, not adapted)
    ("vit_b", VIT, "{dtype: bf16, weights: nf4}")])
def test_zoo_specs_with_qlora(spec, dims, precision):
    text = (ROOT / "specs" / f"{spec}.yaml").read_text()
    assert "precision: {dtype: bf16}" in text
    model = costspec.loads(text.replace("precision: {dtype: bf16}", f"precision: {precision}"))
    values = model.bind(sets={k: int(v) for k, v in (kv.split("=") for kv in dims.split())})
    comparison = compare_saved(model, values)
    assert not comparison.failures(), comparison.failures()
    plain = costspec.loads(text)
    frozen_total = sum(a for _, a, _ in comparison.rows)
    plain_total = sum(int(n.xreplace(values)) for n in saved_bytes(plain.root).values())
    assert frozen_total < plain_total if "lora" not in precision else frozen_total > plain_total
    assert ACTIVATIONS in {k.name for k in memory_kinds(model, "train")}


def test_a_frozen_conv_keeps_its_input():
    """autograd's convolution keeps its input for its one backward (input, weight and bias together), frozen
    weight or not: only a linear's weight gradient input goes."""
    text = """
costspec: 1
name: conv
precision: {dtype: bf16, weights: nf4}
dims: {B: 2, H: 8}
input: [B, 4, H, H]
layers:
  - conv2d: {out: 8, kernel: 3, padding: 1}
  - activation: {fn: relu}
  - conv2d: {out: 8, kernel: 1}
"""
    model = costspec.loads(text)
    assert not compare_saved(model, model.bind()).failures()
    rows = {row: int(n.xreplace(model.bind())) for row, n in saved_bytes(model.root).items()}
    assert rows == {"conv1": 2 * 4 * 8 * 8 * 2, "act": 2 * 8 * 8 * 8 * 2}  # conv2's input is relu's output
