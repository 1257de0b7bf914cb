"""Position information inside an attention layer: rotary embedding on q and k (`rope`), SAM's
decomposed relative positions (`rel_pos`), and a learned relative-position bias table (`rel_bias`:
T5's buckets, Swin's window offsets or BEiT's patch-grid offsets with its class-token entries). Each is
a part of the layer: its work, parameters, traffic and GEMMs."""
from __future__ import annotations

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Phase
from costspec.ops.attention.geometry import Geom
from costspec.ops.opdef import OpCall
from costspec.ops.work import Expr, Gemm, Part, Traffic, Work, pointwise


def has_table(call: OpCall) -> bool:
    """A rel_bias table lives in this layer (T5's layers that read an earlier layer's bias have none)."""
    return call.attrs.rel_bias != "none" and not call.attrs.rel_bias_shared


def rope_work(call: OpCall, g: Geom) -> Work:
    """x*cos + rotate_half(x)*sin on the rotated dims of q and k (forward), g*cos + rotate_half^T(g*sin)
    (backward): 2 mul + 1 add per rotated element either way (partial rotary: rope_dims of head_dim); q's
    tq queries and k's t keys (cross-attention: positions 0..S-1 for q, 0..T-1 for k)."""
    n = g.nb * (g.h * g.tq + g.kv * g.t) * call.attrs.rope_dims
    return pointwise("mul", 2 * n) + pointwise("add", n)


def table_rows(call: OpCall, g: Geom) -> Expr:
    """Rows of the rel_bias table (one column per head): T5's buckets, Swin's (2w-1)^2 offsets, or BEiT's
    (2H-1)(2W-1) offsets of the patch grid and its three class-token entries."""
    a = call.attrs
    if a.rel_bias == "t5":
        return a.buckets
    offsets = (2 * g.qh - 1) * (2 * g.qw - 1)
    return offsets + 3 if a.rel_bias == "beit" else offsets


def rel_pos_params(g: Geom) -> Expr:
    return (2 * g.qh - 1) * g.d + (2 * g.qw - 1) * g.d


def rel_pos_forward(g: Geom) -> Work:
    """rel_h = einsum("bhwc,hkc->bhwk", q, Rh), rel_w likewise with Rw (2*nb*h*Hq*Wq*(Hq+Wq)*d, bmm as
    FlopCounterMode counts einsum), then bias = rel_h[..., None] + rel_w[..., None, :] (one add per
    score). The table lookups Rh = rel_pos_h[coords] are gathers (no FLOPs)."""
    macs = g.nb * g.h * g.qh * g.qw * (g.qh + g.qw) * g.d
    return Work({"gemm": FLOPS_PER_MAC * macs}) + pointwise("add", g.nb * g.h * g.t * g.t)


def rel_pos_backward(g: Geom) -> Work:
    """Each einsum's dq and dR (2x forward); d rel_h and d rel_w sum the bias gradient over the
    other axis (bias_grad on every score, twice); dq of the two einsums summed (one add per q
    element); dR scatter-added into the tables (Hq*Hq*d + Wq*Wq*d)."""
    fwd = rel_pos_forward(g)
    scores = g.nb * g.h * g.t * g.t
    return (Work({k: 2 * v for k, v in fwd.matmul.items()}) + pointwise("bias_grad", 2 * scores)
            + pointwise("add", g.nq) + pointwise("scatter_add", (g.qh * g.qh + g.qw * g.qw) * g.d))


def forward_parts(call: OpCall, g: Geom) -> list[Part]:
    a = call.attrs
    parts = []
    if a.rope:
        parts.append(Part("rope", rope_work(call, g)))
    if a.rel_pos:
        parts.append(Part("rel_pos", rel_pos_forward(g), rel_pos_params(g)))
    if has_table(call):  # a table gather (no FLOPs); its add is in the SDPA
        parts.append(Part("rel_bias", Work(), table_rows(call, g) * g.h))
    return parts


def backward_parts(call: OpCall, g: Geom) -> list[Part]:
    a = call.attrs
    parts = []
    if a.rope:
        parts.append(Part("rope", rope_work(call, g)))
    if a.rel_pos:
        parts.append(Part("rel_pos", rel_pos_backward(g)))
    if has_table(call):
        # the gathered table's gradient added into its rows; with readers, first their gradients summed
        pairs = g.h * g.tq * g.sk  # (query, key) pairs of one problem
        summed = pointwise("add", a.rel_bias_readers * pairs)
        parts.append(Part("rel_bias", pointwise("scatter_add", pairs) + summed))
    return parts


def traffic(call: OpCall, g: Geom, scores: Expr, pass_: Phase) -> list[Traffic]:
    """RoPE reads and writes q and k (plus its cos/sin tables); a rel_bias table is gathered into a
    bias per (query, key) pair of one problem (its readers' gradients read and added in); the relative
    positions read q and the tables, write rel_h and rel_w and read them back into the bias."""
    a = call.attrs
    out = []
    if a.rope:
        rows = g.t if g.ckv is None else g.tq + g.t  # cos and sin rows: the positions of q and of k
        n, tables = (g.nq + g.nk) * a.rope_dims / g.d, 2 * rows * a.rope_dims
        out.append(Traffic("rope", n + tables, n))
    if has_table(call):  # (a reader's bias is read by its SDPA only)
        table, pairs = table_rows(call, g) * g.h, g.h * g.tq * g.sk
        summed = a.rel_bias_readers * pairs  # the readers' gradients: each read and added in
        out.append(Traffic("rel_bias", table, pairs) if pass_ == Phase.FORWARD
                   else Traffic("rel_bias", pairs + 2 * summed, table + summed))
    if a.rel_pos:
        rel = g.nb * g.h * g.t * (g.qh + g.qw)  # rel_h and rel_w
        gathered = (g.qh * g.qh + g.qw * g.qw) * g.d
        if pass_ == Phase.FORWARD:
            out.append(Traffic("rel_pos", g.nq + gathered + rel, rel + scores))
        else:
            out.append(Traffic("rel_pos", scores + rel + g.nq + gathered, rel + g.nq + rel_pos_params(g)))
    return out


def rel_pos_outputs(g: Geom, pass_: Phase) -> Expr:
    """Output elements of the relative positions' two bmm: rel_h and rel_w (backward: dq of each, and
    the gathered tables' gradients)."""
    return g.nb * g.h * g.t * (g.qh + g.qw) if pass_ == Phase.FORWARD else 2 * g.nq + (g.qh * g.qh + g.qw * g.qw) * g.d


def rel_pos_gemms(g: Geom) -> list[Gemm]:
    """The relative positions' two einsums as batched matmuls q @ R^T, n = the grid side Hq (rel_h) or Wq
    (rel_w)."""
    return [Gemm("rel_pos", g.nb * g.h * g.qw, g.qh, g.d, g.qh),
            Gemm("rel_pos", g.nb * g.h * g.qh, g.qw, g.d, g.qw)]
