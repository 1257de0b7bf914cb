"""`costspec time`: measured time per layer of a spec's torch module on CUDA, next to the roofline
estimate (`costspec.roofline.estimate`).

Every layer is bracketed by timer marks from the same hooks that place the NVTX ranges
(`costspec.ncu.nvtx.LayerHooks`): a layer's interval opens when it is entered and closes when it
is left, in the forward and (for `--pass train`) in the backward. With CUDA events the marks are
recorded into the stream at launch time, so an interval covers exactly the kernels launched inside
the layer. A layer's time is inclusive (its sub-layers included); the instances of a repeat add up
in the repeat's row, as in `costspec eval`. Each step is timed `repeats` times after `warmup`
steps; the median per row is reported. The timer is injected (`CudaTimer` on a GPU), so the
aggregation is tested on CPU with a fake one.

The step also has a mark around it: "step" is the whole forward (+ loss + backward) time,
including work outside every layer.
"""
from __future__ import annotations

import json
import statistics
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from .errors import CostspecError
from .tree import RepeatNode

if TYPE_CHECKING:
    from .model import Model
    from .roofline import RooflineReport


class Timer(Protocol):
    def mark(self) -> Any: ...

    def elapsed_s(self, start: Any, end: Any) -> float: ...

    def sync(self) -> None: ...


class CudaTimer:
    """Marks are CUDA events recorded on the current stream."""

    def __init__(self):
        import torch

        self._torch = torch

    def mark(self):
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_s(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3

    def sync(self) -> None:
        self._torch.cuda.synchronize()


class Intervals:
    """A `LayerListener` that opens an interval when a layer is entered and closes it when left."""

    def __init__(self, timer: Timer):
        self.timer = timer
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], tuple[int, Any]] = {}
        self.closed: list[tuple[str, str, Any, Any]] = []  # (phase, path, start mark, end mark)

    def enter(self, path: str, phase: str) -> None:
        with self._lock:
            count, start = self._open.get((phase, path), (0, None))
            self._open[(phase, path)] = (count + 1, start if count else self.timer.mark())

    def exit(self, path: str, phase: str) -> None:
        with self._lock:
            if (phase, path) not in self._open:
                return
            count, start = self._open.pop((phase, path))
            if count > 1:
                self._open[(phase, path)] = (count - 1, start)
            else:
                self.closed.append((phase, path, start, self.timer.mark()))

    def end_backward(self) -> None:
        with self._lock:
            for (phase, path), (_, start) in list(self._open.items()):
                if phase == "backward":
                    self.closed.append((phase, path, start, self.timer.mark()))
                    del self._open[(phase, path)]


@dataclass
class TimeRow:
    name: str
    label: str
    depth: int
    forward_s: float | None  # median over repeats; None: no module of its own (SDPA inside attention)
    backward_s: float | None
    estimate_s: float | None = None

    @property
    def measured_s(self) -> float | None:
        if self.forward_s is None and self.backward_s is None:
            return None
        return (self.forward_s or 0.0) + (self.backward_s or 0.0)


@dataclass
class Timing:
    spec: str
    pass_: str
    dims: dict[str, int]
    device: str
    dtype: str
    warmup: int
    repeats: int
    rows: list[TimeRow]
    model_forward_s: float
    model_backward_s: float
    step_s: float
    gpu: str | None = None
    estimate_total_s: float | None = None
    notes: list[str] = field(default_factory=list)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def time_layers(model: "Model", values: Mapping, pass_: str = "forward", dtype: str | None = None, warmup: int = 3,
                repeats: int = 10, device: str = "cuda", timer: Timer | None = None) -> Timing:
    """Time every layer (median of `repeats` steps after `warmup`) on `device` with `timer`."""
    from .ncu.nvtx import LayerHooks, layer_paths, step
    from .ncu.runner import configure_dtype
    from .torch_build import build_module, import_torch, row_name

    if pass_ not in ("forward", "train"):
        raise CostspecError(f"pass must be forward or train, not {pass_!r}")
    if repeats < 1 or warmup < 0:
        raise CostspecError("--repeats must be >= 1 and --warmup >= 0")
    torch = import_torch("costspec time")
    dtype_name = dtype or str(model.precision)
    torch_dtype = configure_dtype(torch, dtype_name)
    timer = timer or CudaTimer()
    torch.manual_seed(0)
    with torch.device(device):
        module, make_input = build_module(model, values)
    module = module.to(dtype=torch_dtype)
    x = make_input(device, torch_dtype)
    train = pass_ == "train"
    paths = layer_paths(model, module)
    rows_of = {path: row_name(model, path) for path in paths}
    per_repeat: list[dict[tuple[str, str], float]] = []
    steps: list[float] = []
    intervals = Intervals(timer)
    with LayerHooks(model, module, intervals, paths):
        for _ in range(warmup):
            step(module, x, train)
        timer.sync()
        for _ in range(repeats):
            intervals.closed.clear()
            start = timer.mark()
            step(module, x, train)
            end = timer.mark()
            timer.sync()
            steps.append(timer.elapsed_s(start, end))
            totals: dict[tuple[str, str], float] = defaultdict(float)
            for phase, path, a, b in intervals.closed:
                totals[(phase, rows_of[path])] += timer.elapsed_s(a, b)
            per_repeat.append(totals)

    def med(phase: str, row: str) -> float | None:
        if not any((phase, row) in t for t in per_repeat):
            return None
        return _median([t.get((phase, row), 0.0) for t in per_repeat])

    rows: list[TimeRow] = []
    for node, depth, _, _ in model.walk():
        names = [node.name]
        if isinstance(node, RepeatNode) and node.grouped:
            names = [g.name for g in node.children]
        fwd = [v for v in (med("forward", n) for n in names) if v is not None]
        bwd = [v for v in (med("backward", n) for n in names) if v is not None]
        rows.append(TimeRow(node.name, node.label, depth, sum(fwd) if fwd else None,
                            (sum(bwd) if bwd else None) if train else None))
    dims = {str(k): int(v) for k, v in values.items()}
    return Timing(model.name, pass_, dims, device, dtype_name, warmup, repeats, rows,
                  med("forward", "") or 0.0, (med("backward", "") or 0.0) if train else 0.0, _median(steps))


def add_estimate(timing: Timing, roof: "RooflineReport") -> Timing:
    """Put the roofline's estimated time next to each measured row (same pass, same dims)."""
    by_name = {r.name: r for r in roof.rows}
    for row in timing.rows:
        if row.name in by_name:
            row.estimate_s = by_name[row.name].time_s
    timing.gpu = roof.gpu.name
    timing.estimate_total_s = roof.time_s
    timing.notes.extend(roof.notes)
    return timing


# ----------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------
def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1e3 * value:.4g}"


def _ratio(measured: float | None, estimate: float | None) -> str:
    return "-" if not measured or not estimate else f"{measured / estimate:.2f}"


def render_table(t: Timing) -> str:
    dims = " ".join(f"{k}={v}" for k, v in t.dims.items())
    lines = [f"{t.spec} | time {t.pass_} on {t.device} ({t.dtype}) | {dims} | median of {t.repeats} steps after "
             f"{t.warmup} warm-up"]
    head = ["layer", "fwd ms"] + (["bwd ms", "total ms"] if t.pass_ == "train" else []) + \
        ([f"est. ms ({t.gpu})", "measured/est."] if t.gpu else [])
    table = [head]
    model_row = TimeRow("", "model (all layers)", 0, t.model_forward_s, t.model_backward_s if t.pass_ == "train"
                        else None, t.estimate_total_s)
    for r in t.rows + [model_row]:
        cells = ["  " * r.depth + r.label, _ms(r.forward_s)]
        if t.pass_ == "train":
            cells += [_ms(r.backward_s), _ms(r.measured_s)]
        if t.gpu:
            cells += [_ms(r.estimate_s), _ratio(r.measured_s, r.estimate_s)]
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for i, row in enumerate(table):
        lines.append("  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]))
        if i == 0 or i == len(table) - 2:
            lines.append("  ".join("-" * w for w in widths))
    lines.append(f"step (forward{' + loss + backward' if t.pass_ == 'train' else ''}, incl. work outside the "
                 f"layers): {_ms(t.step_s)} ms")
    if not t.gpu:
        lines.append("no roofline estimate: pass --gpu NAME (see `costspec gpus`)")
    lines.extend(t.notes)
    lines.append("measured = CUDA-event time between entering and leaving each layer (inclusive of its sub-layers; "
                 "the instances of a repeat summed); '-' = no module of its own")
    return "\n".join(lines)


def render_json(t: Timing) -> str:
    rows = [{"name": r.name, "label": r.label, "depth": r.depth, "forward_s": r.forward_s, "backward_s": r.backward_s,
             "measured_s": r.measured_s, "estimate_s": r.estimate_s} for r in t.rows]
    out = {"spec": t.spec, "pass": t.pass_, "dims": t.dims, "device": t.device, "dtype": t.dtype, "warmup": t.warmup,
           "repeats": t.repeats, "gpu": t.gpu, "rows": rows, "model_forward_s": t.model_forward_s,
           "model_backward_s": t.model_backward_s, "step_s": t.step_s, "estimate_total_s": t.estimate_total_s,
           "notes": t.notes}
    return json.dumps(out, indent=2)


RENDERERS = {"table": render_table, "json": render_json}
