"""The router of `moe`: its attributes, their checks, and the work of turning the T x E router logits
into each token's k routing weights, forward and backward, step by step as the transformers routers
run them (costspec/nn/moe.py `MixtureOfExperts.route` runs the same aten ops):

    scoring softmax (Mixtral, Qwen, OLMoE)   softmax over E (T*E), top-k (T*E)
    scoring sigmoid (DeepSeek-V3, GLM-4.5)   sigmoid (T*E), top-k (T*E)
    scoring topk_softmax (gpt-oss)           top-k of the logits (T*E), softmax over the k (T*k)
    score_bias (DeepSeek-V3)                 the choice reads score + bias: one add per score (T*E)
    n_group / topk_group (DeepSeek-V3)       each group's two best scores (a top-2 over the T*E), their
                                             sum (T*G*2), the top topk_group groups (T*G), the mask of
                                             the other groups' experts (a logical not and a masked_fill:
                                             2 selects per score)
    (score_bias or groups)                   the weights gathered from the scores at the chosen experts
                                             (no arithmetic); backward: one scatter_add per weight (T*k)
    renorm (norm_topk_prob)                  w / sum(w): a sum and a divide per weight (T*k)
    renorm_eps                               sum + 1e-20: one add per token (T)
    routed_scaling_factor                    w * factor: one multiply per weight (T*k)

The router's linear (C -> E, with a bias under router_bias) is the op's `router` GEMM part.
"""
from __future__ import annotations

import sympy

from costspec.ops.attrs import Attr
from costspec.ops.opdef import Constraint, OpCall
from costspec.ops.work import ZERO, Work, above_one, is_zero, pointwise

SCORINGS = ("softmax", "sigmoid", "topk_softmax")

ROUTER_ATTRS = (
    Attr("scoring", "choice", "router scores: softmax over the experts then top-k (Mixtral, Qwen, OLMoE), sigmoid "
         "then top-k (DeepSeek-V3), or topk_softmax: top-k of the logits, then softmax over those k (gpt-oss)",
         default="softmax", choices=SCORINGS),
    Attr("renorm", "bool", "renormalise the k routing weights to sum to 1 (Mixtral; Qwen's and DeepSeek's "
         "norm_topk_prob); false with topk_softmax, whose k weights already sum to 1", default=True),
    Attr("renorm_eps", "bool", "the renormalisation divides by sum + 1e-20 (DeepSeek-V3 and its descendants): one "
         "add per token; needs renorm", default=False),
    Attr("score_bias", "bool", "experts chosen by score + a per-expert correction bias (DeepSeek-V3's "
         "e_score_correction_bias, a buffer: not a parameter), the weights gathered from the unbiased scores",
         default=False),
    Attr("n_group", "count", "group-limited choice (DeepSeek-V3): the experts in n_group groups, only the "
         "topk_group groups with the largest sum of their two best scores chosen from; 0: no groups", default=0),
    Attr("topk_group", "count", "groups kept by the group-limited choice (needs n_group)", default=0),
    Attr("routed_scaling_factor", "number", "the k routing weights multiplied by this factor after the "
         "renormalisation (DeepSeek-V3: 2.5); 0: no multiply (1.0 still multiplies, as transformers runs it)",
         default=0),
    Attr("router_bias", "bool", "a bias on the router's linear (gpt-oss): E parameters, one add per logit",
         default=False),
)


def check(call: OpCall) -> None:
    """The router attributes' rules that the values decide at load time."""
    a = call.attrs
    if a.scoring == "topk_softmax":
        for name in ("renorm", "score_bias"):
            if getattr(a, name):
                raise call.fail(f"{name} does not apply to scoring topk_softmax (its softmax over the k already "
                                "weighs the chosen experts)", name, f"{name}: false with topk_softmax")
        if not is_zero(a.n_group):
            raise call.fail("group-limited choice (n_group) needs scores over all experts: scoring softmax or "
                            "sigmoid", "n_group", "scoring: softmax or sigmoid with n_group")
    if a.renorm_eps and not a.renorm:
        raise call.fail("renorm_eps adds an epsilon to the renormalisation's sum: set renorm", "renorm_eps",
                        "renorm: true with it")
    if a.routed_scaling_factor < 0:
        raise call.fail(f"routed_scaling_factor {a.routed_scaling_factor} is negative", "routed_scaling_factor",
                        "0 (no multiply) or a positive factor")
    if is_zero(a.n_group) != is_zero(a.topk_group):
        raise call.fail("group-limited choice takes both n_group and topk_group", "topk_group" if is_zero(
            a.topk_group) else "n_group", "n_group >= 1 and 1 <= topk_group <= n_group, or neither")


def constraints(call: OpCall) -> list[Constraint]:
    """Group-limited choice: E divisible into n_group groups of at least 2 (the top-2 per group),
    topk_group <= n_group, and at least top_k experts in the kept groups."""
    a = call.attrs
    if is_zero(a.n_group):
        return []
    e, g, kept, k = a.experts, a.n_group, a.topk_group, a.top_k
    values = {"e": e, "g": g, "kept": kept, "k": k}
    rules = [
        (sympy.Eq(sympy.Mod(e, g), 0), "the {e} experts do not split into n_group {g} groups", "n_group",
         "n_group dividing experts"),
        (sympy.Ge(e, 2 * g), "groups of experts/n_group = {e}/{g} have fewer than the 2 experts the group score "
         "sums", "n_group", "experts >= 2*n_group"),
        (sympy.Le(kept, g), "topk_group {kept} is more than the n_group {g} groups", "topk_group",
         "topk_group <= n_group"),
        (sympy.Le(k * g, kept * e), "top_k {k} is more than the experts in topk_group {kept} of {g} groups of {e}",
         "top_k", "top_k <= topk_group * experts / n_group"),
    ]
    return [Constraint(cond, message, a.where(attr), values, expected) for cond, message, attr, expected in rules]


def gathers(call: OpCall) -> bool:
    """The experts are chosen on other values than the weights (a bias or a group mask): weights gathered."""
    return call.attrs.score_bias or not is_zero(call.attrs.n_group)


def forward(call: OpCall, t, e, k) -> Work:
    """Logits (T x E) -> the k routing weights of each token."""
    a = call.attrs
    slots = t * k
    if a.scoring == "topk_softmax":
        work = pointwise("topk", t * e) + pointwise("softmax", slots)
    else:
        work = pointwise(a.scoring, t * e)
        if a.score_bias:
            work = work + pointwise("add", t * e)
        if not is_zero(a.n_group):
            work = (work + pointwise("topk", t * e) + pointwise("sum", 2 * t * a.n_group)
                    + pointwise("topk", t * a.n_group) + pointwise("select", 2 * t * e))
        work = work + pointwise("topk", t * e)
    if a.renorm:
        work = work + pointwise("sum", slots) + (pointwise("add", t) if a.renorm_eps else Work()) + pointwise(
            "div", slots)
    if a.routed_scaling_factor:
        work = work + pointwise("scale", slots)
    return work


def backward(call: OpCall, t, e, k) -> Work:
    """The routing weights' gradient back to the logits: the scaling's multiply; the renormalisation
    w = p / s (dp = g/s, ds = -sum(g*p/s^2): 3 divides, a negation, a multiply, the sum over k, and the
    two paths into dp added); a gather's scatter_add of the k gradients (top-k's scatter has no
    arithmetic); the scores' softmax or sigmoid backward."""
    a = call.attrs
    slots = t * k
    work = pointwise("scale", slots) if a.routed_scaling_factor else Work()
    if a.renorm:
        work = (work + pointwise("div", 3 * slots) + pointwise("scale", slots) + pointwise("mul", slots)
                + pointwise("bias_grad", above_one(k) * slots) + pointwise("add", slots))
    if a.scoring == "topk_softmax":
        return work + pointwise("softmax_backward", slots)
    if gathers(call):
        work = work + pointwise("scatter_add", slots)
    return work + pointwise(a.scoring + "_backward", t * e)


def extra_traffic(call: OpCall, t, e, k) -> tuple:
    """(reads, writes) of the routing steps beyond softmax + top-k (whose traffic the op counts), the same
    forward and backward: a pass over the T x E scores reads (and where it makes a tensor, writes) them once;
    topk_softmax's softmax runs on the T x k logits instead of the T x E."""
    a = call.attrs
    slots = t * k
    reads, writes = ZERO, ZERO
    if a.scoring == "topk_softmax":
        reads, writes = slots - t * e, slots - t * e
    if a.score_bias:
        reads, writes = reads + t * e + e, writes + t * e
    if not is_zero(a.n_group):  # the top-2 per group, their sum, the top groups, the masked copy
        g = a.n_group
        reads, writes = reads + 2 * t * e + 3 * t * g, writes + t * e + t * g
    passes = (1 if gathers(call) else 0) + (1 if a.routed_scaling_factor else 0)
    eps = t if a.renorm_eps else ZERO
    return reads + passes * slots + eps, writes + passes * slots + eps


def is_variant(call: OpCall) -> bool:
    """Whether the router differs from softmax, top-k (and renorm), the router of Mixtral and Qwen."""
    a = call.attrs
    return (a.scoring != "softmax" or a.score_bias or not is_zero(a.n_group) or a.renorm_eps
            or bool(a.routed_scaling_factor) or a.router_bias)


def note(call: OpCall) -> str:
    """The routing work per token, forward and backward, by kind (the op's note for a router variant)."""
    a = call.attrs
    t = sympy.Integer(1)

    def listed(work: Work) -> str:
        return ", ".join(f"{kind} {sympy.sympify(n)}" for kind, n in sorted(work.pointwise.items()))

    return (f"router ({a.scoring} scores): per token, forward {listed(forward(call, t, a.experts, a.top_k))}; "
            f"backward {listed(backward(call, t, a.experts, a.top_k))}")


def params(call: OpCall) -> sympy.Expr:
    """The router's parameters: the C -> E weight and, under router_bias, its E biases."""
    a = call.attrs
    return a.experts if a.router_bias else ZERO
