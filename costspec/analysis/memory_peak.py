"""The peak of a training step (`memory --pass train`): the moments of a step after the first at which
memory can peak, the bytes each holds by category, and the peak as their maximum, each an exact
expression of the dims.

The step is `loss = model(x).sum(); loss.backward(); optimizer.step()` with the gradients kept between
steps (`zero_grad(set_to_none=False)`) and torch's CUDA default optimizer implementation (`foreach`).
Every moment holds the state: weights, gradients, master weights and optimizer state. On top of it:

* **forward end**: every activation saved for backward, the model's output (alive until the loss is
  made from it, unless a layer saves it already) and the loss (one element of the output's dtype);
* **tied gradients** (a weight shared by two layers, the LM head tied to the embedding): autograd sums
  the gradients of both uses before accumulating them into `.grad`, so at the embedding's backward the
  gradient from the head, the embedding's own and their sum live together: 3 x the table's bytes (the
  activations are freed by then: the embedding is the first layer), with the loss and its gradient (the
  backward's seed, one element each);
* **checkpointed recompute** (activation checkpointing): torch.utils.checkpoint has re-run a checkpointed
  part's forward in backward (a repeat's last checkpointed instance, the first re-run): the saves of
  everything before it (those of the ops and plain instances after it are freed), the re-run's saves and
  output, the gradient of its output and a tied table's pending gradient (`recompute_parts`);
* **optimizer step**: adam / adamw's `_foreach_sqrt` of the second moments, one state-sized copy of
  every trainable parameter (in the state's dtype), alive until the update; sgd (no momentum) updates
  in place.

Not modelled (named in docs/conventions.md, memory): the activation gradients in flight while an op's
backward runs (where the backward's own peak is: each moment above is exact, so their maximum is a lower
bound of the step's peak), the CUDA allocator's 512-byte rounding, buffers (RoPE tables) and the
host-side `step` counters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy

from costspec.core.vocab import Word
from costspec.ops.opdef import OUTPUT
from costspec.ops.work import numel
from costspec.tree.network import Network
from costspec.tree.nodes import OpNode
from costspec.tree.saved import RecomputePoint, recompute_points


class Category(Word):
    """What a byte of a training step is, as MemTracker names its reference types."""

    WEIGHTS = "weights"
    GRADIENTS = "gradients"
    MASTER = "master weights"
    OPTIMIZER = "optimizer state"
    ACTIVATIONS = "activations"
    OUTPUT = "output and loss"
    OPT_BUFFER = "optimizer-step buffer"
    TIED_GRADIENTS = "tied-weight gradients"
    RECOMPUTED = "activations recomputed in backward"
    RECOMPUTED_OUTPUT = "recomputed output"
    GRADIENT_IN_FLIGHT = "output gradient in flight"


@dataclass(frozen=True)
class Moment:
    """One moment of a training step: its name and bytes per category."""

    name: str
    parts: dict[Category, sympy.Expr]

    @property
    def total(self) -> sympy.Expr:
        return sympy.expand(sum(self.parts.values(), sympy.Integer(0)))


def output_bytes(model: Network) -> tuple[sympy.Expr, sympy.Expr]:
    """(bytes of the model's output not saved for backward by its last layer, bytes of the loss)."""
    last = [node for node in model.op_nodes()][-1]
    size = last.precision.bytes_per_element
    saved = any(s.tensor == OUTPUT for s in last.op.saved(last.call, True))
    out = sympy.Integer(0) if saved else numel(model.out_shape) * size
    return sympy.sympify(out), sympy.sympify(size)


def tied_table_bytes(model: Network) -> sympy.Expr:
    """Bytes of the trainable weights two layers share (a tied LM head's embedding table), counted once."""
    nodes = list(model.op_nodes())
    kinds = {kind for node in nodes if (kind := node.op.tied_to(node.call)) is not None}
    sources = [node for node in nodes if node.op.name in kinds]
    return sympy.expand(sum((_trained_bytes(node) for node in sources), sympy.Integer(0)))


def _trained_bytes(node: OpNode) -> sympy.Expr:
    return node.canonical(sympy.sympify(node.trainable_params * node.precision.bytes_per_element))


def step_moments(model: Network, state: dict[Category, sympy.Expr], activations: sympy.Expr,
                 optimizer_buffer: sympy.Expr, rows: Mapping[str, sympy.Expr] | None = None,
                 recomputed: sympy.Expr = sympy.S.Zero) -> list[Moment]:
    """The moments of a training step (see the module docstring); `state`: the bytes held throughout
    (weights, gradients, master weights, optimizer state), `activations`: the saved bytes, `rows`: the same
    per op row (for the recompute moments), `optimizer_buffer`: the optimizer's transient during its step,
    `recomputed`: the most one checkpointed part saves again (the bound used where a recompute moment is
    not modelled exactly: `recompute_points` None)."""
    out, loss = output_bytes(model)
    moments = [Moment("forward end", {**state, Category.ACTIVATIONS: activations, Category.OUTPUT: out + loss})]
    points = recompute_points(model.root) if recomputed != 0 else []
    if points is None:
        moments.append(Moment(RECOMPUTE_BOUND, {**state, Category.ACTIVATIONS: activations,
                                                Category.RECOMPUTED: recomputed, Category.OUTPUT: 2 * loss}))
    else:
        assert rows is not None or not points
        named = len(points) > 1
        for point in points:
            name = f"{RECOMPUTE} ({point.part.name})" if named else RECOMPUTE
            parts = recompute_parts(model, point, rows or {})
            moments.append(Moment(name, {**state, **parts, Category.OUTPUT: 2 * loss}))
    tied = tied_table_bytes(model)
    if tied != 0:
        moments.append(Moment("tied-weight gradients", {**state, Category.OUTPUT: 2 * loss,
                                                        Category.TIED_GRADIENTS: 3 * tied}))
    moments.append(Moment("optimizer step", {**state, Category.OUTPUT: loss, Category.OPT_BUFFER: optimizer_buffer}))
    return moments


RECOMPUTE = "checkpointed recompute"
RECOMPUTE_BOUND = "checkpointed recompute (upper bound)"


def recompute_parts(model: Network, point: RecomputePoint,
                    rows: Mapping[str, sympy.Expr]) -> dict[Category, sympy.Expr]:
    """What a checkpointed part's recompute moment holds besides the state and the loss (module docstring):
    the saved activations of everything before it (the rows of the ops after it, and the repeat's plain
    instances after it, are freed: their backward ran), its re-run's saves and output, its output's gradient,
    and a tied table's gradient from a use after it while its other use, before, has not run its backward."""
    order = [node.name for node in model.op_nodes()]
    inside = {node.name for node in point.part.op_nodes()}
    first = min(order.index(name) for name in inside)
    last = max(order.index(name) for name in inside)
    after = sum((amount for row, amount in rows.items() if order.index(row) > last), sympy.Integer(0))
    held = sympy.expand(sum(rows.values(), sympy.Integer(0)) - after - point.later_plain * point.plain_saved)
    parts = {Category.ACTIVATIONS: held, Category.RECOMPUTED: point.saved, Category.RECOMPUTED_OUTPUT: point.output,
             Category.GRADIENT_IN_FLIGHT: point.gradient}
    nodes = list(model.op_nodes())
    pending = {kind for node in nodes[last + 1:] if (kind := node.op.tied_to(node.call)) is not None}
    tied = sum((_trained_bytes(node) for node in nodes[:first] if node.op.name in pending), sympy.Integer(0))
    if tied != 0:
        parts[Category.TIED_GRADIENTS] = sympy.expand(tied)
    return parts


def peak(moments: list[Moment]) -> sympy.Expr:
    """The largest total of `moments` (a Max of expressions; one moment: its total)."""
    return sympy.Max(*(m.total for m in moments))


__all__ = ["Category", "Moment", "RECOMPUTE", "RECOMPUTE_BOUND", "output_bytes", "peak", "recompute_parts",
           "step_moments", "tied_table_bytes"]
