"""`attention`: multi-head self-attention with SDPA (Vaswani et al. 2017)."""
from __future__ import annotations

import sympy

from ..conventions import FLOPS_PER_MAC
from .base import (ZERO, Attr, Constraint, OpCall, OpDef, Part, Reconcile, Traffic, Work, linear_backward,
                   linear_forward, linear_traffic,
                   numel, pointwise, requires, same_size)
from .registry import register_op


def sdpa_forward(b, h, sq, sk, d, dv, backend: str) -> Work:
    """QK^T (2*b*h*sq*sk*d) + AV (2*b*h*sq*sk*dv) on Tensor Cores; scale and softmax on CUDA cores.

    NB: flash-style kernels scale every score (b*h*sq*sk multiplies); PyTorch's math backend
    scales q and k by sqrt(scale) instead (b*h*(sq+sk)*d multiplies).
    """
    scores = b * h * sq * sk
    work = Work({"sdpa": FLOPS_PER_MAC * scores * (d + dv)}) + pointwise("softmax", scores)
    scaled = scores if backend == "flash" else b * h * (sq + sk) * d
    return work + pointwise("scale", scaled)


def sdpa_backward(b, h, sq, sk, d, dv, backend: str) -> Work:
    """dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: 4 matmuls (8*b*h*s^2*d for d = dv).

    NB: the fused flash / memory-efficient / cuDNN kernels also recompute S = QK^T, which
    FlopCounterMode counts too (10*b*h*s^2*d): that is `backend: flash`, the default, as a GPU
    runs it. `backend: math` is the decomposition that saves P (what meta tensors execute).
    """
    scores = b * h * sq * sk
    macs = scores * (2 * dv + 2 * d) + (scores * d if backend == "flash" else 0)
    work = Work({"sdpa": FLOPS_PER_MAC * macs}) + pointwise("softmax_backward", scores)
    scaled = scores if backend == "flash" else b * h * (sq + sk) * d
    return work + pointwise("scale", scaled)


@register_op
class Attention(OpDef):
    """Multi-head self-attention on [B, S, C]: qkv projection, SDPA, output projection."""

    name = "attention"
    doc = ("Multi-head self-attention on [B, S, C]: fused (or separate) q/k/v projections, "
           "scaled_dot_product_attention (QK^T, scale, softmax, AV), output projection.")
    default_name = "attn"
    attrs = (
        Attr("heads", "size", "number of attention heads h"),
        Attr("dim", "size", "model dim C (default: the input's last dim)", default=lambda shape, a: shape[-1]),
        Attr("head_dim", "size", "per-head dim d (default C / heads)",
             default=lambda shape, a: a["dim"] / a["heads"]),
        Attr("qkv_bias", "bool", "bias on the q/k/v projections", default=True),
        Attr("proj_bias", "bool", "bias on the output projection", default=True),
        Attr("fused_qkv", "bool", "one (C -> 3*h*d) projection instead of three", default=True),
        Attr("backend", "choice", "SDPA kernel family the cost follows: flash (GPU default: the backward "
             "recomputes QK^T) or math (PyTorch's decomposition, as on meta tensors)",
             default="flash", choices=("flash", "math")),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        if same_size(call.attrs.dim, call.in_shape[-1]) is False:
            raise call.fail(f"dim={call.attrs.dim} does not match the input's last dim {call.in_shape[-1]}", "dim")
        return call.in_shape

    def constraints(self, call: OpCall):
        a = call.attrs
        return [Constraint(sympy.Eq(sympy.Mod(a.dim, a.heads), 0), "dim {dim} is not divisible by heads {heads}",
                           a.where("heads"), {"dim": a.dim, "heads": a.heads})]

    def _sizes(self, call: OpCall):
        a = call.attrs
        b, s, c = call.in_shape
        return b, s, c, a.heads, a.head_dim, a.heads * a.head_dim

    def _projections(self, call: OpCall):
        """(part name, in, out, bias) for each projection, in execution order around the SDPA."""
        a = call.attrs
        _, _, c, _, _, inner = self._sizes(call)
        qkv = ([("qkv", c, 3 * inner, a.qkv_bias)] if a.fused_qkv
               else [(n, c, inner, a.qkv_bias) for n in ("q", "k", "v")])
        return qkv, ("proj", inner, c, a.proj_bias)

    def forward(self, call: OpCall):
        b, s, _, h, d, _ = self._sizes(call)
        qkv, proj = self._projections(call)
        m = b * s
        parts = [Part(n, linear_forward(m, k, o, bias), k * o + (o if bias else 0)) for n, k, o, bias in qkv]
        parts.append(Part("sdpa", sdpa_forward(b, h, s, s, d, d, call.attrs.backend), own=True))
        n, k, o, bias = proj
        parts.append(Part(n, linear_forward(m, k, o, bias), k * o + (o if bias else 0)))
        return parts

    def backward(self, call: OpCall, input_grad: bool):
        b, s, _, h, d, _ = self._sizes(call)
        qkv, proj = self._projections(call)
        m = b * s
        parts = [Part(n, linear_backward(m, k, o, bias, input_grad)) for n, k, o, bias in qkv]
        if not call.attrs.fused_qkv and input_grad:  # dX of q, k, v projections summed: 2 adds per element
            parts.append(Part("sdpa", sdpa_backward(b, h, s, s, d, d, call.attrs.backend)
                              + pointwise("add", 2 * numel(call.in_shape)), own=True))
        else:
            parts.append(Part("sdpa", sdpa_backward(b, h, s, s, d, d, call.attrs.backend), own=True))
        n, k, o, bias = proj
        parts.append(Part(n, linear_backward(m, k, o, bias, True)))
        return parts

    def reconcile(self, call: OpCall, pass_: str, input_grad: bool, runtime, ev):
        """How the counters see F.scaled_dot_product_attention, by the way it ran on the device.

        NB: decomposed (meta, cpu math fallback): 2 + 4 bmm and mul by sqrt(scale) on q and k, i.e.
        `backend: math` exactly; fused on cpu (_scaled_dot_product_flash_attention_for_cpu): FlopCounterMode
        has no formula (0) and softmax / scale are not separate ops, so the analytic work stands in.
        """
        b, s, _, h, d, _ = self._sizes(call)
        backend = call.attrs.backend
        sdpa = sdpa_forward if pass_ == "forward" else sdpa_backward
        analytic = sdpa(b, h, s, s, d, d, backend)
        how = runtime.get("sdpa", "decomposed")
        if how == "decomposed":
            if backend == "math":
                return []
            text = ("SDPA ran as PyTorch's math decomposition (always so on meta), which scales q and k "
                    "(B*h*(Sq+Sk)*d multiplies) where the flash backend scales every score (B*h*Sq*Sk)")
            if pass_ == "backward":
                text += ("; its backward is 4 bmm = 8*B*h*S^2*d, the flash backend's 10*B*h*S^2*d recomputes "
                         "QK^T (difference 2*B*h*S^2*d)")
            return [Reconcile("sdpa-math-decomposition", "sdpa", sdpa(b, h, s, s, d, d, "math") + analytic.scaled(-1),
                              text)]
        if how == "fused-uncounted":
            formula = "2*B*h*S^2*d*2" if pass_ == "forward" else (
                "10*B*h*S^2*d" if backend == "flash" else "8*B*h*S^2*d")
            device = runtime.get("device", "this device")
            return [Reconcile("sdpa-not-counted", "sdpa", analytic.scaled(-1),
                              f"SDPA not counted by FlopCounterMode on {device} (a fused kernel with no formula): "
                              f"compensated with analytic {formula}, and its fused softmax/scale with the "
                              f"analytic element counts")]
        # fused-counted (CUDA flash / efficient / cuDNN kernels): counted as the flash convention,
        # softmax and scaling fused (no separate aten ops).
        fused = Work(sdpa(b, h, s, s, d, d, "flash").matmul, {})
        return [Reconcile("sdpa-fused-kernel", "sdpa", fused + analytic.scaled(-1),
                          "SDPA ran as a fused kernel: FlopCounterMode counts it as flash does (backward "
                          "10*B*h*S^2*d), softmax and scaling are not separate aten ops")]

    def traffic(self, call: OpCall, pass_: str, input_grad: bool, fusion: str):
        """Projections as GEMMs. SDPA, flash-style (default): reads q, k, v (and O, dO in backward),
        writes O (dq, dk, dv), never the S x S scores. With `backend: math` or `--fusion none` the
        scores, scaled scores and probabilities are written and read back (b*h*S^2 each)."""
        b, s, _, h, d, _ = self._sizes(call)
        qkv, proj = self._projections(call)
        m, head_elems, scores = b * s, b * h * s * d, b * h * s * s
        unfused = fusion == "none" or call.attrs.backend == "math"
        if pass_ == "forward":
            sdpa = Traffic("sdpa", 3 * head_elems + (3 * scores if unfused else ZERO),
                           head_elems + (3 * scores if unfused else ZERO))
        else:
            sdpa = Traffic("sdpa", 5 * head_elems + (3 * scores if unfused else ZERO),
                           3 * head_elems + (2 * scores if unfused else ZERO))
        out = [linear_traffic(n, m, k, o, bias, pass_, input_grad) for n, k, o, bias in qkv]
        n, k, o, bias = proj
        return out + [sdpa, linear_traffic(n, m, k, o, bias, pass_, True)]

    def build(self, call: OpCall, ev):
        from ..torch_modules import SelfAttention

        a = call.attrs
        return SelfAttention(ev(a.dim), ev(a.heads), ev(a.head_dim), a.qkv_bias, a.proj_bias, a.fused_qkv)
