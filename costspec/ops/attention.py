"""`attention`: multi-head self-attention with SDPA (Vaswani et al. 2017), and the variants the
zoo needs: windowed attention with SAM's padding and decomposed relative positions (Kirillov et
al. 2023, Li et al. 2022 "ViTDet"), grouped-query attention (Ainslie et al. 2023), causal masking,
rotary position embedding (Su et al. 2021; partial, as GPT-NeoX), a causal sliding window (Mistral,
Jiang et al. 2023), learned queries (attention pooling, SigLIP), relative-position bias tables (T5,
Raffel et al. 2020; Swin, Liu et al. 2021).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import Constraint, OpCall, OpDef, Reconcile, Runtime, requires, same_size, same_size_constraint
from costspec.ops.registry import register_op
from costspec.ops.work import (
    ZERO,
    Expr,
    Gemm,
    Part,
    Traffic,
    Work,
    linear_backward,
    linear_forward,
    linear_outputs,
    linear_traffic,
    pointwise,
)


def _is_zero(value) -> bool:
    return sympy.sympify(value) == 0


def _above_one(n: Expr) -> Expr:
    """1 when the size n > 1, 0 when n = 1 (a whole number >= 1), as an expression: autograd sums a
    broadcast gradient over an axis only when that axis is longer than 1."""
    return sympy.Min(1, n - 1)


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
    window: Expr = sympy.Integer(0)  # causal sliding window (Mistral): query i sees keys i-w+1..i; 0 = none

    @property
    def scores(self) -> Expr:
        return self.b * self.h * self.sq * self.sk

    @property
    def pairs(self) -> Expr:
        """(query, key) pairs the matmuls are counted over, per problem and head: all sq*sk, or for
        causal_flops: useful the sq*(sq+1)/2 of self-attention's lower triangle (diagonal included)."""
        if self.causal and self.useful and not _is_zero(self.window):
            m = sympy.Min(self.sq, self.window)  # queries 0..m-1 see i+1 keys, the rest w each
            return m * (m + 1) / 2 + (self.sq - m) * self.window
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
    if a.causal and not _is_zero(a.window):  # flash masks in registers; math adds a mask built once (a buffer)
        work = work + pointwise("select" if backend == "flash" else "add", a.scores)
    elif a.causal:
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
    tq: Expr  # queries per attention problem (t, or the learned queries)
    mq: Expr  # rows the q and output projections run on (m, or B * learned queries)
    ckv: Expr | None = None  # cross-attention: the width of the value keys and values are projected from

    @property
    def nq(self) -> Expr:  # elements of q (and of O)
        return self.nb * self.h * self.tq * self.d

    @property
    def nk(self) -> Expr:  # elements of k (and of v)
        return self.nb * self.kv * self.t * self.d


def _pair(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


@register_op
class Attention(OpDef):
    """Multi-head self-attention on [B, S, C]: q/k/v projections, SDPA, output projection; optional
    windows, relative positions, grouped-query heads, causal mask and rotary embedding."""

    name = "attention"
    doc = ("Multi-head self-attention on [B, S, C]: fused (or separate) q/k/v projections, "
           "scaled_dot_product_attention (QK^T, scale, softmax, AV), output projection. Options: "
           "windowed attention on a token grid (SAM's padding), SAM's decomposed relative position "
           "bias, grouped-query k/v heads (kv_heads from 1 up to heads), causal masking, a 1-D causal sliding "
           "window, rotary position embedding (full or partial), learned queries, T5 / Swin relative-position "
           "bias tables, per-projection biases, no score scale.")
    default_name = "attn"
    runtime = Runtime(
        # PyTorch's math SDPA builds a causal mask with tril + where (one select per element)
        aten={"aten.tril": "select", "aten.where": "select"},
        # F.scaled_dot_product_attention runs as one of these aten ops when it is not decomposed
        fused={"sdpa": ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")},
        kernels={"gemm": "gemm", "sdpa": "attention"},
    )
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
        Attr("q_bias", "bool", "bias on the q projection (default: qkv_bias)", default=lambda shape, a: a["qkv_bias"]),
        Attr("k_bias", "bool", "bias on the k projection (default: qkv_bias; Whisper has none)",
             default=lambda shape, a: a["qkv_bias"]),
        Attr("v_bias", "bool", "bias on the v projection (default: qkv_bias)", default=lambda shape, a: a["qkv_bias"]),
        Attr("o_bias", "bool", "bias on the output projection (default: proj_bias)",
             default=lambda shape, a: a["proj_bias"]),
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
        Attr("rope_dims", "size", "partial rotary: rotate the first n dims of each head only (GPT-NeoX, Phi: "
             "head_dim/4 or a fraction of it), the rest pass through. Default: all head_dim dims",
             default=lambda shape, a: a["head_dim"]),
        Attr("causal", "bool", "causal mask: query i attends to keys 0..i", default=False),
        Attr("causal_flops", "choice", "how causal attention's QK^T and AV are counted: executed (default; the "
             "full S x S scores, as FlopCounterMode and PyTorch's math kernel count them) or useful (the "
             "S*(S+1)/2 unmasked pairs only; validate names the difference to FlopCounterMode)",
             default="executed", choices=("executed", "useful")),
        Attr("sliding_window", "count", "1-D causal sliding window w over the sequence (Mistral): query i attends "
             "to keys i-w+1..i; needs causal: true. Counted as causal is (causal_flops: executed, the default: the "
             "full S x S scores a masked kernel computes; useful: the min(S,w)*(min(S,w)+1)/2 + (S-min(S,w))*w "
             "unmasked pairs). 0 (default): none. Not `window`, which is SAM's 2-D w x w window on a token grid",
             default=0),
        Attr("queries", "count", "learned queries n: n learned query tokens (parameters) attend to the input's "
             "tokens, output [B, n, C] (SigLIP's attention-pooling head); q and the output projection run on "
             "B*n rows, k and v on B*S (fused_qkv fuses k and v). 0 (default): self-attention", default=0),
        Attr("rel_bias", "choice", "a learned relative-position bias added to every score: t5 (a table of "
             "`buckets` x heads over T5's log-bucketed distances; per layer, or made in one layer and read by later "
             "ones: rel_bias_readers, rel_bias_shared) or swin (a (2w-1)^2 x heads table over the "
             "relative offsets in each window, Swin). The bucket / offset of each (query, key) pair depends on "
             "positions only and is computed once (a buffer); gathering the table is free, adding it is one add "
             "per score", default="none", choices=("none", "t5", "swin")),
        Attr("rel_bias_shared", "bool", "rel_bias: t5 -- this layer reads the bias of the nearest earlier layer "
             "with a table (T5 computes it in its first layer and passes it to every later one): it adds it to its "
             "scores but has no table (no parameters, no gather); its gradient is summed at that layer",
             default=False),
        Attr("rel_bias_readers", "count", "rel_bias: t5 with a table -- how many later layers read this layer's bias "
             "(rel_bias_shared: true; T5: L-1). Their gradients and this layer's are summed here, where the bias is "
             "made: one add per (head, query, key) element and reader. 0 (default): none", default=0),
        Attr("shift", "count", "Swin's shifted windows: the grid is rolled by -shift on both axes before the "
             "window partition (and back after), and an additive mask keeps each window's tokens to their own "
             "region (one add per score); needs window (dividing the grid) and 0 < shift < window. 0: none",
             default=0),
        Attr("buckets", "size", "rel_bias: t5 -- number of buckets (T5: 32)", default=32),
        Attr("max_distance", "size", "rel_bias: t5 -- distance of the last bucket (T5: 128)", default=128),
        Attr("scale", "choice", "score scale: default 1/sqrt(head_dim), or none (T5: no scaling). The kernels "
             "still multiply by the scale (1), so the cost is the same", default="default",
             choices=("default", "none")),
        Attr("kv", "value", "cross-attention: keys and values projected from this value ([B, T, Ckv], a `save:`d "
             "value or an `inputs:` name, e.g. an encoder's output); q and the output projection run on the "
             "running value's B*S rows, k and v on B*T (fused_qkv fuses k and v)", default=None),
    )

    # -- shapes -------------------------------------------------------------------------------
    def _windowed(self, call: OpCall) -> bool:
        return not _is_zero(call.attrs.window)

    def _gqa(self, call: OpCall) -> bool:
        return same_size(call.attrs.kv_heads, call.attrs.heads) is not True

    def _grouped(self, call: OpCall) -> Expr:
        """1 when kv_heads < heads, 0 when they are equal (multi-head attention: no group sum).

        NB: kv_heads may be a dim that a sweep takes from 1 (MQA) up to heads (MHA); with whole
        0 <= heads - kv_heads, min(1, heads - kv_heads) is that indicator as a plain expression
        (exact at every binding, no Piecewise in formulas).
        """
        a = call.attrs
        if not self._gqa(call):
            return sympy.Integer(0)
        if same_size(a.kv_heads, a.heads) is False and sympy.sympify(a.heads - a.kv_heads).is_number:
            return sympy.Integer(1)
        return sympy.Min(1, a.heads - a.kv_heads)

    def _geom(self, call: OpCall) -> _Geom:
        a = call.attrs
        b, s, c = call.in_shape
        h, kv, d = a.heads, a.kv_heads, a.head_dim
        gh, gw = _pair(a.grid)
        if self._windowed(call):
            w = a.window
            nwin = sympy.ceiling(gh / w) * sympy.ceiling(gw / w)  # windows of the padded grid
            return _Geom(b, s, c, h, kv, d, b * nwin * w * w, b * nwin, w * w, w, w, w * w, b * nwin * w * w)
        if not _is_zero(a.queries):
            return _Geom(b, s, c, h, kv, d, b * s, b, s, gh, gw, a.queries, b * a.queries)
        if self._cross(call):
            _, t, ckv = call.wiring.extra[0]
            return _Geom(b, s, c, h, kv, d, b * t, b, t, gh, gw, s, b * s, ckv)
        return _Geom(b, s, c, h, kv, d, b * s, b, s, gh, gw, s, b * s)

    def _cross(self, call: OpCall) -> bool:
        return call.attrs.kv is not None

    def _sdpa(self, call: OpCall) -> Sdpa:
        a, g = call.attrs, self._geom(call)
        return Sdpa(g.nb, g.h, g.kv, g.tq, g.t, g.d, g.d, gqa=self._gqa(call), grouped=self._grouped(call),
                    causal=a.causal, window=a.sliding_window,
                    useful=a.causal and a.causal_flops == "useful",
                    bias=a.rel_pos or a.rel_bias != "none" or not _is_zero(a.shift))

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        a = call.attrs
        if a.causal and (a.rel_pos or a.rel_bias != "none"):
            which = "rel_pos" if a.rel_pos else "rel_bias"
            raise call.fail("causal attention with a relative position bias is not supported (SDPA takes "
                            "either is_causal or an additive mask)", which, f"causal or {which}, not both")
        if a.rel_pos and a.rel_bias != "none":
            raise call.fail("rel_pos and rel_bias are two position biases: choose one", "rel_bias", "one of them")
        self._check_window_use(call)
        self._check_options(call)
        same_size_constraint(call, "dim", a.dim, call.in_shape[-1], "the input's last dim")
        if not _is_zero(a.queries):
            return (call.in_shape[0], a.queries, call.in_shape[2])
        return call.in_shape

    def _check_window_use(self, call: OpCall) -> None:
        """`window` is SAM's 2-D window: on a grid one token high or wide (`{window: 4096, grid: [1, S]}`,
        meant as Mistral's 1-D sliding window) it pads that side to w and charges w x w windows of padding."""
        a = call.attrs
        if not self._windowed(call):
            return
        for side, size in zip(("height", "width"), _pair(a.grid)):
            too_big = sympy.sympify(a.window - size)
            if sympy.sympify(size) == 1 and too_big.is_number and too_big > 0:
                raise call.fail(f"window {a.window} on a grid of {side} 1: `window` is SAM's 2-D "
                                "w x w window on a token grid (the grid is padded to whole windows); for 1-D "
                                f"sliding-window attention over the sequence write sliding_window: {a.window} "
                                "(with causal: true)", "window", "a window no larger than the grid, or sliding_window")

    def _check_options(self, call: OpCall) -> None:
        a = call.attrs
        if not _is_zero(a.sliding_window):
            if not a.causal:
                raise call.fail("sliding_window is a causal sliding window (Mistral): set causal: true",
                                "sliding_window", "causal: true with it")
            if self._windowed(call):
                raise call.fail("sliding_window (1-D, over the sequence) and window (2-D, on a grid) exclude each "
                                "other", "sliding_window", "one of them")
        if not _is_zero(a.queries):
            for attr in ("rope", "rel_pos", "causal"):
                if getattr(a, attr):
                    raise call.fail(f"learned queries do not take {attr} (the queries have no positions)", attr,
                                    f"queries without {attr}")
            if self._windowed(call) or a.rel_bias != "none":
                raise call.fail("learned queries attend to all tokens: no window or rel_bias", "queries",
                                "queries without window / rel_bias")
        if self._cross(call):
            if len(call.wiring.extra[0]) != 3:
                raise call.fail(f"kv: '{a.kv}' has shape {list(call.wiring.extra[0])}, not tokens [B, T, C]", "kv",
                                "a value of rank 3")
            same_size_constraint(call, "kv", call.wiring.extra[0][0], call.in_shape[0], "the input's batch")
            for attr in ("rope", "rel_pos", "causal"):
                if getattr(a, attr):
                    raise call.fail(f"cross-attention (kv) does not take {attr} here", attr, f"kv without {attr}")
            if self._windowed(call) or a.rel_bias != "none" or not _is_zero(a.queries) or \
                    not _is_zero(a.sliding_window):
                raise call.fail("cross-attention (kv) attends to all of the value's tokens: no window, "
                                "sliding_window, rel_bias or queries", "kv", "kv alone")
        if not _is_zero(a.shift):
            if not self._windowed(call) or a.rel_pos or a.causal:
                raise call.fail("shift is Swin's shifted window: it needs window (and grid), without rel_pos or "
                                "causal", "shift", "window: w, 0 < shift < w")
            if sympy.sympify(a.shift - a.window).is_number and a.shift >= a.window:
                raise call.fail(f"shift {a.shift} is not smaller than the window {a.window}", "shift",
                                "0 < shift < window")
        if (a.rel_bias_shared or not _is_zero(a.rel_bias_readers)) and a.rel_bias != "t5":
            which = "rel_bias_shared" if a.rel_bias_shared else "rel_bias_readers"
            raise call.fail(f"{which} shares a T5 bias between layers: set rel_bias: t5", which, "rel_bias: t5 with it")
        if a.rel_bias_shared and not _is_zero(a.rel_bias_readers):
            raise call.fail("a layer reading another layer's bias (rel_bias_shared) has no table for others to read",
                            "rel_bias_readers", "rel_bias_readers on the layer with the table")
        if a.rel_bias == "swin" and not self._windowed(call):
            raise call.fail("rel_bias: swin is Swin's table over the offsets inside a window: set window (and grid)",
                            "rel_bias", "window: w with it")
        q, k, v = (bool(x) for x in (a.q_bias, a.k_bias, a.v_bias))
        if a.fused_qkv and _is_zero(a.queries) and not self._cross(call) and not q == k == v:
            raise call.fail("fused_qkv is one projection with one bias: q_bias, k_bias and v_bias must agree "
                            "(set fused_qkv: false for a bias on some of them)", "fused_qkv", "fused_qkv: false")

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
        if not _is_zero(a.shift):  # Swin shifts a grid of whole windows
            gh, gw = _pair(a.grid)
            out.append(Constraint(sympy.Eq(sympy.Mod(gh, a.window), 0) & sympy.Eq(sympy.Mod(gw, a.window), 0)
                                  & sympy.Lt(a.shift, a.window),
                                  "shifted windows need the grid {gh} x {gw} divisible by the window {w} and shift "
                                  "{s} < window", a.where("shift"), {"gh": gh, "gw": gw, "w": a.window, "s": a.shift}))
        if a.rel_bias == "t5":  # half the buckets per direction, half of those exact distances: at least one
            out.append(Constraint(sympy.Ge(a.buckets, 4) & sympy.Gt(a.max_distance, sympy.floor(a.buckets / 4)),
                                  "T5 buckets {n} and max_distance {m}: need buckets >= 4 and max_distance > buckets/4",
                                  a.where("buckets"), {"n": a.buckets, "m": a.max_distance}))
        if a.rope and same_size(a.rope_dims, a.head_dim):
            out.append(Constraint(sympy.Eq(sympy.Mod(a.head_dim, 2), 0), "rope needs an even head_dim, got {d}",
                                  a.where("rope"), {"d": a.head_dim}))
        elif a.rope:
            out.append(Constraint(sympy.Eq(sympy.Mod(a.rope_dims, 2), 0) & sympy.Le(a.rope_dims, a.head_dim),
                                  "rope needs an even rope_dims of at most head_dim {d}, got {n}", a.where("rope_dims"),
                                  {"d": a.head_dim, "n": a.rope_dims}))
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
        """(part name, rows, in, out, bias) for each projection, in execution order around the SDPA."""
        a, g = call.attrs, self._geom(call)
        inner, kv_inner = g.h * g.d, g.kv * g.d
        qb, kb, vb = bool(a.q_bias), bool(a.k_bias), bool(a.v_bias)
        if not _is_zero(a.queries) or g.ckv is not None:  # q from other rows than k and v
            q = ("q", g.mq, g.c, inner, qb)
            src = g.c if g.ckv is None else g.ckv
            kv = ([("kv", g.m, src, 2 * kv_inner, kb)] if a.fused_qkv
                  else [("k", g.m, src, kv_inner, kb), ("v", g.m, src, kv_inner, vb)])
            qkv = [q] + kv
        elif a.fused_qkv:
            qkv = [("qkv", g.m, g.c, inner + 2 * kv_inner, qb)]
        else:
            qkv = [("q", g.m, g.c, inner, qb), ("k", g.m, g.c, kv_inner, kb), ("v", g.m, g.c, kv_inner, vb)]
        return qkv, ("proj", g.mq, inner, g.c, bool(a.o_bias))

    def _rope_work(self, call: OpCall, g: _Geom) -> Work:
        """x*cos + rotate_half(x)*sin on the rotated dims of q and k (forward), g*cos + rotate_half^T(g*sin)
        (backward): 2 mul + 1 add per rotated element either way (partial rotary: rope_dims of head_dim)."""
        n = g.nb * (g.h + g.kv) * g.t * call.attrs.rope_dims
        return pointwise("mul", 2 * n) + pointwise("add", n)

    def _rel_bias_table(self, call: OpCall, g: _Geom) -> Expr:
        """Rows of the rel_bias table (one column per head): T5's buckets, or Swin's (2w-1)^2 offsets."""
        a = call.attrs
        return a.buckets if a.rel_bias == "t5" else (2 * g.qh - 1) * (2 * g.qw - 1)

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
        parts = []
        if not _is_zero(a.queries):  # the learned query tokens: parameters, no work
            parts.append(Part("queries", Work(), a.queries * g.c, own=True))
        parts += [Part(n, linear_forward(m, k, o, bias), k * o + (o if bias else 0)) for n, m, k, o, bias in qkv]
        if a.rope:
            parts.append(Part("rope", self._rope_work(call, g)))
        if a.rel_pos:
            parts.append(Part("rel_pos", self._rel_pos_forward(g), self._rel_pos_params(g)))
        if a.rel_bias != "none" and not a.rel_bias_shared:  # a table gather (no FLOPs); its add is in the SDPA
            parts.append(Part("rel_bias", Work(), self._rel_bias_table(call, g) * g.h))
        sdpa = sdpa_forward(self._sdpa(call), a.backend)
        if not _is_zero(a.shift) and a.rel_bias != "none":  # shift mask + bias table: one mask for the SDPA
            sdpa = sdpa + pointwise("add", g.nb * g.h * g.t * g.t)
        parts.append(Part("sdpa", sdpa, own=True))
        n, m, k, o, bias = proj
        parts.append(Part(n, linear_forward(m, k, o, bias), k * o + (o if bias else 0)))
        return parts

    def backward(self, call: OpCall, input_grad: bool):
        a, g = call.attrs, self._geom(call)
        qkv, proj = self._projections(call)
        queries = not _is_zero(a.queries)
        parts = []
        if queries:  # d(queries) = the batch sum of the q projection's dX (no sum at B = 1)
            parts.append(Part("queries", pointwise("bias_grad", _above_one(g.b) * g.mq * g.c), own=True))
        parts += [Part(n, linear_backward(m, k, o, bias, self._dx(call, n, input_grad)))
                  for n, m, k, o, bias in qkv]
        if a.rope:
            parts.append(Part("rope", self._rope_work(call, g)))
        if a.rel_pos:
            parts.append(Part("rel_pos", self._rel_pos_backward(g)))
        if a.rel_bias != "none" and not a.rel_bias_shared:
            # the gathered table's gradient added into its rows; with readers, first their gradients summed
            pairs = g.h * g.t * g.t
            summed = pointwise("add", a.rel_bias_readers * pairs)
            parts.append(Part("rel_bias", pointwise("scatter_add", pairs) + summed))
        sdpa = sdpa_backward(self._sdpa(call), a.backend)
        readers = len([p for p in qkv if p[0] != "q"]) if queries or g.ckv is not None else len(qkv)
        reads_grad = call.wiring.needs_grad(1, input_grad) if g.ckv is not None else input_grad
        if readers > 1 and reads_grad:  # dX of the projections reading one value summed: an add per extra reader
            sdpa = sdpa + pointwise("add", (readers - 1) * g.m * (g.c if g.ckv is None else g.ckv))
        if a.rel_pos:  # q feeds the SDPA and the relative positions: their dq summed
            sdpa = sdpa + pointwise("add", g.nq)
        if a.rel_bias != "none":  # the bias, broadcast over the nb problems, gets their gradients summed
            sdpa = sdpa + pointwise("bias_grad", _above_one(g.nb) * g.nb * g.h * g.t * g.t)
        parts.append(Part("sdpa", sdpa, own=True))
        n, m, k, o, bias = proj
        parts.append(Part(n, linear_backward(m, k, o, bias, True)))
        return parts

    def _dx(self, call: OpCall, part: str, input_grad: bool) -> bool:
        """Whether a projection computes its input's gradient: q of learned queries always (the queries
        are parameters); k and v of cross-attention when the kv value needs one; else input_grad."""
        if not _is_zero(call.attrs.queries) and part == "q":
            return True
        if self._cross(call) and part != "q":
            return call.wiring.needs_grad(1, input_grad)
        return input_grad

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        """The projections as GEMMs; the relative positions' two bmm write rel_h and rel_w (backward: dq
        of each, and the gathered tables' gradients)."""
        a, g = call.attrs, self._geom(call)
        qkv, proj = self._projections(call)
        out = {n: linear_outputs(rows, k, o, pass_, self._dx(call, n, input_grad)) for n, rows, k, o, _ in qkv}
        if a.rel_pos:
            out["rel_pos"] = (g.nb * g.h * g.t * (g.qh + g.qw) if pass_ == Phase.FORWARD
                              else 2 * g.nq + (g.qh * g.qh + g.qw * g.qw) * g.d)
        n, rows, k, o, _ = proj
        out[n] = linear_outputs(rows, k, o, pass_, True)
        return out

    # -- validation ---------------------------------------------------------------------------
    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """How the counters see F.scaled_dot_product_attention, by the way it ran on the device.

        NB: decomposed (meta, cpu math fallback): 2 + 4 bmm, mul by sqrt(scale) on q and k and a causal
        mask built with tril + where and added, i.e. `backend: math` exactly; fused on cpu
        (_scaled_dot_product_flash_attention_for_cpu): FlopCounterMode has no formula (0) and softmax /
        scale / mask are not separate ops, so the analytic work stands in. FlopCounterMode always
        counts causal SDPA over the full S x S: `causal_flops: useful` is reconciled by name.
        """
        rules = self._reconcile_rel_pos(call, pass_, ev)
        return rules + self._reconcile_sdpa(call, pass_, runtime)

    def _reconcile_rel_pos(self, call: OpCall, pass_: Phase, ev) -> list[Reconcile]:
        """NB: the gradients of rel_h and rel_w sum the bias gradient over the other grid axis; over an
        axis of length 1 (a grid or window one token wide) autograd runs no reduction."""
        if pass_ != Phase.BACKWARD or not call.attrs.rel_pos:
            return []
        g = self._geom(call)
        scores = g.nb * g.h * g.t * g.t
        ones = sum(1 for side in (g.qh, g.qw) if ev(side) == 1)
        if not ones:
            return []
        return [Reconcile("broadcast-grad-size-1", "rel_pos", pointwise("bias_grad", -ones * scores),
                          "a relative-position axis of length 1: autograd reduces the bias gradient over the other "
                          "axis only when it is longer than 1; costspec counts one addition per score for each axis")]

    def _reconcile_sdpa(self, call: OpCall, pass_: Phase, runtime) -> list[Reconcile]:
        backend = call.attrs.backend
        sdpa = sdpa_forward if pass_ == Phase.FORWARD else sdpa_backward
        shape = self._sdpa(call)
        analytic = sdpa(shape, backend)
        how = runtime.get("sdpa", "decomposed")
        if how == "fused-uncounted":
            formula = "2*B*h*S^2*d*2" if pass_ == Phase.FORWARD else (
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
            if pass_ == Phase.BACKWARD:
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
    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Projections as GEMMs on the (padded) tokens; window padding and partitioning are folded into
        their loads and stores. SDPA, flash-style (default): reads q, k, v (and O, dO in backward),
        writes O (dq, dk, dv), never the S x S scores; a relative-position bias is read (and its
        gradient written) once per score. With `backend: math` or `--fusion none` the scores, scaled
        scores and probabilities are written and read back (b*h*S^2 each). GQA's backward writes dK
        and dV per query head and reads them back for the group sum. RoPE reads and writes q and k
        (plus its cos/sin tables); the relative positions read q and the tables, write rel_h and rel_w
        and read them back into the bias; a rel_bias table is gathered into a bias per (query, key)
        pair of one problem (written once, read per score by the SDPA); with readers, their gradients are
        read and added into it. Learned queries are read once."""
        a, g = call.attrs, self._geom(call)
        qkv, proj = self._projections(call)
        shape = self._sdpa(call)
        scores = shape.scores
        unfused = fusion == Fusion.NONE or a.backend == "math"
        extra = 3 * scores if unfused else ZERO
        bias = scores if a.rel_pos or a.rel_bias != "none" else ZERO
        if pass_ == Phase.FORWARD:
            sdpa = Traffic("sdpa", g.nq + 2 * g.nk + bias + extra, g.nq + extra)
        else:
            grouped = 2 * g.nq * shape.grouped if shape.gqa else ZERO
            sdpa = Traffic("sdpa", 3 * g.nq + 2 * g.nk + bias + grouped + extra,
                           g.nq + 2 * g.nk + bias + grouped + (2 * scores if unfused else ZERO))
        queries = not _is_zero(a.queries)
        out = [linear_traffic(n, m, k, o, bias_, pass_, self._dx(call, n, input_grad))
               for n, m, k, o, bias_ in qkv]
        if queries:
            out.insert(0, Traffic("queries", ZERO, ZERO) if pass_ == Phase.FORWARD else
                       Traffic("queries", g.mq * g.c, a.queries * g.c))
        if a.rope:
            n, tables = (g.nq + g.nk) * a.rope_dims / g.d, 2 * g.t * a.rope_dims
            out.append(Traffic("rope", n + tables, n))
        if a.rel_bias != "none" and not a.rel_bias_shared:  # (a reader's bias is read by its SDPA only)
            table, pairs = self._rel_bias_table(call, g) * g.h, g.h * g.t * g.t
            summed = a.rel_bias_readers * pairs  # the readers' gradients: each read and added in
            out.append(Traffic("rel_bias", table, pairs) if pass_ == Phase.FORWARD
                       else Traffic("rel_bias", pairs + 2 * summed, table + summed))
        if a.rel_pos:
            rel = g.nb * g.h * g.t * (g.qh + g.qw)  # rel_h and rel_w
            gathered = (g.qh * g.qh + g.qw * g.qw) * g.d
            if pass_ == Phase.FORWARD:
                out.append(Traffic("rel_pos", g.nq + gathered + rel, rel + scores))
            else:
                out.append(Traffic("rel_pos", scores + rel + g.nq + gathered, rel + g.nq + self._rel_pos_params(g)))
        n, m, k, o, bias_ = proj
        return out + [sdpa, linear_traffic(n, m, k, o, bias_, pass_, True)]

    # -- torch --------------------------------------------------------------------------------
    def build(self, call: OpCall, ev):
        from costspec.nn.modules import SelfAttention

        a, g = call.attrs, self._geom(call)
        grid = tuple(ev(x) for x in _pair(a.grid)) if (self._windowed(call) or a.rel_pos) else None
        rel_bias = None
        if a.rel_bias == "t5":
            rel_bias = (("t5_shared", 0, 0) if a.rel_bias_shared
                        else ("t5", ev(a.buckets), ev(a.max_distance), ev(a.rel_bias_readers)))
        elif a.rel_bias == "swin":
            rel_bias = ("swin", ev(g.qh), ev(g.qw))
        return SelfAttention(ev(a.dim), ev(a.heads), ev(a.head_dim), bool(a.q_bias), bool(a.o_bias), a.fused_qkv,
                             kv_heads=ev(a.kv_heads), gqa=ev(a.kv_heads) != ev(a.heads), window=ev(a.window), grid=grid,
                             rel_pos=a.rel_pos, rope=a.rope, rope_len=ev(g.t), causal=a.causal,
                             qkv_biases=(bool(a.q_bias), bool(a.k_bias), bool(a.v_bias)),
                             rope_dims=ev(a.rope_dims) if a.rope else 0, sliding_window=ev(a.sliding_window),
                             queries=ev(a.queries), rel_bias=rel_bias, unscaled=a.scale == "none", shift=ev(a.shift),
                             cross=ev(g.ckv) if g.ckv is not None else 0)

    def link(self, call: OpCall, module, earlier: list) -> None:
        """rel_bias_shared: read the bias of the nearest earlier attention layer with a T5 table."""
        if not call.attrs.rel_bias_shared:
            return
        owners = [(n, m) for n, m in earlier if n.op is self and n.call.attrs.rel_bias == "t5"
                  and not n.call.attrs.rel_bias_shared]
        if not owners:
            raise call.fail("rel_bias_shared reads the T5 bias of an earlier layer, but no earlier attention layer "
                            "has a table", "rel_bias_shared",
                            "an earlier attention with rel_bias: t5 and rel_bias_readers (T5: the first layer)")
        node, owner = owners[-1]
        slot = owner.rel_bias.add_reader()
        if slot is None:
            raise call.fail(f"more layers read the T5 bias of '{node.name}' than its rel_bias_readers "
                            f"{owner.rel_bias.readers}", "rel_bias_shared",
                            f"rel_bias_readers on '{node.name}' counting every layer that reads it")
        module.bias_source = (owner.rel_bias, slot)

    def gemms(self, call: OpCall) -> list[Gemm]:
        """Projections as GEMMs on their rows (the (padded) tokens, or the learned queries); SDPA's QK^T
        (sq x d @ d x sk) and AV (sq x sk @ sk x dv) per problem and query head, whose only leading dim a
        fused kernel exposes is the head dim d (the scores stay on chip); the relative positions' two
        einsums as batched matmuls q @ R^T with n = the grid side Hq (rel_h) or Wq (rel_w)."""
        a, g = call.attrs, self._geom(call)
        qkv, proj = self._projections(call)
        out = [Gemm(n, rows, o, k) for n, rows, k, o, _ in qkv]
        if a.rel_pos:
            out += [Gemm("rel_pos", g.nb * g.h * g.qw, g.qh, g.d, g.qh),
                    Gemm("rel_pos", g.nb * g.h * g.qh, g.qw, g.d, g.qw)]
        sd = self._sdpa(call)
        problems = sd.b * sd.h
        out += [Gemm("sdpa", sd.sq, sd.sk, sd.d, problems, "sdpa", ("k",)),
                Gemm("sdpa", sd.sq, sd.dv, sd.sk, problems, "sdpa", ("n",))]
        n, rows, k, o, _ = proj
        return out + [Gemm(n, rows, o, k)]
