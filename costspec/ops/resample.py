"""`upsample`: nearest, bilinear or bicubic interpolation of [B, C, H, W] to a larger (or any) grid
(nn.Upsample / F.interpolate), by an integer scale factor or to an output size."""
from __future__ import annotations

import sympy

from costspec.ops.attrs import Attr
from costspec.ops.opdef import OpCall, OpDef, Runtime, requires
from costspec.ops.registry import register_op
from costspec.ops.work import Part, Work, numel, pointwise

# the interpolation kernels, one cost-table kind per output element (backward: per output gradient element)
RESIZE_RUNTIME = Runtime(aten={"aten.upsample_bicubic2d": "bicubic",
                               "aten.upsample_bicubic2d_backward": "bicubic_backward",
                               "aten.upsample_bilinear2d": "bilinear",
                               "aten.upsample_bilinear2d_backward": "bilinear_backward"})


def _pair(value) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple, sympy.Tuple)) else (value, value)


@register_op
class Upsample(OpDef):
    """Interpolation to an output grid: nearest (a gather) or bilinear (4 weighted neighbours)."""

    name = "upsample"
    runtime = Runtime(aten={"aten.upsample_nearest2d_backward": "scatter_add",  # each output gradient into its source
                            **RESIZE_RUNTIME.aten})
    doc = ("Upsample [B, C, H, W] (F.interpolate): mode nearest (a gather, no FLOPs; backward adds each output "
           "gradient into its source), bilinear (4 weighted neighbours per output) or bicubic (4 x 4, separable), "
           "align_corners=False; by an integer `scale` or to `size` [oh, ow].")
    default_name = "up"
    saves_nothing = True  # interpolation's backward needs only the sizes
    attrs = (
        Attr("mode", "choice", "nearest, bilinear or bicubic", default="nearest",
             choices=("nearest", "bilinear", "bicubic")),
        Attr("scale", "count", "integer scale factor of both sides (or give size)", default=0),
        Attr("size", "pair", "output size [oh, ow] (or give scale)", default=0),
    )

    def _out(self, call: OpCall) -> tuple:
        a = call.attrs
        scale_given, size_given = not sympy.sympify(a.scale) == 0, _pair(a.size) != (0, 0)
        if scale_given == size_given:
            raise call.fail("upsample needs exactly one of scale and size", "scale", "scale: k or size: [oh, ow]")
        h, w = call.in_shape[2:]
        return (h * a.scale, w * a.scale) if scale_given else _pair(a.size)

    def output_shape(self, call: OpCall):
        requires(self, call, 4, "an NCHW input")
        out = self._out(call)
        for o in out:
            if sympy.sympify(o).is_number and o < 1:
                raise call.fail(f"output size {o}", "size", "a positive output size")
        return tuple(call.in_shape[:2]) + out

    def forward(self, call: OpCall):
        if call.attrs.mode == "nearest":
            return [Part("", Work())]
        return [Part("", pointwise(call.attrs.mode, numel(self.output_shape(call))))]

    def backward(self, call: OpCall, input_grad: bool):
        if not input_grad:
            return [Part("", Work())]
        kind = "scatter_add" if call.attrs.mode == "nearest" else call.attrs.mode + "_backward"
        return [Part("", pointwise(kind, numel(self.output_shape(call))))]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        size = tuple(ev(o) for o in self._out(call))
        if call.attrs.mode == "nearest":
            return nn.Upsample(size=size, mode="nearest")
        return nn.Upsample(size=size, mode=call.attrs.mode, align_corners=False)
