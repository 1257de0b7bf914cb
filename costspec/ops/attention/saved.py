"""What an attention layer's module keeps for backward (`OpDef.saved`), by SDPA kernel family.

Self-attention over one token sequence, fused or separate q/k/v projections, grouped-query heads, RoPE,
causal or sliding-window masks:

* the input (the q/k/v projections' weight gradient), the output projection's input;
* flash (the fused kernel): q, k, v, the output and the fp32 logsumexp per query row. q, k and v are views:
  of the fused projection's output (one tensor of B x S x (h + 2 kv) x d), of RoPE's rotated q-and-k, of
  the separate projections' outputs; the output projection reads a view of the kernel's (B, S, h, d) output;
* math (torch's composite `_scaled_dot_product_attention_math`): q and k, each scaled by sqrt(scale) (new
  tensors; k repeated to h heads with grouped queries), the probabilities, v, all in fp32 when the layer
  runs in 16 bits (the composite upcasts them), and the output projection's input, the (B, S, h, d) copy of
  the output.

These are torch's cpu kernels, which `validate` runs (the flash kernel takes masks there; its output has q's
layout; CUDA's is always (B, S, h, d)).

Other layouts (windows, relative positions and biases, cross-attention, learned queries, q/k norms, the
eager path with soft-capping or sinks, a served cache) raise: their saved tensors are not modelled yet.
"""
from __future__ import annotations

import sympy

from costspec.core.vocab import Backend
from costspec.ops.attention.geometry import geometry, gqa, projections, windowed
from costspec.ops.opdef import INPUT, STAT_BYTES, OpCall, Saved
from costspec.ops.work import is_zero

UNMODELLED = ("rel_pos", "queries", "rel_bias", "shift", "local_window", "softcap", "sinks", "qk_norm", "kv",
              "alibi")


def unmodelled(call: OpCall) -> list[str]:
    """The options of this layer whose saved tensors are not modelled."""
    a = call.attrs
    found = [name for name in UNMODELLED
             if getattr(a, name, None) not in (None, False, "none", 0) and not is_zero(getattr(a, name, 0) or 0)]
    if windowed(call):
        found.append("window")
    if a.backend == Backend.EAGER:
        found.append("backend: eager")
    if not is_zero(geometry(call).cached):
        found.append("a key/value cache")
    return found


def attention_saved(call: OpCall, backend: Backend) -> list[Saved]:
    """See the module docstring; `backend`: the layer's kernel family."""
    missing = unmodelled(call)
    if missing:
        raise NotImplementedError(f"attention's saved tensors with {', '.join(missing)} are not modelled")
    g = geometry(call)
    b = call.precision.bytes_per_element
    saved = [Saved(INPUT, g.b * g.s * g.c, b, folded=True)]
    if backend == Backend.FLASH:
        return saved + _flash(call, b)
    acc = max(b, STAT_BYTES) if isinstance(b, int) else STAT_BYTES
    keys = g.nb * g.h * g.t * g.d  # k and v as the composite multiplies them: at the h query heads
    return saved + [
        Saved("q_scaled", g.nq, acc), Saved("k_scaled", keys, acc),
        Saved("probabilities", g.nb * g.h * g.tq * g.t, acc), _math_v(call, b), Saved("proj_input", g.nq, b)]


def _math_v(call: OpCall, b) -> Saved:
    """v as the composite's second product keeps it: repeated to h heads with grouped queries, upcast from 16
    bits, or else (fp32, all heads) a view of its projection's output -- whose whole storage it then keeps
    (the fused qkv output) -- where (B, kv, S, d) folds to (B * kv, S, d) without a copy, a copy otherwise."""
    g = geometry(call)
    keys = g.nb * g.h * g.t * g.d
    if gqa(call) or b < STAT_BYTES:
        return Saved("v", keys, max(b, STAT_BYTES))
    source = Saved("qkv", g.b * g.s * projections(call)[0][0].n, b) if call.attrs.fused_qkv else Saved("v", g.nk, b)
    folds = sympy.Or(sympy.Eq(g.nb, 1), sympy.Eq(g.kv, 1), sympy.Eq(g.t, 1))
    return Saved(source.tensor, sympy.Piecewise((source.elements, folds), (keys, True)), b)


def copied(elements, call: OpCall):
    """`elements` when (B, h, S, d) -> (B, S, h * d) copies, 0 when it is a view (one head or one token)."""
    g = geometry(call)
    return sympy.Piecewise((0, sympy.Or(sympy.Eq(g.h, 1), sympy.Eq(g.tq, 1))), (elements, True))


def _flash(call: OpCall, b) -> list[Saved]:
    """q, k, v by the storage they view, the output (the output projection's input is a view of it) and
    the logsumexp."""
    a, g = call.attrs, geometry(call)
    qkv, _ = projections(call)
    rows = g.b * g.s
    if a.rope:  # q and k: views of the rotated pair; v of its projection's output
        out = [Saved("rotated_qk", g.nq + g.nk, b)]
        if a.fused_qkv:
            out.append(Saved("qkv", rows * qkv[0].n, b))
        else:
            out.append(Saved("v", g.nk, b))
    elif a.fused_qkv:
        out = [Saved("qkv", rows * qkv[0].n, b)]
    else:
        out = [Saved("q", g.nq, b), Saved("k", g.nk, b), Saved("v", g.nk, b)]
    out += [Saved("out", g.nq, b), Saved("logsumexp", g.nb * g.h * g.tq, sympy.Integer(STAT_BYTES))]
    if a.rope:  # the kernel's output takes q's layout, (B, h, S, d) after RoPE: the projection's input is a copy
        out.append(Saved("proj_input", copied(g.nq, call), b))
    return out
