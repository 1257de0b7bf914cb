"""What autograd saves for backward when the module generated from a spec runs a training forward:
every tensor a `torch.autograd.graph.saved_tensors_hooks` pack hook sees, deduplicated by storage
(a view saved by two ops, or an op's output saved again by its consumer, is one tensor), with the
model's parameters and buffers left out (by storage too: `weight.t()` is the parameter), but not its further
inputs (`inputs:`, held as buffers).

It runs under `FakeTensorMode` on the cpu device, so no memory is allocated and the attention's
SDPA takes the path `backend` names (`sdpa_kernel`: flash -> the fused flash kernel, which saves q,
k, v, the output and the logsumexp; math -> the decomposed composite, which saves the probabilities).
Each storage is charged, with its whole size, to the layer that saved it first (the innermost op
module open in the forward when the pack hook ran), or to `MODEL_SLOT` outside every op. A checkpointed
scope (torch.utils.checkpoint, non-reentrant) saves its arguments before its modules open, and keeps its
internals to itself: those arguments are charged to the scope's entry op, as `costspec.tree.saved` charges them.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import sympy

from costspec.core.errors import UsageError
from costspec.core.results import Column, Row, Table
from costspec.core.vocab import Backend
from costspec.runtime.torch_build import TORCH_DTYPES, build_module, import_torch
from costspec.tree.walk import MODEL_SLOT, node_of, op_of

if TYPE_CHECKING:
    from costspec.tree.network import Network


@dataclass(frozen=True)
class SavedTensor:
    """One storage autograd keeps for backward: where it was first saved, its bytes, how it was seen."""

    layer: str  # the op row (or MODEL_SLOT)
    nbytes: int
    shape: tuple[int, ...]
    dtype: str


@dataclass
class SavedMeasurement:
    """The storages saved in one training forward, and the bytes per op row."""

    tensors: list[SavedTensor] = field(default_factory=list)

    @property
    def by_layer(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.layer] = out.get(t.layer, 0) + t.nbytes
        return out

    @property
    def total(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def sdpa_backend(model: "Network") -> Backend:
    """The SDPA kernel family of the model's attention layers (`backend:`, or --backend for all); math
    when there are none. Layers of both families cannot run in one measurement."""
    found = {Backend.parse(n.call.attrs.backend, "backend") for n in model.op_nodes()
             if any(a.name == "backend" for a in n.op.attrs)}
    if len(found) > 1:
        raise UsageError("the attention layers use both the flash and the math kernels; measure their saved "
                         "tensors with one (--backend)")
    return next(iter(found), Backend.MATH)


def _sdpa_kernels(backend: Backend):
    """flash: the fused kernel where it takes the call, else the composite (a mask it cannot take)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if backend is Backend.FLASH:
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH], set_priority=True)
    return sdpa_kernel([SDPBackend.MATH])


@contextmanager
def _forks_as_views(clones: dict[int, tuple[int, int]], kept: list):
    """The generated module's forks hand each branch a clone (so that the counters see each branch's
    backward in its own scope); the real model hands the tensor itself: a clone's storage is mapped to its
    source's, so a branch saving its input saves the one tensor."""
    from costspec.nn.autograd import Fork

    original = Fork.forward

    def forward(ctx, x, n):
        out = original(ctx, x, n)
        for t in out:
            clones[t.untyped_storage()._cdata] = (x.untyped_storage()._cdata, int(x.untyped_storage().nbytes()))
        kept.extend((x, *out))  # alive, so that no later storage takes their addresses
        return out

    Fork.forward = staticmethod(forward)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Fork.forward = staticmethod(original)  # type: ignore[method-assign]


@contextmanager
def _checkpoints_charged(model: "Network", module, listener: "_OpenLayers"):
    """A checkpointed scope's saved input (torch.utils.checkpoint saves its arguments before the scope's
    forward opens) is charged to the scope's entry op, as `costspec.tree.saved` charges it."""
    from costspec.runtime.containers import Scope
    from costspec.tree.saved import entry_op

    paths = {id(m): path for path, m in module.named_modules()}
    original = Scope._checkpointed

    def checkpointed(self, x, values):
        marker = f"(checkpoint) {paths[id(self)]}"
        listener.rows[marker] = entry_op(node_of(model.root, paths[id(self)])).name
        listener.stack.append(marker)
        try:
            return original(self, x, values)
        finally:
            listener.stack.pop()

    Scope._checkpointed = checkpointed  # type: ignore[method-assign]
    try:
        yield
    finally:
        Scope._checkpointed = original  # type: ignore[method-assign]


def measure_saved(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer]) -> SavedMeasurement:
    """Build `model`'s module at `values` in the spec's dtype and run one training forward under a
    pack hook (see the module docstring)."""
    backend = sdpa_backend(model)
    torch = import_torch("measuring the tensors autograd saves")
    from torch._subclasses.fake_tensor import FakeTensorMode

    dtype = getattr(torch, TORCH_DTYPES.get(str(model.precision.dtype), "float32"))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), torch.device("cpu"):
            module, make_input = build_module(model, values)
            _cast_buffers(module, dtype)
            return _measure(model, module, make_input("cpu", dtype), backend)
    finally:
        torch.set_default_dtype(previous)


def _cast_buffers(module, dtype) -> None:
    """Float buffers (RoPE's tables, made in fp32) in the spec's dtype, as in a model cast to it."""
    for sub in module.modules():
        for name, buf in list(sub._buffers.items()):
            if buf is not None and buf.is_floating_point() and buf.dtype != dtype:
                sub._buffers[name] = buf.to(dtype)


def _measure(model: "Network", module, x, backend: Backend) -> SavedMeasurement:
    """One training forward of `module` on `x` under the pack hook."""
    import torch

    from costspec.runtime.layer_hooks import LayerHooks, layer_paths

    # (the further model inputs are buffers of the module, but inputs, saved as the main input is)
    inputs = {id(getattr(module, f"input_{name}")) for name in getattr(module, "input_names", ())}
    state = {t.untyped_storage()._cdata for t in [*module.parameters(), *module.buffers()] if id(t) not in inputs}
    paths = layer_paths(model, module)
    listener = _OpenLayers(model, paths)
    result = SavedMeasurement()
    seen: set[int] = set()
    clones: dict[int, tuple[int, int]] = {}
    kept: list = []  # every saved tensor stays alive, so no storage's address is reused by a later one

    def pack(t):
        kept.append(t)
        storage = t.untyped_storage()
        key, nbytes = clones.get(storage._cdata, (storage._cdata, int(storage.nbytes())))
        if key not in state and key not in seen and nbytes:
            seen.add(key)
            result.tensors.append(SavedTensor(listener.current(), nbytes, tuple(t.shape),
                                              str(t.dtype).removeprefix("torch.")))
        return t

    with LayerHooks(model, module, listener, paths), _sdpa_kernels(backend), _forks_as_views(clones, kept), \
            _checkpoints_charged(model, module, listener), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)  # (the graph, and every tensor `kept`, live until the measurement is returned)
    return result


SAVED_COLUMNS = (Column("analytic", "analytic bytes", "count"), Column("measured", "measured bytes", "count"),
                 Column("saved", "saved", "text"))


@dataclass
class SavedComparison:
    """The spec's saved bytes (`costspec.tree.saved`) against the measurement, per op row."""

    rows: list[tuple[str, int, int]]  # (op row, analytic, measured) in walk order, then MODEL_SLOT
    tensors: list[SavedTensor]

    def failures(self) -> list[str]:
        return [f"saved for backward: {row}: analytic {a:,} bytes, measured {m:,}" for row, a, m in self.rows if a != m]

    def table(self) -> Table:
        rows = [Row(name, name, 0, {"analytic": a, "measured": m, "saved": "PASS" if a == m else "FAIL"})
                for name, a, m in self.rows]
        a, m = sum(r[1] for r in self.rows), sum(r[2] for r in self.rows)
        total = Row("", "activations saved for backward", 0,
                    {"analytic": a, "measured": m, "saved": "PASS" if a == m else "FAIL"})
        return Table(list(SAVED_COLUMNS), rows, total, title="saved for backward",
                     label_title="saved for backward (train)")


def compare_saved(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer]) -> SavedComparison:
    """Analytic saved bytes per op row against `measure_saved`, every row either side."""
    from costspec.tree.saved import saved_bytes

    analytic = {row: int(sympy.ceiling(amount.xreplace(values))) for row, amount in saved_bytes(model.root).items()}
    measured = measure_saved(model, values)
    by_layer = measured.by_layer
    order = [n.name for n in model.op_nodes()] + [MODEL_SLOT]
    names = sorted(set(analytic) | set(by_layer), key=lambda n: order.index(n) if n in order else len(order))
    return SavedComparison([(n, analytic.get(n, 0), by_layer.get(n, 0)) for n in names], measured.tensors)


class _OpenLayers:
    """A LayerListener keeping the stack of layers open in the forward; `current()` is the innermost op row."""

    def __init__(self, model: "Network", paths: dict[str, str]):
        self.rows: dict[str, str] = {}
        for path in paths:
            op = op_of(node_of(model.root, path))
            self.rows[path] = op.name if op is not None else MODEL_SLOT
        self.stack: list[str] = []

    def enter(self, path: str, phase: str) -> None:
        if phase == "forward":
            self.stack.append(path)

    def exit(self, path: str, phase: str) -> None:
        if phase == "forward" and self.stack and self.stack[-1] == path:
            self.stack.pop()

    def end_backward(self) -> None:
        pass

    def current(self) -> str:
        for path in reversed(self.stack):
            if self.rows[path] != MODEL_SLOT:
                return self.rows[path]
        return MODEL_SLOT


__all__ = ["SavedComparison", "SavedMeasurement", "SavedTensor", "compare_saved", "measure_saved", "sdpa_backend"]
