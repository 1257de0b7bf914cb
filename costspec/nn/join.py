"""`Join`: the joins (`add`, `mul`, `concat`), the fork before them and a saved value's fan-out."""
from __future__ import annotations

import torch
import torch.nn as nn

from costspec.nn.autograd import Fork, alias


class Join(nn.Module):
    """A join of several values (`add`, `mul`, `concat`), and the fork before it.

    `fork(x, n)` returns n aliases of x for the branches (one autograd node: the sum of their
    gradients, n - 1 adds per element, runs in this module's backward scope, where the join's op
    costs it); `join(a, b, ...)` joins. A `fanout` (a saved value read several times) only forks.
    A residual keeps the two-call form: `join(x)` is its fork (an alias), and its skip is a fresh
    alias of x made just before the add, so that autograd (which runs later-created nodes first)
    finishes the add's backward scope before it starts on the body.
    """

    def __init__(self, mode: str, axis: int = -1, uses: int = 0):
        super().__init__()
        self.mode, self.axis, self.uses = mode, axis, uses

    def forward(self, x: torch.Tensor, *others: torch.Tensor, fork: int = 0):
        if fork:
            return Fork.apply(x, fork)
        if not others:
            if self.mode == "fanout":
                return Fork.apply(x, self.uses)
            return alias(x)
        if self.mode == "concat":
            return torch.cat((x, *others), dim=self.axis)
        out = x
        for other in others:
            out = out * other if self.mode == "mul" else out + other
        return out

    def extra_repr(self) -> str:
        return self.mode + (f", axis={self.axis}" if self.mode == "concat" else "") + \
            (f", uses={self.uses}" if self.mode == "fanout" else "")
