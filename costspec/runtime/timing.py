"""`costspec time`: measured time per layer of a spec's torch module on CUDA, next to the roofline
estimate (`costspec.analysis.roofline.estimate`).

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

import statistics
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from costspec.core.errors import CostspecError
from costspec.core.render import render
from costspec.core.results import Column, Result, Row, Table
from costspec.core.vocab import RUNNABLE_PASSES, Pass
from costspec.tree.nodes import RepeatNode
from costspec.tree.walk import row_name, walk

if TYPE_CHECKING:
    from costspec.analysis.roofline import RooflineReport
    from costspec.tree.network import Network


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
class Timing:
    spec: str
    pass_: str
    dims: dict[str, int]
    device: str
    dtype: str
    warmup: int
    repeats: int
    table: Table  # a row per report row: forward_s, backward_s, measured_s (medians; None: no module of its own)
    model_forward_s: float
    model_backward_s: float
    step_s: float
    gpu: str | None = None
    estimate_total_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return self.table.rows


def _time_row(name: str, label: str, depth: int, forward: float | None, backward: float | None) -> Row:
    measured = None if forward is None and backward is None else (forward or 0.0) + (backward or 0.0)
    return Row(name, label, depth, {"forward_s": forward, "backward_s": backward, "measured_s": measured,
                                    "estimate_s": None, "ratio": None})


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def time_layers(model: "Network", values: Mapping, pass_: str = "forward", dtype: str | None = None, warmup: int = 3,
                repeats: int = 10, device: str = "cuda", timer: Timer | None = None) -> Timing:
    """Time every layer (median of `repeats` steps after `warmup`) on `device` with `timer`."""
    from costspec.runtime.layer_hooks import LayerHooks, layer_paths, step
    from costspec.runtime.torch_build import build_module, configure_dtype, import_torch

    pass_ = Pass.parse(pass_, "--pass", RUNNABLE_PASSES)
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
    train = pass_ is Pass.TRAIN
    paths = layer_paths(model, module)
    rows_of = {path: row_name(model.root, path) for path in paths}
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

    rows: list[Row] = []
    for node, depth, _, _ in walk(model.root):
        names = [node.name]
        if isinstance(node, RepeatNode) and node.grouped:
            names = [g.name for g in node.children]
        fwd = [v for v in (med("forward", n) for n in names) if v is not None]
        bwd = [v for v in (med("backward", n) for n in names) if v is not None]
        rows.append(_time_row(node.name, node.label, depth, sum(fwd) if fwd else None,
                              (sum(bwd) if bwd else None) if train else None))
    total = _time_row("", "model (all layers)", 0, med("forward", "") or 0.0,
                      (med("backward", "") or 0.0) if train else None)
    dims = {str(k): int(v) for k, v in values.items()}
    return Timing(model.name, pass_, dims, device, dtype_name, warmup, repeats, Table([], rows, total),
                  med("forward", "") or 0.0, (med("backward", "") or 0.0) if train else 0.0, _median(steps))


def add_estimate(timing: Timing, roof: "RooflineReport") -> Timing:
    """Put the roofline's estimated time next to each measured row (same pass, same dims)."""
    for row in timing.table.all_rows():
        row.values["estimate_s"] = roof.time_s if row.name == "" else roof.times.get(row.name)
        measured, estimate = row.values["measured_s"], row.values["estimate_s"]
        row.values["ratio"] = measured / estimate if measured and estimate else None
    timing.gpu = roof.gpu.name
    timing.estimate_total_s = roof.time_s
    timing.notes.extend(roof.notes)
    if any(row.get("sparse_tc_flops") for row in roof.rows):
        timing.notes.append("2:4 layers: the generated module runs their weights dense, so 'measured' is the dense "
                            "time and the estimate the 2:4 one; their ratio is not a calibration")
    return timing


# ----------------------------------------------------------------------------------------------
# The printed result
# ----------------------------------------------------------------------------------------------
def to_result(t: Timing) -> Result:
    """The timing as the one result type: a row per layer (and the model), measured next to estimated."""
    dims = " ".join(f"{k}={v}" for k, v in t.dims.items())
    header = (f"{t.spec} | time {t.pass_} on {t.device} ({t.dtype}) | {dims} | median of {t.repeats} steps after "
              f"{t.warmup} warm-up")
    train = t.pass_ == Pass.TRAIN
    columns = [Column("forward_s", "fwd", "seconds")]
    if train:
        columns += [Column("backward_s", "bwd", "seconds"), Column("measured_s", "total", "seconds")]
    else:
        columns += [Column("backward_s", "bwd", "seconds", hidden=True), Column("measured_s", "total", "seconds",
                                                                                hidden=True)]
    columns += [Column("estimate_s", f"est. ({t.gpu})", "seconds", hidden=not t.gpu),
                Column("ratio", "measured/est.", "ratio", hidden=not t.gpu)]
    notes = [f"step (forward{' + loss + backward' if train else ''}, incl. work outside the layers): "
             f"{1e3 * t.step_s:.4g} ms"]
    if not t.gpu:
        notes.append("no roofline estimate: pass --gpu NAME (see `costspec gpus`)")
    notes += t.notes + ["measured = CUDA-event time between entering and leaving each layer (inclusive of its "
                        "sub-layers; the instances of a repeat summed); '-' = no module of its own"]
    meta = {"spec": t.spec, "pass": str(t.pass_), "dims": t.dims, "device": t.device, "dtype": t.dtype,
            "warmup": t.warmup, "repeats": t.repeats, "gpu": t.gpu, "model_forward_s": t.model_forward_s,
            "model_backward_s": t.model_backward_s, "step_s": t.step_s, "estimate_total_s": t.estimate_total_s}
    return Result(header, [Table(columns, t.table.rows, t.table.total)], {}, notes, meta)


def render_table(t: Timing) -> str:
    return render(to_result(t), "table")


def render_json(t: Timing) -> str:
    return render(to_result(t), "json")
