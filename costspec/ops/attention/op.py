"""The `attention` op definition: shape, dim constraints, forward and backward work by part
(projections, positions, SDPA), GEMM outputs and geometry, traffic, reconciliation and the torch
module (`costspec.nn.attention.SelfAttention`)."""
from __future__ import annotations

import sympy

from costspec.core.vocab import Backend, Fusion, Phase
from costspec.ops.attention import positions, qk_norm, rules
from costspec.ops.attention.attributes import ATTRS
from costspec.ops.attention.geometry import (
    causal_bias,
    computes_dx,
    cross,
    cross_cached,
    eager,
    geometry,
    gqa,
    learned_queries,
    local,
    pair,
    projections,
    sdpa_call,
    windowed,
)
from costspec.ops.attention.reconcile import rel_pos_rules, sdpa_rules
from costspec.ops.attention.saved import attention_saved
from costspec.ops.attention.sdpa import sdpa_backward, sdpa_forward
from costspec.ops.opdef import Constraint, OpCall, OpDef, Runtime, Saved, requires, same_size, same_size_constraint
from costspec.ops.registry import register_op
from costspec.ops.work import (
    ZERO,
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


@register_op
class Attention(OpDef):
    """Multi-head self-attention on [B, S, C]: q/k/v projections, SDPA, output projection; optional
    windows, relative positions, grouped-query heads, causal mask, rotary embedding, q/k norms,
    soft-capping, sinks and ALiBi."""

    name = "attention"
    doc = ("Multi-head self-attention on [B, S, C]: fused (or separate) q/k/v projections, "
           "scaled_dot_product_attention (QK^T, scale, softmax, AV), output projection. Options: "
           "windowed attention on a token grid (SAM's padding), SAM's decomposed relative position "
           "bias, grouped-query k/v heads (kv_heads from 1 up to heads), causal masking, a 1-D causal sliding "
           "window, a bidirectional local window (ModernBERT), rotary position embedding (full or partial), learned "
           "queries, T5 / Swin relative-position bias tables, per-projection biases, no score scale, cross-attention "
           "(kv, with rope and causal), q/k normalisation (RMSNorm / LayerNorm, per head or over the width), "
           "attention-logit soft-capping (Gemma 2), attention sinks (gpt-oss), ALiBi (BLOOM), and three kernel "
           "families: flash, PyTorch's SDPA decomposition (math) and eager attention.")
    default_name = "attn"
    runtime = Runtime(
        # PyTorch's math SDPA builds a causal mask with tril + where (one select per element)
        aten={"aten.tril": "select", "aten.where": "select"},
        # F.scaled_dot_product_attention runs as one of these aten ops when it is not decomposed
        fused={"sdpa": ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")},
        kernels={"gemm": "gemm", "sdpa": "attention"},
        # a q/k LayerNorm with a weight per head (costspec.nn.qk_norm): F.layer_norm, then the weight
        decomposed=("HeadLayerNorm", "layernorm", "layernorm_backward"),
    )
    attrs = ATTRS

    # -- shapes -------------------------------------------------------------------------------
    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        a = call.attrs
        rules.check(call)
        same_size_constraint(call, "dim", a.dim, call.in_shape[-1], "the input's last dim")
        if learned_queries(call):
            return (call.in_shape[0], a.queries, call.in_shape[2])
        return call.in_shape

    def constraints(self, call: OpCall):
        a = call.attrs
        out = [Constraint(sympy.Eq(sympy.Mod(a.dim, a.heads), 0), "dim {dim} is not divisible by heads {heads}",
                          a.where("heads"), {"dim": a.dim, "heads": a.heads})]
        out += same_size_constraint(call, "dim", a.dim, call.in_shape[-1], "the input's last dim")
        if gqa(call):
            out.append(Constraint(sympy.Eq(sympy.Mod(a.heads, a.kv_heads), 0) & sympy.Le(a.kv_heads, a.heads),
                                  "kv_heads {kv} must divide heads {heads} (from 1, multi-query, up to heads, "
                                  "multi-head)", a.where("kv_heads"), {"kv": a.kv_heads, "heads": a.heads},
                                  "a divisor of heads"))
        if windowed(call) or a.rel_pos:
            gh, gw = pair(a.grid)
            s = call.in_shape[1]
            out.append(Constraint(sympy.Eq(gh * gw, s) & sympy.Eq(sympy.floor(gh), gh) & sympy.Eq(sympy.floor(gw), gw),
                                  "grid {gh} x {gw} does not hold the {s} tokens", a.where("grid"),
                                  {"gh": gh, "gw": gw, "s": s}, "grid: [H, W] with H*W = the input's tokens"))
        if windowed(call) and not sympy.sympify(a.window).is_number:
            out.append(Constraint(sympy.Ge(a.window, 1), "window {w} must be at least 1 (0 means global attention)",
                                  a.where("window"), {"w": a.window}))
        if not is_zero(a.shift):  # Swin shifts a grid of whole windows
            gh, gw = pair(a.grid)
            out.append(Constraint(sympy.Eq(sympy.Mod(gh, a.window), 0) & sympy.Eq(sympy.Mod(gw, a.window), 0)
                                  & sympy.Lt(a.shift, a.window),
                                  "shifted windows need the grid {gh} x {gw} divisible by the window {w} and shift "
                                  "{s} < window", a.where("shift"), {"gh": gh, "gw": gw, "w": a.window, "s": a.shift}))
        if a.rel_bias == "beit":  # the patch grid and the class token before it
            gh, gw = pair(a.grid)
            s = call.in_shape[1]
            out.append(Constraint(sympy.Eq(gh * gw + 1, s) & sympy.Eq(sympy.floor(gh), gh)
                                  & sympy.Eq(sympy.floor(gw), gw),
                                  "rel_bias: beit on a grid {gh} x {gw} needs {gh} x {gw} + 1 tokens (the class token "
                                  "first), not {s}", a.where("grid"), {"gh": gh, "gw": gw, "s": s},
                                  "grid: [H, W] with H*W + 1 = the input's tokens"))
        if a.rel_bias == "t5" and not causal_bias(call):  # half the buckets per direction, half of those exact
            out.append(Constraint(sympy.Ge(a.buckets, 4) & sympy.Gt(a.max_distance, sympy.floor(a.buckets / 4)),
                                  "T5 buckets {n} and max_distance {m}: need buckets >= 4 and max_distance > buckets/4",
                                  a.where("buckets"), {"n": a.buckets, "m": a.max_distance}))
        elif a.rel_bias == "t5":  # one direction: all the buckets for it, half of them exact distances
            out.append(Constraint(sympy.Ge(a.buckets, 4) & sympy.Gt(a.max_distance, sympy.floor(a.buckets / 2)),
                                  "causal T5 buckets {n} and max_distance {m}: need buckets >= 4 and max_distance > "
                                  "buckets/2 (one direction: half the buckets are exact distances)",
                                  a.where("buckets"), {"n": a.buckets, "m": a.max_distance}))
        if local(call) and not sympy.sympify(a.local_window).is_number:
            out.append(Constraint(sympy.Ge(a.local_window, 2), "local_window {w} must be at least 2 (0 means global "
                                  "attention)", a.where("local_window"), {"w": a.local_window}))
        if a.softcap < 0:
            raise call.fail(f"softcap must be positive, got {a.softcap}", "softcap",
                            "a positive cap (Gemma 2: 50), or 0 for none")
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
        out = []
        if a.softcap:
            out.append(f"soft-capped scores (cap {a.softcap}): scores / cap, tanh, * cap on every score, 2 scale + "
                       "1 tanh (backward 2 scale + 1 tanh_backward); no matmul FLOPs")
        if a.sinks:
            out.append("attention sinks: one learned logit per head joins every softmax row (S + 1 logits per row); "
                       "heads parameters, no matmul FLOPs")
        if a.alibi:
            out.append("ALiBi: slope_h x key position added to every score, B*h*Sq*Sk adds forward (a constant: no "
                       "parameters, no backward work); BLOOM adds it inside baddbmm, which FlopCounterMode counts as "
                       "its bmm alone (2*B*h*Sq*Sk*d), the bias add and alpha scale as pointwise work")
        if eager(call) and a.backend == Backend.FLASH:
            out.append("soft-capping / sinks counted as one fused flash kernel (flash-attn has both); PyTorch's SDPA "
                       "has neither, so the generated module (and transformers) runs eager attention: validate names "
                       "the difference (attention-eager)")
        if not (sdpa_call(call).causal or local(call)):  # (one new query over a cache sees every key)
            return out
        if a.causal_flops == "useful":
            return out + ["masked attention counted as useful work: QK^T and AV over the unmasked pairs only (causal: "
                          "S*(S+1)/2; FlopCounterMode and most kernels count the full S x S; validate names the "
                          "difference)"]
        return out + ["masked attention counted as executed: QK^T and AV over the full S x S scores, as "
                      "FlopCounterMode and PyTorch's math kernel count them (causal: about 2x the useful S*(S+1)/2; "
                      "set causal_flops: useful)"]

    # -- work ---------------------------------------------------------------------------------
    def forward(self, call: OpCall):
        a, g = call.attrs, geometry(call)
        qkv, proj = projections(call)
        parts = []
        if learned_queries(call):  # the learned query tokens: parameters, no work
            parts.append(Part("queries", Work(), a.queries * g.c, own=True))
        parts += [Part(n, linear_forward(m, k, o, bias), k * o + (o if bias else 0)) for n, m, k, o, bias in qkv]
        parts += qk_norm.forward_parts(call, g)
        parts += positions.forward_parts(call, g)
        if a.sinks:  # one learned logit per head: parameters, its work is the softmax's
            parts.append(Part("sinks", Work(), g.h, own=True))
        sdpa = sdpa_forward(sdpa_call(call), a.backend)
        if not is_zero(a.shift) and a.rel_bias != "none":  # shift mask + bias table: one mask for the SDPA
            sdpa = sdpa + pointwise("add", g.nb * g.h * g.t * g.t)
        if causal_bias(call):  # T5's decoder: the bias kept below the diagonal by a where (the mask: a constant);
            sdpa = sdpa + pointwise("select", above_one(g.t) * g.h * g.t * g.t)  # one token sees itself: none
        parts.append(Part("sdpa", sdpa, own=True))
        n, m, k, o, bias = proj
        parts.append(Part(n, linear_forward(m, k, o, bias), k * o + (o if bias else 0)))
        return parts

    def backward(self, call: OpCall, input_grad: bool):
        a, g = call.attrs, geometry(call)
        qkv, proj = projections(call)
        queries = learned_queries(call)
        parts = []
        if queries:  # d(queries) = the batch sum of the q projection's dX (no sum at B = 1)
            parts.append(Part("queries", pointwise("bias_grad", above_one(g.b) * g.mq * g.c), own=True))
        parts += [Part(n, linear_backward(m, k, o, bias, computes_dx(call, n, input_grad)))
                  for n, m, k, o, bias in qkv]
        parts += qk_norm.backward_parts(call, g)
        parts += positions.backward_parts(call, g)
        if a.sinks:  # the sinks' gradient is summed in the SDPA part
            parts.append(Part("sinks", Work(), own=True))
        sdpa = sdpa_backward(sdpa_call(call), a.backend)
        readers = len([p for p in qkv if p.name != "q"]) if queries or g.ckv is not None else len(qkv)
        reads_grad = call.wiring.needs_grad(1, input_grad) if g.ckv is not None else input_grad
        if readers > 1 and reads_grad:  # dX of the projections reading one value summed: an add per extra reader
            sdpa = sdpa + pointwise("add", (readers - 1) * g.m * (g.c if g.ckv is None else g.ckv))
        if a.rel_pos:  # q feeds the SDPA and the relative positions: their dq summed
            sdpa = sdpa + pointwise("add", g.nq)
        if a.rel_bias != "none":  # the bias, broadcast over the nb problems, gets their gradients summed
            sdpa = sdpa + pointwise("bias_grad", above_one(g.nb) * g.nb * g.h * g.t * g.t)
        if causal_bias(call):  # the where's backward: the bias gradient kept below the diagonal
            sdpa = sdpa + pointwise("select", above_one(g.t) * g.h * g.t * g.t)
        parts.append(Part("sdpa", sdpa, own=True))
        n, m, k, o, bias = proj
        parts.append(Part(n, linear_backward(m, k, o, bias, True)))
        return parts

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        """The projections as GEMMs; the relative positions' two bmm write rel_h and rel_w (backward: dq
        of each, and the gathered tables' gradients)."""
        qkv, proj = projections(call)
        out = {n: linear_outputs(rows, k, o, pass_, computes_dx(call, n, input_grad)) for n, rows, k, o, _ in qkv}
        if call.attrs.rel_pos:
            out["rel_pos"] = positions.rel_pos_outputs(geometry(call), pass_)
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
        return rel_pos_rules(call, pass_, ev) + sdpa_rules(call, pass_, runtime, ev)

    # -- memory -------------------------------------------------------------------------------
    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """By the SDPA kernel family (`costspec.ops.attention.saved`)."""
        return attention_saved(call, call.attrs.backend)

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Projections as GEMMs on the (padded) tokens; window padding and partitioning are folded into
        their loads and stores. SDPA, flash-style (default): reads q, k, v (and O, dO in backward),
        writes O (dq, dk, dv), never the S x S scores; a relative-position bias is read (and its
        gradient written) once per score. With `backend: math` / `eager` or `--fusion none` the scores,
        scaled scores and probabilities are written and read back (b*h*S^2 each; soft-capping three more:
        the divided, tanh and multiplied scores). GQA's backward writes dK
        and dV per query head and reads them back for the group sum. RoPE reads and writes q and k
        (plus its cos/sin tables); the relative positions read q and the tables, write rel_h and rel_w
        and read them back into the bias; a rel_bias table is gathered into a bias per (query, key)
        pair of one problem (written once, read per score by the SDPA); with readers, their gradients are
        read and added into it; a causal T5 bias is read and written once more per layer by its where.
        Learned queries and sinks are read once; q/k norms read and write q and k."""
        a, g = call.attrs, geometry(call)
        qkv, proj = projections(call)
        shape = sdpa_call(call)
        scores = shape.scores
        unfused = fusion == Fusion.NONE or a.backend != Backend.FLASH
        extra = (6 if a.softcap else 3) * scores if unfused else ZERO
        bias = scores if a.rel_pos or a.rel_bias != "none" or a.alibi or a.zero_bias else ZERO
        # T5's decoder: the where reads the (1, h, S, S) bias and writes it masked (backward: its gradient)
        folded = above_one(g.t) * g.h * g.t * g.t if causal_bias(call) else ZERO
        if pass_ == Phase.FORWARD:
            sdpa = Traffic("sdpa", g.nq + 2 * g.nkc + bias + extra + folded, g.nq + extra + folded)
        else:
            grouped = 2 * g.nq * shape.grouped if shape.gqa else ZERO
            sdpa = Traffic("sdpa", 3 * g.nq + 2 * g.nkc + bias + grouped + extra + folded,
                           g.nq + 2 * g.nk + bias + grouped + (2 * scores if unfused else ZERO) + folded)
        out = [linear_traffic(n, m, k, o, bias_, pass_, computes_dx(call, n, input_grad))
               for n, m, k, o, bias_ in qkv]
        if learned_queries(call):
            out.insert(0, Traffic("queries", ZERO, ZERO) if pass_ == Phase.FORWARD else
                       Traffic("queries", g.mq * g.c, a.queries * g.c))
        out += qk_norm.traffic(call, g, pass_)
        out += positions.traffic(call, g, scores, pass_)
        if a.sinks:
            out.append(Traffic("sinks", g.h, ZERO) if pass_ == Phase.FORWARD else Traffic("sinks", ZERO, g.h))
        n, m, k, o, bias_ = proj
        return out + [sdpa, linear_traffic(n, m, k, o, bias_, pass_, True)]

    def kv_cache(self, call: OpCall):
        """Causal self-attention caches k and v of every token a later query sees: 2 * B * kv_heads * d per
        token, over the cached and the new tokens (with a sliding window, the last w - 1 cached ones);
        cross-attention over a cache (kv_cache) holds k and v of its kv_cache encoder tokens."""
        a, g = call.attrs, geometry(call)
        if cross_cached(call):  # the encoder's keys and values, read by every step
            return 2 * g.nb * g.kv * g.d * g.sk
        if not a.causal or cross(call):
            return ZERO
        return 2 * g.nb * g.kv * g.d * g.sk

    # -- torch --------------------------------------------------------------------------------
    def build(self, call: OpCall, ev):
        from costspec.nn.attention import Scores, SelfAttention
        from costspec.nn.qk_norm import QKNorm

        a, g = call.attrs, geometry(call)
        cached = ev(g.cached)
        memory = (ev(g.b), cached) if cross_cached(call) else None
        if memory is not None:
            cached = 0
        elif cached and ev(g.t) != 1:
            raise call.fail("the generated module's key/value cache serves one new token per sequence (--phase "
                            "decode); a prefill after cached tokens is costed but not built", "cache",
                            "cache: 0, or one new token")
        grid = tuple(ev(x) for x in pair(a.grid)) if (windowed(call) or a.rel_pos) else None
        rel_bias: tuple | None = None
        if a.rel_bias_shared:
            rel_bias = ("shared", 0, 0)
        elif a.rel_bias == "t5":
            rel_bias = ("t5", ev(a.buckets), ev(a.max_distance), ev(a.rel_bias_readers))
        elif a.rel_bias == "beit":
            rel_bias = ("beit", ev(g.qh), ev(g.qw), ev(a.rel_bias_readers))
        elif a.rel_bias == "swin":
            rel_bias = ("swin", ev(g.qh), ev(g.qw))
        return SelfAttention(ev(a.dim), ev(a.heads), ev(a.head_dim), bool(a.q_bias), bool(a.o_bias), a.fused_qkv,
                             kv_heads=ev(a.kv_heads), gqa=ev(a.kv_heads) != ev(a.heads), window=ev(a.window), grid=grid,
                             rel_pos=a.rel_pos, rope=a.rope, rope_len=ev(g.t), causal=a.causal,
                             qkv_biases=(bool(a.q_bias), bool(a.k_bias), bool(a.v_bias)),
                             rope_dims=ev(a.rope_dims) if a.rope else 0, sliding_window=ev(a.sliding_window),
                             queries=ev(a.queries), rel_bias=rel_bias, unscaled=a.scale == "none", shift=ev(a.shift),
                             cross=ev(g.ckv) if g.ckv is not None else 0,
                             scores=Scores(eager(call), float(a.softcap), bool(a.sinks), ev(a.local_window), ev(g.tq),
                                           a.backend == Backend.MATH, bool(a.alibi), bool(a.zero_bias)),
                             qk_norm=QKNorm(a.qk_norm, a.qk_norm_over, a.qk_norm_weight == "per_head",
                                            bool(a.qk_norm_bias)) if qk_norm.enabled(call) else None,
                             cache=(ev(g.b), cached) if cached else None, memory=memory)

    def link(self, call: OpCall, module, earlier: list) -> None:
        """rel_bias_shared: read the bias of the nearest earlier attention layer with a table of the same kind
        (T5's or BEiT's)."""
        if not call.attrs.rel_bias_shared:
            return
        owners = [(n, m) for n, m in earlier if n.op is self and n.call.attrs.rel_bias == call.attrs.rel_bias
                  and not n.call.attrs.rel_bias_shared]
        kind = {"t5": "T5", "beit": "BEiT"}[call.attrs.rel_bias]
        if not owners:
            raise call.fail(f"rel_bias_shared reads the {kind} bias of an earlier layer, but no earlier attention "
                            "layer has a table", "rel_bias_shared",
                            f"an earlier attention with rel_bias: {call.attrs.rel_bias} and rel_bias_readers (T5: the "
                            "first layer)")
        node, owner = owners[-1]
        slot = owner.rel_bias.add_reader()
        if slot is None:
            raise call.fail(f"more layers read the {kind} bias of '{node.name}' than its rel_bias_readers "
                            f"{owner.rel_bias.readers}", "rel_bias_shared",
                            f"rel_bias_readers on '{node.name}' counting every layer that reads it")
        module.bias_source = (owner.rel_bias, slot)

    def gemms(self, call: OpCall) -> list[Gemm]:
        """Projections as GEMMs on their rows (the (padded) tokens, or the learned queries); SDPA's QK^T
        (sq x d @ d x sk) and AV (sq x sk @ sk x dv) per problem and query head, whose only leading dim a
        fused kernel exposes is the head dim d (the scores stay on chip); the relative positions' two
        einsums as batched matmuls q @ R^T with n = the grid side Hq (rel_h) or Wq (rel_w)."""
        qkv, proj = projections(call)
        out = [Gemm(n, rows, o, k) for n, rows, k, o, _ in qkv]
        if call.attrs.rel_pos:
            out += positions.rel_pos_gemms(geometry(call))
        sd = sdpa_call(call)
        problems = sd.b * sd.h
        out += [Gemm("sdpa", sd.sq, sd.sk, sd.d, problems, "sdpa", ("k",)),
                Gemm("sdpa", sd.sq, sd.dv, sd.sk, problems, "sdpa", ("n",))]
        n, rows, k, o, _ = proj
        return out + [Gemm(n, rows, o, k)]
