"""The containers `torch_build` assembles the op modules in: a `Scope` (the model root, a named
sequence, a block, one repeat instance) runs its steps in order -- `Call` a child, `Load` and `Store`
named values, a `Residual`, `Parallel` branches, a `Repeat` -- and `CostspecModel` is the root."""
from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
import torch.nn as nn

from costspec.nn.autograd import alias


class Call(NamedTuple):
    """Run the child module `name` on the running tensor, with the values `reads` as further arguments."""

    name: str
    reads: tuple[str, ...] = ()


class Load(NamedTuple):
    """Make the value `name` the running tensor (`input:`)."""

    name: str


class Store(NamedTuple):
    """Remember the running tensor as the value `name` (`save:`); `continued`: the next layer reads it too."""

    name: str
    continued: bool = True


class Residual(NamedTuple):
    """x + body(x): fork with the Join child `add`, run `body`, add."""

    add: str
    body: tuple


class Parallel(NamedTuple):
    """Branches from one value, joined by the Join child `join`: () is the value itself."""

    join: str
    branches: tuple


class Repeat(NamedTuple):
    """Run every module of the ModuleList child `name` in order (each instance with its own values)."""

    name: str


def _take(values: dict, name: str) -> torch.Tensor:
    """The value `name` for one consumer: the next alias a fanout made for it, or an alias of the value."""
    value = values[name]
    if isinstance(value, list):
        return alias(value.pop(0) if len(value) > 1 else value[0])
    return alias(value)


class Scope(nn.Module):
    """A named scope of the spec (model root, named sequence, block, one repeat instance).

    Its children are the scope's layers under their local names; `steps` says how to run them
    (residuals are transparent in names, so their layers are children of the scope itself).
    `values` holds the named values (`save:` / `inputs:`); nested scopes share it, a repeat's
    instances each get their own copy (their values are theirs).

    A `checkpointed` scope (a block use or repeat instance with `checkpoint:`) runs under
    torch.utils.checkpoint (non-reentrant, early stop off): autograd keeps its input only, and its whole
    forward runs again in backward, hooks and all, as the analytic costs count it.
    """

    def __init__(self):
        super().__init__()
        self.steps: tuple = ()
        self.checkpointed = False

    def _run(self, steps, x, values: dict):
        for step in steps:
            if isinstance(step, Call):
                module = getattr(self, step.name)
                if isinstance(module, Scope):
                    x = module.enter(x, values)
                else:
                    x = module(x, *(_take(values, r) for r in step.reads))
            elif isinstance(step, Load):
                x = _take(values, step.name)
            elif isinstance(step, Store):  # after a fanout: the running value is one of its aliases
                if isinstance(x, tuple):  # (if the next layer reads another value, x[0] goes to a reader:
                    # a scope's output must have a consumer for its backward scope to open)
                    values[step.name], x = (list(x[1:]), alias(x[0])) if step.continued else (list(x), x[0])
                else:
                    values[step.name] = x
            elif isinstance(step, Residual):
                add = getattr(self, step.add)
                h = self._run(step.body, add(x), values)  # body(fork(x))
                x = add(alias(x), h)  # x + body(x)
            elif isinstance(step, Parallel):
                join = getattr(self, step.join)
                forks = join(x, fork=len(step.branches))  # one node: the fork's gradient sum (see Join)
                outs = [self._run(branch, alias(fork), values) for branch, fork in zip(step.branches, forks)]
                # every branch joins through a fresh alias: autograd runs them right after the join, so the
                # join's backward scope closes before any branch's opens
                x = join(*(alias(out) for out in outs))
            else:
                for instance in getattr(self, step.name):
                    x = instance.enter(x, dict(values))
        return x

    def enter(self, x: torch.Tensor, values: dict) -> torch.Tensor:
        """Run this scope with the named values of the enclosing one. They are handed over outside the
        call's arguments: module hooks (the scope trackers) must see the scope's input tensor only."""
        if self.checkpointed:
            return self._checkpointed(x, values)
        return self._call(x, values)

    def _call(self, x: torch.Tensor, values: dict) -> torch.Tensor:
        self._values = values
        try:
            return self(x)
        finally:
            del self._values

    def _checkpointed(self, x: torch.Tensor, values: dict) -> torch.Tensor:
        """`self(x)` under torch.utils.checkpoint. The recomputation in backward reads the named values as the
        forward found them (a copy: the forward's reads and saves changed the dict and its alias lists)."""
        from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

        found = {k: list(v) if isinstance(v, list) else v for k, v in values.items()}
        runs = [values]

        def run(t: torch.Tensor) -> torch.Tensor:
            own = runs.pop() if runs else {k: list(v) if isinstance(v, list) else v for k, v in found.items()}
            return self._call(t, own)

        with set_checkpoint_early_stop(False):  # the whole forward again, as `checkpoint:` in the spec counts it
            return checkpoint(run, x, use_reentrant=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = getattr(self, "_values", None)
        return self._run(self.steps, x, {} if values is None else values)


class CostspecModel(Scope):
    """The root module built from a spec (`costspec.load(path).to_torch()`)."""

    def __init__(self, spec_name: str = "", input_shape: Sequence[int] = ()):
        super().__init__()
        self.spec_name, self.input_shape = spec_name, tuple(input_shape)

    def extra_repr(self) -> str:
        return f"{self.spec_name}, input {list(self.input_shape)}"

    def add_input(self, name: str, value: torch.Tensor) -> None:
        """A further model input (`inputs:`), held as a buffer so the module is still called with one
        tensor: constant data that needs no gradient, as an encoder's output fed to a decoder is."""
        self.register_buffer(f"input_{name}", value, persistent=False)
        self.input_names = (*getattr(self, "input_names", ()), name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = {name: getattr(self, f"input_{name}") for name in getattr(self, "input_names", ())}
        return self._run(self.steps, x, values)
