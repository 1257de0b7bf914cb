"""What one attention computation ran, as the runtime counter recorded it (`Ran`), and the
`sdpa-math-decomposition` / `sdpa-eager` rules derived from it.

A run is recorded per module instance: the aten ops inside one F.scaled_dot_product_attention
call that PyTorch decomposed (the math path: always so on meta), or, where a module computes
attention with its own matmuls (eager attention), the ops from its QK^T bmm to its AV bmm; in
backward, the ops of the autograd nodes those created. The rule states, kind by kind, which form
of the spec's SDPA each recorded count is (q and k scaled as passed, a causal mask built with
tril + where, a where over a boolean mask of [B, 1, S, S], ...) and charges the difference to the
analytic work. A count that no form of the spec's SDPA explains gets no delta: the row then shows
it as a difference, named by kind.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import sympy

from costspec.core.vocab import Backend, Phase
from costspec.ops.attention.sdpa import Sdpa, sdpa_backward, sdpa_forward
from costspec.ops.work import Expr, Work

# the kinds a decomposition runs otherwise than the flash kernel: where the scale and the mask apply. Softmax
# and the sum of a broadcast k / v gradient (GQA) run alike, wherever the model runs them (inside the SDPA
# call or before it, as transformers' repeat_kv): they are compared as they are.
DIFFERING = ("scale", "select", "add")
MATH = "math"  # F.scaled_dot_product_attention, decomposed by PyTorch (_scaled_dot_product_attention_math)
EAGER = "eager"  # no SDPA call: the module's own matmuls, scale, mask and softmax


@dataclass(frozen=True)
class Ran:
    """One instance's attention as it ran: `how` (MATH or EAGER), and per phase the matmul-class
    FLOPs and pointwise (kind, elements) of its ops."""

    how: str
    matmul: tuple[tuple[str, int], ...]  # (phase, FLOPs)
    pointwise: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # (phase, ((kind, elements), ...))
    # the mask an SDPA call was given: "causal" (is_causal), "bool:bh" with b / h "B" or "1" (its batch and
    # head dims: the mask's shape [b, h, Sq, Sk]), "float", "none"; "" where unknown (eager attention)
    mask: str = ""

    @classmethod
    def of(cls, how: str, matmul: Mapping[str, int], pointwise: Mapping[str, Mapping[str, int]],
           mask: str = "") -> Ran:
        return cls(how, tuple(sorted(matmul.items())),
                   tuple(sorted((p, tuple(sorted((k, v) for k, v in kinds.items() if v)))
                                for p, kinds in pointwise.items())), mask)

    def flops(self, phase: str) -> int:
        return dict(self.matmul).get(phase, 0)

    def kinds(self, phase: str) -> dict[str, int]:
        return dict(dict(self.pointwise).get(phase, ()))


def _mask_forms(a: Sdpa, mask: str) -> list[tuple[Expr, str]]:
    """The selects of building the mask an SDPA call was given (its math path turns a boolean mask
    into a float one with one where per element)."""
    if mask == "causal":
        return [(2 * a.sq * a.sk, "a causal mask built with tril + where: 2*Sq*Sk")]
    if mask.startswith("bool:"):
        b, h = mask[5], mask[6]
        count = (a.b if b == "B" else 1) * (a.h if h == "H" else 1) * a.sq * a.sk
        dims = f"[{'B' if b == 'B' else 1}, {'h' if h == 'H' else 1}, Sq, Sk]"
        return [(count, f"a where over the boolean mask passed, {dims}: {sympy.sstr(count).replace('**', '^')}")]
    return []


def _forms(kind: str, a: Sdpa, phase: Phase, how: str, mask: str = "") -> list[tuple[Expr, str]]:
    """The forms a count of `kind` takes in a run of the SDPA `a`, each with its formula in words,
    most specific first (where two forms are equal at the bound dims, the first names it)."""
    b, h, kv, sq, sk, d = a.b, a.h, a.kv, a.sq, a.sk, a.d
    scores = a.scores
    q = b * h * sq * d
    zero: list[tuple[Expr, str]] = [(sympy.Integer(0), "none")]
    if kind == "scale":
        qk = [(q + b * h * sk * d, "q and k scaled by sqrt(scale), k at the h query heads: B*h*(Sq+Sk)*d"),
              (q + b * kv * sk * d, "q and k scaled by sqrt(scale), k as passed at its kv heads: B*(h*Sq+kv*Sk)*d")]
        each = [(scores, "every score scaled: B*h*Sq*Sk")]
        return (qk + each if how == MATH else each + qk) + zero
    # a mask is a form of the spec's SDPA only where the spec masks (causal, a sliding window) or adds a bias
    masked, biased = a.masked, a.bias
    if kind == "select":
        if not masked:
            return zero
        if phase == Phase.BACKWARD:
            return zero + [(scores, "a where on every score's gradient: B*h*Sq*Sk")]
        if mask:
            return _mask_forms(a, mask) + zero
        return zero + [(2 * sq * sk, "a causal mask built with tril + where: 2*Sq*Sk"),
                       (sq * sk, "a where over a boolean mask of [Sq, Sk]: Sq*Sk"),
                       (b * sq * sk, "a where over a boolean mask of [B, 1, Sq, Sk]: B*Sq*Sk"),
                       (h * sq * sk, "a where over a boolean mask of [1, h, Sq, Sk]: h*Sq*Sk"),
                       (scores, "a where on every score: B*h*Sq*Sk")]
    if kind == "add":
        if phase == Phase.BACKWARD:
            return zero
        return zero + ([(scores, "a mask added to every score: B*h*Sq*Sk")] if masked or biased else []) \
            + ([(2 * scores, "a mask and a bias added to every score: 2*B*h*Sq*Sk")] if masked and biased else [])
    return []


def _matmul_forms(a: Sdpa, phase: Phase) -> list[tuple[Expr, str]]:
    sdpa = sdpa_forward if phase == Phase.FORWARD else sdpa_backward
    out = [(sum(sdpa(a, Backend.MATH).matmul.values(), sympy.Integer(0)),
            "2 bmm" if phase == Phase.FORWARD else "4 bmm, no recompute of QK^T: 8*B*h*Sq*Sk*d")]
    if phase == Phase.BACKWARD:
        out.append((sum(sdpa(a, Backend.FLASH).matmul.values(), sympy.Integer(0)),
                    "5 bmm, QK^T recomputed: 10*B*h*Sq*Sk*d"))
    return out


def derived_delta(a: Sdpa, backend: Backend, phase: Phase, ran: Ran,
                  ev: Callable[[Expr], int]) -> tuple[Work, list[str]]:
    """(measured - analytic, the forms named) for one instance: each recorded kind matched to the
    first form of `a` with its count. `a` is the SDPA over all the scores (causal_flops aside)."""
    sdpa = sdpa_forward if phase == Phase.FORWARD else sdpa_backward
    analytic = sdpa(a, backend)
    recorded = ran.kinds(phase)
    delta: dict[str, Expr] = {}
    named: list[str] = []
    for kind in sorted((set(recorded) | set(analytic.pointwise)) & set(DIFFERING)):
        count = recorded.get(kind, 0)
        forms = _forms(kind, a, phase, ran.how, ran.mask)
        form = next(((e, words) for e, words in forms if ev(e) == count), None)
        if form is None:
            named.append(f"{kind}: {count:,} elements, no form of this SDPA")
            continue
        expr, words = form
        diff = sympy.expand(expr - analytic.pointwise.get(kind, sympy.Integer(0)))
        if diff != 0:
            delta[kind] = diff
            named.append(f"{kind}: {words}")
    matmul: dict[str, Expr] = {}
    spec = sum(analytic.matmul.values(), sympy.Integer(0))
    form = next(((e, w) for e, w in _matmul_forms(a, phase) if ev(e) == ran.flops(phase)), None)
    if form is None:
        named.append(f"matmul: {ran.flops(phase):,} FLOPs, no form of this SDPA")
    elif sympy.expand(form[0] - spec) != 0:
        matmul["sdpa"] = sympy.expand(form[0] - spec)
        named.append(f"matmul: {form[1]}")
    return Work(matmul, delta), named
