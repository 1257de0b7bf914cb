"""`linear`: y = x W^T + b over the last dim."""
from __future__ import annotations

from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import GEMM_RUNTIME, INPUT, MAX_RANK, OpCall, OpDef, Saved, requires, same_size_constraint
from costspec.ops.registry import register_op
from costspec.ops.work import Gemm, Part, linear_backward, linear_forward, linear_outputs, linear_traffic, numel


@register_op
class Linear(OpDef):
    """Dense layer on the last dim: 2*M*K*N Tensor-Core FLOPs for M rows, plus the bias add."""

    name = "linear"
    doc = "Dense layer over the last dim (nn.Linear): [..., in] -> [..., out]."
    default_name = "linear"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The input, folded to rows (the weight gradient needs it; the weight is a parameter)."""
        return [Saved(INPUT, numel(call.in_shape), call.precision.bytes_per_element, folded=len(call.in_shape) > 2)]
    runtime = GEMM_RUNTIME
    attrs = (
        Attr("out", "size", "output features N"),
        Attr("in", "size", "input features K (default: the input's last dim; checked against it)",
             default=lambda shape, a: shape[-1]),
        Attr("bias", "bool", "add a learned bias", default=True),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, tuple(range(1, MAX_RANK + 1)), "a tensor")
        self.constraints(call)  # a mismatch sympy can decide is an error right away
        return call.in_shape[:-1] + (call.attrs.out,)

    def constraints(self, call: OpCall):
        """`in` must be the input's last dim; checked when the dims are bound if sympy cannot tell."""
        return same_size_constraint(call, "in", call.attrs.in_, call.in_shape[-1], "the input's last dim")

    def _mkn(self, call: OpCall):
        return numel(call.in_shape[:-1]), call.attrs.in_, call.attrs.out

    def forward(self, call: OpCall):
        m, k, n = self._mkn(call)
        params = k * n + (n if call.attrs.bias else 0)
        return [Part("", linear_forward(m, k, n, call.attrs.bias), params)]

    def backward(self, call: OpCall, input_grad: bool):
        m, k, n = self._mkn(call)
        return [Part("", linear_backward(m, k, n, call.attrs.bias, input_grad))]

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        m, k, n = self._mkn(call)
        return {"": linear_outputs(m, k, n, pass_, input_grad)}

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        m, k, n = self._mkn(call)
        return [linear_traffic("", m, k, n, call.attrs.bias, pass_, input_grad)]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        return nn.Linear(ev(call.attrs.in_), ev(call.attrs.out), bias=call.attrs.bias)

    def gemms(self, call: OpCall) -> list[Gemm]:
        m, k, n = self._mkn(call)
        return [Gemm("", m, n, k)]
