"""q/k normalisation inside an attention layer (`qk_norm`): an RMSNorm or LayerNorm on q and on k after
their projections, before rope -- over each head's d dims (Qwen3, Gemma 3; Cohere with a weight per
head) or over the whole projected width (OLMo-2). Two parts, `q_norm` and `k_norm`: their work,
parameters and traffic, and what they keep for backward."""
from __future__ import annotations

from costspec.core.vocab import Phase
from costspec.ops.attention.geometry import Geom
from costspec.ops.opdef import STAT_BYTES, OpCall, Saved
from costspec.ops.work import Expr, Part, Traffic, pointwise


def enabled(call: OpCall) -> bool:
    return call.attrs.qk_norm != "none"


def widths(call: OpCall, g: Geom) -> tuple[Expr, Expr]:
    """The elements one weight of q's norm and of k's norm covers: d shared by every head, or one per
    head (heads*d, kv_heads*d) when the weight is per head or the norm runs over the whole width."""
    a = call.attrs
    if a.qk_norm_over == "all" or a.qk_norm_weight == "per_head":
        return g.h * g.d, g.kv * g.d
    return g.d, g.d


def params(call: OpCall, g: Geom) -> tuple[Expr, Expr]:
    per = 2 if call.attrs.qk_norm == "layernorm" and call.attrs.qk_norm_bias else 1  # weight (and bias)
    q, k = widths(call, g)
    return per * q, per * k


def forward_parts(call: OpCall, g: Geom) -> list[Part]:
    """One norm kind per element of q (nb*h*tq*d) and of k (nb*kv*t*d)."""
    if not enabled(call):
        return []
    kind = call.attrs.qk_norm
    pq, pk = params(call, g)
    return [Part("q_norm", pointwise(kind, g.nq), pq), Part("k_norm", pointwise(kind, g.nk), pk)]


def backward_parts(call: OpCall, g: Geom) -> list[Part]:
    """The norm's backward per element (dx, and the weight's gradient summed in the same kernel)."""
    if not enabled(call):
        return []
    kind = call.attrs.qk_norm + "_backward"
    return [Part("q_norm", pointwise(kind, g.nq)), Part("k_norm", pointwise(kind, g.nk))]


def traffic(call: OpCall, g: Geom, pass_: Phase) -> list[Traffic]:
    """Forward: read x and the weight, write the normalised x; backward: read dy, x and the weight,
    write dx and the weight's gradient."""
    if not enabled(call):
        return []
    pq, pk = params(call, g)
    out = []
    for name, n, w in (("q_norm", g.nq, pq), ("k_norm", g.nk, pk)):
        out.append(Traffic(name, n + w, n) if pass_ == Phase.FORWARD else Traffic(name, 2 * n + w, n + w))
    return out


def saved(call: OpCall, g: Geom, sources: tuple[Saved, Saved], b) -> list[Saved]:
    """What the two norms keep for backward (`sources`: the storages q and k view before them, the projections'
    outputs), torch's cpu kernels as the generated module runs them:

    * RMSNorm (F.rms_norm, composed of pow, mean, rsqrt, mul): its input in fp32 (the view of its projection's
      output, whose storage it keeps, or in 16 bits an fp32 copy) and 1/rms per row in fp32; then the
      normalised values its weight multiplies: in fp32 with a shared weight (the composite multiplies before it
      casts back), in the layer's dtype with a weight per head (a separate multiply after the cast);
    * LayerNorm (native_layer_norm): its input as it is (the view), the mean and 1/std per row in the layer's
      dtype; with a weight per head the normalised values too (a separate multiply).

    The norms' outputs are new tensors (`normed`), which the SDPA or RoPE reads."""
    if not enabled(call):
        return []
    a = call.attrs
    per_head = a.qk_norm_weight == "per_head" and a.qk_norm_over != "all"
    out = []
    for which, n, source in (("q", g.nq, sources[0]), ("k", g.nk, sources[1])):
        rows = n / (g.h * g.d if which == "q" else g.kv * g.d) if a.qk_norm_over == "all" else n / g.d
        if a.qk_norm == "rmsnorm":
            x = source if b == STAT_BYTES else Saved(f"{which}_norm.input_fp32", n, STAT_BYTES)
            out += [x, Saved(f"{which}_norm.rstd", rows, STAT_BYTES),
                    Saved(f"{which}_norm.normalized", n, b if per_head else STAT_BYTES)]
        else:
            out += [source, Saved(f"{which}_norm.mean", rows, b), Saved(f"{which}_norm.rstd", rows, b)]
            if per_head:
                out.append(Saved(f"{which}_norm.normalized", n, b))
    return out


def normed(call: OpCall, g: Geom, b) -> tuple[Saved, Saved]:
    """q and k after their norms: new tensors of the layer's dtype."""
    return Saved("q_normed", g.nq, b), Saved("k_normed", g.nk, b)
