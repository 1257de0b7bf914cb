"""Pooling and reductions: `max_pool1d`, `max_pool2d`, `avg_pool1d`, `avg_pool2d`, `adaptive_avg_pool2d`,
`global_avg_pool`, `mean`. No parameters; CUDA-core work by the elements each window holds.

Counting: a pooling window of k elements is k elements of its kind per output (one compare for max,
one add for average; the average's one divide per output is O(1/k) and folded in, as a norm's
rsqrt per row is). Backward: max pooling adds each output gradient into the position of its
maximum (one element per output); average pooling spreads it over the window (k per output).

A window is counted over the padded input: its padding positions count (zeros for the average,
-inf for max), the part of a `ceil_mode` window reaching past the padded input does not (torch
clips it there: EfficientNet's AvgPool2d(1280, ceil_mode=True) on a 7 x 7 map reads 49 elements
per channel, not 1280^2). `count_include_pad` changes only the divisor, which is folded.
"""
from __future__ import annotations

from typing import ClassVar

import sympy

from costspec.core.vocab import Phase
from costspec.ops.attrs import Attr
from costspec.ops.conv import conv_out
from costspec.ops.opdef import (
    INDEX_BYTES,
    INPUT,
    Constraint,
    OpCall,
    OpDef,
    Reconcile,
    Runtime,
    Saved,
    requires,
    same_size,
)
from costspec.ops.registry import register_op
from costspec.ops.spatial import RANKS, Rank, per_dim
from costspec.ops.work import Part, Work, numel, pointwise


class PoolNd(OpDef):
    """Max or average pooling over the `rank.n` trailing dims of [B, C, *spatial] (nn.MaxPool*/AvgPool*);
    `pool_op` registers one per reduction and rank."""

    rank: ClassVar[Rank] = RANKS[2]
    reduce: ClassVar[str] = "max"  # or "avg"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The input, and max pooling's int64 argmax per output element."""
        out = [Saved(INPUT, numel(call.in_shape), call.precision.bytes_per_element)]
        if self.reduce == "max":
            out.append(Saved("indices", numel(self.output_shape(call)), INDEX_BYTES))
        return out

    def _geometry(self, call: OpCall):
        a, n = call.attrs, self.rank.n
        kernel, stride, padding = (per_dim(v, n) for v in (a.kernel, a.stride, a.padding))
        sizes = call.in_shape[2:]
        out = pool_out if a.ceil_mode else lambda s, k, st, p, ceil: conv_out(s, k, st, p, 1)
        return kernel, stride, padding, tuple(out(s, k, st, p, True) for s, k, st, p in
                                              zip(sizes, kernel, stride, padding))

    def output_shape(self, call: OpCall):
        requires(self, call, self.rank.n + 2, f"an {self.rank.layout} input")
        kernel, _, padding, out = self._geometry(call)
        for size in out:
            if size.is_number and size < 1:
                raise call.fail(f"output size would be {size}", "kernel", "a kernel no larger than the padded input")
        for k, p in zip(kernel, padding):
            if (2 * p - k).is_number and 2 * p > k:
                raise call.fail(f"padding {p} is more than half the kernel {k}", "padding",
                                "padding at most half the kernel (as torch requires)")
        return tuple(call.in_shape[:2]) + out

    def constraints(self, call: OpCall):
        kernel, _, padding, _ = self._geometry(call)
        return [Constraint(sympy.Le(2 * p, k), "padding {p} is more than half the kernel {k}",
                           call.attrs.where("padding"), {"p": p, "k": k}, "padding at most half the kernel")
                for k, p in zip(kernel, padding) if not (2 * p - k).is_number]

    def _window_elements(self, call: OpCall):
        """B*C times, per spatial dim, the elements its windows cover: outputs x kernel, except that with
        ceil_mode the last window is clipped to the padded input."""
        kernel, stride, padding, out = self._geometry(call)
        if not call.attrs.ceil_mode:
            return numel((*call.in_shape[:2], *out, *kernel))
        covered = [window_cover(size, k, s, p, o) for size, k, s, p, o in
                   zip(call.in_shape[2:], kernel, stride, padding, out)]
        return numel((*call.in_shape[:2], *covered))

    def forward(self, call: OpCall):
        return [Part("", pointwise(self.reduce + "_pool", self._window_elements(call)))]

    def backward(self, call: OpCall, input_grad: bool):
        if not input_grad:
            return [Part("", Work())]
        if self.reduce == "max":  # one add per output, into the position of its maximum
            return [Part("", pointwise("max_pool_backward", numel(self.output_shape(call))))]
        return [Part("", pointwise("avg_pool_backward", self._window_elements(call)))]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        a, n = call.attrs, self.rank.n
        sizes = lambda v: tuple(ev(x) for x in per_dim(v, n))  # noqa: E731
        cls = getattr(nn, _torch_class(self.reduce, n))
        extra = {"count_include_pad": bool(a.count_include_pad)} if self.reduce == "avg" else {}
        return cls(sizes(a.kernel), stride=sizes(a.stride), padding=sizes(a.padding), ceil_mode=bool(a.ceil_mode),
                   **extra)


def pool_out(size, kernel, stride, padding, ceil: bool = True):
    """Outputs of a pooling window along one dim, as torch computes them: floor((L + 2p - k) / s) + 1,
    or with ceil_mode ceil((L + 2p - k) / s) + 1 less a last window that would start in the right
    padding (torch keeps only windows starting inside the input or its left padding)."""
    if not ceil:
        return conv_out(size, kernel, stride, padding, 1)
    last = sympy.floor((size + 2 * padding - kernel + stride - 1) / stride)
    inside = sympy.floor((size + padding - 1) / stride)
    return sympy.Min(last, inside) + 1


def window_cover(size, kernel, stride, padding, out):
    """Elements the `out` windows along one dim cover, each clipped to the padded input [-p, L + p):
    (out - 1) full windows and the last one, min(k, L + 2p - (out - 1)*s)."""
    return (out - 1) * kernel + sympy.Min(kernel, size + 2 * padding - (out - 1) * stride)


def _pool_attrs(kind: str, reduce: str) -> tuple[Attr, ...]:
    attrs: tuple[Attr, ...] = (
        Attr("kernel", kind, "window size"),
        Attr("stride", kind, "stride (default: the kernel, non-overlapping windows)",
             default=lambda shape, a: a["kernel"]),
        Attr("padding", "count" if kind == "size" else kind, "implicit padding on each side (at most half the "
             "kernel; -inf for max, zeros counted in the average)", default=0),
        Attr("ceil_mode", "bool", "round the output size up (torch's ceil_mode): a last, partial window that "
             "starts inside the input (or its left padding), clipped to the padded input", default=False),
    )
    if reduce == "avg":
        attrs += (Attr("count_include_pad", "bool", "divide by the window including its padding (torch's "
                       "default) or by the input elements it covers; the divide per output is folded, so the "
                       "count is the same", default=True),)
    return attrs


def _torch_class(reduce: str, n: int) -> str:
    return f"{'Max' if reduce == 'max' else 'Avg'}Pool{n}d"


# max_pool1d runs as max_pool2d too; its backward counts one element per output gradient
MAX_POOL_RUNTIME = Runtime(aten={"aten.max_pool2d_with_indices_backward": "max_pool_backward"})


def pool_op(reduce: str, n: int, use: str = "") -> type[PoolNd]:
    """Register max ("max") or average ("avg") pooling over n spatial dims as a PoolNd: its name, docs,
    layout, attribute kinds and torch class follow from the reduction and n; `use` is a note for its
    docstring (where the zoo uses it)."""
    rank, torch_class = RANKS[n], _torch_class(reduce, n)
    word, per = ("Max", "compare") if reduce == "max" else ("Average", "add")

    class Pool(PoolNd):
        __doc__ = f"{word} pooling over {rank.axes} of {rank.shape} (nn.{torch_class}{'; ' + use if use else ''})."
        name = f"{reduce}_pool{n}d"
        doc = f"{word} pooling over {rank.axes} of {rank.shape} (nn.{torch_class}): one {per} per window element."
        default_name = "pool"
        attrs = _pool_attrs(rank.kind, reduce)

    if reduce == "max":
        Pool.runtime = MAX_POOL_RUNTIME
    Pool.rank, Pool.reduce = rank, reduce
    Pool.__name__ = Pool.__qualname__ = torch_class
    return register_op(Pool)


MaxPool1d = pool_op("max", 1)
MaxPool2d = pool_op("max", 2, "ResNet's stem")
AvgPool1d = pool_op("avg", 1)
AvgPool2d = pool_op("avg", 2)


def _axes(call: OpCall, axes) -> tuple[int, ...]:
    rank = len(call.in_shape)
    out = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise call.fail(f"axis {axis} is out of range for an input of rank {rank}", "axes",
                            f"axes in [{-rank}, {rank - 1}]")
        if axis % rank in out:
            raise call.fail(f"axis {axis} is listed twice", "axes", "distinct axes")
        out.append(axis % rank)
    return tuple(sorted(out))


class _Mean(OpDef):
    """A mean over some axes: one add per input element (the divide per output folded); backward
    divides the output gradient by the count for every input element (a scale)."""

    saves_nothing = True  # a mean's backward needs only the sizes

    def reduced(self, call: OpCall) -> tuple[int, ...]:
        raise NotImplementedError

    def forward(self, call: OpCall):
        return [Part("", pointwise("mean", numel(call.in_shape)))]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", pointwise("scale", numel(call.in_shape)) if input_grad else Work())]


@register_op
class Mean(_Mean):
    """Mean over chosen axes (torch.mean(dim=axes, keepdim))."""

    name = "mean"
    doc = "Mean over chosen axes (torch.mean): [B, S, C] with axes [1] -> [B, C]; one add per input element."
    default_name = "mean"
    attrs = (Attr("axes", "axes", "the axes to average over (negative counts from the end)"),
             Attr("keepdim", "bool", "keep the reduced axes with size 1", default=False))

    def reduced(self, call: OpCall):
        return _axes(call, call.attrs.axes)

    def output_shape(self, call: OpCall):
        axes = self.reduced(call)
        if call.attrs.keepdim:
            return tuple(sympy.Integer(1) if i in axes else d for i, d in enumerate(call.in_shape))
        return tuple(d for i, d in enumerate(call.in_shape) if i not in axes)

    def build(self, call: OpCall, ev):
        from costspec.nn.pool import Mean as TorchMean

        return TorchMean(self.reduced(call), call.attrs.keepdim)


@register_op
class GlobalAvgPool(_Mean):
    """Global average pooling: [B, C, *spatial] -> [B, C] (ResNet's and ConvNeXt's head)."""

    name = "global_avg_pool"
    doc = ("Global average pooling: the mean over every position of [B, C, L], [B, C, H, W] or [B, C, T, H, W] "
           "-> [B, C] (AdaptiveAvgPool(1) + flatten); one add per input element.")
    default_name = "pool"

    def reduced(self, call: OpCall):
        return tuple(range(2, len(call.in_shape)))

    def output_shape(self, call: OpCall):
        requires(self, call, (3, 4, 5), "an input [B, C, ...] with positions after the channels")
        return tuple(call.in_shape[:2])

    def build(self, call: OpCall, ev):
        from costspec.nn.pool import Mean as TorchMean

        return TorchMean(self.reduced(call), False)


@register_op
class AdaptiveAvgPool2d(OpDef):
    """Adaptive average pooling to an output grid (nn.AdaptiveAvgPool2d)."""

    name = "adaptive_avg_pool2d"
    doc = ("Adaptive average pooling of [B, C, H, W] to [B, C, oh, ow] (nn.AdaptiveAvgPool2d). The input must be "
           "a multiple of the output (windows of H/oh x W/ow; torch's uneven windows are not modelled): one add "
           "per input element. An output of 1 x 1 is torch's mean, counted as `mean`.")
    default_name = "pool"
    attrs = (Attr("size", "pair", "output size [oh, ow] (or one int for both)"),)

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The input (the pooling's backward reads it); none to 1 x 1, which torch runs as a mean."""
        return [] if self._global(call) else [Saved(INPUT, numel(call.in_shape), call.precision.bytes_per_element)]

    def _out(self, call: OpCall):
        return per_dim(call.attrs.size, 2)

    def _global(self, call: OpCall) -> bool:
        return all(same_size(o, 1) for o in self._out(call))

    def output_shape(self, call: OpCall):
        requires(self, call, 4, "an NCHW input")
        for o in self._out(call):
            if o.is_number and o < 1:
                raise call.fail(f"output size {o}", "size", "a positive output size")
        return tuple(call.in_shape[:2]) + self._out(call)

    def constraints(self, call: OpCall):
        out = []
        for size, o in zip(call.in_shape[2:], self._out(call)):
            out.append(Constraint(sympy.Eq(sympy.Mod(size, o), 0) & sympy.Ge(o, 1),
                                  "input size {size} is not a multiple of the output size {o}",
                                  call.attrs.where("size"), {"size": size, "o": o},
                                  "an output size that divides the input (even windows)"))
        return out

    def forward(self, call: OpCall):
        return [Part("", pointwise("mean" if self._global(call) else "avg_pool", numel(call.in_shape)))]

    def backward(self, call: OpCall, input_grad: bool):
        if not input_grad:
            return [Part("", Work())]
        return [Part("", pointwise("scale" if self._global(call) else "avg_pool_backward", numel(call.in_shape)))]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """NB: torch runs adaptive pooling to 1 x 1 as a mean (aten.mean; backward a divide); an output size
        that is symbolic is counted as pooling, so at a binding where it is 1 x 1 the kinds move."""
        if self._global(call) or any(ev(o) != 1 for o in self._out(call)):
            return []
        n = numel(call.in_shape)
        minus = sympy.Mul(-1, n)
        delta = (pointwise("mean", n) + pointwise("avg_pool", minus) if pass_ == Phase.FORWARD
                 else pointwise("scale", n) + pointwise("avg_pool_backward", minus))
        if pass_ == Phase.BACKWARD and not input_grad:
            return []
        return [Reconcile("adaptive-pool-1x1-is-mean", "", delta,
                          "an adaptive average pool to 1 x 1 runs as torch.mean (and its backward as a divide): "
                          "the same elements, counted under mean / scale")]

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        return nn.AdaptiveAvgPool2d(tuple(ev(o) for o in self._out(call)))
