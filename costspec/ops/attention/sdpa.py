"""One attention call (`Sdpa`: problems, heads, queries, keys, masking, soft-capping, sinks) and its
forward and backward work under the three kernel families: flash (fused, the GPU default), math
(PyTorch's SDPA decomposition) and eager (the explicit matmul / softmax / matmul of transformers'
eager_attention_forward)."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Backend
from costspec.ops.work import Expr, Work, above_one, is_zero, pointwise


@dataclass(frozen=True)
class Sdpa:
    """One attention call: b problems x h query heads over sq queries and sk keys (kv key/value heads;
    d and dv per head), and how it is masked, capped and counted."""

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
    offset: Expr = sympy.Integer(0)  # keys before the first query (a KV cache): causal masks align bottom-right
    useful: bool = False  # causal_flops: useful -- matmuls over the unmasked pairs only
    bias: bool = False  # an additive float bias on every score (SAM's relative positions)
    window: Expr = sympy.Integer(0)  # causal sliding window (Mistral): query i sees keys i-w+1..i; 0 = none
    local: Expr = sympy.Integer(0)  # bidirectional local window (ModernBERT): |i - j| <= local // 2; 0 = none
    softcap: bool = False  # Gemma 2's tanh soft-capping of every score: cap * tanh(score / cap)
    alibi: bool = False  # the bias is ALiBi's, the causal mask folded into it (one float tensor, built once)
    sinks: bool = False  # gpt-oss: a learned logit per head joins every row's softmax, then is dropped
    folded: bool = False  # T5's decoder: the causal mask is folded into the bias before the call (one float mask)

    @property
    def scores(self) -> Expr:
        return self.b * self.h * self.sq * self.sk

    @property
    def masked(self) -> bool:
        """A mask on the scores: causal (with or without a sliding window) or a local window."""
        return self.causal or not is_zero(self.local)

    @property
    def softmax_scores(self) -> Expr:
        """Elements of the softmax: every score, and with sinks one more logit per row."""
        return self.b * self.h * self.sq * (self.sk + 1) if self.sinks else self.scores

    @property
    def pairs(self) -> Expr:
        """(query, key) pairs the matmuls are counted over, per problem and head: all sq*sk, or for
        causal_flops: useful the unmasked ones -- the lower triangle (diagonal included; PyTorch's
        top-left alignment when sq != sk: query i sees keys 0..min(i, sk-1); after `offset` cached keys
        bottom-right: query i sees keys 0..offset+i), the band of a sliding window, or the |i - j| <= r
        band of a local window (r = local // 2)."""
        if not self.useful:
            return self.sq * self.sk
        if self.causal and not is_zero(self.window):
            m = sympy.Min(self.sq, self.window - self.offset)  # queries 0..m-1 see offset+i+1 keys, the rest w each
            return m * self.offset + m * (m + 1) / 2 + (self.sq - m) * self.window
        if self.causal and not is_zero(self.offset):
            return self.sq * self.offset + self.sq * (self.sq + 1) / 2
        if self.causal:
            m = sympy.Min(self.sq, self.sk)  # queries 0..m-1 see i+1 keys, the rest all sk
            return m * (m + 1) / 2 + (self.sq - m) * self.sk
        if not is_zero(self.local):
            r = sympy.floor(self.local / 2)
            m = sympy.Min(self.sq - 1, r)  # keys on one side: min(i, r) before query i, as many after
            return self.sq + m * (m + 1) + 2 * (self.sq - 1 - m) * r
        return self.sq * self.sk


def _scale(a: Sdpa, backend: Backend) -> Work:
    """flash and eager scale every score (b*h*sq*sk multiplies); PyTorch's math decomposition scales q
    and k by sqrt(scale) instead (b*h*(sq+sk)*d)."""
    if backend == Backend.MATH:
        return pointwise("scale", a.b * a.h * (a.sq + a.sk) * a.d)
    return pointwise("scale", a.scores)


def sdpa_forward(a: Sdpa, backend: Backend) -> Work:
    """QK^T (2*b*h*pairs*d) + AV (2*b*h*pairs*dv) on Tensor Cores; scale, mask, bias, soft-cap and
    softmax on CUDA cores.

    NB: flash-style kernels scale every score (b*h*sq*sk multiplies) and mask in registers (one
    select per score); PyTorch's math backend scales q and k by sqrt(scale) instead
    (b*h*(sq+sk)*d multiplies) and builds the causal mask once per call (tril + where, 2*sq*sk
    selects) then adds it to the scores; eager attention (transformers' eager_attention_forward)
    scales every score and adds a float mask built once (one add per score). A window's mask
    (sliding or local) is a float mask built once in math and eager (one add per score). GQA is
    counted at the query head count h (k and v are expanded to h heads, as FlopCounterMode counts
    them). An additive bias (relative positions) is one add per score in every backend (on a GPU
    PyTorch runs a biased SDPA with the memory-efficient kernel, whose backward recomputes QK^T as
    flash does). ALiBi is such a bias (slope x key position per head); math and eager add it with the causal
    mask folded in (one float tensor: one add per score), flash masks in registers and adds it.
    Soft-capping is scores / cap, tanh, * cap: 2 scale + 1 tanh per score. Sinks make
    every softmax row one longer (sk + 1). A causal T5 bias (`folded`) carries the causal mask into the
    call (the attention op charges the where that folds it): the kernel adds that one float mask, in every
    backend, and masks nothing else.
    """
    work = Work({"sdpa": FLOPS_PER_MAC * a.b * a.h * a.pairs * (a.d + a.dv)}) + pointwise("softmax", a.softmax_scores)
    work = work + _scale(a, backend)
    if a.softcap:
        work = work + pointwise("scale", 2 * a.scores) + pointwise("tanh", a.scores)
    if a.folded:  # the causal mask is in the float bias, added below
        pass
    elif a.masked and backend == Backend.FLASH:  # masked in registers
        work = work + pointwise("select", a.scores)
    elif a.alibi:  # math / eager: the causal mask is part of ALiBi's float bias, added below
        pass
    elif a.causal and is_zero(a.window) and is_zero(a.offset) and backend == Backend.MATH:  # tril + where, added
        work = work + pointwise("select", 2 * a.sq * a.sk) + pointwise("add", a.scores)
    elif a.masked:  # a float mask built once, added to the scores
        work = work + pointwise("add", a.scores)
    if a.bias:
        work = work + pointwise("add", a.scores)
    return work


def sdpa_backward(a: Sdpa, backend: Backend) -> Work:
    """dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: 4 matmuls (8*b*h*s^2*d for d = dv).

    NB: the fused flash / memory-efficient / cuDNN kernels also recompute S = QK^T (and re-mask
    it when masked), which FlopCounterMode counts too (10*b*h*s^2*d): that is `backend: flash`,
    the default, as a GPU runs it. `backend: math` (the decomposition that saves P, what meta
    tensors execute) and `backend: eager` do not recompute. With GQA, dK and dV come out per query
    head and are summed over each group (every backend: flash-attn sums its expanded dK/dV the same
    way). Soft-capping's backward is tanh_backward and the two scalings per score; the sinks'
    gradient sums the sink column over the problems and queries (b*h*sq, none when b*sq = 1).
    """
    macs = a.b * a.h * a.pairs * (2 * a.dv + 2 * a.d) + (a.b * a.h * a.pairs * a.d if backend == Backend.FLASH else 0)
    work = Work({"sdpa": FLOPS_PER_MAC * macs}) + pointwise("softmax_backward", a.softmax_scores)
    work = work + _scale(a, backend)
    if a.softcap:
        work = work + pointwise("scale", 2 * a.scores) + pointwise("tanh_backward", a.scores)
    if a.masked and backend == Backend.FLASH and not a.folded:
        work = work + pointwise("select", a.scores)
    if a.gqa:
        work = work + pointwise("bias_grad", a.grouped * a.b * a.h * a.sk * (a.d + a.dv))
    if a.sinks:
        work = work + pointwise("bias_grad", above_one(a.b * a.sq) * a.b * a.h * a.sq)
    return work
