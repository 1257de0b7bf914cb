"""`unmapped`: a stand-in for work no op describes, written by `costspec import torch --allow-unmapped`.

It costs nothing and says so: `eval` prints a note for every use ("NOT COUNTED: ..."), so a total
that leaves something out never reads as complete. It holds the real module's parameters (their
count is known) and gives the real output shape, so that the layers after it are costed.
"""
from __future__ import annotations

import sympy

from costspec.ops.attrs import Attr
from costspec.ops.opdef import OpCall, OpDef
from costspec.ops.registry import register_op
from costspec.ops.work import Part, Work, numel


@register_op
class Unmapped(OpDef):
    """Work the importer could not map to an op: zero FLOPs, the real parameters, the real output shape."""

    name = "unmapped"
    doc = ("A gap: work of the real model no op describes (written by `costspec import torch "
           "--allow-unmapped`). No FLOPs are counted for it -- `eval` says so in a note -- but it holds the "
           "module's parameters and gives its output shape, so the layers after it are costed.")
    default_name = "unmapped"
    saves_nothing = True  # reshape, slice or pad, and a concatenation with none of its weight

    def aliases(self, call: OpCall) -> bool:
        """A view of the input when it keeps at most the input's elements and has no weight (no concatenation)."""
        fewer = sympy.sympify(numel(tuple(call.attrs.shape)) - numel(call.in_shape)).is_nonpositive
        if fewer is None:
            raise NotImplementedError("whether unmapped's output is a view depends on the dims")
        return bool(fewer) and sympy.sympify(call.attrs.params) == 0
    attrs = (
        Attr("what", "text", "what ran there: a module class or torch function, with its aten ops"),
        Attr("module", "text", "the real model's module path where it ran"),
        Attr("shape", "shape", "the output shape (default: the input's)", default=lambda shape, attrs: shape),
        Attr("params", "count", "the parameters it holds (counted; the work is not)", default=0),
    )

    def output_shape(self, call: OpCall):
        shape = tuple(call.attrs.shape)
        if any(d == -1 or (getattr(d, "is_number", False) and d < 1) for d in shape):
            raise call.fail(f"shape {list(shape)} has a size below 1", "shape", "the output's sizes (positive)")
        return shape

    def forward(self, call: OpCall):
        return [Part("", Work(), call.attrs.params)]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", Work())]

    def notes(self, call: OpCall) -> list[str]:
        return [f"NOT COUNTED: {call.attrs.what} in {call.attrs.module} maps to no op; its FLOPs are missing from "
                "every total here (its parameters are counted)"]

    def build(self, call: OpCall, ev):
        from costspec.nn.unmapped import Unmapped as TorchUnmapped

        return TorchUnmapped([ev(d) for d in call.attrs.shape], ev(call.attrs.params))
