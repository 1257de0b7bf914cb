"""How the modules shape the autograd graph, so that the runtime counters see each op's backward in
the scope of the module that costs it: `alias` (a view with its own node), `Fork` (n aliases summed
in one node), `FanOut` (one tensor handed to several readers, their gradients summed where it was made)."""
from __future__ import annotations

import torch


def alias(x: torch.Tensor) -> torch.Tensor:
    """A view of `x` with its own autograd node.

    Where one tensor feeds several modules, each consumer gets its own alias, so that torch's
    ModuleTracker (used by FlopCounterMode) closes each consumer's backward scope as soon as
    that consumer's own input gradient is done, instead of when the summed gradient is.
    """
    return x.view_as(x)


class Fork(torch.autograd.Function):
    """n aliases of one tensor as ONE autograd node, whose backward sums their gradients explicitly
    (n - 1 adds per element, unused aliases skipped). Autograd runs it once every alias's gradient is
    in, so the sum runs inside the backward scope of the module that forked, and after every branch."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, n: int):
        ctx.set_materialize_grads(False)
        return tuple(x.clone() for _ in range(n))  # (views of an input would be rebased by autograd)

    @staticmethod
    def backward(ctx, *grads):
        total = None
        for g in grads:
            if g is not None:
                total = g if total is None else total + g
        return total, None


class FanOut(torch.autograd.Function):
    """One tensor handed to n + 1 readers (views); the backward sums their gradients here, where the
    tensor was made: n adds per element (a reader whose output went unused contributes nothing)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, n: int):
        ctx.set_materialize_grads(False)
        return tuple(x.view_as(x) for _ in range(n + 1))

    @staticmethod
    def backward(ctx, *grads):
        present = [g for g in grads if g is not None]
        total = present[0] if present else None
        for g in present[1:]:
            total = total + g
        return total, None
