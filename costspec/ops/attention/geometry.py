"""The geometry of one attention layer, read from its resolved attributes and input: rows of the
projections, attention problems and their tokens, the token grid (`Geom`); the projections in
execution order (`Projection`); the SDPA call it makes (`sdpa_call`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import sympy

from costspec.core.vocab import Backend
from costspec.ops.attention.sdpa import Sdpa
from costspec.ops.opdef import OpCall, same_size
from costspec.ops.work import Expr, is_zero


@dataclass(frozen=True)
class Geom:
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
    cached: Expr = sympy.Integer(0)  # keys read from the KV cache besides the t new ones (serving)

    @property
    def nq(self) -> Expr:  # elements of q (and of O)
        return self.nb * self.h * self.tq * self.d

    @property
    def nk(self) -> Expr:  # elements of the new k (and of v): what the projections write
        return self.nb * self.kv * self.t * self.d

    @property
    def sk(self) -> Expr:  # keys each query of the SDPA sees: the cached ones and the t new ones
        return self.cached + self.t

    @property
    def nkc(self) -> Expr:  # elements of k (and of v) the SDPA reads: the cache and the new ones
        return self.nb * self.kv * self.sk * self.d


class Projection(NamedTuple):
    """One linear projection of the layer: part name, rows, in and out features, bias."""

    name: str
    rows: Expr
    k: Expr
    n: Expr
    bias: bool


def pair(value) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


def windowed(call: OpCall) -> bool:
    return not is_zero(call.attrs.window)


def cross(call: OpCall) -> bool:
    return call.attrs.kv is not None


def cross_cached(call: OpCall) -> bool:
    """Cross-attention over a cache of kv_cache tokens (keys and values projected earlier): no k/v projections."""
    return not is_zero(call.attrs.kv_cache)


def learned_queries(call: OpCall) -> bool:
    return not is_zero(call.attrs.queries)


def gqa(call: OpCall) -> bool:
    return same_size(call.attrs.kv_heads, call.attrs.heads) is not True


def grouped(call: OpCall) -> Expr:
    """1 when kv_heads < heads, 0 when they are equal (multi-head attention: no group sum).

    NB: kv_heads may be a dim that a sweep takes from 1 (MQA) up to heads (MHA); with whole
    0 <= heads - kv_heads, min(1, heads - kv_heads) is that indicator as a plain expression
    (exact at every binding, no Piecewise in formulas).
    """
    a = call.attrs
    if not gqa(call):
        return sympy.Integer(0)
    if same_size(a.kv_heads, a.heads) is False and sympy.sympify(a.heads - a.kv_heads).is_number:
        return sympy.Integer(1)
    return sympy.Min(1, a.heads - a.kv_heads)


def cached_keys(call: OpCall) -> Expr:
    """Keys the layer reads from its KV cache: `cache`, or with a sliding window w at most the last w - 1
    (the cache keeps what the next query can still see: w keys with the new one, as transformers'
    sliding-window cache layer keeps them)."""
    a = call.attrs
    if is_zero(a.cache) or is_zero(a.sliding_window):
        return sympy.sympify(a.cache)
    return sympy.Min(a.cache, a.sliding_window - 1)


def geometry(call: OpCall) -> Geom:
    a = call.attrs
    b, s, c = call.in_shape
    h, kv, d = a.heads, a.kv_heads, a.head_dim
    gh, gw = pair(a.grid)
    if windowed(call):
        w = a.window
        nwin = sympy.ceiling(gh / w) * sympy.ceiling(gw / w)  # windows of the padded grid
        return Geom(b, s, c, h, kv, d, b * nwin * w * w, b * nwin, w * w, w, w, w * w, b * nwin * w * w)
    if learned_queries(call):
        return Geom(b, s, c, h, kv, d, b * s, b, s, gh, gw, a.queries, b * a.queries)
    if cross(call):
        _, t, ckv = call.wiring.extra[0]
        return Geom(b, s, c, h, kv, d, b * t, b, t, gh, gw, s, b * s, ckv)
    if cross_cached(call):  # the S queries over kv_cache cached keys, no new ones
        return Geom(b, s, c, h, kv, d, b * s, b, sympy.Integer(0), gh, gw, s, b * s, cached=sympy.sympify(a.kv_cache))
    return Geom(b, s, c, h, kv, d, b * s, b, s, gh, gw, s, b * s, cached=cached_keys(call))


def local(call: OpCall) -> bool:
    return not is_zero(call.attrs.local_window)


def eager(call: OpCall) -> bool:
    """The module runs explicit matmul / softmax / matmul: `backend: eager`, or an option PyTorch's SDPA
    cannot run (soft-capping, sinks)."""
    a = call.attrs
    return a.backend == Backend.EAGER or bool(a.softcap) or bool(a.sinks)


def sdpa_call(call: OpCall) -> Sdpa:
    a, g = call.attrs, geometry(call)
    single = sympy.sympify(g.tq) == 1 and not is_zero(g.cached)  # one new query sees every cached key: no mask
    return Sdpa(g.nb, g.h, g.kv, g.tq, g.sk, g.d, g.d, gqa=gqa(call), grouped=grouped(call),
                causal=a.causal and not single, offset=g.cached, window=a.sliding_window, local=a.local_window,
                useful=(a.causal or local(call)) and a.causal_flops == "useful",
                bias=a.rel_pos or a.rel_bias != "none" or not is_zero(a.shift) or a.alibi or a.zero_bias,
                alibi=a.alibi,
                softcap=bool(a.softcap), sinks=bool(a.sinks), folded=causal_bias(call))


def causal_bias(call: OpCall) -> bool:
    """T5's decoder: a causal layer with a T5 bias (its own table or an earlier layer's), the causal mask folded
    into the bias by a where before the SDPA call (which takes is_causal or a float mask, not both)."""
    return call.attrs.causal and call.attrs.rel_bias == "t5"


def projections(call: OpCall) -> tuple[list[Projection], Projection]:
    """The q/k/v projections in execution order around the SDPA, and the output projection."""
    a, g = call.attrs, geometry(call)
    inner, kv_inner = g.h * g.d, g.kv * g.d
    qb, kb, vb = bool(a.q_bias), bool(a.k_bias), bool(a.v_bias)
    if cross_cached(call):  # k and v were projected when the cache was filled
        qkv = [Projection("q", g.mq, g.c, inner, qb)]
    elif learned_queries(call) or g.ckv is not None:  # q from other rows than k and v
        q = Projection("q", g.mq, g.c, inner, qb)
        src = g.c if g.ckv is None else g.ckv
        kv = ([Projection("kv", g.m, src, 2 * kv_inner, kb)] if a.fused_qkv
              else [Projection("k", g.m, src, kv_inner, kb), Projection("v", g.m, src, kv_inner, vb)])
        qkv = [q] + kv
    elif a.fused_qkv:
        qkv = [Projection("qkv", g.m, g.c, inner + 2 * kv_inner, qb)]
    else:
        qkv = [Projection("q", g.m, g.c, inner, qb), Projection("k", g.m, g.c, kv_inner, kb),
               Projection("v", g.m, g.c, kv_inner, vb)]
    return qkv, Projection("proj", g.mq, inner, g.c, bool(a.o_bias))


def computes_dx(call: OpCall, part: str, input_grad: bool) -> bool:
    """Whether a projection computes its input's gradient: q of learned queries always (the queries
    are parameters); k and v of cross-attention when the kv value needs one; else input_grad."""
    if learned_queries(call) and part == "q":
        return True
    if cross(call) and part != "q":
        return call.wiring.needs_grad(1, input_grad)
    return input_grad
