"""q/k normalisation inside an attention layer (`qk_norm`): an RMSNorm or LayerNorm on q and on k after
their projections, before rope -- over each head's d dims (Qwen3, Gemma 3; Cohere with a weight per
head) or over the whole projected width (OLMo-2). Two parts, `q_norm` and `k_norm`: their work,
parameters and traffic."""
from __future__ import annotations

from costspec.core.vocab import Phase
from costspec.ops.attention.geometry import Geom
from costspec.ops.opdef import OpCall
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
