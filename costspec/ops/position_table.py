"""`interpolated_positions`: a learned position table whose grid rows are resized to the tokens' grid
by interpolation, as transformers' ViT, DINOv2 and YOLOS do at a resolution other than the config's
(`interpolate_pos_encoding`, YOLOS's InterpolateInitialPositionEmbeddings / InterpolateMidPositionEmbeddings).

What runs (transformers 5): the (1, prefix + gh*gw + suffix, C) table is sliced into its class (and
detection) rows and its grid rows; the grid rows are viewed as an image (1, C, gh, gw) and resized with
F.interpolate(mode="bicubic", align_corners=False) (aten.upsample_bicubic2d) to (h, w); the pieces are
concatenated and the result added to the tokens (broadcast over the batch). Backward: the add's table
gradient summed over the batch (B > 1), upsample_bicubic2d_backward, and the sum of the slices'
zero-filled gradients of the whole table (autograd adds the gradients of a tensor read n times: one
add per table element per extra slice). FlopCounterMode counts none of it (no matmul); the CUDA-core
kinds are `bicubic` / `bicubic_backward` (or `bilinear` / `bilinear_backward`) per output element.
"""
from __future__ import annotations

import sympy

from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.embed import batch_summed
from costspec.ops.opdef import Constraint, OpCall, OpDef, requires
from costspec.ops.registry import register_op
from costspec.ops.resample import RESIZE_RUNTIME
from costspec.ops.spatial import per_dim
from costspec.ops.work import ZERO, Part, Traffic, pointwise


def _indicator(value) -> sympy.Expr:
    """1 when the non-negative integer `value` is positive, else 0 (an expression when it is symbolic)."""
    value = sympy.sympify(value)
    return sympy.Integer(1 if value > 0 else 0) if value.is_number else sympy.Min(1, value)


@register_op
class InterpolatedPositions(OpDef):
    """A learned (prefix + gh*gw + suffix) x C position table, its grid rows interpolated to the tokens'
    h x w grid, added to the tokens (or, with add: false, the table itself as the output)."""

    name = "interpolated_positions"
    doc = ("Learned position table resized to another token grid (transformers' interpolate_pos_encoding: ViT, "
           "DINOv2, YOLOS): a (prefix + gh*gw + suffix) x C table whose gh x gw grid rows are interpolated "
           "(F.interpolate, bicubic or bilinear, align_corners=False) to the tokens' h x w grid, the prefix "
           "(class token) and suffix (detection tokens) rows kept, then added to the tokens [B, S, C] with "
           "S = prefix + h*w + suffix. `native: skip` uses the table as it is when the grids are equal (ViT, "
           "DINOv2); `run` resizes it anyway (YOLOS). `tables: n` with `add: false` outputs n stacked tables "
           "[n, S, C] resized in one call (YOLOS's mid position embeddings, one per layer but the last), for "
           "later layers to slice and add.")
    default_name = "pos_embed"
    saves_nothing = True  # the table's interpolation needs only sizes, the concatenation and add nothing
    runtime = RESIZE_RUNTIME
    attrs = (
        Attr("grid", "pair", "the table's grid [gh, gw] (the config's image size // patch)"),
        Attr("size", "pair", "the tokens' grid [h, w] (the input image // patch)"),
        Attr("prefix", "count", "rows before the grid, not resized (the class token)", default=1),
        Attr("suffix", "count", "rows after the grid, not resized (YOLOS's detection tokens)", default=0),
        Attr("mode", "choice", "interpolation (transformers: bicubic)", default="bicubic",
             choices=("bicubic", "bilinear")),
        Attr("native", "choice", "when the grids are equal: run the interpolation anyway (YOLOS) or skip it and "
             "add the table as it is (ViT, DINOv2)", default="run", choices=("run", "skip")),
        Attr("tables", "size", "stacked tables resized in one call (add: false; YOLOS's mid position "
             "embeddings: L - 1)", default=1),
        Attr("add", "bool", "add the table to the tokens; false: the output is the resized table(s) "
             "[tables, S, C], which later layers read (`save:` it, then slice and `add: {with: ...}`)",
             default=True),
    )

    # -- geometry -----------------------------------------------------------------------------
    def _grids(self, call: OpCall):
        return per_dim(call.attrs.grid, 2), per_dim(call.attrs.size, 2)

    def _rows(self, call: OpCall):
        """(rows of the stored table, rows of the resized one)."""
        a = call.attrs
        (gh, gw), (h, w) = self._grids(call)
        return a.prefix + gh * gw + a.suffix, a.prefix + h * w + a.suffix

    def _resized(self, call: OpCall) -> sympy.Expr:
        """1 when the interpolation runs, 0 when it is skipped (native: skip at equal grids)."""
        if call.attrs.native == "run":
            return sympy.Integer(1)
        (gh, gw), (h, w) = self._grids(call)
        return _indicator((h - gh) ** 2 + (w - gw) ** 2)

    def _pieces(self, call: OpCall) -> sympy.Expr:
        """Slices of the table read when it is resized: the grid rows, and the prefix / suffix rows when
        there are any."""
        return 1 + _indicator(call.attrs.prefix) + _indicator(call.attrs.suffix)

    def reads_input(self, call: OpCall) -> bool:
        return bool(call.attrs.add)

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        (gh, gw), (h, w) = self._grids(call)
        for value, attr in ((gh, "grid"), (gw, "grid"), (h, "size"), (w, "size")):
            if sympy.sympify(value).is_number and value < 1:
                raise call.fail(f"{attr} {value}: a grid side must be positive", attr, "a positive grid size")
        _, rows = self._rows(call)
        if not call.attrs.add:
            return (call.attrs.tables, rows, call.in_shape[2])
        if sympy.sympify(call.attrs.tables) != 1:
            raise call.fail("add: true adds one table to the tokens", "tables",
                            "tables: 1, or add: false for a stack that later layers read")
        if sympy.sympify(call.in_shape[1] - rows).is_number and call.in_shape[1] != rows:
            raise call.fail(f"the tokens are {call.in_shape[1]}, the resized table has prefix + h*w + suffix = "
                            f"{rows} rows", "size", "size [h, w] with prefix + h*w + suffix = the input's tokens")
        return call.in_shape

    def constraints(self, call: OpCall):
        _, rows = self._rows(call)
        if not call.attrs.add or sympy.sympify(call.in_shape[1] - rows).is_number:
            return []
        return [Constraint(sympy.Eq(call.in_shape[1], rows),
                           "the tokens are {s}, the resized table has prefix + h*w + suffix = {rows} rows",
                           call.attrs.where("size"), {"s": call.in_shape[1], "rows": rows},
                           "prefix + h*w + suffix = the input's tokens")]

    # -- work ---------------------------------------------------------------------------------
    def _resize_elements(self, call: OpCall) -> sympy.Expr:
        """Output elements of the interpolation: tables x C x h x w (0 when it is skipped)."""
        _, (h, w) = self._grids(call)
        return self._resized(call) * call.attrs.tables * call.in_shape[2] * h * w

    def forward(self, call: OpCall):
        a = call.attrs
        stored, rows = self._rows(call)
        c = call.in_shape[2]
        work = pointwise(a.mode, self._resize_elements(call))
        if a.add:
            work = work + pointwise("add", call.in_shape[0] * rows * c)
        return [Part("", work, a.tables * stored * c)]

    def backward(self, call: OpCall, input_grad: bool):
        """The table's gradient: summed over the batch from the add (B > 1), back through the interpolation
        (its backward kind per output element), and the slices' zero-filled gradients of the whole stored
        table summed (pieces - 1 adds per element). The tokens' gradient passes through the add."""
        a = call.attrs
        stored, rows = self._rows(call)
        b, c = call.in_shape[0], call.in_shape[2]
        work = pointwise(a.mode + "_backward", self._resize_elements(call))
        work = work + pointwise("add", self._resized(call) * (self._pieces(call) - 1) * a.tables * stored * c)
        if a.add:
            work = work + pointwise("bias_grad", batch_summed(b) * b * rows * c)
        return [Part("", work)]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Forward: the interpolation reads the grid rows and writes the resized ones, the concatenation
        copies the resized table, the add reads the tokens and the table and writes the tokens. Backward:
        the batch sum (B > 1) reads the output gradient, the interpolation's backward reads the resized
        gradient and writes the grid's, the slices' gradients (zero-filled tables) are summed."""
        a = call.attrs
        stored, rows = self._rows(call)
        (gh, gw), _ = self._grids(call)
        b, c = call.in_shape[0], call.in_shape[2]
        resized, grid = self._resize_elements(call), self._resized(call) * a.tables * c * gh * gw
        table = a.tables * rows * c
        tokens = b * rows * c if a.add else ZERO
        if pass_ == Phase.FORWARD:
            copied = self._resized(call) * table
            return [Traffic("", grid + copied + tokens + (rows * c if a.add else ZERO), resized + copied + tokens)]
        summed = batch_summed(b) * tokens
        slices = self._resized(call) * self._pieces(call) * a.tables * stored * c
        sums = self._resized(call) * (self._pieces(call) - 1) * a.tables * stored * c
        return [Traffic("", summed + resized + slices + sums, a.tables * stored * c + grid + slices)]

    def build(self, call: OpCall, ev):
        from costspec.nn.embed import InterpolatedPositions as TorchInterpolatedPositions

        a = call.attrs
        (gh, gw), (h, w) = self._grids(call)
        return TorchInterpolatedPositions(ev(a.tables), ev(a.prefix), (ev(gh), ev(gw)), (ev(h), ev(w)), ev(a.suffix),
                                          ev(call.in_shape[2]), a.mode, a.native == "skip", bool(a.add))

    def notes(self, call: OpCall) -> list[str]:
        if call.attrs.native == "run" or self._resized(call).is_number:
            return []
        return ["native: skip -- the interpolation's work is counted only where the tokens' grid differs from the "
                "table's (a factor min(1, (h - gh)^2 + (w - gw)^2) in the formulas)"]

