"""`mlp`: fc1 -> activation -> fc2 (the transformer feed-forward block)."""
from __future__ import annotations

from .base import (ZERO, Attr, OpCall, OpDef, Part, Traffic, linear_backward, linear_forward, linear_traffic,
                   numel, requires, same_size)
from .pointwise import ACT_ATTR, activation_work
from .registry import register_op


@register_op
class Mlp(OpDef):
    """Two dense layers with an activation between them: [.., C] -> [.., hidden] -> [.., out]."""

    name = "mlp"
    doc = "Feed-forward block: fc1 (C -> hidden), activation, fc2 (hidden -> out)."
    default_name = "mlp"
    attrs = (
        Attr("hidden", "size", "hidden width (e.g. 4*C)"),
        Attr("out", "size", "output width (default: the input's last dim)", default=lambda shape, a: shape[-1]),
        ACT_ATTR,
        Attr("bias", "bool", "biases on fc1 and fc2", default=True),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, (2, 3, 4), "a tensor [..., C]")
        return call.in_shape[:-1] + (call.attrs.out,)

    def _sizes(self, call: OpCall):
        return numel(call.in_shape[:-1]), call.in_shape[-1], call.attrs.hidden, call.attrs.out

    def forward(self, call: OpCall):
        m, c, hidden, out = self._sizes(call)
        bias = call.attrs.bias
        return [
            Part("fc1", linear_forward(m, c, hidden, bias), c * hidden + (hidden if bias else 0)),
            Part("act", activation_work(call.attrs.fn, m * hidden, "forward")),
            Part("fc2", linear_forward(m, hidden, out, bias), hidden * out + (out if bias else 0)),
        ]

    def backward(self, call: OpCall, input_grad: bool):
        m, c, hidden, out = self._sizes(call)
        bias = call.attrs.bias
        return [
            Part("fc1", linear_backward(m, c, hidden, bias, input_grad)),
            Part("act", activation_work(call.attrs.fn, m * hidden, "backward")),
            Part("fc2", linear_backward(m, hidden, out, bias, True)),
        ]

    def traffic(self, call: OpCall, pass_: str, input_grad: bool, fusion: str):
        """fc1 and fc2 as GEMMs; the activation reads and writes the hidden tensor (forward) or
        reads dH and H and writes dH (backward), unless `--fusion aggressive` fuses it into fc1."""
        m, c, hidden, out = self._sizes(call)
        bias = call.attrs.bias
        h = m * hidden
        act = (ZERO, ZERO) if fusion == "aggressive" else ((h, h) if pass_ == "forward" else (2 * h, h))
        return [linear_traffic("fc1", m, c, hidden, bias, pass_, input_grad), Traffic("act", *act),
                linear_traffic("fc2", m, hidden, out, bias, pass_, True)]

    def build(self, call: OpCall, ev):
        from ..torch_modules import Mlp as TorchMlp

        m, c, hidden, out = self._sizes(call)
        return TorchMlp(ev(c), ev(hidden), ev(out), call.attrs.fn, call.attrs.bias)
