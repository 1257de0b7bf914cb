"""Normalisations: `layernorm` (last dim), `layernorm2d` (channel dim of NCHW), `rmsnorm`."""
from __future__ import annotations

from .base import Attr, OpCall, OpDef, Part, Runtime, numel, pointwise, requires
from .registry import register_op

# one native_layer_norm kernel per call, forward and backward (nn.LayerNorm, F.layer_norm)
_LAYER_NORM_RUNTIME = Runtime(aten={"aten.native_layer_norm": "layernorm",
                                    "aten.native_layer_norm_backward": "layernorm_backward"})


class _Norm(OpDef):
    kind = ""  # cost-table kind; backward is kind + "_backward"
    channel_axis = -1

    def channels(self, call: OpCall):
        return call.in_shape[self.channel_axis]

    def has_bias(self, call: OpCall) -> bool:
        return call.attrs.affine and getattr(call.attrs, "bias", False)

    def forward(self, call: OpCall):
        c = self.channels(call)
        params = (c if call.attrs.affine else 0) + (c if self.has_bias(call) else 0)
        return [Part("", pointwise(self.kind, numel(call.in_shape)), params)]

    def backward(self, call: OpCall, input_grad: bool):
        # The fused backward kernel computes dx, dweight and dbias together; without dx it still runs.
        return [Part("", pointwise(self.kind + "_backward", numel(call.in_shape)))]


@register_op
class LayerNorm(_Norm):
    """LayerNorm over the last dim (Ba et al. 2016)."""

    name = "layernorm"
    doc = "LayerNorm over the last dim (nn.LayerNorm), with learned scale and bias."
    default_name = "norm"
    kind = "layernorm"
    runtime = _LAYER_NORM_RUNTIME
    attrs = (
        Attr("eps", "number", "epsilon (does not change the cost)", default=1e-6),
        Attr("affine", "bool", "learned scale", default=True),
        Attr("bias", "bool", "learned bias (with affine)", default=True),
    )

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        a = call.attrs
        return nn.LayerNorm(ev(self.channels(call)), eps=a.eps, elementwise_affine=a.affine, bias=self.has_bias(call))


@register_op
class LayerNorm2d(_Norm):
    """LayerNorm over the channel dim of [B, C, H, W] (SAM's neck, ConvNeXt)."""

    name = "layernorm2d"
    doc = "LayerNorm over the channel dim of an NCHW tensor (SAM's LayerNorm2d)."
    default_name = "norm"
    kind = "layernorm"
    runtime = _LAYER_NORM_RUNTIME
    channel_axis = 1
    attrs = LayerNorm.attrs

    def output_shape(self, call: OpCall):
        requires(self, call, 4, "an NCHW input")
        return call.in_shape

    def build(self, call: OpCall, ev):
        from ..torch_modules import LayerNorm2d as TorchLayerNorm2d

        a = call.attrs
        return TorchLayerNorm2d(ev(self.channels(call)), a.eps, a.affine, self.has_bias(call))


@register_op
class RMSNorm(_Norm):
    """RMSNorm over the last dim (Zhang & Sennrich 2019), as in Llama."""

    name = "rmsnorm"
    doc = "RMSNorm over the last dim (nn.RMSNorm), learned scale, no bias."
    default_name = "norm"
    kind = "rmsnorm"
    # nn.RMSNorm runs pow, mean, add, rsqrt, mul (and their backward ops): one rmsnorm element each
    runtime = Runtime(decomposed=("RMSNorm", "rmsnorm", "rmsnorm_backward"))
    attrs = (
        Attr("eps", "number", "epsilon (does not change the cost)", default=1e-6),
        Attr("affine", "bool", "learned scale", default=True),
    )

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        return nn.RMSNorm(ev(self.channels(call)), eps=call.attrs.eps, elementwise_affine=call.attrs.affine)
