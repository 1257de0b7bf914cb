"""What eager attention keeps for backward (`backend: eager`, or soft-capping and sinks, which PyTorch's SDPA
does not run): transformers' eager_attention_forward as the generated module runs it, in the layer's dtype.

* q and k^T as the first product folds them to (B*h, S, d) batches: views of the storage they come from (the
  fused projection's output, RoPE's rotated q-and-k, q's or k's own) where the fold needs no copy, else
  copies; with grouped queries k and v are repeated to the h heads first (copies, which fold as views);
* the soft-capped scores' tanh (its output);
* the probabilities (the softmax's output; with sinks over S + 1 keys, the sink column sliced off by a view);
* v as the second product folds it, as k.

Where the fold is a view: one attention problem, one head, or (a projection's own output) one token; RoPE's
partial rotation concatenates q and k anew (contiguous: always a view); q/k norms (without RoPE) make q and k
anew, per head a contiguous (B, heads, S, d) (always a view), over the width a (B, S, heads*d) of their own.
"""
from __future__ import annotations

import sympy

from costspec.ops.attention import qk_norm
from costspec.ops.attention.geometry import geometry, gqa, learned_queries, projections
from costspec.ops.opdef import OpCall, Saved


def eager_saved(call: OpCall, b) -> list[Saved]:
    """q, k, the tanh of soft-capping, the probabilities and v (see the module docstring)."""
    a, g = call.attrs, geometry(call)
    rows = g.nb * g.h * g.tq
    saved = [*_folded(call, "q", b)]
    saved += _repeated(call, "k", b) if gqa(call) else _folded(call, "k", b)
    if a.softcap:
        saved.append(Saved("tanh", rows * g.t, b))
    saved.append(Saved("probabilities", rows * (g.t + (1 if a.sinks else 0)), b))
    saved += _repeated(call, "v", b) if gqa(call) else _folded(call, "v", b)
    return saved


def _repeated(call: OpCall, which: str, b) -> list[Saved]:
    """k or v repeated to the h query heads and folded: a view of its storage with one key/value head in one
    problem (the repeat is a stride-0 view), else a copy of B*h*S*d."""
    g = geometry(call)
    source = _partial_rotation(call, which, b) or _source(call, which, b)[0]
    view = sympy.And(sympy.Eq(g.nb, 1), sympy.Eq(g.kv, 1))
    return [Saved(source.tensor, sympy.Piecewise((source.elements, view), (0, True)), b),
            Saved(f"{which}_repeated", sympy.Piecewise((0, view), (g.nb * g.h * g.t * g.d, True)), b)]


def _partial_rotation(call: OpCall, which: str, b) -> Saved | None:
    """q or k after a partial RoPE (rope_dims < head_dim): concatenated anew, contiguous; None otherwise."""
    a, g = call.attrs, geometry(call)
    if which == "v" or not a.rope or a.rope_dims is None or sympy.sympify(a.rope_dims - a.head_dim) == 0:
        return None
    heads, tokens = (g.h, g.tq) if which == "q" else (g.kv, g.t)
    return Saved(f"{which}_rotated", g.nb * heads * tokens * g.d, b)


def _folded(call: OpCall, which: str, b) -> list[Saved]:
    """q, k or v folded to (problems * heads, tokens, d): the storage it views where that needs no copy, else a
    copy of its elements."""
    g = geometry(call)
    heads, tokens = (g.h, g.tq) if which == "q" else (g.kv, g.t)
    elements = g.nb * heads * tokens * g.d
    rotated = _partial_rotation(call, which, b)
    if rotated is not None:  # a partial rotation's cat: contiguous, folds as a view
        return [rotated]
    source, folds = _source(call, which, b)
    return [Saved(source.tensor, sympy.Piecewise((source.elements, folds), (0, True)), b),
            Saved(f"{which}_copy", sympy.Piecewise((0, folds), (elements, True)), b)]


def _source(call: OpCall, which: str, b) -> tuple[Saved, sympy.Basic]:
    """The storage q, k or v views, and where folding it to (problems * heads, tokens, d) is a view: with one
    problem or one head; with one token too where its rows are that tensor's alone (a projection of h*d or
    kv*d outputs, a q/k norm over the width); always for a q/k norm per head (a contiguous (B, heads, S, d))."""
    a, g = call.attrs, geometry(call)
    heads, tokens = (g.h, g.tq) if which == "q" else (g.kv, g.t)
    one = sympy.Or(sympy.Eq(g.nb, 1), sympy.Eq(heads, 1))
    if a.rope and which != "v":
        return Saved("rotated_qk", g.nq + g.nk, b), one
    if qk_norm.enabled(call) and which != "v":
        normed = qk_norm.normed(call, g, b)[0 if which == "q" else 1]
        return normed, sympy.Or(one, sympy.Eq(tokens, 1)) if a.qk_norm_over == "all" else sympy.true
    source, own_rows = projected(call, which, b)
    return source, sympy.Or(one, sympy.Eq(tokens, 1)) if own_rows else one


def projected(call: OpCall, which: str, b) -> tuple[Saved, bool]:
    """The storage q, k or v views as the projections write it, and whether its rows are that tensor's alone (a
    projection of h*d or kv*d outputs: one token then folds as a view)."""
    qkv = {p.name: p for p in projections(call)[0]}
    if which in qkv:
        p = qkv[which]
        return Saved(which, p.rows * p.n, b), True
    fused = qkv["kv"] if learned_queries(call) or "kv" in qkv else qkv["qkv"]
    return Saved(fused.name, fused.rows * fused.n, b), False
