"""What an attention layer's module keeps for backward (`OpDef.saved`), by SDPA kernel family.

Attention over one token sequence or within windows of a token grid, fused or separate q/k/v
projections, grouped-query heads, RoPE, masks (causal, sliding or local windows, ALiBi, shifted windows),
learned queries, SAM's relative positions, T5's and Swin's bias tables:

* the input (the q/k/v projections' weight gradient), or with windows its partition (a copy unless the grid
  splits into whole windows by views); learned queries expanded over the batch (a copy unless a view);
  SAM's relative positions: q folded for each of its two products and the gathered tables;
* flash (the fused kernel): q, k, v, the output and the fp32 logsumexp per query row. q, k and v are views:
  of the fused projection's output (one tensor of B x S x (h + 2 kv) x d), of RoPE's rotated q-and-k, of
  the separate projections' outputs; the output projection reads a view of the kernel's (B, S, h, d) output;
* math (torch's composite `_scaled_dot_product_attention_math`): q and k, each scaled by sqrt(scale) (new
  tensors; k repeated to h heads with grouped queries), the probabilities, v, all in fp32 when the layer
  runs in 16 bits (the composite upcasts them), and the output projection's input, the (B, S, h, d) copy of
  the output. A mask that needs a gradient (a learned bias) is not taken by the cpu flash kernel: math;
* eager (and soft-capping, sinks): `costspec.ops.attention.saved_eager`.

These are torch's cpu kernels, which `validate` runs (the flash kernel takes constant masks there; its output
has q's layout; CUDA's is always (B, S, h, d)).

q/k norms (`costspec.ops.attention.qk_norm.saved`): what each norm keeps, and q and k become the norms' outputs
(new tensors; the flash kernel's output then has their (B, h, S, d) layout when the norm is per head).

Cross-attention: q from the input, k and v from the kv value (both kept for the projections' weight gradients,
the kv value once per projection reading it where it is strided); q, k and v as above, k and v viewing the kv
projections' outputs.

A served cache, and SAM's relative positions with RoPE or a q/k norm per head raise: their saved tensors are not
modelled yet.
"""
from __future__ import annotations

import sympy

from costspec.core.vocab import Backend
from costspec.ops.attention import qk_norm
from costspec.ops.attention.geometry import eager, geometry, gqa, learned_queries, pair, projections, windowed
from costspec.ops.attention.saved_eager import eager_saved, projected
from costspec.ops.opdef import INPUT, STAT_BYTES, OpCall, Saved, input_tensor
from costspec.ops.work import is_zero


def unmodelled(call: OpCall) -> list[str]:
    """The options of this layer whose saved tensors are not modelled."""
    return [] if is_zero(geometry(call).cached) else ["a key/value cache"]


def attention_saved(call: OpCall, backend: Backend) -> list[Saved]:
    """See the module docstring; `backend`: the layer's kernel family."""
    missing = unmodelled(call)
    if missing:
        raise NotImplementedError(f"attention's saved tensors with {', '.join(missing)} are not modelled")
    g = geometry(call)
    b = call.precision.bytes_per_element
    saved = _projection_input(call, b) + _rel_pos(call, b)
    saved += qk_norm.saved(call, g, (projected(call, "q", b)[0], projected(call, "k", b)[0]), b)
    if learned_queries(call):  # the queries expanded over the batch, folded to rows: a copy unless that is a view
        view = sympy.Or(sympy.Eq(g.b, 1), sympy.Eq(g.tq, 1))  # (of the parameter: one sample or one query)
        saved.append(Saved("queries", sympy.Piecewise((0, view), (g.mq * g.c, True)), b))
    if eager(call):
        return merged(saved + eager_saved(call, b) + [Saved("proj_input", g.nq, b)])
    if backend == Backend.FLASH and not mask_needs_grad(call):
        return merged(saved + _flash(call, b))
    acc = max(b, STAT_BYTES) if isinstance(b, int) else STAT_BYTES
    keys = g.nb * g.h * g.t * g.d  # k and v as the composite multiplies them: at the h query heads
    return merged(saved + [
        Saved("q_scaled", g.nq, acc), Saved("k_scaled", keys, acc),
        Saved("probabilities", g.nb * g.h * g.tq * g.t, acc), *_math_v(call, b), Saved("proj_input", g.nq, b)])


def _math_v(call: OpCall, b) -> list[Saved]:
    """v as the composite's second product keeps it: repeated to h heads with grouped queries, upcast from 16
    bits, or else (fp32, all heads) a view of its projection's output -- whose whole storage it then keeps
    (the fused qkv output) -- where (B, kv, S, d) folds to (B * kv, S, d) without a copy, a copy otherwise."""
    g = geometry(call)
    keys = g.nb * g.h * g.t * g.d
    if gqa(call) or b < STAT_BYTES:
        return [Saved("v_copy", keys, max(b, STAT_BYTES))]
    qkv = projections(call)[0]
    source = Saved(qkv[-1].name, g.m * qkv[-1].n, b) if call.attrs.fused_qkv else Saved("v", g.nk, b)
    # (a fused projection's rows are wider than v's kv x d: one token does not make them fold)
    folds = sympy.Or(sympy.Eq(g.nb, 1), sympy.Eq(g.kv, 1), sympy.Eq(g.t, 1) & sympy.S(not call.attrs.fused_qkv))
    return [Saved(source.tensor, sympy.Piecewise((source.elements, folds), (0, True)), b),
            Saved("v_copy", sympy.Piecewise((0, folds), (keys, True)), b)]


def _projection_input(call: OpCall, b) -> list[Saved]:
    """The rows the q/k/v projections read: the input (and with cross-attention the kv value), once per projection
    reading it (a strided value is folded to rows by a copy per reader), or with windows its partition into w x w
    windows (a copy where the grid is padded or rolled, or where a row of the grid holds more than one window of
    w > 1)."""
    g = geometry(call)
    if not windowed(call):
        qkv = projections(call)[0]
        readers = [p for p in qkv if p.name != "q"] if learned_queries(call) or g.ckv is not None else qkv
        # (one sample or one token: a (B, S, C) folds to rows by a view whatever its layout)
        x = Saved(INPUT, g.b * g.s * g.c, b, folded=True, folds=sympy.Or(sympy.Eq(g.b, 1), sympy.Eq(g.s, 1)))
        if g.ckv is not None:
            one_row = sympy.Or(sympy.Eq(g.b, 1), sympy.Eq(g.t, 1))
            return [x] + [Saved(input_tensor(1), g.m * g.ckv, b, folded=True, folds=one_row) for _ in readers]
        return [x for _ in readers]
    a = call.attrs
    gh, gw = pair(a.grid)
    w = a.window
    whole = sympy.And(sympy.Eq(sympy.Mod(gh, w), 0), sympy.Eq(sympy.Mod(gw, w), 0), sympy.S(is_zero(a.shift)))
    return [Saved(INPUT, g.m * g.c, b, folded=True, view=whole & sympy.Or(sympy.Eq(w, 1), sympy.Eq(gw, w)))]


def _rel_pos(call: OpCall, b) -> list[Saved]:
    """SAM's decomposed relative positions: the tables gathered per (query, key) row, and q folded to the rows of
    each product, (q_h, B*h*q_w, d) and (q_w, B*h*q_h, d): copies of q, one shared or views of q's storage (the
    fused projection's output, or q's) where sizes of 1 let torch fold by views."""
    if not call.attrs.rel_pos:
        return []
    g = geometry(call)
    if call.attrs.rope or (qk_norm.enabled(call) and call.attrs.qk_norm_over == "head"):
        # (q then a (B, h, S, d) tensor of its own, which the two products fold otherwise)
        raise NotImplementedError("attention's saved tensors with rel_pos and rope or a q/k norm per head together "
                                  "are not modelled")
    heads, problems, rows, cols = (sympy.Gt(n, 1) for n in (g.h, g.nb, g.qh, g.qw))
    one_copy = problems & heads & ~(rows & cols)
    if own_rows(call):  # q's own (B, S, h*d): one token folds without a copy
        one_copy &= rows | cols
    with_source = (~problems & heads & sympy.Xor(rows, cols)) | (problems & ~heads & rows & cols)
    copies = sympy.Piecewise((2, heads & rows & cols), (1, one_copy | with_source), (0, True))
    source = _q_source(call, b)
    return [Saved("rel_h", g.qh * g.qh * g.d, b), Saved("rel_w", g.qw * g.qw * g.d, b),
            Saved("q_rows", copies * g.nq, b),
            Saved(source.tensor, sympy.Piecewise((0, (heads & rows & cols) | one_copy), (source.elements, True)), b)]


def _q_source(call: OpCall, b) -> Saved:
    """The storage q views before the SDPA (no rope): the fused projection's output, q's own, or its norm's output
    (over the width)."""
    g = geometry(call)
    if qk_norm.enabled(call):  # (over the width: a (B, S, h*d) of its own)
        return qk_norm.normed(call, g, b)[0]
    if call.attrs.fused_qkv and not learned_queries(call):
        return Saved("qkv", g.m * projections(call)[0][0].n, b)
    return Saved("q", g.nq, b)


def own_rows(call: OpCall) -> bool:
    """q before the SDPA views a (B, S, h*d) of its own (its projection's, or a q norm's over the width), not the
    fused projection's wider rows."""
    return not call.attrs.fused_qkv or learned_queries(call) or qk_norm.enabled(call)


def merged(items: list[Saved]) -> list[Saved]:
    """One item per tensor of the op's own: a storage two parts may keep (each either all of it or none) is kept
    once, at the larger."""
    out: dict[str, Saved] = {}
    inputs = [item for item in items if item.tensor.startswith(INPUT)]  # (the walk dedups those by identity)
    for item in items:
        if item.tensor.startswith(INPUT):
            continue
        if item.tensor in out:
            first = out[item.tensor]
            out[item.tensor] = Saved(item.tensor, sympy.Max(first.elements, item.elements), first.bytes_per_element)
        else:
            out[item.tensor] = item
    return inputs + list(out.values())


def mask_needs_grad(call: OpCall) -> bool:
    """A learned bias (rel_pos, rel_bias) is a mask that needs a gradient: torch's cpu flash kernel does not take
    one, the SDPA runs the math composite whatever the backend."""
    return bool(call.attrs.rel_pos) or call.attrs.rel_bias != "none"


def copied(elements, call: OpCall):
    """`elements` when (B, h, S, d) -> (B, S, h * d) copies, 0 when it is a view (one head or one token)."""
    g = geometry(call)
    return sympy.Piecewise((0, sympy.Or(sympy.Eq(g.h, 1), sympy.Eq(g.tq, 1))), (elements, True))


def _sdpa_source(call: OpCall, which: str, b) -> Saved:
    """The storage q, k or v views as the SDPA reads it: RoPE's rotated q-and-k, the q/k norms' outputs, or the
    projections' outputs (the fused projection's whole output)."""
    if which != "v" and call.attrs.rope:
        g = geometry(call)
        return Saved("rotated_qk", g.nq + g.nk, b)
    if which != "v" and qk_norm.enabled(call):
        return qk_norm.normed(call, geometry(call), b)[0 if which == "q" else 1]
    return projected(call, which, b)[0]


def _flash(call: OpCall, b) -> list[Saved]:
    """q, k, v by the storage they view, the output (the output projection's input is a view of it) and
    the logsumexp."""
    a, g = call.attrs, geometry(call)
    out = [_sdpa_source(call, which, b) for which in ("q", "k", "v")]  # (one storage each: merged)
    out += [Saved("out", g.nq, b), Saved("logsumexp", g.nb * g.h * g.tq, sympy.Integer(STAT_BYTES))]
    if a.rope or (qk_norm.enabled(call) and a.qk_norm_over == "head"):
        # the kernel's output takes q's layout, (B, h, S, d) after RoPE or a norm per head: the projection's input
        # is a copy
        out.append(Saved("proj_input", copied(g.nq, call), b))
    return out
