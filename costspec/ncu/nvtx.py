"""Per-layer hooks on a module built by `costspec.runtime.torch_build`: NVTX ranges (and timers) around
the forward AND the backward of every costspec layer, without changing the module.

**Range names** are torch module paths, i.e. the spec's dotted layer names with the repeat index
(``layers.3.fc``, ``blocks.0.attn.qkv``); `costspec.runtime.torch_build.row_name` maps them to report rows
and `costspec.analysis.slots.RangeResolver` to comparison slots. The root module's range is named
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
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Protocol

from costspec.runtime.layer_hooks import (
    BACKWARD_RANGE,
    FORWARD_RANGE,
    LOSS_RANGE,
    LayerHooks,
    LayerListener,
    layer_paths,
    step,
)

if TYPE_CHECKING:

    pass



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


__all__ = ["BACKWARD_RANGE", "FORWARD_RANGE", "LOSS_RANGE", "LayerHooks", "LayerListener", "ListRecorder",
           "NvtxRanges", "Recorder", "TorchNvtx", "layer_paths", "step"]
