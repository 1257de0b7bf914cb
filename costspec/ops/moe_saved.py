"""What a `moe` layer's module keeps for backward (`Moe.saved`), as costspec.nn.moe runs it.

* the input (the router's, the shared MLP's and its gate's weight gradients);
* the router: its scores (softmax's or sigmoid's output), the top-k indices (int64; the gather of
  group-limited or biased choice reads the same ones), the group-limited choice's indices (the two best of
  each group, the kept groups) and its mask (bool, E per token); renormalised weights keep the divided k
  weights and their sum (+ 1e-20: a tensor of its own), top-k-then-softmax the softmax's k outputs;
* the routed rows: each token copied to its k slots (T*k x C; with k = 1 or one token the input itself),
  each expert's MLP on its rows (what an `mlp` keeps, per row: summed over the experts, R rows);
* the weighted sum: the k expert outputs (T*k x C) and the final weights;
* the shared MLP on every token, with a gate its sigmoid and its output.

gpt-oss's experts: with interleaved columns alone, gate and up are strided views of gate_up, kept as a fused
expert's are (gate_up's whole storage); with a clamp limit, the two clamps keep their inputs (views of gate_up:
its storage), the activation keeps what it keeps of the clamped gate (a tensor of its own), and the product
act(gate) * (up + 1) keeps both sides (up + 1 a tensor of its own).
"""
from __future__ import annotations

import sympy

from costspec.ops.activations import activation_saved
from costspec.ops.opdef import INDEX_BYTES, INPUT, OpCall, Saved
from costspec.ops.work import is_zero, numel


def moe_saved(call: OpCall, rows) -> list[Saved]:
    """See the module docstring; `rows`: R, the routed rows the experts process."""
    a = call.attrs
    b = call.precision.bytes_per_element
    t, c = numel(call.in_shape[:-1]), call.in_shape[-1]
    k = a.top_k
    saved = [Saved(INPUT, t * c, b, folded=len(call.in_shape) > 2), *_router(call, t, b)]
    # k = 1, or one token (its k slots a stride-0 view): the experts read the input
    slots = sympy.Piecewise((0, sympy.Eq(k, 1) | sympy.Eq(t, 1)), (t * k * c, True))
    saved.append(Saved("slots", slots, b))
    if a.swiglu_limit:
        saved += _clamped_mlp("expert.", rows, a.hidden, a.fn, b)
    else:
        saved += _mlp("expert.", rows, a.hidden, a.fn, a.gated, a.fused_gate_up, b)
    saved.append(Saved("expert_outputs", t * k * c, b))
    if not is_zero(a.shared_experts):
        saved += _mlp("shared.", t, a.shared_experts * a.shared_hidden, a.fn, a.gated, False, b)
        if a.shared_gate:
            saved += [Saved("shared_gate", t, b), Saved("shared_output", t * c, b)]
    return saved


def _router(call: OpCall, t, b) -> list[Saved]:
    """The scores, indices and weights the routing keeps (see the module docstring)."""
    a = call.attrs
    e, k = a.experts, a.top_k
    out = [Saved("topk_indices", t * k, INDEX_BYTES)]
    if a.scoring == "topk_softmax":  # softmax over the k top logits: its output is the weights
        out.append(Saved("weights", t * k, b))
        return out + ([Saved("final_weights", t * k, b)] if a.routed_scaling_factor else [])
    out.append(Saved("scores", t * e, b))
    if not is_zero(a.n_group):
        out += [Saved("group_best", t * a.n_group * 2, INDEX_BYTES),
                Saved("groups_kept", t * a.topk_group, INDEX_BYTES), Saved("group_mask", t * e, 1)]
    if a.renorm or not a.routed_scaling_factor:  # the top-k values or the gathered scores, kept by the division or
        out.append(Saved("weights", t * k, b))  # the weighted sum (a multiply by the scaling factor keeps none)
    if a.renorm:  # the division keeps both sides; its quotient is the final weights unless they are scaled
        out.append(Saved("renorm_sum", t, b))
    if a.routed_scaling_factor or a.renorm:
        out.append(Saved("final_weights", t * k, b))
    return out


def _mlp(prefix: str, m, hidden, fn: str, gated: bool, fused: bool, b) -> list[Saved]:
    """One MLP on m rows (its input kept by the caller): the activation's input and what it keeps, act(fc1) or
    act(gate), up and their product (gate and up views of one gate_up output when fused)."""
    h = m * hidden
    first = prefix + ("gate" if gated else "fc1")
    if gated and fused:
        first = prefix + "gate_up"
    saved = activation_saved(fn, h * (2 if gated and fused else 1), b, first, prefix + "act", prefix + "act.")
    if gated and fused:  # (the activation's input is the gate half: the storage is all of gate_up)
        saved = [Saved(s.tensor, h if s.tensor != first else 2 * h, b) for s in saved]
    saved.append(Saved(prefix + "act", h, b))
    if gated:
        saved += [Saved(first if fused else prefix + "up", 2 * h if fused else h, b), Saved(prefix + "product", h, b)]
    return saved


def _clamped_mlp(prefix: str, m, hidden, fn: str, b) -> list[Saved]:
    """gpt-oss's clamped expert on m rows (its input kept by the caller): gate_up (the clamps' inputs are views
    of it), what the activation keeps of the clamped gate, act(gate), up + 1 and their product."""
    h = m * hidden
    saved = [Saved(prefix + "gate_up", 2 * h, b)]
    saved += activation_saved(fn, h, b, prefix + "gate_clamped", prefix + "act", prefix + "act.")
    return saved + [Saved(prefix + "act", h, b), Saved(prefix + "up_plus_one", h, b), Saved(prefix + "product", h, b)]
