"""The work a layer's weight matrices add to its op's own formulas, applied in one place for every op
(`OpNode`) from its precision and its GEMM geometry (`OpDef.gemms`):

* quantised weights are dequantised on CUDA cores once per use: per weight value in the forward GEMM and
  again in the backward's dX GEMM (`DEQUANT_KIND`); a native int8 / fp8 GEMM instead rescales each k-group's
  partial sum per output element (`NATIVE_RESCALE_KIND`);
* frozen weight matrices (quantised, or adapted by LoRA) get no weight gradient: the op's dW GEMM,
  2*m*n*k per weight GEMM, is taken out of its backward;
* a LoRA adapter of rank r on each weight GEMM (x A^T B^T * scaling added to the frozen GEMM's output, as
  PEFT's `lora.Linear` runs it; on a conv, PEFT's `lora.Conv2d`: A a conv of the same kernel to r channels,
  B a 1x1 conv, the same 2*m*r*(k + n) in the conv class) adds its parameters r*(k + n), its two GEMMs and
  their gradients.

The conventions: docs/conventions.md (quantised weights, LoRA adapters). A weight GEMM is a `gemm` or `conv`
of a part that holds a weight matrix (the set 2:4 sparsity prunes and quantisation stores narrow).
"""
from __future__ import annotations

from collections.abc import Iterable

import sympy

from costspec.core.conventions import (
    DEQUANT_KIND,
    FLOPS_PER_MAC,
    NATIVE_RESCALE_KIND,
    SPARSE_MATMUL_CLASSES,
    Precision,
)
from costspec.ops.opdef import OpCall, OpDef
from costspec.ops.work import NO_WORK, ZERO, Gemm, Part, Work
from costspec.tree.cost import holds_weight_matrix


def weight_gemms(op: OpDef, call: OpCall, parts: Iterable[Part]) -> dict[str, list[Gemm]]:
    """part -> the GEMMs / convs that multiply by the part's weight matrix (n x k, `count` of them for
    grouped convs and experts), from the op's GEMM geometry."""
    weight_parts = {p.name for p in parts if holds_weight_matrix(p.name, p.params)}
    out: dict[str, list[Gemm]] = {}
    for g in op.gemms(call):
        if g.part in weight_parts and g.kind in SPARSE_MATMUL_CLASSES:
            out.setdefault(g.part, []).append(g)
    return out


def weight_elements(gemms: Iterable[Gemm]) -> sympy.Expr:
    """Values of the weight matrices of `gemms` (n*k each, `count` of them)."""
    return sum((g.count * g.n * g.k for g in gemms), ZERO)


def lora_params(precision: Precision, gemms: Iterable[Gemm]) -> sympy.Expr:
    """Parameters of the LoRA adapters on `gemms`: A (r x k) and B (n x r) per weight matrix."""
    if not precision.lora:
        return ZERO
    return sum((g.count * precision.lora * (g.k + g.n) for g in gemms), ZERO)


def dequantise(precision: Precision, g: Gemm) -> Work:
    """One use of a quantised weight: each of its n*k values dequantised (a 16/32-bit compute dtype), or,
    on the native int8 / fp8 path, each of the m*n outputs' ceiling(k / group) partial sums rescaled."""
    if precision.native:
        return Work({}, {NATIVE_RESCALE_KIND: g.count * g.m * g.n * sympy.ceiling(g.k / precision.group)})
    assert precision.weights is not None
    return Work({}, {DEQUANT_KIND[precision.weights]: g.count * g.n * g.k})


def lora_forward(r: int, g: Gemm) -> Work:
    """h = x A^T (m x k by k x r), h B^T (m x r by r x n), times the scaling, added to the frozen output."""
    c = g.count
    return Work({g.kind: c * FLOPS_PER_MAC * g.m * r * (g.k + g.n)}, {"scale": c * g.m * g.n, "add": c * g.m * g.n})


def lora_backward(r: int, g: Gemm, input_grad: bool) -> Work:
    """The scaling's backward (one multiply per output), dB = dY'^T h and dh = dY' B (2*m*n*r each),
    dA = dh^T x (2*m*r*k); when the input needs a gradient, dh A (2*m*r*k) and its sum with the frozen
    GEMM's dX (one add per input element)."""
    c = g.count
    flops = 2 * g.m * g.n * r + g.m * r * g.k + (g.m * r * g.k if input_grad else ZERO)
    pointwise = {"scale": c * g.m * g.n, **({"add": c * g.m * g.k} if input_grad else {})}
    return Work({g.kind: c * FLOPS_PER_MAC * flops}, pointwise)


def frozen_weight_grad(g: Gemm) -> Work:
    """The dW GEMM of a weight matrix (dY^T X, 2*m*n*k per matrix) that a frozen weight does not run."""
    return Work({g.kind: g.count * FLOPS_PER_MAC * g.m * g.n * g.k})


def forward_work(precision: Precision, gemms: Iterable[Gemm]) -> Work:
    """What a part's weight GEMMs add to its forward work: dequantisation, LoRA adapters."""
    work = NO_WORK
    for g in gemms:
        if precision.quantised:
            work = work + dequantise(precision, g)
        if precision.lora:
            work = work + lora_forward(precision.lora, g)
    return work


def backward_work(precision: Precision, gemms: Iterable[Gemm], input_grad: bool) -> Work:
    """What a part's weight GEMMs change in its backward work: minus the frozen weights' dW GEMMs, plus the
    dequantisation the dX GEMM needs and the LoRA adapters' gradients."""
    work = NO_WORK
    for g in gemms:
        if precision.frozen_weights:
            work = work + frozen_weight_grad(g).scaled(-1)
        if precision.quantised and input_grad:
            work = work + dequantise(precision, g)
        if precision.lora:
            work = work + lora_backward(precision.lora, g, input_grad)
    return work


def weight_notes(precision: Precision) -> list[str]:
    """The counting choices of a layer's quantised or adapted weight GEMMs, one line each."""
    notes = []
    if precision.native:
        notes.append(f"{precision.weights} weights on the {precision.dtype} Tensor-Core GEMM: each output's partial "
                     f"sum per k-group of {precision.group} rescaled into the fp32 accumulator on CUDA cores "
                     f"({NATIVE_RESCALE_KIND}, m*n*ceiling(k/{precision.group}))")
    elif precision.quantised:
        assert precision.weights is not None
        kind = DEQUANT_KIND[precision.weights]
        notes.append(f"{precision.weights} weights dequantised on CUDA cores per use ({kind} per weight value, "
                     "n*k, in the forward GEMM and again in the backward's dX GEMM); frozen: no "
                     "weight gradient")
    if precision.lora:
        notes.append(f"LoRA adapters of rank {precision.lora} on its weight GEMMs (their weights frozen): "
                     "r*(k + n) parameters, 2*m*r*(k + n) FLOPs forward")
    return notes
