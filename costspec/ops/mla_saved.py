"""What an `mla` layer's module keeps for backward (`MultiHeadLatentAttention.saved`), as costspec.nn.mla runs
it in transformers' form (kv_b up-projecting the latent, SDPA over per-head keys and values):

* the input (the q or q_a and the kv_a projections' weight gradients);
* each RMSNorm (q_norm on q_a's output, kv_norm on the latent, a view of kv_a's output) as nn.RMSNorm keeps
  it: the input in fp32 (a copy unless the layer is fp32: then the storage it views), 1/rms per row and the
  normalised fp32 values; and the norm's output, the next projection's input;
* the SDPA's: query and key are concatenations (of q's or k's no-rope dims and the rotated dims: tensors of
  their own), v a view of kv_b's output. torch's cpu flash kernel takes the call only where the query's head
  dim is v's (d_n + d_r = d_v): q, k, v, the output and the fp32 logsumexp; else the math composite: the
  scaled q and k, the probabilities (fp32 from 16 bits), v (an fp32 copy from 16 bits; in fp32 a view of
  kv_b's output where (B, h, S, d_v) folds to (B*h, S, d_v): one sample, one head or one token);
* the output projection's input (B*S x h*d_v): a copy of the output, or (one head or one token) a view of it.

Eager attention (`backend: eager`: matmul, softmax, matmul, in the layer's dtype) keeps the query and the key
(the concatenations), the probabilities, v (a view of kv_b's output where it folds, as above, else a copy) and the
output projection's input.

The weight-absorbed form (`absorb`) keeps, besides the input and the norms', uk's input (a view of the query
projection's output, all of its storage: (B, h, S, d_n) folds to (h, B*S, d_n)), the attention's over the latent
and uv's input (h x B*S x r, a copy of the attention output or a view of it: the same bytes) and the output
projection's (B*S x h*d_v, likewise). Its query (r + d_r dims) is never v's (r): torch's flash kernel never takes
it and either backend runs the math composite, which repeats the one key/value head to the h query heads (h > 1):
the scaled q and k, the probabilities and v at B*h*S*(r + d_r), B*h*S*S and B*h*S*r elements (fp32 from 16
bits); one head keeps the latent itself, the same elements. Eager attention repeats them likewise (in the
layer's dtype), except for one sample, where repeat_kv's expanded k and v fold to (h, S, .) as stride-0 views: the
key's concatenation (B*S*(r + d_r)) and the latent (B*S*r) are kept.

A served cache (`cache`: a decode step, not a training one) is not modelled.
"""
from __future__ import annotations

import sympy

from costspec.core.vocab import Backend
from costspec.ops.opdef import INPUT, STAT_BYTES, OpCall, Saved
from costspec.ops.work import is_zero


def mla_saved(call: OpCall, g) -> list[Saved]:
    """See the module docstring; `g`: the layer's geometry (costspec.ops.mla.Geom)."""
    a = call.attrs
    if not is_zero(a.cache):
        raise NotImplementedError("what mla saves for backward with a key/value cache (a decode step) is not modelled")
    b = call.precision.bytes_per_element
    m, h, dq = g.m, g.h, g.dn + g.dr
    saved = [Saved(INPUT, m * g.c, b, folded=True)]
    if not is_zero(g.rq):
        saved += _rmsnorm("q_a", m, g.rq, g.rq, b)
    saved += _rmsnorm("kv_a", m, g.r, g.r + g.dr, b)
    eager = a.backend == Backend.EAGER
    acc = max(b, STAT_BYTES) if isinstance(b, int) else STAT_BYTES  # the math composite's fp32 from 16 bits
    if a.absorb:  # no kv_b: the latent is the key's concatenation's and v's (counted with the attention's)
        return [s for s in saved if s.tensor != "kv_a_norm_out"] + _absorbed(g, b, b if eager else acc, eager)
    heads = g.b * h * g.s
    kv = Saved("kv", m * h * (g.dn + g.dv), b)
    if eager:
        return saved + [Saved("query", heads * dq, b), Saved("key", heads * dq, b),
                        Saved("probabilities", heads * g.s, b), *_folded_v(g, b),
                        Saved("proj_input", heads * g.dv, b)]
    view = sympy.Or(sympy.Eq(h, 1), sympy.Eq(g.s, 1))  # (B, h, S, d_v) -> (B, S, h*d_v) without a copy
    flash = [Saved("query", heads * dq, b), Saved("key", heads * dq, b), kv,
             Saved("out", heads * g.dv, b), Saved("logsumexp", heads, STAT_BYTES),
             Saved("proj_input", sympy.Piecewise((0, view), (heads * g.dv, True)), b)]
    math = [Saved("q_scaled", heads * dq, acc), Saved("k_scaled", heads * dq, acc),
            Saved("probabilities", heads * g.s, acc), *_math_v(g, b), Saved("proj_input", heads * g.dv, b)]
    kernel = sympy.Eq(dq, g.dv) if a.backend == Backend.FLASH else sympy.false
    return saved + _either(kernel, flash, math)


def _rmsnorm(source: str, m, width, source_width, b) -> list[Saved]:
    """nn.RMSNorm on `width` columns of the projection `source` (of `source_width` columns): its fp32 input (the
    source's storage in fp32), 1/rms, the normalised values; and its output."""
    x = Saved(source, m * source_width, b) if b == STAT_BYTES else Saved(f"{source}_fp32", m * width, STAT_BYTES)
    return [x, Saved(f"{source}_rstd", m, STAT_BYTES), Saved(f"{source}_normalized", m * width, STAT_BYTES),
            Saved(f"{source}_norm_out", m * width, b)]


def _absorbed(g, b, acc, eager: bool) -> list[Saved]:
    """The weight-absorbed form's uk input, attention over the latent and uv and proj inputs (see the module
    docstring); the attention's tensors at `acc` bytes an element (eager: the layer's dtype; the math
    composite: fp32 from 16 bits)."""
    heads, dk = g.b * g.h * g.s, g.r + g.dr
    if eager:  # repeat_kv's expand folds to the h heads without a copy for one sample: the key's and the latent's
        one = sympy.Eq(g.b, 1)
        key = Saved("key", sympy.Piecewise((g.m * dk, one), (heads * dk, True)), b)
        values = Saved("values", sympy.Piecewise((g.m * g.r, one), (heads * g.r, True)), b)
        query = Saved("query", heads * dk, b)
    else:
        query, key, values = (Saved("q_scaled", heads * dk, acc), Saved("k_scaled", heads * dk, acc),
                              Saved("values", heads * g.r, acc))
    return [Saved("q", g.m * g.h * (g.dn + g.dr), b), query, key, Saved("probabilities", heads * g.s, acc), values,
            Saved("uv_input", heads * g.r, b), Saved("proj_input", heads * g.dv, b)]


def _math_v(g, b) -> list[Saved]:
    """v as the composite's second product keeps it (see the module docstring)."""
    if b != STAT_BYTES:
        return [Saved("v_copy", g.b * g.h * g.s * g.dv, STAT_BYTES)]
    return _folded_v(g, b)


def _folded_v(g, b) -> list[Saved]:
    """v folded to (B*h, S, d_v) for a batched product: a view of kv_b's output where it folds (one sample, one
    head or one token), else a copy."""
    copy = g.b * g.h * g.s * g.dv
    folds = sympy.Or(sympy.Eq(g.b, 1), sympy.Eq(g.h, 1), sympy.Eq(g.s, 1))
    return [Saved("kv", sympy.Piecewise((g.m * g.h * (g.dn + g.dv), folds), (0, True)), b),
            Saved("v_copy", sympy.Piecewise((0, folds), (copy, True)), b)]


def _either(condition, first: list[Saved], second: list[Saved]) -> list[Saved]:
    """`first` where `condition` holds, else `second` (each item's elements as a Piecewise; a tensor both keep is
    one item, at its size in each)."""
    if condition is sympy.true:
        return first
    if condition is sympy.false:
        return second
    out: dict[str, list] = {}
    for which, items in ((0, first), (1, second)):
        for item in items:
            entry = out.setdefault(item.tensor, [sympy.Integer(0), sympy.Integer(0), item.bytes_per_element])
            entry[which] = item.elements
    return [Saved(name, sympy.Piecewise((e1, condition), (e2, True)), per) for name, (e1, e2, per) in out.items()]
