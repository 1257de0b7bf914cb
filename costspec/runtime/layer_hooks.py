"""Hooks on every layer of a module built by `costspec.runtime.torch_build`: a listener is told when each
layer is entered and left, in the forward AND the backward, without changing the module. NVTX ranges
(`costspec.ncu.nvtx.NvtxRanges`) and timers (`costspec.runtime.timing.Intervals`) are such listeners.

A module gets hooks when it is a layer of its own: the root, a repeat instance, a scope, an op, or
an op's part with its own submodule -- not an op's internals, and not `nn.ModuleList` containers.

**Forward**: a forward pre-hook enters the layer, a forward hook leaves it.

**Backward** (as torch's ModuleTracker, with the two fixes of `runtime_count.ScopeTracker`): a
layer is entered when the gradients of all its outputs are ready (a multi-grad hook on its outputs)
and left when the gradients of all its inputs are ready. A layer whose inputs need no gradient (the
first layer with parameters) is left when its parameters' gradients are ready; a layer that returns
its input unchanged gets no backward event. Anything still open when autograd finishes is closed by
an engine callback (`end_backward`).
"""
from __future__ import annotations

import threading
from contextlib import nullcontext
from typing import TYPE_CHECKING, Callable, ContextManager, Protocol

from costspec.tree.walk import node_of

if TYPE_CHECKING:
    import torch

    from costspec.tree.network import Network

FORWARD_RANGE = "costspec:forward"
BACKWARD_RANGE = "costspec:backward"
LOSS_RANGE = "costspec:loss"


class LayerListener(Protocol):
    """What `LayerHooks` calls: a layer (torch module path) is entered or left in a phase."""

    def enter(self, path: str, phase: str) -> None: ...

    def exit(self, path: str, phase: str) -> None: ...

    def end_backward(self) -> None: ...


def layer_paths(model: "Network", module: "torch.nn.Module") -> dict[str, str]:
    """torch module path -> range name, for every module that is a costspec layer of its own."""
    from torch import nn

    out: dict[str, str] = {}
    nodes: dict[str | None, object] = {}
    for path, sub in module.named_modules():
        node = node_of(model.root, path)
        nodes[path] = node
        if isinstance(sub, nn.ModuleList):
            continue
        parent = path.rpartition(".")[0] if path else None
        if path == "" or nodes.get(parent) is not node:
            out[path] = path or model.name
    return out


class LayerHooks:
    """Context manager: hooks on every layer module of `module` that report to `listener`."""

    def __init__(self, model: "Network", module: "torch.nn.Module", listener: LayerListener,
                 paths: dict[str, str] | None = None):
        self.listener = listener
        self.paths = paths if paths is not None else layer_paths(model, module)
        self.modules = dict(module.named_modules())
        self._handles: list = []
        self._grad_handles: list = []
        self._lock = threading.Lock()
        self._callback_queued = False

    def __enter__(self) -> "LayerHooks":
        for path in self.paths:
            mod = self.modules[path]
            self._handles.append(mod.register_forward_pre_hook(self._pre(path)))
            self._handles.append(mod.register_forward_hook(self._post(path)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles + self._grad_handles:
            handle.remove()
        self._handles.clear()
        self._grad_handles.clear()

    def _backward_event(self, path: str, entering: bool) -> Callable:
        def fn(*_grads) -> None:
            self._queue_end_callback()
            (self.listener.enter if entering else self.listener.exit)(path, "backward")

        return fn

    def _queue_end_callback(self) -> None:
        import torch

        with self._lock:
            if self._callback_queued:
                return
            self._callback_queued = True

        def done() -> None:
            with self._lock:
                self._callback_queued = False
                handles, self._grad_handles = self._grad_handles, []
            self.listener.end_backward()
            for handle in handles:
                handle.remove()

        torch.autograd.Variable._execution_engine.queue_callback(done)

    def _watch(self, tensors: list, path: str, entering: bool) -> None:
        from torch.autograd.graph import register_multi_grad_hook

        handle = register_multi_grad_hook(tensors, self._backward_event(path, entering))
        with self._lock:
            self._grad_handles.append(handle)

    def _pre(self, path: str) -> Callable:
        import torch
        from torch.utils._pytree import tree_flatten

        def hook(mod, args) -> None:
            self.listener.enter(path, "forward")
            if not torch.is_grad_enabled():
                return
            tensors = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
            if not tensors:  # no input gradient will come: leave once the parameters' gradients are done
                tensors = [p for p in mod.parameters() if p.requires_grad]
            if tensors:
                self._watch(tensors, path, entering=False)

        return hook

    def _post(self, path: str) -> Callable:
        import torch
        from torch.utils._pytree import tree_flatten

        def hook(mod, args, output) -> None:
            self.listener.exit(path, "forward")
            if not torch.is_grad_enabled():
                return
            inputs = {id(a) for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)}
            outputs = [a for a in tree_flatten(output)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
            if outputs and not all(id(a) in inputs for a in outputs):  # identity modules: no backward range
                self._watch(outputs, path, entering=True)

        return hook


def step(module: "torch.nn.Module", x: "torch.Tensor", train: bool,
         region: Callable[[str], ContextManager[object]] | None = None) -> None:
    """One step as costspec profiles and times it: forward; for train, the loss out.float().sum()
    and its backward. Each phase runs inside `region(name)` (NVTX phase ranges) when given.
    Forward-only steps run under torch.no_grad()."""
    import torch

    region = region or (lambda name: nullcontext())
    if not train:
        with torch.no_grad(), region(FORWARD_RANGE):
            module(x)
        return
    with region(FORWARD_RANGE):
        out = module(x)
    with region(LOSS_RANGE):
        loss = out.float().sum()
    with region(BACKWARD_RANGE):
        loss.backward()
    module.zero_grad(set_to_none=True)
