"""`mlp`: fc1 -> activation -> fc2 (the transformer feed-forward block), or its gated form
gate / up -> act(gate) * up -> down (GLU variants: SwiGLU, GeGLU; Shazeer 2020, as in Llama)."""
from __future__ import annotations

from costspec.core.vocab import Fusion, Phase
from costspec.ops.activations import activation_saved
from costspec.ops.attrs import Attr
from costspec.ops.opdef import GEMM_RUNTIME, INPUT, OpCall, OpDef, Saved, requires
from costspec.ops.pointwise import ACT_ATTR, activation_work, build_activation
from costspec.ops.registry import register_op
from costspec.ops.work import (
    ZERO,
    Gemm,
    Part,
    Traffic,
    linear_backward,
    linear_forward,
    linear_outputs,
    linear_traffic,
    numel,
    pointwise,
)


@register_op
class Mlp(OpDef):
    """Two dense layers with an activation between them: [.., C] -> [.., hidden] -> [.., out];
    gated: act(x W_gate) * (x W_up), then W_down."""

    name = "mlp"
    doc = ("Feed-forward block: fc1 (C -> hidden), activation, fc2 (hidden -> out); with gated: true, "
           "gate and up (C -> hidden each), act(gate) * up, down (hidden -> out) (SwiGLU with fn: silu, "
           "GeGLU with fn: gelu).")
    default_name = "mlp"
    runtime = GEMM_RUNTIME
    attrs = (
        Attr("hidden", "size", "hidden width (e.g. 4*C; for gated, the width of gate and up, e.g. 5632)"),
        Attr("out", "size", "output width (default: the input's last dim)", default=lambda shape, a: shape[-1]),
        ACT_ATTR,
        Attr("bias", "bool", "biases on every projection", default=True),
        Attr("gated", "bool", "gated linear unit: act(gate(x)) * up(x), then down", default=False),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, (2, 3, 4), "a tensor [..., C]")
        return call.in_shape[:-1] + (call.attrs.out,)

    def _sizes(self, call: OpCall):
        return numel(call.in_shape[:-1]), call.in_shape[-1], call.attrs.hidden, call.attrs.out

    def _linears(self, call: OpCall):
        """(part name, in, out) of each projection, in execution order."""
        m, c, hidden, out = self._sizes(call)
        if call.attrs.gated:
            return [("gate", c, hidden), ("up", c, hidden)], ("down", hidden, out)
        return [("fc1", c, hidden)], ("fc2", hidden, out)

    def forward(self, call: OpCall):
        m, c, hidden, out = self._sizes(call)
        bias = call.attrs.bias
        ins, (down, k, n) = self._linears(call)
        parts = [Part(name, linear_forward(m, i, o, bias), i * o + (o if bias else 0)) for name, i, o in ins]
        parts.append(Part("act", activation_work(call.attrs.fn, m * hidden, Phase.FORWARD)))
        if call.attrs.gated:  # act(gate) * up, in the mlp module itself
            parts.append(Part("mul", pointwise("mul", m * hidden), own=True))
        parts.append(Part(down, linear_forward(m, k, n, bias), k * n + (n if bias else 0)))
        return parts

    def backward(self, call: OpCall, input_grad: bool):
        m, c, hidden, out = self._sizes(call)
        bias = call.attrs.bias
        ins, (down, k, n) = self._linears(call)
        parts = [Part(name, linear_backward(m, i, o, bias, input_grad)) for name, i, o in ins]
        parts.append(Part("act", activation_work(call.attrs.fn, m * hidden, Phase.BACKWARD)))
        if call.attrs.gated:  # d(act) = g * up, d(up) = g * act; x feeds gate and up: their dX summed
            work = pointwise("mul", 2 * m * hidden)
            parts.append(Part("mul", work + pointwise("add", m * c) if input_grad else work, own=True))
        parts.append(Part(down, linear_backward(m, k, n, bias, True)))
        return parts

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        m, _, _, _ = self._sizes(call)
        ins, (down, k, n) = self._linears(call)
        out = {name: linear_outputs(m, i, o, pass_, input_grad) for name, i, o in ins}
        out[down] = linear_outputs(m, k, n, pass_, True)
        return out

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """The projections as GEMMs; the activation reads and writes the hidden tensor (forward) or
        reads dH and H and writes dH (backward), unless `--fusion aggressive` fuses it into fc1 / gate.
        Gated: the product reads act(gate) and up and writes the hidden tensor (backward: reads dH,
        act(gate), up, writes both gradients), unless aggressive fusion folds it into the activation."""
        m, c, hidden, out = self._sizes(call)
        bias = call.attrs.bias
        h = m * hidden
        fused = fusion == Fusion.AGGRESSIVE
        act = (ZERO, ZERO) if fused else ((h, h) if pass_ == Phase.FORWARD else (2 * h, h))
        ins, (down, k, n) = self._linears(call)
        parts = [linear_traffic(name, m, i, o, bias, pass_, input_grad) for name, i, o in ins]
        parts.append(Traffic("act", *act))
        if call.attrs.gated:
            mul = (ZERO, ZERO) if fused else ((2 * h, h) if pass_ == Phase.FORWARD else (3 * h, 2 * h))
            parts.append(Traffic("mul", *mul))
        return parts + [linear_traffic(down, m, k, n, bias, pass_, True)]

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The input (for the first projections' weights), what the activation keeps of the hidden values
        (`Activation.saves`), and the second projection's input: act(fc1); gated, act(gate) and up (the
        product's two sides) and their product (down's input)."""
        m, c, hidden, out = self._sizes(call)
        b, fn = call.precision.bytes_per_element, call.attrs.fn
        first = "gate" if call.attrs.gated else "fc1"
        folded = len(call.in_shape) > 2
        saved = [Saved(INPUT, m * c, b, folded), *activation_saved(fn, m * hidden, b, first, "act", "act.")]
        if not call.attrs.gated:
            return saved + [Saved("act", m * hidden, b)]
        return saved + [Saved("act", m * hidden, b), Saved("up", m * hidden, b), Saved("product", m * hidden, b)]

    def build(self, call: OpCall, ev):
        from costspec.nn.mlp import GatedMlp
        from costspec.nn.mlp import Mlp as TorchMlp

        m, c, hidden, out = self._sizes(call)
        cls = GatedMlp if call.attrs.gated else TorchMlp
        return cls(ev(c), ev(hidden), ev(out), build_activation(call.attrs.fn), call.attrs.bias)

    def gemms(self, call: OpCall) -> list[Gemm]:
        m = self._sizes(call)[0]
        ins, down = self._linears(call)
        return [Gemm(name, m, o, i) for name, i, o in [*ins, down]]
