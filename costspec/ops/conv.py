"""Convolutions: `conv1d`, `conv2d`, `conv3d`, `conv_transpose2d`, and `patch_embed` (a stride=patch
conv flattened to tokens)."""
from __future__ import annotations

from typing import ClassVar

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import CONV_RUNTIME, INPUT, Constraint, OpCall, OpDef, Reconcile, Saved, requires
from costspec.ops.registry import register_op
from costspec.ops.spatial import RANKS, Rank, per_dim
from costspec.ops.work import ZERO, Gemm, Part, Traffic, Work, numel, pointwise


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


def transposed_conv_out(size, kernel, stride, padding, dilation, output_padding):
    """(size - 1)*s - 2p + d(k-1) + output_padding + 1, as nn.ConvTranspose2d computes it."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def _conv_attrs(k: str, transposed: bool = False) -> tuple[Attr, ...]:
    """Attributes of a convolution whose per-dim sizes are of attribute kind `k` (size, pair, triple)."""
    out: tuple[Attr, ...] = (
        Attr("out", "size", "output channels"),
        Attr("kernel", k, "kernel size" + ("" if k == "size" else " (int or one per spatial dim)")),
        Attr("stride", k, "stride", default=1),
        Attr("padding", "count" if k == "size" else k, "zero padding on each side", default=0),
        Attr("dilation", k, "dilation", default=1),
        Attr("groups", "size", "channel groups (depthwise: groups = channels)", default=1),
        Attr("bias", "bool", "add a learned bias", default=True),
    )
    if transposed:
        out += (Attr("output_padding", k if k != "size" else "count", "extra size added to one side of the "
                     "output (nn.ConvTranspose's output_padding; smaller than stride or dilation)", default=0),)
    return out


def conv_outputs(outputs, weight, inputs, pass_: Phase, input_grad: bool):
    """Conv output elements: the output forward; dW (the weight, bias excluded) and dX (the input) backward."""
    if pass_ == Phase.FORWARD:
        return outputs
    return weight + (inputs if input_grad else ZERO)


class ConvNd(OpDef):
    """A convolution over the `rank.n` trailing dims of [B, C, *spatial] (nn.Conv1d/2d/3d, or transposed);
    `conv_op` registers one per rank.

    Work counts 2 FLOPs per multiply-add the kernel executes: B*Cout*prod(out)*(Cin/g)*prod(k) for a
    convolution; B*Cin*prod(in)*(Cout/g)*prod(k) for a transposed one (each input element is scattered
    through the kernel, as FlopCounterMode counts it).
    """

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The input (the weight gradient needs it; the weight is a parameter)."""
        return [Saved(INPUT, numel(call.in_shape), call.precision.bytes_per_element)]

    rank: ClassVar[Rank] = RANKS[2]
    transposed: ClassVar[bool] = False
    runtime = CONV_RUNTIME

    def _geometry(self, call: OpCall):
        """(b, cin, in sizes, out sizes, kernel sizes)."""
        a, n = call.attrs, self.rank.n
        b, cin, *sizes = call.in_shape
        kernel, stride, padding, dilation = (per_dim(v, n) for v in (a.kernel, a.stride, a.padding, a.dilation))
        if self.transposed:
            extra = per_dim(a.output_padding, n)
            out = tuple(transposed_conv_out(*g) for g in zip(sizes, kernel, stride, padding, dilation, extra))
        else:
            out = tuple(conv_out(*g) for g in zip(sizes, kernel, stride, padding, dilation))
        return b, cin, tuple(sizes), out, kernel

    def output_shape(self, call: OpCall):
        requires(self, call, self.rank.n + 2, f"an {self.rank.layout} input")
        b, _, _, out, _ = self._geometry(call)
        for name, size in zip(self.rank.dim_names, out):
            if size.is_number and size < 1:
                raise call.fail(f"output {name} would be {size}", "kernel", "a kernel no larger than the padded input")
        return (b, call.attrs.out, *out)

    def constraints(self, call: OpCall):
        a = call.attrs
        cin = call.in_shape[1]
        out = [Constraint(sympy.Eq(sympy.Mod(cin, a.groups), 0),
                          "input channels {cin} not divisible by groups {groups}", a.where("groups"),
                          {"cin": cin, "groups": a.groups}),
               Constraint(sympy.Eq(sympy.Mod(a.out, a.groups), 0), "out {out} not divisible by groups {groups}",
                          a.where("groups"), {"out": a.out, "groups": a.groups})]
        if self.transposed:
            n = self.rank.n
            for extra, s, d in zip(per_dim(a.output_padding, n), per_dim(a.stride, n), per_dim(a.dilation, n)):
                if not (sympy.sympify(extra) == 0):
                    out.append(Constraint(sympy.Lt(extra, sympy.Max(s, d)), "output_padding {p} must be smaller than "
                                          "stride {s} or dilation {d}", a.where("output_padding"),
                                          {"p": extra, "s": s, "d": d}))
        return out

    def _macs(self, call: OpCall):
        a = call.attrs
        b, cin, sizes, out, kernel = self._geometry(call)
        if self.transposed:
            return b * cin * numel(sizes) * (a.out / a.groups) * numel(kernel)
        return b * a.out * numel(out) * (cin / a.groups) * numel(kernel)

    def _outputs(self, call: OpCall):
        b, _, _, out, _ = self._geometry(call)
        return b * call.attrs.out * numel(out)

    def forward(self, call: OpCall):
        a = call.attrs
        _, cin, _, _, kernel = self._geometry(call)
        params = (cin * a.out / a.groups) * numel(kernel) + (a.out if a.bias else 0)
        work = Work({"conv": FLOPS_PER_MAC * self._macs(call)})
        return [Part("", work + pointwise("bias_add", self._outputs(call)) if a.bias else work, params)]

    def backward(self, call: OpCall, input_grad: bool):
        """dW (same MACs as forward), dX only when needed (same MACs again), db = sum over B and space."""
        work = Work({"conv": FLOPS_PER_MAC * self._macs(call) * (2 if input_grad else 1)})
        return [Part("", work + pointwise("bias_grad", self._outputs(call)) if call.attrs.bias else work)]

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        a = call.attrs
        _, cin, _, _, kernel = self._geometry(call)
        weight = cin * a.out / a.groups * numel(kernel)
        return {"": conv_outputs(self._outputs(call), weight, numel(call.in_shape), pass_, input_grad)}

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The implicit GEMM cuDNN runs per group: m = B*prod(out), n = out/groups, k = (in/groups)*prod(kernel);
        a transposed conv scatters each input element: m = B*prod(in), n = (out/groups)*prod(kernel),
        k = in/groups. The channel counts themselves are padded by cuDNN (>= 7.6.3) and not checked alone."""
        a = call.attrs
        b, cin, sizes, out, kernel = self._geometry(call)
        if self.transposed:
            return [Gemm("", b * numel(sizes), a.out / a.groups * numel(kernel), cin / a.groups, a.groups, "conv")]
        return [Gemm("", b * numel(out), a.out / a.groups, cin / a.groups * numel(kernel), a.groups, "conv")]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """FlopCounterMode's convolution_backward formula for grad_weight.

        NB: torch 2.13 counts grad_weight as g*F (its formula ignores the groups, for convolutions and
        transposed ones alike); costspec keeps the F the grouped kernel executes and names the difference.
        """
        a = call.attrs
        if pass_ != Phase.BACKWARD or ev(a.groups) == 1:
            return []
        weight_grad = FLOPS_PER_MAC * self._macs(call)
        return [Reconcile("conv-grouped-weight-grad", "", Work({"conv": (a.groups - 1) * weight_grad}),
                          "FlopCounterMode counts convolution_backward's grad_weight as g*F (its formula ignores "
                          "groups); costspec counts the F = 2*MACs the grouped kernel executes")]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        a, n = call.attrs, self.rank.n
        sizes = lambda v: tuple(ev(x) for x in per_dim(v, n))  # noqa: E731
        cls = getattr(nn, _torch_class(n, self.transposed))
        extra = {"output_padding": sizes(a.output_padding)} if self.transposed else {}
        return cls(ev(call.in_shape[1]), ev(a.out), sizes(a.kernel), stride=sizes(a.stride), padding=sizes(a.padding),
                   dilation=sizes(a.dilation), groups=ev(a.groups), bias=a.bias, **extra)


def _torch_class(n: int, transposed: bool) -> str:
    return f"Conv{'Transpose' if transposed else ''}{n}d"


def conv_op(n: int, summary: str, note: str = "", transposed: bool = False) -> type[ConvNd]:
    """Register the convolution over n spatial dims (transposed: the transposed one) as a ConvNd of that
    rank: its name, doc, layout, attribute kinds and torch class follow from n. `summary` is its
    docstring, `note` what its doc adds after the torch class."""
    rank, torch_class = RANKS[n], _torch_class(n, transposed)

    class Conv(ConvNd):
        __doc__ = summary
        name = f"conv{'_transpose' if transposed else ''}{n}d"
        doc = f"{'Transposed ' if transposed else ''}{n}D convolution on {rank.shape} (nn.{torch_class}){note}."
        default_name = "deconv" if transposed else "conv"
        attrs = _conv_attrs(rank.kind, transposed)

    Conv.rank, Conv.transposed = rank, transposed
    Conv.__name__ = Conv.__qualname__ = torch_class
    return register_op(Conv)


Conv1d = conv_op(1, "1D convolution on [B, C, L] (nn.Conv1d; Whisper's audio stem).")
Conv2d = conv_op(2, "2D convolution on NCHW (nn.Conv2d).")
Conv3d = conv_op(3, "3D convolution on [B, C, T, H, W] (nn.Conv3d; video patch embedding).",
                 ", e.g. a video patch embedding (kernel = stride)")
ConvTranspose2d = conv_op(2, "Transposed 2D convolution on NCHW (nn.ConvTranspose2d; decoders and upsampling necks).",
                          ": output (H-1)*s - 2p + d(k-1) + output_padding + 1; FLOPs 2*B*Cin*H*W*(Cout/g)*kh*kw "
                          "(every input element through the kernel)", transposed=True)


@register_op
class PatchEmbed(OpDef):
    """Image -> tokens: conv with kernel = stride = patch, flattened; optional class token and
    learned position embedding (ViT, Dosovitskiy et al. 2021)."""

    name = "patch_embed"
    doc = ("Patch embedding: conv with kernel = stride = patch on [B, C, H, W], flattened to "
           "[B, (H/p)*(W/p) (+1 class token), dim], plus an optional learned position embedding (and an optional "
           "mask token: parameters only).")
    default_name = "patch_embed"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The image (the conv's weight gradient needs it); the class token's concatenation and the
        position add keep nothing."""
        return [Saved(INPUT, numel(call.in_shape), call.precision.bytes_per_element)]

    runtime = CONV_RUNTIME
    attrs = (
        Attr("patch", "size", "patch size p (kernel = stride = p)"),
        Attr("dim", "size", "embedding dim"),
        Attr("cls_token", "bool", "prepend a learned class token", default=False),
        Attr("pos_embed", "bool", "add a learned position embedding to every token", default=False),
        Attr("bias", "bool", "conv bias", default=True),
        Attr("mask_token", "bool", "hold a learned (1, 1, dim) mask token that only masked image modelling reads "
             "(DINOv2's / BEiT's use_mask_token): dim parameters, no work, no gradient (a forward without a mask "
             "never reads it)", default=False),
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
        if a.mask_token:  # held, never read without a mask: parameters only
            parts.append(Part("mask_token", Work(), a.dim, own=True))
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

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        a = call.attrs
        b, cin, gh, gw = self._grid(call)
        return {"proj": conv_outputs(b * a.dim * gh * gw, a.dim * cin * a.patch ** 2, numel(call.in_shape), pass_,
                                     input_grad)}

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The patch conv as its implicit GEMM: m = B*(H/p)*(W/p), n = dim, k = C*p*p."""
        a = call.attrs
        b, cin, gh, gw = self._grid(call)
        return [Gemm("proj", b * gh * gw, a.dim, cin * a.patch * a.patch, sympy.Integer(1), "conv")]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """The gradient of cls_token / pos_embed at batch 1.

        NB: the formula counts B*dim and B*S*dim elements for the batch sums of these gradients;
        autograd's sum_to_size runs no reduction when B = 1, so none is measured then.
        """
        a = call.attrs
        b, _, gh, gw = self._grid(call)
        if pass_ != Phase.BACKWARD or ev(b) != 1:
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

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """proj: the conv (image + weights in, grid tokens out); cls_token: torch.cat copies the grid
        tokens into the longer sequence; pos_embed: reads tokens and the table, writes tokens."""
        a = call.attrs
        b, cin, gh, gw = self._grid(call)
        image, grid_tokens = b * cin * gh * a.patch * gw * a.patch, b * gh * gw * a.dim
        tokens = b * (gh * gw + (1 if a.cls_token else 0)) * a.dim
        weights = a.dim * cin * a.patch ** 2 + (a.dim if a.bias else 0)
        if pass_ == Phase.FORWARD:
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
        from costspec.nn.conv import PatchEmbed as TorchPatchEmbed

        a = call.attrs
        _, cin, gh, gw = self._grid(call)
        return TorchPatchEmbed(ev(cin), ev(a.dim), ev(a.patch), ev(gh) * ev(gw), a.cls_token, a.pos_embed, a.bias,
                               a.mask_token)
