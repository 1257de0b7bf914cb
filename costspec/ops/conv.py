"""`conv2d` and `patch_embed` (a stride=patch conv flattened to tokens)."""
from __future__ import annotations

import sympy

from ..conventions import FLOPS_PER_MAC
from .base import (
    CONV_RUNTIME,
    ZERO,
    Attr,
    Constraint,
    Gemm,
    OpCall,
    OpDef,
    Part,
    Reconcile,
    Traffic,
    Work,
    numel,
    pointwise,
    requires,
)
from .registry import register_op


def _pair(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


def conv_out(size, kernel, stride, padding, dilation):
    """floor((size + 2p - d(k-1) - 1) / s) + 1, as nn.Conv2d computes it."""
    return sympy.floor((size + 2 * padding - dilation * (kernel - 1) - 1) / stride) + 1


def conv_forward(b, cin, cout, hout, wout, kh, kw, groups, bias) -> Work:
    """2 * B*Cout*Hout*Wout * (Cin/groups)*kh*kw FLOPs, plus the bias add per output element."""
    outputs = b * cout * hout * wout
    work = Work({"conv": FLOPS_PER_MAC * outputs * (cin / groups) * kh * kw})
    return work + pointwise("bias_add", outputs) if bias else work


def conv_backward(b, cin, cout, hout, wout, kh, kw, groups, bias, input_grad) -> Work:
    """dW (same MACs as forward), dX only when needed (same MACs again), db = sum over B, H, W."""
    outputs = b * cout * hout * wout
    macs = outputs * (cin / groups) * kh * kw
    work = Work({"conv": FLOPS_PER_MAC * macs * (2 if input_grad else 1)})
    return work + pointwise("bias_grad", outputs) if bias else work


def conv_outputs(outputs, weight, inputs, pass_: str, input_grad: bool):
    """Conv output elements: the output forward; dW (the weight, bias excluded) and dX (the input) backward."""
    if pass_ == "forward":
        return outputs
    return weight + (inputs if input_grad else ZERO)


@register_op
class Conv2d(OpDef):
    """2D convolution on NCHW (nn.Conv2d)."""

    name = "conv2d"
    doc = "2D convolution on [B, C, H, W] (nn.Conv2d)."
    default_name = "conv"
    runtime = CONV_RUNTIME
    attrs = (
        Attr("out", "size", "output channels"),
        Attr("kernel", "pair", "kernel size (int or [kh, kw])"),
        Attr("stride", "pair", "stride", default=1),
        Attr("padding", "pair", "zero padding on each side", default=0),
        Attr("dilation", "pair", "dilation", default=1),
        Attr("groups", "size", "channel groups (depthwise: groups = channels)", default=1),
        Attr("bias", "bool", "add a learned bias", default=True),
    )

    def _geometry(self, call: OpCall):
        a = call.attrs
        b, cin, h, w = call.in_shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (_pair(a.kernel), _pair(a.stride), _pair(a.padding),
                                                  _pair(a.dilation))
        return b, cin, conv_out(h, kh, sh, ph, dh), conv_out(w, kw, sw, pw, dw), kh, kw

    def output_shape(self, call: OpCall):
        requires(self, call, 4, "an NCHW input")
        b, _, hout, wout, _, _ = self._geometry(call)
        for name, size in (("height", hout), ("width", wout)):
            if size.is_number and size < 1:
                raise call.fail(f"output {name} would be {size}", "kernel", "a kernel no larger than the padded input")
        return (b, call.attrs.out, hout, wout)

    def constraints(self, call: OpCall):
        a = call.attrs
        cin = call.in_shape[1]
        return [Constraint(sympy.Eq(sympy.Mod(cin, a.groups), 0),
                           "input channels {cin} not divisible by groups {groups}",
                           a.where("groups"), {"cin": cin, "groups": a.groups}),
                Constraint(sympy.Eq(sympy.Mod(a.out, a.groups), 0), "out {out} not divisible by groups {groups}",
                           a.where("groups"), {"out": a.out, "groups": a.groups})]

    def forward(self, call: OpCall):
        a = call.attrs
        b, cin, hout, wout, kh, kw = self._geometry(call)
        params = a.out * (cin / a.groups) * kh * kw + (a.out if a.bias else 0)
        return [Part("", conv_forward(b, cin, a.out, hout, wout, kh, kw, a.groups, a.bias), params)]

    def backward(self, call: OpCall, input_grad: bool):
        a = call.attrs
        b, cin, hout, wout, kh, kw = self._geometry(call)
        return [Part("", conv_backward(b, cin, a.out, hout, wout, kh, kw, a.groups, a.bias, input_grad))]

    def gemm_outputs(self, call: OpCall, pass_: str, input_grad: bool):
        a = call.attrs
        b, cin, hout, wout, kh, kw = self._geometry(call)
        return {"": conv_outputs(b * a.out * hout * wout, a.out * (cin / a.groups) * kh * kw, numel(call.in_shape),
                                 pass_, input_grad)}

    def reconcile(self, call: OpCall, pass_: str, input_grad: bool, runtime, ev):
        """FlopCounterMode's convolution_backward formula for grad_weight.

        NB: torch 2.13 counts grad_weight as 2*B*Cout*Ho*Wo*Cin*kh*kw = g*F (the groups are ignored);
        costspec keeps the F that the grouped kernel executes and names the difference.
        """
        a = call.attrs
        if pass_ != "backward" or ev(a.groups) == 1:
            return []
        b, cin, hout, wout, kh, kw = self._geometry(call)
        weight_grad = FLOPS_PER_MAC * b * a.out * hout * wout * (cin / a.groups) * kh * kw
        return [Reconcile("conv-grouped-weight-grad", "", Work({"conv": (a.groups - 1) * weight_grad}),
                          "FlopCounterMode counts convolution_backward's grad_weight as g*F (its formula ignores "
                          "groups); costspec counts the F = 2*B*Cout*Ho*Wo*(Cin/g)*kh*kw it executes")]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        a = call.attrs
        pair = lambda v: tuple(ev(x) for x in _pair(v))  # noqa: E731
        return nn.Conv2d(ev(call.in_shape[1]), ev(a.out), pair(a.kernel), stride=pair(a.stride),
                         padding=pair(a.padding), dilation=pair(a.dilation), groups=ev(a.groups), bias=a.bias)

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The implicit GEMM cuDNN runs per group: m = B*Ho*Wo, n = out/groups, k = (in/groups)*kh*kw.
        The channel counts themselves are padded by cuDNN (>= 7.6.3) and not checked on their own."""
        a = call.attrs
        b, cin, hout, wout, kh, kw = self._geometry(call)
        return [Gemm("", b * hout * wout, a.out / a.groups, cin / a.groups * kh * kw, a.groups, "conv")]


@register_op
class PatchEmbed(OpDef):
    """Image -> tokens: conv with kernel = stride = patch, flattened; optional class token and
    learned position embedding (ViT, Dosovitskiy et al. 2021)."""

    name = "patch_embed"
    doc = ("Patch embedding: conv with kernel = stride = patch on [B, C, H, W], flattened to "
           "[B, (H/p)*(W/p) (+1 class token), dim], plus an optional learned position embedding.")
    default_name = "patch_embed"
    runtime = CONV_RUNTIME
    attrs = (
        Attr("patch", "size", "patch size p (kernel = stride = p)"),
        Attr("dim", "size", "embedding dim"),
        Attr("cls_token", "bool", "prepend a learned class token", default=False),
        Attr("pos_embed", "bool", "add a learned position embedding to every token", default=False),
        Attr("bias", "bool", "conv bias", default=True),
    )

    def _grid(self, call: OpCall):
        b, cin, h, w = call.in_shape
        p = call.attrs.patch
        return b, cin, sympy.floor(h / p), sympy.floor(w / p)

    def output_shape(self, call: OpCall):
        requires(self, call, 4, "an NCHW image")
        b, _, gh, gw = self._grid(call)
        tokens = gh * gw + (1 if call.attrs.cls_token else 0)
        return (b, tokens, call.attrs.dim)

    def constraints(self, call: OpCall):
        _, _, h, w = call.in_shape
        p = call.attrs.patch
        return [Constraint(sympy.Eq(sympy.Mod(h, p), 0) & sympy.Eq(sympy.Mod(w, p), 0),
                           "image {h}x{w} is not divisible by patch {p}", call.attrs.where("patch"),
                           {"h": h, "w": w, "p": p})]

    def forward(self, call: OpCall):
        a = call.attrs
        b, cin, gh, gw = self._grid(call)
        tokens = gh * gw + (1 if a.cls_token else 0)
        parts = [Part("proj", conv_forward(b, cin, a.dim, gh, gw, a.patch, a.patch, 1, a.bias),
                      a.dim * cin * a.patch ** 2 + (a.dim if a.bias else 0))]
        if a.cls_token:
            parts.append(Part("cls_token", Work(), a.dim, own=True))
        if a.pos_embed:
            parts.append(Part("pos_embed", pointwise("add", b * tokens * a.dim), tokens * a.dim, own=True))
        return parts

    def backward(self, call: OpCall, input_grad: bool):
        a = call.attrs
        b, cin, gh, gw = self._grid(call)
        tokens = gh * gw + (1 if a.cls_token else 0)
        parts = [Part("proj", conv_backward(b, cin, a.dim, gh, gw, a.patch, a.patch, 1, a.bias, input_grad))]
        if a.cls_token:  # d(cls) = sum over the batch of the class token's gradient
            parts.append(Part("cls_token", pointwise("bias_grad", b * a.dim), own=True))
        if a.pos_embed:  # d(pos) = sum over the batch
            parts.append(Part("pos_embed", pointwise("bias_grad", b * tokens * a.dim), own=True))
        return parts

    def gemm_outputs(self, call: OpCall, pass_: str, input_grad: bool):
        a = call.attrs
        b, cin, gh, gw = self._grid(call)
        return {"proj": conv_outputs(b * a.dim * gh * gw, a.dim * cin * a.patch ** 2, numel(call.in_shape), pass_,
                                     input_grad)}

    def reconcile(self, call: OpCall, pass_: str, input_grad: bool, runtime, ev):
        """The gradient of cls_token / pos_embed at batch 1.

        NB: the formula counts B*dim and B*S*dim elements for the batch sums of these gradients;
        autograd's sum_to_size runs no reduction when B = 1, so none is measured then.
        """
        a = call.attrs
        b, _, gh, gw = self._grid(call)
        if pass_ != "backward" or ev(b) != 1:
            return []
        text = ("batch of 1: autograd sums the gradient of a parameter broadcast over the batch (cls_token, "
                "pos_embed) only when B > 1; at B = 1 no reduction runs, costspec counts B*dim and B*S*dim elements")
        out = []
        if a.cls_token:
            out.append(Reconcile("broadcast-grad-batch-1", "cls_token", pointwise("bias_grad", -b * a.dim), text))
        if a.pos_embed:
            tokens = gh * gw + (1 if a.cls_token else 0)
            out.append(Reconcile("broadcast-grad-batch-1", "pos_embed", pointwise("bias_grad", -b * tokens * a.dim),
                                 text))
        return out

    def traffic(self, call: OpCall, pass_: str, input_grad: bool, fusion: str):
        """proj: the conv (image + weights in, grid tokens out); cls_token: torch.cat copies the grid
        tokens into the longer sequence; pos_embed: reads tokens and the table, writes tokens."""
        a = call.attrs
        b, cin, gh, gw = self._grid(call)
        image, grid_tokens = b * cin * gh * a.patch * gw * a.patch, b * gh * gw * a.dim
        tokens = b * (gh * gw + (1 if a.cls_token else 0)) * a.dim
        weights = a.dim * cin * a.patch ** 2 + (a.dim if a.bias else 0)
        if pass_ == "forward":
            out = [Traffic("proj", image + weights, grid_tokens)]
            if a.cls_token:
                out.append(Traffic("cls_token", grid_tokens + a.dim, tokens))
            if a.pos_embed:
                out.append(Traffic("pos_embed", tokens + tokens // b, tokens))
            return out
        out = [Traffic("proj", grid_tokens + image + (grid_tokens + weights if input_grad else ZERO),
                       weights + (image if input_grad else ZERO))]
        if a.cls_token:
            out.append(Traffic("cls_token", tokens, grid_tokens + a.dim))
        if a.pos_embed:
            out.append(Traffic("pos_embed", tokens, tokens // b))
        return out

    def build(self, call: OpCall, ev):
        from ..torch_modules import PatchEmbed as TorchPatchEmbed

        a = call.attrs
        _, cin, gh, gw = self._grid(call)
        return TorchPatchEmbed(ev(cin), ev(a.dim), ev(a.patch), ev(gh) * ev(gw), a.cls_token, a.pos_embed, a.bias)

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The patch conv as its implicit GEMM: m = B*(H/p)*(W/p), n = dim, k = C*p*p."""
        a = call.attrs
        b, cin, gh, gw = self._grid(call)
        return [Gemm("proj", b * gh * gw, a.dim, cin * a.patch * a.patch, sympy.Integer(1), "conv")]
