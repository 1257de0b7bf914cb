"""`mla`: multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024, Sec. 2.1; DeepSeek-V3; Kimi K2).

Keys and values come from one low-rank latent per token: c_kv = RMSNorm(x W_DKV) (kv_lora_rank r),
beside a shared rotary key k_r = RoPE(x W_KR) (qk_rope_head_dim d_r, one head) from the same
down-projection (`kv_a`: C -> r + d_r). Queries are low-rank too (q_lora_rank r_q: `q_a`, its
RMSNorm, `q_b`), or one projection (`q`, q_lora_rank 0: DeepSeek-V2-Lite). Each head's query is
[q_nope (d_n), RoPE(q_rot) (d_r)]; its key [k_nope (d_n), k_r] and value (d_v) come from
c_kv W_UKV (`kv_b`: r -> h*(d_n + d_v)).

Two forms, the same parameters:
* as transformers runs it (the default, what training runs): `kv_b` up-projects c_kv for every
  token, then SDPA over h heads of d_n + d_r (keys) and d_v (values);
* weight-absorbed (`absorb: true`, the inference form of DeepSeek's paper, as vLLM / SGLang /
  FlashMLA run it): W_UK is applied to the query (`uk`: per head d_n -> r) and W_UV to the attention
  output (`uv`: per head r -> d_v), so attention runs over the latent: one key/value head of r + d_r
  (keys) and r (values), multi-query style.
Per token the projections cost the same in both forms (h*r*(d_n + d_v) multiply-adds: `kv_b`'s,
or `uk`'s and `uv`'s); the attention does not: per (query, key) pair and head the absorbed form
multiplies over 2*r + d_r dims instead of d_n + d_r + d_v -- for DeepSeek-V3 (r 512, d_n 128, d_r 64,
d_v 128) 1088 against 320, 3.4x the SDPA FLOPs at equal S. It pays off where keys are many and
queries few (decoding with a cache): no up-projection of the cached latent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Backend, Fusion, Phase
from costspec.ops.attention.reconcile import attention_rules
from costspec.ops.attention.sdpa import Sdpa, sdpa_backward, sdpa_forward
from costspec.ops.attrs import Attr
from costspec.ops.mla_saved import mla_saved
from costspec.ops.opdef import Constraint, OpCall, OpDef, Runtime, requires, same_size_constraint
from costspec.ops.registry import register_op
from costspec.ops.work import (
    ZERO,
    Expr,
    Gemm,
    Part,
    Traffic,
    Work,
    above_one,
    is_zero,
    linear_backward,
    linear_forward,
    linear_outputs,
    linear_traffic,
    pointwise,
)

ATTRS = (
    Attr("heads", "size", "attention heads h (num_attention_heads)"),
    Attr("dim", "size", "model dim C (default: the input's last dim; checked against it)",
         default=lambda shape, a: shape[-1]),
    Attr("kv_lora_rank", "size", "rank r of the key/value latent c_kv (DeepSeek-V3: 512)"),
    Attr("q_lora_rank", "count", "rank r_q of the low-rank query (q_a: C -> r_q, its RMSNorm, q_b: r_q -> "
         "h*(d_n + d_r); DeepSeek-V3: 1536). 0 (default): one query projection C -> h*(d_n + d_r), as "
         "DeepSeek-V2-Lite (q_lora_rank null)", default=0),
    Attr("qk_nope_head_dim", "size", "per-head query/key dims without rotary embedding d_n (DeepSeek-V3: 128)"),
    Attr("qk_rope_head_dim", "size", "per-head query dims and shared key dims with rotary embedding d_r "
         "(DeepSeek-V3: 64)"),
    Attr("v_head_dim", "size", "per-head value dims d_v (DeepSeek-V3: 128)"),
    Attr("bias", "bool", "bias on q_a (or q), kv_a and the output projection (attention_bias); q_b and kv_b "
         "never have one", default=False),
    Attr("causal", "bool", "causal mask: query i attends to keys 0..i", default=False),
    Attr("causal_flops", "choice", "how causal attention's QK^T and AV are counted: executed (default; the full "
         "S x S scores, as FlopCounterMode counts them) or useful (the S*(S+1)/2 unmasked pairs)",
         default="executed", choices=("executed", "useful")),
    Attr("backend", "choice", "attention kernel family the cost follows: flash (GPU default: the backward "
         "recomputes QK^T), math (PyTorch's SDPA decomposition, as on meta tensors) or eager (explicit matmul, "
         "softmax, matmul)", default="flash", choices=("flash", "math", "eager")),
    Attr("cache", "count", "tokens already in the layer's key/value cache (serving: `--phase decode --context N`): "
         "the cache holds the latent and the rope key of every token (r + d_r); the projections run on the S new "
         "tokens, except kv_b, which (as transformers runs it) up-projects every cached latent again (absorb: true "
         "does not); the SDPA's S queries attend to cache + S keys. Causal only. 0: none",
         default=0),
    Attr("absorb", "bool", "the weight-absorbed inference form: W_UK applied to q (uk: per head d_n -> r), W_UV to "
         "the attention output (uv: per head r -> d_v), attention over the latent (one key/value head of r + d_r, "
         "values r). Same parameters; the projections cost the same per token (uk + uv: 2*B*S*h*r*(d_n + d_v) "
         "FLOPs, as kv_b); SDPA costs 2*B*h*S^2*(2r + d_r) instead of 2*B*h*S^2*(d_n + d_r + d_v) (DeepSeek-V3: "
         "1088 against 320, 3.4x): worth it where keys are many and queries few (decoding from a cache)",
         default=False),
    Attr("mscale", "number", "YaRN's attention factor on the softmax scale, scale = mscale^2 / sqrt(d_n + d_r) "
         "(transformers applies it for rope_type yarn with mscale_all_dim: mscale = 0.1*mscale_all_dim*ln(factor) "
         "+ 1). It multiplies the same scores: it changes no FLOPs. Default 1", default=1.0),
)


class Linear(NamedTuple):
    """One linear projection of the layer: part name, rows, in and out features, bias."""

    name: str
    rows: Expr
    k: Expr
    n: Expr
    bias: bool


@dataclass(frozen=True)
class Geom:
    b: Expr
    s: Expr
    c: Expr
    h: Expr
    rq: Expr  # q_lora_rank (0: one q projection)
    r: Expr  # kv_lora_rank
    dn: Expr
    dr: Expr
    dv: Expr
    cached: Expr = sympy.Integer(0)  # keys read from the cache besides the s new ones (serving)

    @property
    def m(self) -> Expr:  # rows of the projections
        return self.b * self.s

    @property
    def sk(self) -> Expr:  # keys each query sees: the cached and the new ones
        return self.cached + self.s

    @classmethod
    def of(cls, call: OpCall) -> Geom:
        a = call.attrs
        b, s, c = call.in_shape
        return cls(b, s, c, a.heads, a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim,
                   a.v_head_dim, sympy.sympify(a.cache))


def low_rank_q(call: OpCall) -> bool:
    return not is_zero(call.attrs.q_lora_rank)


def linears(call: OpCall) -> tuple[list[Linear], list[Linear]]:
    """The projections before the attention (q path, kv_a, and kv_b unless absorbed) and after it (proj)."""
    g, bias = Geom.of(call), bool(call.attrs.bias)
    dq = g.h * (g.dn + g.dr)
    q = ([Linear("q_a", g.m, g.c, g.rq, bias), Linear("q_b", g.m, g.rq, dq, False)] if low_rank_q(call)
         else [Linear("q", g.m, g.c, dq, False)])
    before = q + [Linear("kv_a", g.m, g.c, g.r + g.dr, bias)]
    if not call.attrs.absorb:
        # (over a cache, every cached latent is up-projected again: transformers' expand_kv)
        before.append(Linear("kv_b", g.b * g.sk, g.r, g.h * (g.dn + g.dv), False))
    return before, [Linear("proj", g.m, g.h * g.dv, g.c, bias)]


def heads_products(call: OpCall) -> list[Linear]:
    """absorb: W_UK on q (uk: per head d_n -> r) and W_UV on the output (uv: per head r -> d_v), h batched
    GEMMs on the B*S rows (`n` per head; the weight is h x k x n)."""
    if not call.attrs.absorb:
        return []
    g = Geom.of(call)
    return [Linear("uk", g.m, g.dn, g.r, False), Linear("uv", g.m, g.r, g.dv, False)]


def sdpa_call(call: OpCall) -> Sdpa:
    a, g = call.attrs, Geom.of(call)
    useful = a.causal and a.causal_flops == "useful"
    causal = a.causal and not (sympy.sympify(g.s) == 1 and not is_zero(g.cached))  # one query over a cache: no mask
    if a.absorb:  # one key/value head of the latent: multi-query
        return Sdpa(g.b, g.h, 1, g.s, g.sk, g.r + g.dr, g.r, gqa=True, grouped=above_one(g.h), causal=causal,
                    offset=g.cached, useful=useful)
    return Sdpa(g.b, g.h, g.h, g.s, g.sk, g.dn + g.dr, g.dv, causal=causal, offset=g.cached, useful=useful)


def _heads_work(p: Linear, h: Expr, pass_: Phase) -> Work:
    """h GEMMs (rows x k) @ (k x n); backward dW and dX (the input always needs its gradient)."""
    flops = FLOPS_PER_MAC * h * p.rows * p.k * p.n
    return Work({"gemm": flops if pass_ == Phase.FORWARD else 2 * flops})


@register_op
class MultiHeadLatentAttention(OpDef):
    """Multi-head latent attention on [B, S, C] (DeepSeek-V2/V3): low-rank queries and a shared key/value
    latent with a decoupled rotary key; as transformers runs it, or weight-absorbed."""

    name = "mla"
    doc = ("Multi-head latent attention on [B, S, C] (DeepSeek-V2/V3, Kimi): low-rank q (q_a, RMSNorm, q_b; or "
           "one q projection), a key/value latent c_kv = RMSNorm(kv_a(x)) of kv_lora_rank with a shared rotary key "
           "of qk_rope_head_dim from the same projection, kv_b up-projecting c_kv to per-head keys (d_n) and values "
           "(d_v), RoPE on the rope dims only, SDPA, output projection. `absorb: true`: the weight-absorbed "
           "inference form (attention over the latent).")
    default_name = "attn"
    attrs = ATTRS
    runtime = Runtime(
        # transformers' interleaved RoPE (DeepSeek-V3) rotates with x1*cos - x2*sin: a subtraction is an add
        aten={"aten.sub": "add"},
        fused={"sdpa": ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")},
        kernels={"gemm": "gemm", "sdpa": "attention"},
    )

    def saved(self, call: OpCall, input_grad: bool):
        """The input, the norms' inputs and statistics, the SDPA's tensors, the output projection's input
        (`costspec.ops.mla_saved`)."""
        return mla_saved(call, Geom.of(call))

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        same_size_constraint(call, "dim", call.attrs.dim, call.in_shape[-1], "the input's last dim")
        if call.attrs.mscale <= 0:
            raise call.fail(f"mscale must be positive, got {call.attrs.mscale}", "mscale", "a positive factor (1)")
        if not is_zero(call.attrs.cache) and not call.attrs.causal:
            raise call.fail("cache holds the keys and values of earlier tokens of one sequence: it needs causal: true",
                            "cache", "causal: true, or cache: 0")
        return call.in_shape

    def constraints(self, call: OpCall):
        a = call.attrs
        return same_size_constraint(call, "dim", a.dim, call.in_shape[-1], "the input's last dim") + [
            Constraint(sympy.Eq(sympy.Mod(a.qk_rope_head_dim, 2), 0), "rope needs an even qk_rope_head_dim, got {d}",
                       a.where("qk_rope_head_dim"), {"d": a.qk_rope_head_dim})]

    def notes(self, call: OpCall):
        g = Geom.of(call)
        if call.attrs.absorb:
            out = [f"weight-absorbed MLA: attention over the latent, QK^T over r + d_r = {g.r + g.dr} and AV over "
                   f"r = {g.r} dims per head where transformers' form uses d_n + d_r = {g.dn + g.dr} and d_v = {g.dv}: "
                   "SDPA FLOPs x (2r + d_r)/(d_n + d_r + d_v); the projections cost the same per token (uk + uv "
                   "instead of kv_b)"]
        else:
            out = [f"MLA as transformers runs it: kv_b up-projects the latent for every token, SDPA over "
                   f"{g.dn + g.dr} (QK^T) and {g.dv} (AV) dims per head; absorb: true runs attention over the latent "
                   "(the inference form)"]
        if call.attrs.mscale != 1:
            out.append(f"softmax scale mscale^2/sqrt(d_n + d_r) with mscale {call.attrs.mscale}: no FLOPs change")
        if call.attrs.causal:
            out.append("causal attention counted as " + ("useful work: the S*(S+1)/2 unmasked pairs"
                                                         if call.attrs.causal_flops == "useful" else
                                                         "executed: the full S x S scores, as FlopCounterMode counts"))
        return out

    # -- work ---------------------------------------------------------------------------------
    def forward(self, call: OpCall):
        g = Geom.of(call)
        before, after = linears(call)
        lin = {p.name: Part(p.name, linear_forward(p.rows, p.k, p.n, p.bias), p.k * p.n + (p.n if p.bias else 0))
               for p in before + after}
        heads = {p.name: Part(p.name, _heads_work(p, g.h, Phase.FORWARD), g.h * p.k * p.n)
                 for p in heads_products(call)}
        parts = []
        if low_rank_q(call):
            parts += [lin["q_a"], Part("q_norm", pointwise("rmsnorm", g.m * g.rq), g.rq), lin["q_b"]]
        else:
            parts.append(lin["q"])
        parts += [lin["kv_a"], Part("kv_norm", pointwise("rmsnorm", g.m * g.r), g.r), Part("rope", self._rope(g))]
        parts += [heads["uk"]] if heads else [lin["kv_b"]]
        parts.append(Part("sdpa", sdpa_forward(sdpa_call(call), call.attrs.backend), own=True))
        return parts + ([heads["uv"]] if heads else []) + [lin["proj"]]

    @staticmethod
    def _rope(g: Geom) -> Work:
        """RoPE on q's rope dims (h heads) and the shared key's (one head): 2 mul + 1 add per element."""
        n = g.b * g.s * (g.h + 1) * g.dr
        return pointwise("mul", 2 * n) + pointwise("add", n)

    def backward(self, call: OpCall, input_grad: bool):
        g = Geom.of(call)
        before, after = linears(call)
        first = {"q_a", "q", "kv_a"}  # these read the layer's input
        lin = {p.name: Part(p.name, linear_backward(p.rows, p.k, p.n, p.bias, input_grad or p.name not in first))
               for p in before + after}
        heads = {p.name: Part(p.name, _heads_work(p, g.h, Phase.BACKWARD)) for p in heads_products(call)}
        sdpa = sdpa_backward(sdpa_call(call), call.attrs.backend)
        if input_grad:  # x feeds the q path and kv_a: their dX summed
            sdpa = sdpa + pointwise("add", g.m * g.c)
        if call.attrs.absorb:  # c_kv is the keys' latent and the values: its two gradients summed
            sdpa = sdpa + pointwise("add", g.m * g.r)
        else:  # the shared rotary key, broadcast to the h heads: its gradient summed over them
            sdpa = sdpa + pointwise("bias_grad", above_one(g.h) * g.b * g.h * g.s * g.dr)
        parts = []
        if low_rank_q(call):
            parts += [lin["q_a"], Part("q_norm", pointwise("rmsnorm_backward", g.m * g.rq)), lin["q_b"]]
        else:
            parts.append(lin["q"])
        parts += [lin["kv_a"], Part("kv_norm", pointwise("rmsnorm_backward", g.m * g.r)), Part("rope", self._rope(g))]
        parts += [heads["uk"]] if heads else [lin["kv_b"]]
        parts.append(Part("sdpa", sdpa, own=True))
        return parts + ([heads["uv"]] if heads else []) + [lin["proj"]]

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        """The projections as GEMMs; uk and uv as h GEMMs each (backward: dW and dX)."""
        g = Geom.of(call)
        before, after = linears(call)
        first = {"q_a", "q", "kv_a"}
        out = {p.name: linear_outputs(p.rows, p.k, p.n, pass_, input_grad or p.name not in first)
               for p in before + after}
        for p in heads_products(call):
            out[p.name] = g.h * (p.rows * p.n if pass_ == Phase.FORWARD else p.k * p.n + p.rows * p.k)
        return out

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The projections on the B*S rows; uk and uv as h GEMMs; SDPA's QK^T and AV per (problem, head)."""
        before, after = linears(call)
        g = Geom.of(call)
        out = [Gemm(p.name, p.rows, p.n, p.k) for p in before]
        out += [Gemm(p.name, p.rows, p.n, p.k, g.h) for p in heads_products(call)]
        sd = sdpa_call(call)
        out += [Gemm("sdpa", sd.sq, sd.sk, sd.d, sd.b * sd.h, "sdpa", ("k",)),
                Gemm("sdpa", sd.sq, sd.dv, sd.sk, sd.b * sd.h, "sdpa", ("n",))]
        return out + [Gemm(p.name, p.rows, p.n, p.k) for p in after]

    # -- validation ---------------------------------------------------------------------------
    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """How the counters see its attention call (see attention's reconcile)."""
        return attention_rules(sdpa_call(call), call.attrs.backend, call.attrs.backend == Backend.EAGER, pass_,
                               runtime, ev)

    # -- memory -------------------------------------------------------------------------------
    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Projections as GEMMs (uk, uv: h of them, reading their h weights once); the norms read and write
        the latents; RoPE reads and writes q's and the shared key's rope dims (plus its cos/sin tables);
        SDPA as attention's (flash: q, k, v in, O out, never the scores; math / eager / --fusion none: the
        scores, scaled scores and probabilities written and read back)."""
        g = Geom.of(call)
        before, after = linears(call)
        first = {"q_a", "q", "kv_a"}
        lin = {p.name: linear_traffic(p.name, p.rows, p.k, p.n, p.bias, pass_, input_grad or p.name not in first)
               for p in before + after}
        for p in heads_products(call):
            lin[p.name] = linear_traffic(p.name, g.h * p.rows, p.k, p.n, False, pass_, True)
            weights = g.h * p.k * p.n - p.k * p.n  # h weights, where linear_traffic reads (writes) one
            lin[p.name] = Traffic(p.name, lin[p.name].reads + (weights if pass_ == Phase.FORWARD else 2 * weights),
                                  lin[p.name].writes + (ZERO if pass_ == Phase.FORWARD else weights))
        fwd = pass_ == Phase.FORWARD
        norms = []
        for name, n, w in (("q_norm", g.m * g.rq, g.rq), ("kv_norm", g.m * g.r, g.r)):
            if name == "kv_norm" or low_rank_q(call):
                norms.append(Traffic(name, n + w, n) if fwd else Traffic(name, 2 * n + w, n + w))
        rot = g.b * g.s * (g.h + 1) * g.dr
        rope = Traffic("rope", rot + 2 * g.s * g.dr, rot)
        sd = sdpa_call(call)
        nq, nk, nv = sd.b * sd.h * sd.sq * sd.d, sd.b * sd.kv * sd.sk * sd.d, sd.b * sd.kv * sd.sk * sd.dv
        no = sd.b * sd.h * sd.sq * sd.dv
        unfused = fusion == Fusion.NONE or call.attrs.backend != Backend.FLASH
        extra = 3 * sd.scores if unfused else ZERO
        sdpa = (Traffic("sdpa", nq + nk + nv + extra, no + extra) if fwd else
                Traffic("sdpa", nq + nk + nv + 2 * no + extra, nq + nk + nv + (2 * sd.scores if unfused else ZERO)))
        found = {t.part: t for t in [*lin.values(), *norms, rope, sdpa]}
        return [found[p.name] for p in self.forward(call) if p.name in found]

    def kv_cache(self, call: OpCall):
        """Causal MLA caches the latent and the shared rope key per token (r + d_r), in both forms: the
        absorbed one attends over them, transformers' form up-projects every cached latent each step."""
        g = Geom.of(call)
        return g.b * (g.r + g.dr) * g.sk if call.attrs.causal else ZERO

    # -- torch --------------------------------------------------------------------------------
    def build(self, call: OpCall, ev):
        from costspec.nn.mla import LatentAttention, MlaShape

        a, g = call.attrs, Geom.of(call)
        cached = ev(g.cached)
        if cached and ev(g.s) != 1:
            raise call.fail("the generated module's key/value cache serves one new token per sequence (--phase "
                            "decode); a prefill after cached tokens is costed but not built", "cache",
                            "cache: 0, or one new token")
        shape = MlaShape(ev(a.dim), ev(g.h), ev(g.rq), ev(g.r), ev(g.dn), ev(g.dr), ev(g.dv))
        scale = float(a.mscale) ** 2 / float(ev(g.dn + g.dr)) ** 0.5
        return LatentAttention(shape, ev(g.s), bool(a.bias), a.causal, bool(a.absorb), a.backend == Backend.EAGER,
                               scale, a.backend == Backend.MATH, cache=(ev(g.b), cached) if cached else None)
