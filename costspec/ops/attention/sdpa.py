"""One F.scaled_dot_product_attention call (`Sdpa`: problems, heads, queries, keys, masking) and its
forward and backward work under the two kernel families: flash (fused, the GPU default) and math
(PyTorch's decomposition)."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Backend
from costspec.ops.work import Expr, Work, is_zero, pointwise


@dataclass(frozen=True)
class Sdpa:
    """One F.scaled_dot_product_attention call: b problems x h query heads over sq queries and sk
    keys (kv key/value heads; d and dv per head), and how it is masked and counted."""

    b: Expr
    h: Expr
    kv: Expr
    sq: Expr
    sk: Expr
    d: Expr
    dv: Expr
    gqa: bool = False  # kv may be < h: each k/v head serves h/kv query heads
    grouped: Expr = sympy.Integer(1)  # 1 when kv < h, 0 when kv == h (see geometry.grouped), with gqa
    causal: bool = False
    useful: bool = False  # causal_flops: useful -- matmuls over the unmasked pairs only
    bias: bool = False  # an additive float bias on every score (SAM's relative positions)
    window: Expr = sympy.Integer(0)  # causal sliding window (Mistral): query i sees keys i-w+1..i; 0 = none

    @property
    def scores(self) -> Expr:
        return self.b * self.h * self.sq * self.sk

    @property
    def pairs(self) -> Expr:
        """(query, key) pairs the matmuls are counted over, per problem and head: all sq*sk, or for
        causal_flops: useful the sq*(sq+1)/2 of self-attention's lower triangle (diagonal included)."""
        if self.causal and self.useful and not is_zero(self.window):
            m = sympy.Min(self.sq, self.window)  # queries 0..m-1 see i+1 keys, the rest w each
            return m * (m + 1) / 2 + (self.sq - m) * self.window
        if self.causal and self.useful:
            return self.sq * (self.sq + 1) / 2
        return self.sq * self.sk


def sdpa_forward(a: Sdpa, backend: Backend) -> Work:
    """QK^T (2*b*h*pairs*d) + AV (2*b*h*pairs*dv) on Tensor Cores; scale, mask, bias and softmax on
    CUDA cores.

    NB: flash-style kernels scale every score (b*h*sq*sk multiplies) and mask in registers (one
    select per score); PyTorch's math backend scales q and k by sqrt(scale) instead
    (b*h*(sq+sk)*d multiplies) and builds the causal mask once per call (tril + where, 2*sq*sk
    selects) then adds it to the scores. GQA is counted at the query head count h (k and v are
    expanded to h heads, as FlopCounterMode counts them). An additive bias (SAM's relative
    positions) is one add per score in both backends (on a GPU PyTorch runs a biased SDPA with
    the memory-efficient kernel, whose backward recomputes QK^T as flash does).
    """
    work = Work({"sdpa": FLOPS_PER_MAC * a.b * a.h * a.pairs * (a.d + a.dv)}) + pointwise("softmax", a.scores)
    work = work + pointwise("scale", a.scores if backend == Backend.FLASH else a.b * a.h * (a.sq + a.sk) * a.d)
    if a.causal and not is_zero(a.window):  # flash masks in registers; math adds a mask built once (a buffer)
        work = work + pointwise("select" if backend == Backend.FLASH else "add", a.scores)
    elif a.causal:
        work = work + (pointwise("select", a.scores) if backend == Backend.FLASH
                       else pointwise("select", 2 * a.sq * a.sk) + pointwise("add", a.scores))
    if a.bias:
        work = work + pointwise("add", a.scores)
    return work


def sdpa_backward(a: Sdpa, backend: Backend) -> Work:
    """dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: 4 matmuls (8*b*h*s^2*d for d = dv).

    NB: the fused flash / memory-efficient / cuDNN kernels also recompute S = QK^T (and re-mask
    it when causal), which FlopCounterMode counts too (10*b*h*s^2*d): that is `backend: flash`,
    the default, as a GPU runs it. `backend: math` is the decomposition that saves P (what meta
    tensors execute). With GQA, dK and dV come out per query head and are summed over each
    group (both backends: flash-attn sums its expanded dK/dV the same way).
    """
    macs = a.b * a.h * a.pairs * (2 * a.dv + 2 * a.d) + (a.b * a.h * a.pairs * a.d if backend == Backend.FLASH else 0)
    work = Work({"sdpa": FLOPS_PER_MAC * macs}) + pointwise("softmax_backward", a.scores)
    work = work + pointwise("scale", a.scores if backend == Backend.FLASH else a.b * a.h * (a.sq + a.sk) * a.d)
    if a.causal and backend == Backend.FLASH:
        work = work + pointwise("select", a.scores)
    if a.gqa:
        work = work + pointwise("bias_grad", a.grouped * a.b * a.h * a.sk * (a.d + a.dv))
    return work
