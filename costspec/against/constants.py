"""Work the real model does on constants: ops whose tensor inputs derive from neither the model
input nor a parameter (index grids from `arange`, rotary cos/sin tables from a buffer, position
ids sliced from a buffer). They depend on the shapes alone, a compiler folds them, and the spec
does not price them: `validate --against` runs them outside the counters and lists them.

torch is imported here: import this module only for `--against`.
"""
from __future__ import annotations

import weakref
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

# SDPA's math path builds its causal mask from constants (ones -> tril, then where): the spec's
# attention prices those as `select`, as plain validate counts them, so they stay counted.
COUNTED = frozenset({"aten.tril", "aten.where"})


class ConstantOps(TorchDispatchMode):
    """Runs ops on constants with the outer (counting) modes disabled and records them.

    A tensor is constant when it is a buffer of the module or the output of a constant op; an op
    is constant when every tensor it reads is constant (a factory op such as arange reads none).
    """

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.constant: dict[int, weakref.ref] = {}  # id -> the tensor (ids are checked against the live object)
        for buffer in module.buffers():
            self._add(buffer)
        self.ops: Counter = Counter()  # aten op -> calls
        self.elements: Counter = Counter()  # aten op -> output elements

    def _add(self, t: torch.Tensor) -> None:
        self.constant[id(t)] = weakref.ref(t)

    def _is_constant(self, t: torch.Tensor) -> bool:
        ref = self.constant.get(id(t))
        return ref is not None and ref() is t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        name = str(func._overloadpacket)
        if name in COUNTED or not all(self._is_constant(t) for t in tensors):
            return func(*args, **kwargs)
        with _disable_current_modes():
            out = func(*args, **kwargs)
        self.ops[name] += 1
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._add(t)
                self.elements[name] += t.numel()
        return out
