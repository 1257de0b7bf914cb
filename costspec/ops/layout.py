"""Ops that select or rearrange data: `permute`, `slice`, `chunk`, `split`, `pad` (no FLOPs, no
parameters; their traffic is the default copy, as for `transpose`).

NB on `chunk` and `split`: the layer list is sequential, so a split keeps ONE piece (`index`) and the
next layer receives it; the other pieces are dropped (their gradient is zero). A model that uses
every piece needs branches, which the sequential list cannot state.
"""
from __future__ import annotations

import sympy

from costspec.ops.attrs import Attr
from costspec.ops.opdef import Constraint, OpCall, same_size
from costspec.ops.registry import register_op
from costspec.ops.shape_ops import FreeOp, axis_index


def leading_ones(call: OpCall, axis: int | None = None):
    """A piece along `axis` is contiguous when every dim before the axis is 1 (a sympy condition)."""
    axis = axis_index(call, "axis") if axis is None else axis
    return sympy.And(*(sympy.Eq(d, 1) for d in map(sympy.sympify, call.in_shape[:axis])))


def piece_view(op, call: OpCall, contiguous):
    """A piece along the axis is a view that any reshape folds without a copy (contiguous, size-1 dims aside)
    where the input is: every dim before the axis is 1, the piece is the whole axis, or it is one position with
    only dims of 1 after it."""
    axis = axis_index(call, "axis")
    length, whole = sympy.sympify(op.output_shape(call)[axis]), sympy.sympify(call.in_shape[axis])
    after = sympy.And(*(sympy.Eq(d, 1) for d in map(sympy.sympify, call.in_shape[axis + 1:])))
    return sympy.And(contiguous, leading_ones(call, axis) | sympy.Eq(length, whole) | (sympy.Eq(length, 1) & after))


@register_op
class Permute(FreeOp):
    """Reorder all axes."""

    def view(self, call: OpCall, contiguous):
        return sympy.false  # a strided view

    name = "permute"
    doc = "Reorder the axes (torch.permute): `order: [0, 2, 3, 1]` turns NCHW into NHWC; no FLOPs."
    default_name = "permute"
    attrs = (Attr("order", "axes", "the input axis that each output axis takes, a permutation of 0..rank-1"),)

    def _order(self, call: OpCall) -> tuple[int, ...]:
        rank = len(call.in_shape)
        order = tuple(call.attrs.order)
        if len(order) != rank or sorted(a % rank if -rank <= a < rank else a for a in order) != list(range(rank)):
            raise call.fail(f"order {list(order)} is not a permutation of the {rank} axes", "order",
                            f"each of 0..{rank - 1} once")
        return tuple(a % rank for a in order)

    def output_shape(self, call: OpCall):
        return tuple(call.in_shape[a] for a in self._order(call))

    def build(self, call: OpCall, ev):
        from costspec.nn.layout import Permute as TorchPermute

        return TorchPermute(self._order(call))


@register_op
class Slice(FreeOp):
    """x[..., start:end, ...] along one axis."""

    def view(self, call: OpCall, contiguous):
        return piece_view(self, call, contiguous)

    name = "slice"
    doc = "Keep positions start..end-1 along one axis (x[:, start:end]); no FLOPs."
    default_name = "slice"
    attrs = (
        Attr("axis", "axis", "the axis to slice"),
        Attr("start", "count", "first position kept", default=0),
        Attr("end", "size", "one past the last position kept (default: the axis' size)",
             default=lambda shape, a: shape[a["axis"]] if -len(shape) <= a["axis"] < len(shape) else 1),
    )

    def output_shape(self, call: OpCall):
        axis, a = axis_index(call, "axis"), call.attrs
        size = call.in_shape[axis]
        for name, value in (("start", a.start), ("end", a.end)):
            bad = (sympy.sympify(value - size) if name == "end" else sympy.sympify(value - size + 1))
            if bad.is_number and bad > 0:
                raise call.fail(f"{name} {value} is beyond the axis' size {size}", name, f"at most {size}")
        if sympy.sympify(a.end - a.start).is_number and a.end <= a.start:
            raise call.fail(f"end {a.end} is not after start {a.start}", "end", "end > start")
        shape = list(call.in_shape)
        shape[axis] = a.end - a.start
        return tuple(shape)

    def constraints(self, call: OpCall):
        axis, a = axis_index(call, "axis"), call.attrs
        size = call.in_shape[axis]
        return [Constraint(sympy.Lt(a.start, a.end) & sympy.Le(a.end, size),
                           "slice {start}:{end} is not within the axis' {size} positions", a.where("end"),
                           {"start": a.start, "end": a.end, "size": size}, "0 <= start < end <= size")]

    def build(self, call: OpCall, ev):
        from costspec.nn.layout import Narrow

        a = call.attrs
        return Narrow(axis_index(call, "axis") - len(call.in_shape), ev(a.start), ev(a.end - a.start))


class _Piece(FreeOp):
    """One piece of a split along an axis (see the module doc: the others are dropped)."""

    def view(self, call: OpCall, contiguous):
        return piece_view(self, call, contiguous)

    def sizes(self, call: OpCall) -> tuple:
        raise NotImplementedError

    def output_shape(self, call: OpCall):
        axis, index = axis_index(call, "axis"), call.attrs.index
        sizes = self.sizes(call)
        if not 0 <= index < len(sizes):
            raise call.fail(f"index {index} is not one of the {len(sizes)} pieces", "index",
                            f"an index in [0, {len(sizes) - 1}]")
        shape = list(call.in_shape)
        shape[axis] = sizes[index]
        return tuple(shape)

    def build(self, call: OpCall, ev):
        from costspec.nn.layout import Narrow

        sizes, index = self.sizes(call), call.attrs.index
        start = sum((ev(s) for s in sizes[:index]), 0)
        return Narrow(axis_index(call, "axis") - len(call.in_shape), start, ev(sizes[index]), [ev(s) for s in sizes],
                      index)


@register_op
class Chunk(_Piece):
    """torch.chunk into equal pieces, keeping one."""

    name = "chunk"
    doc = ("Split an axis into `chunks` equal pieces and keep piece `index` (torch.chunk(x, n, axis)[index]); "
           "the other pieces are dropped (a sequential layer list carries one value). No FLOPs.")
    default_name = "chunk"
    attrs = (Attr("chunks", "size", "number of equal pieces"), Attr("index", "axis", "the piece kept (0-based)"),
             Attr("axis", "axis", "the axis split", default=-1))

    def sizes(self, call: OpCall):
        n = call.attrs.chunks
        if not sympy.sympify(n).is_number:
            raise call.fail(f"chunks {n} must be a number (the pieces are counted)", "chunks", "an integer")
        size = call.in_shape[axis_index(call, "axis")]
        return (size / n,) * int(n)

    def constraints(self, call: OpCall):
        a = call.attrs
        size = call.in_shape[axis_index(call, "axis")]
        return [Constraint(sympy.Eq(sympy.Mod(size, a.chunks), 0), "axis size {size} is not divisible by chunks {n}",
                           a.where("chunks"), {"size": size, "n": a.chunks}, "chunks that divide the axis")]


@register_op
class Split(_Piece):
    """torch.split into given sizes, keeping one."""

    name = "split"
    doc = ("Split an axis into pieces of the given sizes and keep piece `index` (torch.split(x, sizes, axis)"
           "[index]); the other pieces are dropped. No FLOPs.")
    default_name = "split"
    attrs = (Attr("sizes", "shape", "the pieces' sizes (summing to the axis' size)"),
             Attr("index", "axis", "the piece kept (0-based)"), Attr("axis", "axis", "the axis split", default=-1))

    def sizes(self, call: OpCall):
        if any(s == -1 for s in call.attrs.sizes):
            raise call.fail("a split size cannot be -1", "sizes", "sizes that sum to the axis' size")
        return tuple(call.attrs.sizes)

    def constraints(self, call: OpCall):
        a = call.attrs
        size, total = call.in_shape[axis_index(call, "axis")], sum(self.sizes(call))
        if same_size(size, total):
            return []
        if same_size(size, total) is False and sympy.sympify(size - total).is_number:
            raise call.fail(f"sizes sum to {total}, the axis has {size}", "sizes", "sizes that sum to the axis' size")
        return [Constraint(sympy.Eq(size, total), "sizes sum to {total}, the axis has {size}", a.where("sizes"),
                           {"total": total, "size": size}, "sizes that sum to the axis' size")]


@register_op
class Pad(FreeOp):
    """Constant padding (F.pad)."""

    name = "pad"
    doc = ("Constant padding (F.pad): `pads` lists [before, after] for the last axis, then the one before it, "
           "... (torch's order); `value` fills the new positions. No FLOPs.")
    default_name = "pad"
    output_view = False  # a padded copy
    attrs = (Attr("pads", "counts", "padding as in F.pad: [last_before, last_after, prev_before, prev_after, ...]"),
             Attr("value", "number", "the fill value (does not change the cost)", default=0.0))

    def output_shape(self, call: OpCall):
        pads, rank = call.attrs.pads, len(call.in_shape)
        if len(pads) % 2 or len(pads) > 2 * rank:
            raise call.fail(f"{len(pads)} pads for an input of rank {rank}", "pads",
                            f"an even number of pads, at most {2 * rank}")
        shape = list(call.in_shape)
        for i in range(len(pads) // 2):
            shape[rank - 1 - i] = shape[rank - 1 - i] + pads[2 * i] + pads[2 * i + 1]
        return tuple(shape)

    def build(self, call: OpCall, ev):
        from costspec.nn.layout import Pad as TorchPad

        return TorchPad([ev(p) for p in call.attrs.pads], call.attrs.value)


