"""`moe`: a mixture-of-experts feed-forward layer (Shazeer et al. 2017; Switch, Fedus et al. 2021;
Mixtral, Jiang et al. 2024; DeepSeekMoE's shared experts, Dai et al. 2024).

A router (C -> E linear, scores over the E experts, top-k, optionally renormalised over the k: its
variants in ops/routing.py), E expert MLPs (gated or not; gpt-oss's clamped SwiGLU), an optional
shared MLP every token goes through, and the weighted sum of each token's k expert outputs.

NB: costs are charged under balanced routing. The T tokens make T*k (token, expert) rows; the
experts together process R = T*k of them (each expert T*k/E on average), or with a capacity
factor cf each expert at most ceil(cf*T*k/E) (R = min(T*k, E*capacity); the rest are dropped, as
in Switch). The work of the experts is linear in their rows, so only R matters, not which expert
gets which row. Parameters count every expert; the notes give the active parameters per token.
The generated torch module routes deterministically (contiguous balanced blocks of the T*k rows,
expert e taking rows floor(e*T*k/E) .. floor((e+1)*T*k/E) - 1), so that FlopCounterMode sees
exactly the balanced row counts; the router's scores still weight the outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from costspec.core.vocab import Fusion, Phase
from costspec.ops import routing
from costspec.ops.activations import ACT_ATTR, activation_work, build_activation
from costspec.ops.attrs import Attr
from costspec.ops.moe_saved import moe_saved
from costspec.ops.opdef import GEMM_RUNTIME, Constraint, OpCall, OpDef, requires
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
    numel,
    pointwise,
)


@dataclass(frozen=True)
class Expert:
    """The form of one expert MLP (or the shared MLP): gated or not, biases, activation; gate and up as
    one projection (fused), its columns interleaved (gpt-oss), gpt-oss's clamp limit (0: none)."""

    gated: bool
    bias: bool
    fn: str
    fused: bool = False
    limit: float = 0
    interleaved: bool = False


def _mlp_linears(c, hidden, gated: bool, fused: bool = False):
    """(in, out) of each projection of one expert MLP: (gate, up, down), (gate_up, down) when the gate and
    up projections are one GEMM (fused), or (fc1, fc2)."""
    if gated and fused:
        return [(c, 2 * hidden), (hidden, c)]
    return [(c, hidden), (c, hidden), (hidden, c)] if gated else [(c, hidden), (hidden, c)]


def mlp_forward(m, c, hidden, x: Expert) -> Work:
    """An MLP on m rows: its projections, the activation and (gated) the product act(gate) * up; with a
    clamp limit, the gate's one-sided clamp, up's two-sided clamp and up + 1 (gpt-oss)."""
    work = Work()
    for k, n in _mlp_linears(c, hidden, x.gated, x.fused):
        work = work + linear_forward(m, k, n, x.bias)
    work = work + activation_work(x.fn, m * hidden, Phase.FORWARD)
    if x.limit:
        work = work + pointwise("clamp_bound", m * hidden) + pointwise("clamp", m * hidden) + pointwise(
            "add", m * hidden)
    return work + pointwise("mul", m * hidden) if x.gated else work


def mlp_backward(m, c, hidden, x: Expert, input_grad: bool) -> Work:
    """Backward of mlp_forward: dW of every projection, dX of the first ones only when needed; the
    activation; gated: the product's two multiplies and, with dX, the sum of gate's and up's dX (none when
    gate and up are one fused GEMM: its dX is one product). A clamp's backward keeps the gradient where the
    input lay inside the bounds: a compare per bound (and their logical and) and a where; interleaved gate
    and up are strided slices of one output, whose two gradients are summed into it (one add per element)."""
    linears = _mlp_linears(c, hidden, x.gated, x.fused)
    work = Work()
    for k, n in linears[:-1]:
        work = work + linear_backward(m, k, n, x.bias, input_grad)
    work = work + linear_backward(m, hidden, c, x.bias, True) + activation_work(x.fn, m * hidden, Phase.BACKWARD)
    if x.gated:
        work = work + pointwise("mul", 2 * m * hidden) + (pointwise("add", m * c) if input_grad and not x.fused
                                                          else Work())
    if x.limit:
        work = work + pointwise("select", (2 + 4) * m * hidden)
    if x.interleaved:
        work = work + pointwise("add", 2 * m * hidden)
    return work


def mlp_outputs(m, c, hidden, gated: bool, pass_: Phase, input_grad: bool, copies=1, fused: bool = False):
    """GEMM output elements of an MLP on m rows (`copies` experts sharing the rows: each has its own dW)."""
    linears = _mlp_linears(c, hidden, gated, fused)
    total = ZERO
    for i, (k, n) in enumerate(linears):
        last = i == len(linears) - 1
        if pass_ == Phase.FORWARD:
            total += m * n
        else:
            total += copies * k * n + (m * k if input_grad or last else ZERO)
    return total


def mlp_params(c, hidden, gated: bool, bias: bool):
    return sum((k * n + (n if bias else 0) for k, n in _mlp_linears(c, hidden, gated)), ZERO)


@register_op
class Moe(OpDef):
    """Mixture of experts on [..., C] (see the module doc for the balanced-routing convention)."""

    name = "moe"
    doc = ("Mixture-of-experts feed-forward on [..., C]: router (C -> experts linear; softmax, sigmoid or "
           "top-k-then-softmax scores; DeepSeek-V3's score-correction bias and group-limited choice; top-k, "
           "renormalised, scaled), `experts` expert MLPs of width `hidden` (gated by default; gpt-oss's clamped "
           "SwiGLU), optional shared experts; costs charged under balanced routing (each expert T*top_k/experts "
           "tokens, capped by a capacity factor), parameters for all experts, the active parameters per token in "
           "the notes.")
    default_name = "moe"
    runtime = GEMM_RUNTIME
    attrs = (
        Attr("experts", "size", "number of routed experts E"),
        Attr("top_k", "size", "experts per token k (at most E)"),
        Attr("hidden", "size", "hidden width of each expert MLP"),
        Attr("gated", "bool", "gated expert MLPs (act(gate) * up, then down), as Mixtral", default=True),
        Attr("fn", "choice", ACT_ATTR.doc + " (default silu: SwiGLU experts)", default="silu",
             choices=ACT_ATTR.choices, extensible=True),
        Attr("bias", "bool", "biases on the expert projections", default=False),
        *routing.ROUTER_ATTRS,
        Attr("shared_experts", "count", "shared experts every token goes through (one MLP of width "
             "shared_experts * shared_hidden, as DeepSeekMoE builds them)", default=0),
        Attr("shared_hidden", "size", "hidden width of one shared expert (default: hidden)",
             default=lambda shape, a: a["hidden"]),
        Attr("fused_gate_up", "bool", "gated experts: gate and up as one C -> 2*hidden projection (transformers 5 "
             "stores Mixtral's and Qwen-MoE's experts as gate_up_proj): the same FLOPs, but the backward's dX is "
             "one product, with no add of gate's and up's dX", default=False),
        Attr("shared_gate", "bool", "a sigmoid gate on the shared experts' output, sigmoid(x w) * shared(x) with "
             "a learned C -> 1 projection w (Qwen2-MoE's shared_expert_gate); needs shared_experts", default=False),
        Attr("capacity_factor", "number", "expert capacity ceil(cf * T*k/E) rows (tokens beyond it are dropped); "
             "0: no limit", default=0),
        Attr("swiglu_limit", "number", "gpt-oss's clamped SwiGLU experts: the gate clamped to at most the limit, "
             "the up projection to [-limit, limit], then act(gate) * (up + 1) (with fn: quick_gelu, gpt-oss's "
             "x * sigmoid(1.702 x)); needs fused_gate_up; 0: no clamp", default=0),
        Attr("interleaved_gate_up", "bool", "the fused gate_up projection's columns alternate gate, up (gpt-oss): "
             "two strided slices, whose gradients autograd sums (one add per gate_up element backward); needs "
             "fused_gate_up", default=False),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, (2, 3, 4), "tokens [..., C]")
        a = call.attrs
        k, e = a.top_k, a.experts
        if sympy.sympify(k - e).is_number and k > e:
            raise call.fail(f"top_k {k} is more than the {e} experts", "top_k", "top_k <= experts")
        if a.shared_gate and is_zero(a.shared_experts):
            raise call.fail("shared_gate gates the shared experts' output: set shared_experts", "shared_gate",
                            "shared_experts >= 1 with it")
        if a.fused_gate_up and not a.gated:
            raise call.fail("fused_gate_up fuses the gate and up projections of gated experts: set gated: true",
                            "fused_gate_up", "gated: true with it")
        for name, needs, what in (("swiglu_limit", "fused_gate_up", "fused_gate_up: true"),
                                  ("interleaved_gate_up", "fused_gate_up", "fused_gate_up: true")):
            if getattr(a, name) and not getattr(a, needs):
                raise call.fail(f"{name} is an option of {what} experts: set {what}", name, f"{what} with it")
        for name, what in (("capacity_factor", "0 (no limit) or a positive factor"),
                           ("swiglu_limit", "0 (no clamp) or a positive limit")):
            if getattr(a, name) < 0:
                raise call.fail(f"{name} {getattr(a, name)} is negative", name, what)
        routing.check(call)
        return call.in_shape

    def constraints(self, call: OpCall):
        a = call.attrs
        return [Constraint(sympy.Le(a.top_k, a.experts), "top_k {k} is more than the {e} experts", a.where("top_k"),
                           {"k": a.top_k, "e": a.experts}, "top_k <= experts")] + routing.constraints(call)

    # -- sizes ----------------------------------------------------------------------------------
    def _tokens(self, call: OpCall):
        return numel(call.in_shape[:-1]), call.in_shape[-1]

    def _expert(self, call: OpCall) -> Expert:
        a = call.attrs
        return Expert(a.gated, a.bias, a.fn, a.fused_gate_up, a.swiglu_limit, a.interleaved_gate_up)

    def _shared(self, call: OpCall) -> Expert:
        a = call.attrs
        return Expert(a.gated, a.bias, a.fn)

    def saved(self, call: OpCall, input_grad: bool):
        """The input, the router's scores, indices and weights, the routed rows and each expert's, the weighted
        sum's two sides, the shared MLP (`costspec.ops.moe_saved`)."""
        return moe_saved(call, self.rows(call))

    def capacity(self, call: OpCall):
        """Rows one expert may take: ceil(cf * T*k/E), or None without a limit."""
        a = call.attrs
        if not a.capacity_factor:
            return None
        t, _ = self._tokens(call)
        return sympy.ceiling(sympy.Rational(str(a.capacity_factor)) * t * a.top_k / a.experts)

    def rows(self, call: OpCall):
        """R, the (token, expert) rows the experts process: T*k, or min(T*k, E*capacity)."""
        t, _ = self._tokens(call)
        cap = self.capacity(call)
        slots = t * call.attrs.top_k
        return slots if cap is None else sympy.Min(slots, call.attrs.experts * cap)

    # -- work -----------------------------------------------------------------------------------
    def forward(self, call: OpCall):
        a = call.attrs
        t, c = self._tokens(call)
        e, k = a.experts, a.top_k
        slots = t * k
        route = routing.forward(call, t, e, k)
        route = route + pointwise("mul", slots * c) + pointwise("sum", slots * c)  # the weighted sum of k outputs
        parts = [Part("router", linear_forward(t, c, e, a.router_bias), c * e + routing.params(call)),
                 Part("route", route, own=True),
                 Part("experts", mlp_forward(self.rows(call), c, a.hidden, self._expert(call)),
                      e * mlp_params(c, a.hidden, a.gated, a.bias))]
        if not is_zero(a.shared_experts):
            width = a.shared_experts * a.shared_hidden
            parts.append(Part("shared", mlp_forward(t, c, width, self._shared(call)),
                              mlp_params(c, width, a.gated, a.bias)))
            parts[1] = Part("route", route + pointwise("add", t * c), own=True)
        if a.shared_gate:  # the C -> 1 projection; sigmoid on its T scores, broadcast over C onto the shared output
            parts[1] = Part("route", parts[1].work + pointwise("sigmoid", t) + pointwise("mul", t * c), own=True)
            parts.append(Part("shared_gate", linear_forward(t, c, 1, False), c))
        return parts

    def backward(self, call: OpCall, input_grad: bool):
        """route: the weighted sum's dY*w and dY*y (summed over C: bias_grad), the routing weights' backward
        (ops/routing.py); with dX, the sum of each token's k row gradients, and the router's (and shared
        MLP's) dX added to it."""
        a = call.attrs
        t, c = self._tokens(call)
        e, k = a.experts, a.top_k
        slots = t * k
        route = pointwise("mul", 2 * slots * c) + pointwise("bias_grad", above_one(c) * slots * c)
        route = route + routing.backward(call, t, e, k)
        if input_grad:  # dX: the k rows of each token summed, then + router's dX (+ shared's dX)
            route = route + pointwise("bias_grad", above_one(k) * slots * c) + pointwise("add", t * c)
            if not is_zero(a.shared_experts):
                route = route + pointwise("add", t * c)
            if a.shared_gate:
                route = route + pointwise("add", t * c)
        if a.shared_gate:  # y = s * m: dm = g*s; ds = the sum over C of g*m; sigmoid's backward
            route = (route + pointwise("mul", 2 * t * c) + pointwise("bias_grad", above_one(c) * t * c)
                     + pointwise("sigmoid_backward", t))
        parts = [Part("router", linear_backward(t, c, e, a.router_bias, input_grad)), Part("route", route, own=True),
                 Part("experts", mlp_backward(self.rows(call), c, a.hidden, self._expert(call), input_grad))]
        if not is_zero(a.shared_experts):
            width = a.shared_experts * a.shared_hidden
            parts.append(Part("shared", mlp_backward(t, c, width, self._shared(call), input_grad)))
        if a.shared_gate:
            parts.append(Part("shared_gate", linear_backward(t, c, 1, False, input_grad)))
        return parts

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        a = call.attrs
        t, c = self._tokens(call)
        out = {"router": linear_outputs(t, c, a.experts, pass_, input_grad),
               "experts": mlp_outputs(self.rows(call), c, a.hidden, a.gated, pass_, input_grad, a.experts,
                                      a.fused_gate_up)}
        if not is_zero(a.shared_experts):
            out["shared"] = mlp_outputs(t, c, a.shared_experts * a.shared_hidden, a.gated, pass_, input_grad)
        if a.shared_gate:
            out["shared_gate"] = linear_outputs(t, c, 1, pass_, input_grad)
        return out

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The router GEMM on every token; each expert's projections on its share of the routed rows
        (balanced: rows / experts each); the shared experts' projections on every token."""
        a = call.attrs
        t, c = self._tokens(call)
        out = [Gemm("router", t, a.experts, c)]
        out += [Gemm("experts", self.rows(call) / a.experts, n, k, a.experts)
                for k, n in _mlp_linears(c, a.hidden, a.gated, a.fused_gate_up)]
        if not is_zero(a.shared_experts):
            width = a.shared_experts * a.shared_hidden
            out += [Gemm("shared", t, n, k) for k, n in _mlp_linears(c, width, a.gated)]
        if a.shared_gate:
            out.append(Gemm("shared_gate", t, 1, c))
        return out

    def _param_split(self, call: OpCall):
        """(all parameters, those one token uses: the router, top_k experts, the shared experts)."""
        a = call.attrs
        _, c = self._tokens(call)
        expert = mlp_params(c, a.hidden, a.gated, a.bias)
        shared = ZERO if is_zero(a.shared_experts) else mlp_params(c, a.shared_experts * a.shared_hidden, a.gated,
                                                                    a.bias)
        shared = shared + (c if a.shared_gate else ZERO)
        router = c * a.experts + routing.params(call)
        return router + a.experts * expert + shared, router + a.top_k * expert + shared

    def active_params(self, call: OpCall):
        return self._param_split(call)[1]

    def notes(self, call: OpCall):
        a = call.attrs
        total, active = self._param_split(call)
        cap = "" if not a.capacity_factor else f", capacity factor {a.capacity_factor} (rows beyond it dropped)"
        out = [f"{sympy.sympify(total)} parameters in total, {sympy.sympify(active)} active per token "
               f"(router, top_k = {a.top_k} of {a.experts} experts"
               + (", shared experts)" if not is_zero(a.shared_experts) else ")"),
               f"experts charged under balanced routing, T*top_k/experts tokens each{cap}"]
        if a.score_bias:
            out.append(f"the score-correction bias is a buffer of {a.experts} values (not a parameter)")
        if routing.is_variant(call):
            out.append(routing.note(call))
        if a.swiglu_limit:
            out.append(f"clamped SwiGLU experts (limit {a.swiglu_limit}): per routed row and hidden unit a one-sided "
                       "clamp (clamp_bound), a two-sided one (clamp) and up + 1 (add) forward, 6 selects backward")
        return out

    # -- memory ---------------------------------------------------------------------------------
    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Router and expert projections as GEMMs (every expert's weights read once; the R rows in
        total); the route part reads the scores and the k outputs per token and writes the result
        (backward: the reverse), plus each further routing step's pass over the scores or weights."""
        a = call.attrs
        t, c = self._tokens(call)
        e, slots, rows = a.experts, t * a.top_k, self.rows(call)
        out = [linear_traffic("router", t, c, e, a.router_bias, pass_, input_grad)]
        hidden_traffic = _mlp_traffic("experts", rows, c, a.hidden, a.gated, a.bias, pass_, input_grad,
                                      a.fused_gate_up)
        weights = (e - 1) * mlp_params(c, a.hidden, a.gated, a.bias)
        out.append(Traffic("experts", hidden_traffic.reads + weights,
                           hidden_traffic.writes + (weights if pass_ == Phase.BACKWARD else ZERO)))
        more_reads, more_writes = routing.extra_traffic(call, t, e, a.top_k)
        if pass_ == Phase.FORWARD:
            out.append(Traffic("route", 2 * t * e + slots * c + slots + more_reads,
                               t * e + slots + t * c + more_writes))
        else:
            out.append(Traffic("route", t * c + slots * c + slots + t * e + more_reads,
                               slots * c + slots + t * e + more_writes))
        if not is_zero(a.shared_experts):
            out.append(_mlp_traffic("shared", t, c, a.shared_experts * a.shared_hidden, a.gated, a.bias, pass_,
                                    input_grad))
        if a.shared_gate:  # the C -> 1 GEMM; sigmoid on T scores; the product reads the shared output and the gate
            gate = linear_traffic("shared_gate", t, c, 1, False, pass_, input_grad)
            extra = (t + t * c + t, t + t * c) if pass_ == Phase.FORWARD else (3 * t * c + 2 * t, t * c + 2 * t)
            out.append(Traffic("shared_gate", gate.reads + extra[0], gate.writes + extra[1]))
        return out

    def build(self, call: OpCall, ev):
        from costspec.nn.moe import ClampedGluMlp, MixtureOfExperts, Routing

        a = call.attrs
        t, c = self._tokens(call)
        cap = self.capacity(call)
        shared = 0 if is_zero(a.shared_experts) else ev(a.shared_experts * a.shared_hidden)

        def act():
            return build_activation(a.fn, fail=lambda message, expected: call.fail(message, "fn", expected))

        route = Routing(a.scoring, a.renorm, a.renorm_eps, a.score_bias, ev(a.n_group), ev(a.topk_group),
                        a.routed_scaling_factor, a.router_bias)
        expert = None
        if a.swiglu_limit or a.interleaved_gate_up:
            def expert():
                return ClampedGluMlp(ev(c), ev(a.hidden), ev(c), act(), a.bias, a.swiglu_limit, a.interleaved_gate_up)
        return MixtureOfExperts(ev(c), ev(a.experts), ev(a.top_k), ev(a.hidden), a.gated, act, a.bias, route,
                                shared, None if cap is None else ev(cap), fused_gate_up=a.fused_gate_up,
                                shared_gate=a.shared_gate, expert=expert)


def _mlp_traffic(part: str, m, c, hidden, gated: bool, bias: bool, pass_: Phase, input_grad: bool,
                 fused: bool = False) -> Traffic:
    reads, writes = ZERO, ZERO
    linears = _mlp_linears(c, hidden, gated, fused)
    for i, (k, n) in enumerate(linears):
        tr = linear_traffic(part, m, k, n, bias, pass_, input_grad or i == len(linears) - 1)
        reads, writes = reads + tr.reads, writes + tr.writes
    h = m * hidden
    extra = (h + (2 * h if gated else ZERO), h + (h if gated else ZERO)) if pass_ == Phase.FORWARD else \
        (2 * h + (3 * h if gated else ZERO), h + (2 * h if gated else ZERO))
    return Traffic(part, reads + extra[0], writes + extra[1])
