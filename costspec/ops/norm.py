"""Normalisations: `layernorm` (last dim), `layernorm2d` (channel dim of NCHW), `rmsnorm`, `batchnorm`
(train or eval statistics), `groupnorm`, `grn` (ConvNeXt-V2's global response normalisation)."""
from __future__ import annotations

import sympy

from costspec.ops.attrs import Attr
from costspec.ops.opdef import INPUT, STAT_BYTES, Constraint, OpCall, OpDef, Runtime, Saved, requires
from costspec.ops.registry import register_op
from costspec.ops.work import ZERO, Expr, Part, numel, pointwise

# one native_layer_norm kernel per call, forward and backward (nn.LayerNorm, F.layer_norm)
_LAYER_NORM_RUNTIME = Runtime(aten={"aten.native_layer_norm": "layernorm",
                                    "aten.native_layer_norm_backward": "layernorm_backward"})


class _Norm(OpDef):
    kind = ""  # cost-table kind; backward is kind + "_backward"
    channel_axis = -1

    def channels(self, call: OpCall):
        return call.in_shape[self.channel_axis]

    def constraints(self, call: OpCall):
        # every norm divides by sqrt(var + eps): torch refuses eps <= 0 in training (batch_norm raises)
        if call.attrs.eps <= 0:
            raise call.fail(f"eps must be positive, got {call.attrs.eps}", "eps", "a small positive number (1e-5)")
        return super().constraints(call)

    def has_bias(self, call: OpCall) -> bool:
        return call.attrs.affine and getattr(call.attrs, "bias", False)

    def statistics(self, call: OpCall) -> Expr:
        """Elements of each of the mean and 1/std the kernel keeps for backward."""
        return numel(call.in_shape) / self.channels(call)

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The input, its mean and 1/std (one per normalised group), both in the input's dtype as torch's
        cpu kernels keep them (CUDA's keep fp32)."""
        b = call.precision.bytes_per_element
        return [Saved(INPUT, numel(call.in_shape), b), Saved("mean", self.statistics(call), b),
                Saved("rstd", self.statistics(call), b)]

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
        from costspec.nn.norm import LayerNorm2d as TorchLayerNorm2d

        a = call.attrs
        return TorchLayerNorm2d(ev(self.channels(call)), a.eps, a.affine, self.has_bias(call))


@register_op
class RMSNorm(_Norm):
    """RMSNorm over the last dim (Zhang & Sennrich 2019), as in Llama."""

    name = "rmsnorm"
    doc = "RMSNorm over the last dim (nn.RMSNorm), learned scale, no bias."
    default_name = "norm"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """nn.RMSNorm as torch composes it: with an input gradient, the input in fp32 (a copy unless it is
        fp32) and 1/rms per row (fp32); with a scale, the normalised fp32 values it multiplies."""
        n, rows = numel(call.in_shape), numel(call.in_shape[:-1])
        x = INPUT if call.precision.bytes_per_element == STAT_BYTES else "input_fp32"
        out = [Saved(x, n, STAT_BYTES), Saved("rstd", rows, STAT_BYTES)] if input_grad else []
        return out + ([Saved("normalized", n, STAT_BYTES)] if call.attrs.affine else [])
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


@register_op
class BatchNorm(_Norm):
    """BatchNorm over the channel dim 1 of [B, C], [B, C, L], [B, C, H, W] or [B, C, T, H, W] (Ioffe &
    Szegedy 2015), in train mode (batch statistics) or eval mode (running statistics)."""

    name = "batchnorm"
    doc = ("BatchNorm over channel dim 1 of [B, C], [B, C, L] (BatchNorm1d), [B, C, H, W] (BatchNorm2d) or "
           "[B, C, T, H, W]. mode: train computes the batch statistics (mean and variance over all but the "
           "channel dim, 7 FLOPs/element), eval normalises with the running statistics (a per-channel scale and "
           "shift, 2 FLOPs/element). The running mean and variance are buffers, not parameters.")
    default_name = "bn"
    channel_axis = 1
    attrs = (
        Attr("mode", "choice", "train (batch statistics; backward through them) or eval (running statistics, "
             "frozen BatchNorm)", default="train", choices=("train", "eval")),
        Attr("eps", "number", "epsilon (does not change the cost)", default=1e-5),
        Attr("affine", "bool", "learned per-channel scale and bias", default=True),
    )

    def has_bias(self, call: OpCall) -> bool:
        return bool(call.attrs.affine)

    def output_shape(self, call: OpCall):
        requires(self, call, (2, 3, 4, 5), "an input [B, C, ...] with channels at dim 1")
        return call.in_shape

    def constraints(self, call: OpCall):
        if call.attrs.mode != "train":
            return super().constraints(call)
        super().constraints(call)
        values = numel(call.in_shape) / self.channels(call)
        return [Constraint(sympy.Gt(values, 1), "batchnorm in train mode needs more than one value per channel "
                           "(B x positions = {n})", call.attrs.where("mode"), {"n": values},
                           "a batch or positions larger than 1, or mode: eval")]

    def forward(self, call: OpCall):
        kind = "batchnorm" if call.attrs.mode == "train" else "batchnorm_eval"
        c = self.channels(call)
        return [Part("", pointwise(kind, numel(call.in_shape)), 2 * c if call.attrs.affine else 0)]

    def backward(self, call: OpCall, input_grad: bool):
        kind = "batchnorm_backward" if call.attrs.mode == "train" else "batchnorm_eval_backward"
        return [Part("", pointwise(kind, numel(call.in_shape)))]

    def notes(self, call: OpCall):
        return [f"batchnorm in {call.attrs.mode} mode: " + (
            "batch statistics computed in the forward and differentiated in the backward" if call.attrs.mode == "train"
            else "running statistics (constants): a per-channel scale and shift")]

    def build(self, call: OpCall, ev):
        from costspec.nn.norm import BatchNorm as TorchBatchNorm

        a = call.attrs
        return TorchBatchNorm(ev(self.channels(call)), a.eps, a.affine, a.mode == "train")

    def statistics(self, call: OpCall) -> Expr:
        return self.channels(call) if call.attrs.mode == "train" else ZERO


@register_op
class GroupNorm(_Norm):
    """GroupNorm (Wu & He 2018): statistics per sample over each group of channels and all positions."""

    name = "groupnorm"
    runtime = Runtime(aten={"aten.native_group_norm": "groupnorm",
                            "aten.native_group_norm_backward": "groupnorm_backward"})
    doc = ("GroupNorm over channel groups of [B, C, ...] (nn.GroupNorm): mean and variance per sample and group "
           "over C/groups channels and every position; learned per-channel scale and bias.")
    default_name = "norm"
    kind = "groupnorm"
    channel_axis = 1
    attrs = (
        Attr("groups", "size", "channel groups (1 = LayerNorm over C and positions; C = InstanceNorm)"),
        Attr("eps", "number", "epsilon (does not change the cost)", default=1e-5),
        Attr("affine", "bool", "learned per-channel scale and bias", default=True),
    )

    def has_bias(self, call: OpCall) -> bool:
        return bool(call.attrs.affine)

    def output_shape(self, call: OpCall):
        requires(self, call, (2, 3, 4, 5), "an input [B, C, ...] with channels at dim 1")
        return call.in_shape

    def constraints(self, call: OpCall):
        super().constraints(call)
        a, c = call.attrs, self.channels(call)
        per_group = numel(call.in_shape[1:]) / a.groups
        return [Constraint(sympy.Eq(sympy.Mod(c, a.groups), 0), "channels {c} not divisible by groups {groups}",
                           a.where("groups"), {"c": c, "groups": a.groups}),
                Constraint(sympy.Gt(per_group, 1), "groupnorm needs more than one value per group (C/groups x "
                           "positions = {n})", a.where("groups"), {"n": per_group}, "fewer groups or more positions")]

    def statistics(self, call: OpCall) -> Expr:
        return call.in_shape[0] * call.attrs.groups

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        a = call.attrs
        return nn.GroupNorm(ev(a.groups), ev(self.channels(call)), eps=a.eps, affine=a.affine)


@register_op
class GRN(OpDef):
    """Global Response Normalisation (Woo et al. 2023, ConvNeXt-V2) on channels-last [B, H, W, C]:
    G = the L2 norm of each channel over H and W, N = G / (mean of G over the channels + eps),
    out = gamma * (x * N) + beta + x."""

    name = "grn"
    doc = ("Global Response Normalisation of ConvNeXt-V2 on a channels-last [B, H, W, C] input: each channel's L2 "
           "norm over H and W divided by its mean over the channels (+ eps), then gamma * (x * N) + beta + x "
           "(the residual is part of the layer); 2C parameters (gamma, beta).")
    default_name = "grn"
    # transformers' ConvNextV2GRN (and costspec's module of the same name) runs vector_norm, mean, add, div,
    # mul, mul, add, add (and their backward ops): one grn element per input element each way
    runtime = Runtime(decomposed=("ConvNextV2GRN", "grn", "grn_backward"))
    attrs = (Attr("eps", "number", "epsilon of the division by the mean norm (does not change the cost)",
                  default=1e-6),)

    def output_shape(self, call: OpCall):
        requires(self, call, 4, "a channels-last input [B, H, W, C]")
        return call.in_shape

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """Its separate operations' tensors: x * N for gamma's gradient; with an input gradient also x and the
        channel norms (the norm's backward), the mean + eps per sample and N (the division's and the product's
        other sides)."""
        b, c, n = call.precision.bytes_per_element, call.in_shape[-1], numel(call.in_shape)
        scaled = [Saved("x_normed", n, b)]
        if not input_grad:
            return scaled
        batch = call.in_shape[0]
        return [Saved(INPUT, n, b), Saved("norms", batch * c, b), Saved("denominator", batch, b),
                Saved("normed", batch * c, b)] + scaled

    def forward(self, call: OpCall):
        return [Part("", pointwise("grn", numel(call.in_shape)), 2 * call.in_shape[-1])]

    def backward(self, call: OpCall, input_grad: bool):
        # the backward reads x and g over every element for dgamma and dbeta even without dx
        return [Part("", pointwise("grn_backward", numel(call.in_shape)))]

    def build(self, call: OpCall, ev):
        from costspec.nn.norm import ConvNextV2GRN

        return ConvNextV2GRN(ev(call.in_shape[-1]), call.attrs.eps)
