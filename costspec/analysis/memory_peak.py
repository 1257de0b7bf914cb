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
* **optimizer step**: adam / adamw's `_foreach_sqrt` of the second moments, one state-sized copy of
  every trainable parameter (in the state's dtype), alive until the update; sgd (no momentum) updates
  in place.

Not modelled (named in docs/conventions.md, memory): the gradients of activations in flight during the
backward, the CUDA allocator's 512-byte rounding, buffers (RoPE tables) and the host-side `step`
counters.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from costspec.core.vocab import Word
from costspec.ops.opdef import OUTPUT
from costspec.ops.work import numel
from costspec.tree.network import Network
from costspec.tree.nodes import OpNode


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
                 optimizer_buffer: sympy.Expr, recomputed: sympy.Expr = sympy.S.Zero) -> list[Moment]:
    """The moments of a training step (see the module docstring); `state`: the bytes held throughout
    (weights, gradients, master weights, optimizer state), `activations`: the saved bytes,
    `optimizer_buffer`: the optimizer's transient during its step, `recomputed`: the most one checkpointed
    part saves again while its forward re-runs in backward (an upper bound: the activations the backward
    freed before it are still counted)."""
    out, loss = output_bytes(model)
    moments = [Moment("forward end", {**state, Category.ACTIVATIONS: activations, Category.OUTPUT: out + loss})]
    if recomputed != 0:
        moments.append(Moment("checkpointed recompute (upper bound)",
                              {**state, Category.ACTIVATIONS: activations, Category.RECOMPUTED: recomputed,
                               Category.OUTPUT: 2 * loss}))
    tied = tied_table_bytes(model)
    if tied != 0:
        moments.append(Moment("tied-weight gradients", {**state, Category.OUTPUT: 2 * loss,
                                                        Category.TIED_GRADIENTS: 3 * tied}))
    moments.append(Moment("optimizer step", {**state, Category.OUTPUT: loss, Category.OPT_BUFFER: optimizer_buffer}))
    return moments


def peak(moments: list[Moment]) -> sympy.Expr:
    """The largest total of `moments` (a Max of expressions; one moment: its total)."""
    return sympy.Max(*(m.total for m in moments))


__all__ = ["Category", "Moment", "output_bytes", "peak", "step_moments", "tied_table_bytes"]
