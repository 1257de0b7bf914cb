"""The training-step peak measured by PyTorch's `MemTracker` on the module generated from a spec, and
its comparison with `memory --pass train`'s peak (`costspec.analysis.memory_peak`), category by category.

The module is built under `FakeTensorMode` on the cpu device (nothing is allocated) in the spec's dtype
and runs the step the peak models: `loss = module(x).sum(); loss.backward(); optimizer.step();
optimizer.zero_grad(set_to_none=False)`, with torch.optim's optimizer in its `foreach` implementation
(torch's default on CUDA; its default on cpu is the per-tensor loop). One step runs first, untracked,
so that the gradients and optimizer states exist; `MemTracker.track_external` then registers them and
the second step is tracked. Why, in MemTracker as torch 2.13 ships it:

* a module called twice under one tracker raises NotImplementedError ("multiple iterative calls")
  unless `reset_mod_stats` runs between the calls: the first step is run outside it;
* fake CUDA tensors cannot be made on a cpu-only torch (`uniform_` at a layer's initialisation raises
  "PyTorch is not linked with support for cuda devices"), and MemTracker rounds a storage up to the
  CUDA caching allocator's 512-byte blocks only on a cuda device: on cpu it counts exact bytes. The
  rounding is reported as its own rule (`ROUNDING`), measured on every parameter, gradient and state;
* under `FakeTensorMode` entered before it, MemTracker counts the fake tensors (its dispatch counts
  ops run under the fake mode active when it was entered).

Its categories: Parameter, Buffer, Gradient, Activation, Temp (tensors made in the backward), Optstate
(the optimizer's states and what its step allocates), Other (the input batch, passed to track_external).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import sympy

from costspec.analysis.memory import exact_bytes, memory_kinds, training_moments, unmodelled_activations
from costspec.analysis.memory_peak import RECOMPUTE, RECOMPUTE_BOUND, Category, Moment
from costspec.core.errors import UsageError
from costspec.core.results import Column, Result, Row, Table
from costspec.runtime.torch_build import TORCH_DTYPES, build_module, import_torch

if TYPE_CHECKING:
    from costspec.tree.network import Network

ALLOCATOR_BLOCK = 512  # bytes: the CUDA caching allocator's smallest block (MemTracker's _PYTORCH_MIN_ALLOCATE)
TOLERANCE = 0.05  # the peak's bound: the gradients of activations in flight in the backward are not modelled
TRACKED = ("sgd", "adam", "adamw")

# costspec's categories -> MemTracker's reference types (their values in `_MemRefType`)
REFTYPE = {Category.WEIGHTS: "Parameter", Category.GRADIENTS: "Gradient", Category.OPTIMIZER: "Optstate",
           Category.OPT_BUFFER: "Optstate", Category.ACTIVATIONS: "Activation", Category.OUTPUT: "Activation",
           Category.TIED_GRADIENTS: "Temp", Category.RECOMPUTED: "Activation", Category.RECOMPUTED_OUTPUT: "Activation",
           Category.GRADIENT_IN_FLIGHT: "Temp"}  # (MemTracker counts a re-run's tensors as activations)
REFTYPES = ("Parameter", "Buffer", "Gradient", "Activation", "Temp", "Optstate", "Other")


@dataclass(frozen=True)
class Tracked:
    """MemTracker's bytes per reference type at the step's peak and after its forward, and what the named
    rules need from the run: the host-side step counters' bytes (in Optstate), the input's bytes (Other),
    the buffers' bytes, and the bytes 512-byte rounding would add to parameters, gradients and states."""

    peak: dict[str, int]
    forward_end: dict[str, int]
    step_counters: int
    input_bytes: int
    rounding: int
    recomputes: list[dict[str, int]] = field(default_factory=list)  # at the end of each checkpointed re-run


def _rounded(nbytes: int) -> int:
    return math.ceil(nbytes / ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK


def track_step(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], optimizer: str = "adamw") -> Tracked:
    """Run one tracked training step of `model`'s module at `values` under MemTracker (module docstring)."""
    if optimizer not in TRACKED:
        raise UsageError(f"--check runs torch.optim's optimizers ({', '.join(TRACKED)}); {optimizer} is not one")
    if str(model.precision.dtype) not in TORCH_DTYPES:
        raise UsageError(f"--check runs the module in torch; {model.precision.dtype} weights cannot run there")
    torch = import_torch("tracking a training step's memory")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    dtype = getattr(torch, TORCH_DTYPES[str(model.precision.dtype)])
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), torch.device("cpu"):
            module, make_input = build_module(model, values)
            for sub in module.modules():  # float buffers (RoPE tables) in the model's dtype
                for name, buf in list(sub._buffers.items()):
                    if buf is not None and buf.is_floating_point() and buf.dtype != dtype:
                        sub._buffers[name] = buf.to(dtype)
            opt = _optimizer(torch, optimizer, module)
            x = make_input("cpu", dtype)
            _step(module, opt, x)
            tracker = MemTracker()
            tracker.track_external(module, opt, x)
            recomputes: list[dict[str, int]] = []
            hooks = [sub.register_forward_hook(_recompute_end(torch, tracker, recomputes))
                     for sub in module.modules() if getattr(sub, "checkpointed", False)]
            with tracker:
                forward_end = _step(module, opt, x, tracker)
            for hook in hooks:
                hook.remove()
            counters = sum(_nbytes(v) for s in opt.state.values() for k, v in s.items() if k == "step")
            states = [v for s in opt.state.values() for k, v in s.items()
                      if isinstance(v, torch.Tensor) and k != "step"]
            kept = [*module.parameters(), *(p.grad for p in module.parameters() if p.grad is not None), *states]
            rounding = sum(_rounded(_nbytes(t)) - _nbytes(t) for t in kept)
            peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
            return Tracked(_by_name(peak), forward_end, counters, _nbytes(x), rounding, recomputes)
    finally:
        torch.set_default_dtype(previous)


def _recompute_end(torch, tracker, into: list[dict[str, int]]):
    """A forward hook for a checkpointed scope: in backward (its forward re-run by torch.utils.checkpoint),
    MemTracker's snapshot at the re-run's end goes into `into`."""
    def hook(module, inputs, output) -> None:
        if torch._C._current_graph_task_id() != -1:
            into.append(_by_name(tracker.get_tracker_snapshot()[torch.device("cpu")]))
    return hook


def _optimizer(torch, name: str, module):
    params = [p for p in module.parameters() if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=True)
    return (torch.optim.Adam if name == "adam" else torch.optim.AdamW)(params, foreach=True)


def _step(module, opt, x, tracker=None) -> dict[str, int]:
    """One training step; with `tracker`, its snapshot after the forward (the loss made)."""
    import torch

    out = module(x)
    loss = out.sum()
    snapshot = _by_name(tracker.get_tracker_snapshot()[torch.device("cpu")]) if tracker is not None else {}
    del out  # (the output lives until the loss is made from it)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    return snapshot


def _nbytes(t) -> int:
    return int(t.untyped_storage().nbytes())


def _by_name(snapshot: dict) -> dict[str, int]:
    return {str(getattr(k, "value", k)): int(v) for k, v in snapshot.items()}


@dataclass(frozen=True)
class MemoryCheck:
    """costspec's peak moment against MemTracker's peak, per reference type, with the named rules."""

    moment: str
    rows: list[tuple[str, int, int, str]]  # (reference type, costspec bytes, MemTracker bytes, rule or "")
    peak: tuple[int, int]  # (costspec, MemTracker)
    rounding: int = 0  # bytes 512-byte blocks would add to the parameters, gradients and device states

    @property
    def peak_error(self) -> float:
        ours, theirs = self.peak
        return (ours - theirs) / theirs if theirs else 0.0

    @property
    def ok(self) -> bool:
        return abs(self.peak_error) <= TOLERANCE

    @property
    def exact(self) -> bool:
        """Every category without a named rule equal."""
        return all(ours == theirs for _, ours, theirs, rule in self.rows if not rule)


def passed(checks: tuple[MemoryCheck, ...]) -> bool:
    """The peak within TOLERANCE and a checkpointed recompute moment (a third check) exact."""
    return checks[0].ok and all(check.exact for check in checks[2:])


def check_memory(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], optimizer: str = "adamw",
                 master: bool = False) -> tuple[MemoryCheck, ...]:
    """Track a step (track_step); compare the moment of `memory --pass train` that peaks with MemTracker's
    peak, its forward end with MemTracker's snapshot after the forward (the loss made), and, with activation
    checkpointing, its largest recompute moment with the largest of MemTracker's snapshots at the end of a
    checkpointed re-run (a third check)."""
    if optimizer not in TRACKED:
        raise UsageError(f"--check runs torch.optim's optimizers ({', '.join(TRACKED)}); {optimizer} is not one")
    if master:
        raise UsageError("--check runs torch.optim on the model's own weights: --master-weights is not tracked")
    reason = unmodelled_activations(model)
    if reason is not None:
        raise UsageError(f"--check compares the whole training step, and {reason}")
    moments = training_moments(model, memory_kinds(model, "train", optimizer))
    totals = [exact_bytes(m.total, values) for m in moments]
    top = moments[totals.index(max(totals))]
    tracked = track_step(model, values, optimizer)
    checks = (compare(top, values, tracked.peak, tracked), compare(moments[0], values, tracked.forward_end, tracked))
    recomputes = [(n, m) for m, n in zip(moments, totals) if m.name.startswith(RECOMPUTE)]
    if not recomputes or not tracked.recomputes:
        return checks
    if any(m.name == RECOMPUTE_BOUND for _, m in recomputes):
        raise UsageError("--check compares a checkpointed recompute moment modelled exactly; this spec's is an "
                         "upper bound (a repeat of variant groups, or plain instances keeping their own output)")
    largest = max(recomputes, key=lambda pair: pair[0])[1]
    theirs = max(tracked.recomputes, key=lambda snapshot: snapshot["Total"])
    return (*checks, compare(largest, values, theirs, tracked))


def compare(moment: Moment, values: Mapping[sympy.Symbol, sympy.Integer], snapshot: dict[str, int],
            tracked: Tracked) -> MemoryCheck:
    """Per reference type: costspec's bytes at `moment` and MemTracker's in `snapshot`, with the host step
    counters taken out of Optstate (a row of their own). Where the saved activations are held (the forward
    end, a recompute) the input batch (Other) is compared with them: costspec counts it when a layer saves it."""
    ours = dict.fromkeys(REFTYPES, 0)
    for category, amount in moment.parts.items():
        ours[REFTYPE[category]] += exact_bytes(amount, values)
    theirs = {ref: snapshot.get(ref, 0) for ref in REFTYPES}
    theirs["Optstate"] -= tracked.step_counters
    if Category.ACTIVATIONS in moment.parts:  # (the forward end, a recompute: the saved activations held)
        theirs["Activation"] += theirs.pop("Other")
        del ours["Other"]
    rows = [(ref, ours[ref], theirs[ref], _RULES.get(ref, "")) for ref in ours]
    rows.append(("step counters", 0, tracked.step_counters, "host step counters"))
    return MemoryCheck(moment.name, rows, (sum(ours.values()), int(snapshot["Total"])), tracked.rounding)


RULES = {"host step counters": "adam's 0-d fp32 `step` per parameter tensor, 4 B each (sgd: none): on the host "
                               "beside CUDA parameters (torch's default), on the device only in this cpu run",
         "buffers": "the module's buffers (RoPE's cos / sin tables): not parameters, not counted",
         "input batch": "the caller's input (numel x its element size): counted only where a layer saves it, "
                        "where the saved activations are held (the forward end, a checkpointed re-run)",
         "backward buffers": "tensors the backward makes: modelled are a tied weight's three gradients and, at a "
                             "checkpointed re-run's end, its output's gradient and a tied table's pending gradient; "
                             "the gradients an op's backward makes while it runs are not (docs/conventions.md, "
                             "memory: activation gradients in flight)",
         "allocator rounding": "a CUDA storage takes ceil(bytes / 512) x 512 (MemTracker rounds on cuda only; "
                               "this run is on cpu)"}
_RULES = {"Buffer": "buffers", "Other": "input batch", "Temp": "backward buffers", "Activation": ""}
FORWARD_END = "forward end"

CHECK_COLUMNS = [Column("costspec", "costspec bytes", "count"), Column("memtracker", "MemTracker bytes", "count"),
                 Column("diff", "diff", "percent"), Column("rule", "rule", "text")]


def check_result(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer],
                 checks: tuple[MemoryCheck, ...]) -> Result:
    """The comparison as a Result: the peak, then the forward end, then a checkpointed recompute (where the
    spec has one), one row per reference type."""
    peak, forward, *recomputes = checks
    titled = [(peak, f"peak (costspec: {peak.moment})"), (forward, "after the forward (the loss made)")]
    titled += [(check, f"at the end of a checkpointed re-run (costspec: {check.moment})") for check in recomputes]
    tables = [_table(c, title) for c, title in titled]
    ours, theirs = peak.peak
    dims = " ".join(f"{k}={values[d.symbol]}" for k, d in model.dims.dims.items() if d.symbol in values)
    verdict = "within" if peak.ok else "OUTSIDE"
    notes = [f"the peak is {verdict} {TOLERANCE:.0%} of MemTracker's ({100 * peak.peak_error:+.3f}%): the "
             "gradients an op's backward makes while it runs (activation gradients in flight) are not modelled",
             f"on a GPU, allocator rounding would add {peak.rounding:,} bytes to the parameters, gradients and "
             "optimizer states (both sides count exact bytes here)"]
    notes += [f"the checkpointed re-run's end is {'exact' if check.exact else 'NOT exact'} in every category "
              "without a rule" for check in recomputes]
    notes += [f"{name}: {how}" for name, how in RULES.items()]
    meta = {"spec": model.name, "moment": peak.moment, "peak": {"costspec": ours, "memtracker": theirs},
            "categories": _categories(peak), "forward_end": {"costspec": forward.peak[0], "memtracker": forward.peak[1],
                                                             "categories": _categories(forward)},
            "rounding_bytes": peak.rounding, "ok": passed(checks)}
    if recomputes:
        check = recomputes[0]
        meta["recompute"] = {"moment": check.moment, "costspec": check.peak[0], "memtracker": check.peak[1],
                             "exact": check.exact, "categories": _categories(check)}
    return Result(f"{model.name} | memory check vs MemTracker (FakeTensorMode, cpu) | {dims}", tables, {}, notes, meta)


def _table(check: MemoryCheck, title: str) -> Table:
    rows = [Row(ref, ref, 0, {"costspec": ours, "memtracker": theirs, "diff": _diff(ours, theirs), "rule": rule})
            for ref, ours, theirs, rule in check.rows]
    ours, theirs = check.peak
    total = Row("", "total", 0, {"costspec": ours, "memtracker": theirs, "diff": _diff(ours, theirs), "rule": ""})
    return Table(CHECK_COLUMNS, rows, total, title=title, label_title="MemTracker category")


def _diff(ours: int, theirs: int) -> float:
    return (ours - theirs) / theirs if theirs else 0.0


def _categories(check: MemoryCheck) -> dict:
    return {ref: {"costspec": o, "memtracker": t, "rule": r} for ref, o, t, r in check.rows}


__all__ = ["ALLOCATOR_BLOCK", "MemoryCheck", "TOLERANCE", "Tracked", "check_memory", "check_result", "compare",
           "passed", "track_step"]
