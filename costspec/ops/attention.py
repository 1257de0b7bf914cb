"""`attention`: multi-head self-attention with SDPA (Vaswani et al. 2017), and the variants the
zoo needs: windowed attention with SAM's padding and decomposed relative positions (Kirillov et
al. 2023, Li et al. 2022 "ViTDet"), grouped-query attention (Ainslie et al. 2023), causal masking,
rotary position embedding (Su et al. 2021).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from ..conventions import FLOPS_PER_MAC
from .base import (ZERO, Attr, Constraint, Expr, OpCall, OpDef, Part, Reconcile, Traffic, Work, linear_backward,
                   linear_forward, linear_traffic, pointwise, requires, same_size, same_size_constraint)
from .registry import register_op


# ----------------------------------------------------------------------------------------------
# SDPA
# ----------------------------------------------------------------------------------------------
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
    grouped: Expr = sympy.Integer(1)  # 1 when kv < h, 0 when kv == h (see _Geom.grouped), with gqa
    causal: bool = False
    useful: bool = False  # causal_flops: useful -- matmuls over the unmasked pairs only
    bias: bool = False  # an additive float bias on every score (SAM's relative positions)

    @property
    def scores(self) -> Expr:
        return self.b * self.h * self.sq * self.sk

    @property
    def pairs(self) -> Expr:
        """(query, key) pairs the matmuls are counted over, per problem and head: all sq*sk, or for
        causal_flops: useful the sq*(sq+1)/2 of self-attention's lower triangle (diagonal included)."""
        if self.causal and self.useful:
            return self.sq * (self.sq + 1) / 2
        return self.sq * self.sk


def sdpa_forward(a: Sdpa, backend: str) -> Work:
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
    work = work + pointwise("scale", a.scores if backend == "flash" else a.b * a.h * (a.sq + a.sk) * a.d)
    if a.causal:
        work = work + (pointwise("select", a.scores) if backend == "flash"
                       else pointwise("select", 2 * a.sq * a.sk) + pointwise("add", a.scores))
    if a.bias:
        work = work + pointwise("add", a.scores)
    return work


def sdpa_backward(a: Sdpa, backend: str) -> Work:
    """dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: 4 matmuls (8*b*h*s^2*d for d = dv).

    NB: the fused flash / memory-efficient / cuDNN kernels also recompute S = QK^T (and re-mask
    it when causal), which FlopCounterMode counts too (10*b*h*s^2*d): that is `backend: flash`,
    the default, as a GPU runs it. `backend: math` is the decomposition that saves P (what meta
    tensors execute). With GQA, dK and dV come out per query head and are summed over each
    group (both backends: flash-attn sums its expanded dK/dV the same way).
    """
    macs = a.b * a.h * a.pairs * (2 * a.dv + 2 * a.d) + (a.b * a.h * a.pairs * a.d if backend == "flash" else 0)
    work = Work({"sdpa": FLOPS_PER_MAC * macs}) + pointwise("softmax_backward", a.scores)
    work = work + pointwise("scale", a.scores if backend == "flash" else a.b * a.h * (a.sq + a.sk) * a.d)
    if a.causal and backend == "flash":
        work = work + pointwise("select", a.scores)
    if a.gqa:
        work = work + pointwise("bias_grad", a.grouped * a.b * a.h * a.sk * (a.d + a.dv))
    return work


# ----------------------------------------------------------------------------------------------
# Geometry of one attention layer
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Geom:
    b: Expr  # batch
    s: Expr  # tokens of the input
    c: Expr  # model dim
    h: Expr  # query heads
    kv: Expr  # key/value heads
    d: Expr  # head dim
    m: Expr  # rows the projections run on (B*S, or the padded B*Hp*Wp with windows)
    nb: Expr  # attention problems (B, or B * windows)
    t: Expr  # tokens per attention problem (S, or window^2)
    qh: Expr  # token grid of one attention problem (relative positions)
    qw: Expr

    @property
    def nq(self) -> Expr:  # elements of q (and of O)
        return self.nb * self.h * self.t * self.d

    @property
    def nk(self) -> Expr:  # elements of k (and of v)
        return self.nb * self.kv * self.t * self.d


def _pair(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


def _is_zero(value) -> bool:
    return sympy.sympify(value) == 0


@register_op
class Attention(OpDef):
    """Multi-head self-attention on [B, S, C]: q/k/v projections, SDPA, output projection; optional
    windows, relative positions, grouped-query heads, causal mask and rotary embedding."""

    name = "attention"
    doc = ("Multi-head self-attention on [B, S, C]: fused (or separate) q/k/v projections, "
           "scaled_dot_product_attention (QK^T, scale, softmax, AV), output projection. Options: "
           "windowed attention on a token grid (SAM's padding), SAM's decomposed relative position "
           "bias, grouped-query k/v heads, causal masking, rotary position embedding.")
    default_name = "attn"
    attrs = (
        Attr("heads", "size", "number of attention (query) heads h"),
        Attr("dim", "size", "model dim C (default: the input's last dim; checked against it)",
             default=lambda shape, a: shape[-1]),
        Attr("head_dim", "size", "per-head dim d (default C / heads)",
             default=lambda shape, a: a["dim"] / a["heads"]),
        Attr("kv_heads", "size", "key/value heads (grouped-query attention when fewer than heads; it must "
             "divide heads; 1 = multi-query, heads = multi-head, so one dim can sweep MQA -> MHA). Default: heads",
             default=lambda shape, a: a["heads"]),
        Attr("qkv_bias", "bool", "bias on the q/k/v projections", default=True),
        Attr("proj_bias", "bool", "bias on the output projection", default=True),
        Attr("fused_qkv", "bool", "one (C -> (h + 2*kv_heads)*d) projection instead of three", default=True),
        Attr("backend", "choice", "SDPA kernel family the cost follows: flash (GPU default: the backward "
             "recomputes QK^T) or math (PyTorch's decomposition, as on meta tensors)",
             default="flash", choices=("flash", "math")),
        Attr("window", "count", "window side w: attention within w x w windows of the token grid, the grid "
             "zero-padded at the bottom / right to a multiple of w as SAM does (the projections and SDPA are "
             "charged on the padded grid, as executed). 0 (default): global attention", default=0),
        Attr("grid", "pair", "token grid [H, W] of the S = H*W tokens, row-major (windows and relative "
             "positions need it). Default: a square grid, sqrt(S) x sqrt(S)",
             default=lambda shape, a: sympy.sqrt(shape[1]) if len(shape) > 1 else sympy.Integer(1)),
        Attr("rel_pos", "bool", "SAM's decomposed relative position bias: learned tables rel_pos_h "
             "(2*Hq-1, d) and rel_pos_w (2*Wq-1, d) over the grid (or window) Hq x Wq, two einsums with q and "
             "a broadcast add give a bias added to every score", default=False),
        Attr("rope", "bool", "rotary position embedding on q and k (x*cos + rotate_half(x)*sin: 2 mul + 1 add "
             "per element), positions 0..S-1 of the attention sequence", default=False),
        Attr("causal", "bool", "causal mask: query i attends to keys 0..i", default=False),
        Attr("causal_flops", "choice", "how causal attention's QK^T and AV are counted: executed (default; the "
             "full S x S scores, as FlopCounterMode and PyTorch's math kernel count them) or useful (the "
             "S*(S+1)/2 unmasked pairs only; validate names the difference to FlopCounterMode)",
             default="executed", choices=("executed", "useful")),
    )

    # -- shapes -------------------------------------------------------------------------------
    def _windowed(self, call: OpCall) -> bool:
        return not _is_zero(call.attrs.window)

    def _gqa(self, call: OpCall) -> bool:
        return same_size(call.attrs.kv_heads, call.attrs.heads) is not True

    def _grouped(self, call: OpCall) -> Expr:
        """1 when kv_heads < heads, 0 when they are equal (multi-head attention: no group sum).

        NB: kv_heads may be a dim that a sweep takes from 1 (MQA) up to heads (MHA); with
        0 <= heads - kv_heads < heads, ceiling((heads - kv_heads) / heads) is that indicator as a
        plain expression (exact at every binding, no Piecewise in formulas).
        """
        a = call.attrs
        if not self._gqa(call):
            return sympy.Integer(0)
        if same_size(a.kv_heads, a.heads) is False and sympy.sympify(a.heads - a.kv_heads).is_number:
            return sympy.Integer(1)
        return sympy.ceiling((a.heads - a.kv_heads) / a.heads)

    def _geom(self, call: OpCall) -> _Geom:
        a = call.attrs
        b, s, c = call.in_shape
        h, kv, d = a.heads, a.kv_heads, a.head_dim
        gh, gw = _pair(a.grid)
        if self._windowed(call):
            w = a.window
            nwin = sympy.ceiling(gh / w) * sympy.ceiling(gw / w)  # windows of the padded grid
            return _Geom(b, s, c, h, kv, d, b * nwin * w * w, b * nwin, w * w, w, w)
        return _Geom(b, s, c, h, kv, d, b * s, b, s, gh, gw)

    def _sdpa(self, call: OpCall) -> Sdpa:
        a, g = call.attrs, self._geom(call)
        return Sdpa(g.nb, g.h, g.kv, g.t, g.t, g.d, g.d, gqa=self._gqa(call), grouped=self._grouped(call),
                    causal=a.causal,
                    useful=a.causal and a.causal_flops == "useful", bias=a.rel_pos)

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        if call.attrs.causal and call.attrs.rel_pos:
            raise call.fail("causal attention with a relative position bias is not supported (SDPA takes "
                            "either is_causal or an additive mask)", "rel_pos", "causal or rel_pos, not both")
        same_size_constraint(call, "dim", call.attrs.dim, call.in_shape[-1], "the input's last dim")
        return call.in_shape

    def constraints(self, call: OpCall):
        a = call.attrs
        out = [Constraint(sympy.Eq(sympy.Mod(a.dim, a.heads), 0), "dim {dim} is not divisible by heads {heads}",
                          a.where("heads"), {"dim": a.dim, "heads": a.heads})]
        out += same_size_constraint(call, "dim", a.dim, call.in_shape[-1], "the input's last dim")
        if self._gqa(call):
            out.append(Constraint(sympy.Eq(sympy.Mod(a.heads, a.kv_heads), 0) & sympy.Le(a.kv_heads, a.heads),
                                  "kv_heads {kv} must divide heads {heads} (from 1, multi-query, up to heads, "
                                  "multi-head)", a.where("kv_heads"), {"kv": a.kv_heads, "heads": a.heads},
                                  "a divisor of heads"))
        if self._windowed(call) or a.rel_pos:
            gh, gw = _pair(a.grid)
            s = call.in_shape[1]
            out.append(Constraint(sympy.Eq(gh * gw, s) & sympy.Eq(sympy.floor(gh), gh) & sympy.Eq(sympy.floor(gw), gw),
                                  "grid {gh} x {gw} does not hold the {s} tokens", a.where("grid"),
                                  {"gh": gh, "gw": gw, "s": s}, "grid: [H, W] with H*W = the input's tokens"))
        if self._windowed(call) and not sympy.sympify(a.window).is_number:
            out.append(Constraint(sympy.Ge(a.window, 1), "window {w} must be at least 1 (0 means global attention)",
                                  a.where("window"), {"w": a.window}))
        if a.rope:
            out.append(Constraint(sympy.Eq(sympy.Mod(a.head_dim, 2), 0), "rope needs an even head_dim, got {d}",
                                  a.where("rope"), {"d": a.head_dim}))
        return out

    def notes(self, call: OpCall):
        a = call.attrs
        if not a.causal:
            return []
        if a.causal_flops == "useful":
            return ["causal attention counted as useful work: QK^T and AV over the S*(S+1)/2 unmasked pairs "
                    "(FlopCounterMode and most kernels count the full S x S; validate names the difference)"]
        return ["causal attention counted as executed: QK^T and AV over the full S x S scores, as FlopCounterMode "
                "and PyTorch's math kernel count them (about 2x the useful S*(S+1)/2; set causal_flops: useful)"]

    # -- work ---------------------------------------------------------------------------------
    def _projections(self, call: OpCall):
        """(part name, in, out, bias) for each projection, in execution order around the SDPA."""
        a, g = call.attrs, self._geom(call)
        inner, kv_inner = g.h * g.d, g.kv * g.d
        qkv = ([("qkv", g.c, inner + 2 * kv_inner, a.qkv_bias)] if a.fused_qkv
               else [("q", g.c, inner, a.qkv_bias), ("k", g.c, kv_inner, a.qkv_bias), ("v", g.c, kv_inner, a.qkv_bias)])
        return qkv, ("proj", inner, g.c, a.proj_bias)

    def _rope_work(self, g: _Geom) -> Work:
        """x*cos + rotate_half(x)*sin on q and k (forward), g*cos + rotate_half^T(g*sin) (backward):
        2 mul + 1 add per element either way."""
        n = g.nq + g.nk
        return pointwise("mul", 2 * n) + pointwise("add", n)

    def _rel_pos_params(self, g: _Geom) -> Expr:
        return (2 * g.qh - 1) * g.d + (2 * g.qw - 1) * g.d

    def _rel_pos_forward(self, g: _Geom) -> Work:
        """rel_h = einsum("bhwc,hkc->bhwk", q, Rh), rel_w likewise with Rw (2*nb*h*Hq*Wq*(Hq+Wq)*d, bmm as
        FlopCounterMode counts einsum), then bias = rel_h[..., None] + rel_w[..., None, :] (one add per
        score). The table lookups Rh = rel_pos_h[coords] are gathers (no FLOPs)."""
        macs = g.nb * g.h * g.qh * g.qw * (g.qh + g.qw) * g.d
        return Work({"gemm": FLOPS_PER_MAC * macs}) + pointwise("add", g.nb * g.h * g.t * g.t)

    def _rel_pos_backward(self, g: _Geom) -> Work:
        """Each einsum's dq and dR (2x forward); d rel_h and d rel_w sum the bias gradient over the
        other axis (bias_grad on every score, twice); dq of the two einsums summed (one add per q
        element); dR scatter-added into the tables (Hq*Hq*d + Wq*Wq*d)."""
        fwd = self._rel_pos_forward(g)
        scores = g.nb * g.h * g.t * g.t
        return (Work({k: 2 * v for k, v in fwd.matmul.items()}) + pointwise("bias_grad", 2 * scores)
                + pointwise("add", g.nq) + pointwise("scatter_add", (g.qh * g.qh + g.qw * g.qw) * g.d))

    def forward(self, call: OpCall):
        a, g = call.attrs, self._geom(call)
        qkv, proj = self._projections(call)
        parts = [Part(n, linear_forward(g.m, k, o, bias), k * o + (o if bias else 0)) for n, k, o, bias in qkv]
        if a.rope:
            parts.append(Part("rope", self._rope_work(g)))
        if a.rel_pos:
            parts.append(Part("rel_pos", self._rel_pos_forward(g), self._rel_pos_params(g)))
        parts.append(Part("sdpa", sdpa_forward(self._sdpa(call), a.backend), own=True))
        n, k, o, bias = proj
        parts.append(Part(n, linear_forward(g.m, k, o, bias), k * o + (o if bias else 0)))
        return parts

    def backward(self, call: OpCall, input_grad: bool):
        a, g = call.attrs, self._geom(call)
        qkv, proj = self._projections(call)
        parts = [Part(n, linear_backward(g.m, k, o, bias, input_grad)) for n, k, o, bias in qkv]
        if a.rope:
            parts.append(Part("rope", self._rope_work(g)))
        if a.rel_pos:
            parts.append(Part("rel_pos", self._rel_pos_backward(g)))
        sdpa = sdpa_backward(self._sdpa(call), a.backend)
        if not a.fused_qkv and input_grad:  # dX of the q, k, v projections summed: 2 adds per element
            sdpa = sdpa + pointwise("add", 2 * g.m * g.c)
        if a.rel_pos:  # q feeds the SDPA and the relative positions: their dq summed
            sdpa = sdpa + pointwise("add", g.nq)
        parts.append(Part("sdpa", sdpa, own=True))
        n, k, o, bias = proj
        parts.append(Part(n, linear_backward(g.m, k, o, bias, True)))
        return parts

    # -- validation ---------------------------------------------------------------------------
    def reconcile(self, call: OpCall, pass_: str, input_grad: bool, runtime, ev):
        """How the counters see F.scaled_dot_product_attention, by the way it ran on the device.

        NB: decomposed (meta, cpu math fallback): 2 + 4 bmm, mul by sqrt(scale) on q and k and a causal
        mask built with tril + where and added, i.e. `backend: math` exactly; fused on cpu
        (_scaled_dot_product_flash_attention_for_cpu): FlopCounterMode has no formula (0) and softmax /
        scale / mask are not separate ops, so the analytic work stands in. FlopCounterMode always
        counts causal SDPA over the full S x S: `causal_flops: useful` is reconciled by name.
        """
        rules = self._reconcile_rel_pos(call, pass_, ev)
        return rules + self._reconcile_sdpa(call, pass_, runtime)

    def _reconcile_rel_pos(self, call: OpCall, pass_: str, ev) -> list[Reconcile]:
        """NB: the gradients of rel_h and rel_w sum the bias gradient over the other grid axis; over an
        axis of length 1 (a grid or window one token wide) autograd runs no reduction."""
        if pass_ != "backward" or not call.attrs.rel_pos:
            return []
        g = self._geom(call)
        scores = g.nb * g.h * g.t * g.t
        ones = sum(1 for side in (g.qh, g.qw) if ev(side) == 1)
        if not ones:
            return []
        return [Reconcile("broadcast-grad-size-1", "rel_pos", pointwise("bias_grad", -ones * scores),
                          "a relative-position axis of length 1: autograd reduces the bias gradient over the other "
                          "axis only when it is longer than 1; costspec counts one addition per score for each axis")]

    def _reconcile_sdpa(self, call: OpCall, pass_: str, runtime) -> list[Reconcile]:
        backend = call.attrs.backend
        sdpa = sdpa_forward if pass_ == "forward" else sdpa_backward
        shape = self._sdpa(call)
        analytic = sdpa(shape, backend)
        how = runtime.get("sdpa", "decomposed")
        if how == "fused-uncounted":
            formula = "2*B*h*S^2*d*2" if pass_ == "forward" else (
                "10*B*h*S^2*d" if backend == "flash" else "8*B*h*S^2*d")
            device = runtime.get("device", "this device")
            return [Reconcile("sdpa-not-counted", "sdpa", analytic.scaled(-1),
                              f"SDPA not counted by FlopCounterMode on {device} (a fused kernel with no formula): "
                              f"compensated with analytic {formula}, and its fused softmax/scale with the "
                              f"analytic element counts")]
        full = replace(shape, useful=False)
        executed = sdpa(full, backend)
        rules = []
        if shape.useful:
            masked = Work(executed.matmul) + Work(analytic.matmul).scaled(-1)
            rules.append(Reconcile("causal-useful-flops", "sdpa", masked,
                                   "FlopCounterMode counts causal SDPA over all S x S scores (no causal discount); "
                                   "causal_flops: useful counts the S*(S+1)/2 unmasked pairs, so the counter also "
                                   "sees the matmul FLOPs of the S*(S-1)/2 masked ones"))
        if how == "decomposed":
            if backend == "math":
                return rules
            text = ("SDPA ran as PyTorch's math decomposition (always so on meta), which scales q and k "
                    "(B*h*(Sq+Sk)*d multiplies) where the flash backend scales every score (B*h*Sq*Sk)")
            if shape.causal:
                text += ("; it builds the causal mask with tril + where (2*S^2 selects) and adds it to the scores, "
                         "where flash masks each score in registers (B*h*S^2 selects)")
            if pass_ == "backward":
                text += ("; its backward is 4 bmm = 8*B*h*S^2*d, the flash backend's 10*B*h*S^2*d recomputes "
                         "QK^T (difference 2*B*h*S^2*d)")
            return rules + [Reconcile("sdpa-math-decomposition", "sdpa", sdpa(full, "math") + executed.scaled(-1),
                                      text)]
        # fused-counted (CUDA flash / efficient / cuDNN kernels): counted as the flash convention,
        # softmax, scaling and masking fused (no separate aten ops).
        fused = Work(sdpa(full, "flash").matmul, {})
        return rules + [Reconcile("sdpa-fused-kernel", "sdpa", fused + executed.scaled(-1),
                                  "SDPA ran as a fused kernel: FlopCounterMode counts it as flash does (backward "
                                  "10*B*h*S^2*d), softmax, scaling and masking are not separate aten ops")]

    # -- memory -------------------------------------------------------------------------------
    def traffic(self, call: OpCall, pass_: str, input_grad: bool, fusion: str):
        """Projections as GEMMs on the (padded) tokens; window padding and partitioning are folded into
        their loads and stores. SDPA, flash-style (default): reads q, k, v (and O, dO in backward),
        writes O (dq, dk, dv), never the S x S scores; a relative-position bias is read (and its
        gradient written) once per score. With `backend: math` or `--fusion none` the scores, scaled
        scores and probabilities are written and read back (b*h*S^2 each). GQA's backward writes dK
        and dV per query head and reads them back for the group sum. RoPE reads and writes q and k
        (plus its cos/sin tables); the relative positions read q and the tables, write rel_h and rel_w
        and read them back into the bias."""
        a, g = call.attrs, self._geom(call)
        qkv, proj = self._projections(call)
        shape = self._sdpa(call)
        scores = shape.scores
        unfused = fusion == "none" or a.backend == "math"
        extra = 3 * scores if unfused else ZERO
        bias = scores if a.rel_pos else ZERO
        if pass_ == "forward":
            sdpa = Traffic("sdpa", g.nq + 2 * g.nk + bias + extra, g.nq + extra)
        else:
            grouped = 2 * g.nq * shape.grouped if shape.gqa else ZERO
            sdpa = Traffic("sdpa", 3 * g.nq + 2 * g.nk + bias + grouped + extra,
                           g.nq + 2 * g.nk + bias + grouped + (2 * scores if unfused else ZERO))
        out = [linear_traffic(n, g.m, k, o, bias_, pass_, input_grad) for n, k, o, bias_ in qkv]
        if a.rope:
            n, tables = g.nq + g.nk, 2 * g.t * g.d
            out.append(Traffic("rope", n + tables, n))
        if a.rel_pos:
            rel = g.nb * g.h * g.t * (g.qh + g.qw)  # rel_h and rel_w
            gathered = (g.qh * g.qh + g.qw * g.qw) * g.d
            if pass_ == "forward":
                out.append(Traffic("rel_pos", g.nq + gathered + rel, rel + scores))
            else:
                out.append(Traffic("rel_pos", scores + rel + g.nq + gathered, rel + g.nq + self._rel_pos_params(g)))
        n, k, o, bias_ = proj
        return out + [sdpa, linear_traffic(n, g.m, k, o, bias_, pass_, True)]

    # -- torch --------------------------------------------------------------------------------
    def build(self, call: OpCall, ev):
        from ..torch_modules import SelfAttention

        a, g = call.attrs, self._geom(call)
        grid = tuple(ev(x) for x in _pair(a.grid)) if (self._windowed(call) or a.rel_pos) else None
        return SelfAttention(ev(a.dim), ev(a.heads), ev(a.head_dim), a.qkv_bias, a.proj_bias, a.fused_qkv,
                             kv_heads=ev(a.kv_heads), gqa=ev(a.kv_heads) != ev(a.heads), window=ev(a.window), grid=grid,
                             rel_pos=a.rel_pos, rope=a.rope, rope_len=ev(g.t), causal=a.causal)
