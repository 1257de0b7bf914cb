"""The named differences between attention's analytic work and what the runtime counters measure:
how the attention call ran (eagerly by the spec's own module; F.scaled_dot_product_attention decomposed,
as recorded: `ran`, or eager attention without an SDPA call; fused and counted; fused and not counted),
causal_flops: useful, and autograd's skipped reductions over relative-position axes of length 1.
`attention_rules` serves every op with an attention call (attention, mla)."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

from costspec.core.vocab import Backend, FusedRun, Phase
from costspec.ops.attention.geometry import eager, geometry, sdpa_call
from costspec.ops.attention.ran import EAGER, Ran, derived_delta
from costspec.ops.attention.sdpa import Sdpa, sdpa_backward, sdpa_forward
from costspec.ops.opdef import OpCall, Reconcile
from costspec.ops.work import Expr, Work, is_zero, pointwise


def rel_pos_rules(call: OpCall, pass_: Phase, ev: Callable[[Expr], int]) -> list[Reconcile]:
    """NB: the gradients of rel_h and rel_w sum the bias gradient over the other grid axis; over an
    axis of length 1 (a grid or window one token wide) autograd runs no reduction."""
    if pass_ != Phase.BACKWARD or not call.attrs.rel_pos:
        return []
    g = geometry(call)
    scores = g.nb * g.h * g.t * g.t
    ones = sum(1 for side in (g.qh, g.qw) if ev(side) == 1)
    if not ones:
        return []
    return [Reconcile("broadcast-grad-size-1", "rel_pos", pointwise("bias_grad", -ones * scores),
                      "a relative-position axis of length 1: autograd reduces the bias gradient over the other "
                      "axis only when it is longer than 1; costspec counts one addition per score for each axis")]


def _useful(shape: Sdpa, executed: Work, analytic: Work) -> list[Reconcile]:
    if not shape.useful:
        return []
    masked = Work(executed.matmul) + Work(analytic.matmul).scaled(-1)
    return [Reconcile("causal-useful-flops", "sdpa", masked,
                      "FlopCounterMode counts masked attention over all S x S scores (no causal discount); "
                      "causal_flops: useful counts the unmasked pairs (causal: S*(S+1)/2), so the counter also "
                      "sees the matmul FLOPs of the masked ones")]


def eager_rules(shape: Sdpa, backend: Backend, pass_: Phase) -> list[Reconcile]:
    """NB: soft-capping and sinks are options PyTorch's SDPA does not have: the module (and transformers)
    runs them eagerly, whatever the backend the cost follows."""
    sdpa = sdpa_forward if pass_ == Phase.FORWARD else sdpa_backward
    full = replace(shape, useful=False)
    executed = sdpa(full, backend)
    rules = _useful(shape, executed, sdpa(shape, backend))
    if backend == Backend.EAGER:
        return rules
    text = ("soft-capping / sinks: PyTorch's SDPA runs neither, so attention ran eagerly (matmul, softmax, matmul, "
            "as transformers' eager_attention_forward) where the flash backend is one fused kernel")
    if shape.masked:
        text += "; its mask is a float tensor added to the scores (B*h*S^2 adds) where flash selects in registers"
    if pass_ == Phase.BACKWARD:
        text += ("; its backward is 4 matmuls = 8*B*h*S^2*d, the flash backend's 10*B*h*S^2*d recomputes QK^T "
                 "(difference 2*B*h*S^2*d)")
    return rules + [Reconcile("attention-eager", "sdpa", sdpa(full, Backend.EAGER) + executed.scaled(-1), text)]


def sdpa_rules(call: OpCall, pass_: Phase, runtime: Mapping[str, object],
               ev: Callable[[Expr], int] | None = None) -> list[Reconcile]:
    return attention_rules(sdpa_call(call), call.attrs.backend, eager(call), pass_, runtime, ev)


def attention_rules(shape: Sdpa, backend: Backend, eagerly: bool, pass_: Phase,
                    runtime: Mapping[str, object], ev: Callable[[Expr], int] | None = None) -> list[Reconcile]:
    """How the counters see one attention call (`shape`, costed as `backend`), by the way it ran: eagerly
    (the spec's module runs explicit matmuls: eager_rules), or as F.scaled_dot_product_attention decomposed,
    fused and counted, or fused and not counted (runtime["sdpa"]). runtime["ran"]: the runs the counter
    recorded for this layer's instances (`ran.Ran`; absent where nothing was recorded, as for an
    analytic-only caller: the decomposition of costspec's own module is assumed then)."""
    if eagerly:
        return eager_rules(shape, backend, pass_)
    sdpa = sdpa_forward if pass_ == Phase.FORWARD else sdpa_backward
    analytic = sdpa(shape, backend)
    how = runtime.get("sdpa", FusedRun.DECOMPOSED)
    if how == FusedRun.UNCOUNTED:
        formula = "2*B*h*S^2*d*2" if pass_ == Phase.FORWARD else (
            "10*B*h*S^2*d" if backend == Backend.FLASH else "8*B*h*S^2*d")
        device = runtime.get("device", "this device")
        return [Reconcile("sdpa-not-counted", "sdpa", analytic.scaled(-1),
                          f"SDPA not counted by FlopCounterMode on {device} (a fused kernel with no formula): "
                          f"compensated with analytic {formula}, and its fused softmax/scale with the "
                          f"analytic element counts")]
    full = replace(shape, useful=False)
    executed = sdpa(full, backend)
    rules = _useful(shape, executed, analytic)
    if how == FusedRun.DECOMPOSED and "ran" in runtime and ev is not None:
        recorded = _recorded_rule(full, backend, pass_, runtime["ran"], ev)  # type: ignore[arg-type]
        if recorded is not None:
            return rules + recorded
    if how == FusedRun.DECOMPOSED:
        if backend == Backend.MATH:
            return rules
        text = ("SDPA ran as PyTorch's math decomposition (always so on meta), which scales q and k "
                "(B*h*(Sq+Sk)*d multiplies) where the flash backend scales every score (B*h*Sq*Sk)")
        if shape.causal and is_zero(shape.window):
            text += ("; it builds the causal mask with tril + where (2*S^2 selects) and adds it to the scores, "
                     "where flash masks each score in registers (B*h*S^2 selects)")
        elif shape.masked:
            text += ("; it adds the window's float mask to the scores (B*h*S^2 adds) where flash masks each score in "
                     "registers (B*h*S^2 selects)")
        if pass_ == Phase.BACKWARD:
            text += ("; its backward is 4 bmm = 8*B*h*S^2*d, the flash backend's 10*B*h*S^2*d recomputes "
                     "QK^T (difference 2*B*h*S^2*d)")
        return rules + [Reconcile("sdpa-math-decomposition", "sdpa", sdpa(full, Backend.MATH) + executed.scaled(-1),
                                  text)]
    # fused-counted (CUDA flash / efficient / cuDNN kernels): counted as the flash convention,
    # softmax, scaling and masking fused (no separate aten ops).
    fused = Work(sdpa(full, Backend.FLASH).matmul, {})
    return rules + [Reconcile("sdpa-fused-kernel", "sdpa", fused + executed.scaled(-1),
                              "SDPA ran as a fused kernel: FlopCounterMode counts it as flash does (backward "
                              "10*B*h*S^2*d), softmax, scaling and masking are not separate aten ops")]


def _recorded_rule(full, backend: Backend, pass_: Phase, runs: tuple[Ran, ...],
                   ev: Callable[[Expr], int]) -> list[Reconcile] | None:
    """The decomposition rule derived from what the instances ran; None when they did not all run alike
    (the instances' runs could not be told apart, e.g. one head whose ops' shapes coincide): the rule of
    the assumed decomposition applies then."""
    if len(set(runs)) != 1:
        return None
    ran = runs[0]
    delta, named = derived_delta(full, backend, pass_, ran, ev)
    if not delta.matmul and not delta.pointwise:
        return []
    if ran.how == EAGER:
        rule, what = "sdpa-eager", ("attention ran eagerly (its own matmuls, scale, mask and softmax; no "
                                    "F.scaled_dot_product_attention call)")
    else:
        rule, what = "sdpa-math-decomposition", ("SDPA ran as PyTorch's math decomposition (always so on meta; "
                                                 "the CPU fallback)")
    spec = "the flash kernel" if backend == Backend.FLASH else "the spec's math decomposition"
    return [Reconcile(rule, "sdpa", delta, f"{what}; as recorded: " + "; ".join(named)
                      + f" (where {spec} is charged)")]
