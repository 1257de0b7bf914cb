"""Per-layer hooks on a module built by `costspec.torch_build`: NVTX ranges (and timers) around
the forward AND the backward of every costspec layer, without changing the module.

**Range names** are torch module paths, i.e. the spec's dotted layer names with the repeat index
(``layers.3.fc``, ``blocks.0.attn.qkv``); `costspec.torch_build.row_name` maps them to report rows
and `costspec.ncu.slots.RangeResolver` to comparison slots. The root module's range is named
after the spec (``toy_mlp``). A module gets a range when it is a layer of its own: the root, a
repeat instance, a scope, an op, or an op's part with its own submodule -- not an op's internals,
and not `nn.ModuleList` containers (they never run).

**Forward**: a forward pre-hook enters the layer, a forward hook leaves it.

**Backward** (as torch's ModuleTracker, with the two fixes of `runtime_count.ScopeTracker`): a
layer is entered when the gradients of all its outputs are ready (a multi-grad hook on its outputs)
and left when the gradients of all its inputs are ready. A layer whose inputs need no gradient (the
first layer with parameters) is left when its parameters' gradients are ready; a layer that returns
its input unchanged gets no backward range. Anything still open when autograd finishes is closed
by an engine callback.

**Why process-scope push/pop ranges.** Autograd runs the backward of CUDA tensors on its own
device thread, not on the Python thread that called ``loss.backward()``. ncu's default push/pop
scope is per thread, so ranges pushed on the Python thread would not enclose backward kernels.
costspec pushes and pops every range from whichever thread the hook runs on, and ncu is run with
``--nvtx-push-pop-scope process`` (`costspec.ncu.metrics.build_command`), which keeps one stack
for the whole process. Forward and backward never overlap (``backward()`` blocks the Python
thread), so the one stack is well defined. Start/end ranges (`nvtxRangeStart/End`) would also
cross threads, but ncu prints them as an unordered set with no nesting; push/pop gives the
innermost layer directly.

**Nesting.** Autograd fires hooks on one tensor in registration order, so a parent and its child
are sometimes entered (or left) in the "wrong" order -- and `nvtxRangePop` always pops the top of
the stack. `NvtxRanges` therefore keeps the set of open layers and, after every change,
re-synchronises the NVTX stack to: phase ranges (``costspec:forward``, ``costspec:backward``,
``costspec:loss``), then the open layers sorted by depth (outermost first). Ranges are properly
nested and balanced at every kernel launch, and the top of the stack is always the innermost layer.

The push/pop functions are injected (`Recorder`): `TorchNvtx` uses ``torch.cuda.nvtx``;
`ListRecorder` records the events, so the logic is tested on CPU.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

from ..torch_build import node_of

if TYPE_CHECKING:
    import torch

    from ..model import Model

FORWARD_RANGE = "costspec:forward"
BACKWARD_RANGE = "costspec:backward"
LOSS_RANGE = "costspec:loss"


class Recorder(Protocol):
    def push(self, name: str) -> None: ...

    def pop(self) -> None: ...


class TorchNvtx:
    """NVTX push/pop through torch.cuda.nvtx (needs a CUDA build of torch)."""

    def __init__(self):
        import torch

        self._push, self._pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop

    def push(self, name: str) -> None:
        self._push(name)

    def pop(self) -> None:
        self._pop()


class ListRecorder:
    """Records pushes and pops (for tests): `events` in order, and the current `stack`."""

    def __init__(self):
        self.events: list[tuple[str, str | None]] = []
        self.stack: list[str] = []

    def push(self, name: str) -> None:
        self.events.append(("push", name))
        self.stack.append(name)

    def pop(self) -> None:
        if not self.stack:
            raise AssertionError("NVTX pop with an empty stack")
        self.events.append(("pop", self.stack.pop()))


class LayerListener(Protocol):
    """What `LayerHooks` calls: a layer (torch module path) is entered or left in a phase."""

    def enter(self, path: str, phase: str) -> None: ...

    def exit(self, path: str, phase: str) -> None: ...

    def end_backward(self) -> None: ...


def layer_paths(model: "Model", module: "torch.nn.Module") -> dict[str, str]:
    """torch module path -> range name, for every module that is a costspec layer of its own."""
    from torch import nn

    out: dict[str, str] = {}
    nodes: dict[str, object] = {}
    for path, sub in module.named_modules():
        node = node_of(model, path)
        nodes[path] = node
        if isinstance(sub, nn.ModuleList):
            continue
        parent = path.rpartition(".")[0] if path else None
        if path == "" or nodes.get(parent) is not node:
            out[path] = path or model.name
    return out


def _depth(path: str) -> int:
    return path.count(".") + 1 if path else 0


class NvtxRanges:
    """A `LayerListener` that keeps the NVTX push/pop stack equal to [phase ranges] + the open
    layers, outermost first (see the module docstring). Thread-safe."""

    def __init__(self, names: dict[str, str], recorder: Recorder):
        self.names = names
        self.recorder = recorder
        self._lock = threading.RLock()
        self._open: dict[str, int] = {}  # path -> open count (a module may run twice: the residual fork/add)
        self._since: dict[str, int] = {}
        self._seq = 0
        self._base: list[str] = []
        self._pushed: list[tuple[str, str]] = []

    def enter(self, path: str, phase: str) -> None:
        with self._lock:
            if path not in self._open:
                self._seq += 1
                self._since[path] = self._seq
            self._open[path] = self._open.get(path, 0) + 1
            self._sync()

    def exit(self, path: str, phase: str) -> None:
        with self._lock:
            if path not in self._open:
                return  # a layer that never opened (identity module; gradient that arrived first)
            self._open[path] -= 1
            if not self._open[path]:
                del self._open[path], self._since[path]
            self._sync()

    def end_backward(self) -> None:
        with self._lock:
            self._open.clear()
            self._since.clear()
            self._sync()

    @contextmanager
    def region(self, name: str) -> Iterator[None]:
        """A phase range (costspec:forward, ...) below every layer range while it is open."""
        with self._lock:
            self._base.append(name)
            self._sync()
        try:
            yield
        finally:
            with self._lock:
                self._base.remove(name)
                self._sync()

    def close(self) -> None:
        """Pop everything (end of a run)."""
        with self._lock:
            self._open.clear()
            self._since.clear()
            self._base.clear()
            self._sync()

    def _sync(self) -> None:
        layers = sorted(self._open, key=lambda p: (_depth(p), self._since[p]))
        desired = [("phase", n) for n in self._base] + [("layer", p) for p in layers]
        keep = 0
        while keep < min(len(desired), len(self._pushed)) and desired[keep] == self._pushed[keep]:
            keep += 1
        while len(self._pushed) > keep:
            self.recorder.pop()
            self._pushed.pop()
        for kind, key in desired[keep:]:
            self.recorder.push(key if kind == "phase" else self.names.get(key, key))
            self._pushed.append((kind, key))


class LayerHooks:
    """Context manager: hooks on every layer module of `module` that report to `listener`."""

    def __init__(self, model: "Model", module: "torch.nn.Module", listener: LayerListener,
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
         region: Callable[[str], object] | None = None) -> None:
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
