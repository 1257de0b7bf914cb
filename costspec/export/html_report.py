"""Everything `costspec report` shows, gathered (no HTML here; the page is `costspec.export.html_page`).

One call evaluates the spec at the bound dims for the chosen pass, adds the roofline (with a GPU),
the closed forms per layer and total for forward and train, the device memory by kind (`costspec memory`'s
rows for the page's pass and phase), for a decoder on a GPU the decode / prefill curve over the context
length, a sweep over --vary (with per-point roofline time when there is a GPU), and reads a
`validate --format json` and an `ncu compare --format json` file when given. A served model (a phase:
`costspec.analysis.serving`) has forward forms only and says what its costs are per step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import sympy

from costspec.analysis.backend_note import flash_backward_note
from costspec.analysis.decode_curve import DecodeCurve, decode_curve
from costspec.analysis.evaluation import build_report
from costspec.analysis.formula import ClosedForm, Symbols, choose_symbols, closed_form, formulas
from costspec.analysis.gpus import Gpu
from costspec.analysis.roofline import Efficiency, RooflineReport, estimate
from costspec.analysis.sweep import Grid, sweep
from costspec.analysis.sweep_time import GridTimes, grid_times
from costspec.core.errors import UsageError
from costspec.core.progress import progress
from costspec.core.results import Result
from costspec.export.report import CONVENTIONS
from costspec.tree.walk import node_cost

if TYPE_CHECKING:
    from costspec.analysis.evaluation import Report
    from costspec.tree.network import Network

@dataclass(frozen=True)
class RowForms:
    """A layer's closed forms: total FLOPs forward and train (all its instances; no train form for a model
    running quantised weights on a native int8 / fp8 GEMM, which has no backward pass), and parameters."""

    forward: ClosedForm
    train: ClosedForm | None
    params: ClosedForm


@dataclass
class SweepData:
    grid: Grid
    values: dict[str, Any]
    times: GridTimes | None


@dataclass(frozen=True)
class Served:
    """The serving phase of the page's model: prefill or decode, the dim of the cached tokens (None: no
    cache before the input), and the new tokens one step costs (decode: one per sequence)."""

    phase: str
    context_dim: str | None
    tokens: int


@dataclass
class PageData:
    model: Network
    report: Report
    roof: RooflineReport | None
    gpu: Gpu | None
    symbols: Symbols
    row_forms: dict[str, RowForms]
    totals: dict[str, dict[str, ClosedForm]]  # pass -> tc / cuda / total / params
    sweep: SweepData | None = None
    validation: dict | None = None
    compare: dict | None = None
    notes: list[str] = field(default_factory=list)
    conventions: str = CONVENTIONS
    served: Served | None = None
    memory: Result | str | None = None  # `costspec memory`'s result, or why the memory is not shown
    curve: DecodeCurve | None = None  # a decoder on a GPU: time per token against the context


def read_json(path: str | Path, what: str) -> dict:
    """A JSON object from a file, through the bounded reader (`costspec.core.safeio`: a regular file of
    at most 64 MiB, nested at most 32 levels, bounded numbers), or a clear usage error naming the file."""
    from costspec.core.safeio import COMPARE_JSON, VALIDATION_JSON, InputError
    from costspec.core.safeio import read_json as bounded_json

    try:
        data = bounded_json(path, COMPARE_JSON if what == "--compare" else VALIDATION_JSON)
    except InputError as exc:
        raise UsageError(f"{what}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} {path}: expected a JSON object (the output of --format json)")
    return data


def _memory(model: Network, values: Mapping[sympy.Symbol, sympy.Integer], pass_: str, gpu: Gpu | None) -> Result | str:
    """`costspec memory`'s result for the page: its pass (forward; train for a backward or train page of a
    model that trains), its phase (a served model holds its key/value cache), the optimizer's default; or the
    reason it cannot be counted."""
    from costspec.analysis.memory import memory_kinds, memory_result

    served = getattr(model, "phase", None) is not None
    step = "forward" if pass_ == "forward" or served or not model.trains else "train"
    try:
        kinds = memory_kinds(model, step, cache=served)
        return memory_result(model, kinds, values, step, gpu)
    except UsageError as exc:
        return str(exc)


def _row_forms(model: Network, symbols: Symbols, quiet: bool, trains: bool = True) -> dict[str, RowForms]:
    walked = list(model.walk())
    out = {}
    with progress("report: closed forms", len(walked), quiet) as tick:
        for node, _depth, mult, in_rg in walked:
            fwd = node_cost(node, "forward", mult, in_rg)
            train = node_cost(node, "train", mult, in_rg) if model.trains and trains else None
            out[node.name] = RowForms(closed_form(fwd.tc + fwd.cuda, symbols),
                                      closed_form(train.tc + train.cuda, symbols) if train else None,
                                      closed_form(fwd.params, symbols))
            tick(what=node.name)
    return out


def gather(model: Network, values: Mapping[sympy.Symbol, sympy.Integer], pass_: str, sets: Mapping[str, int],
           gpu: Gpu | None = None, fusion: str = "default", efficiency: Efficiency | None = None,
           varies: Sequence[tuple[str, Sequence[int]]] = (), validation: dict | None = None,
           compare: dict | None = None, quiet: bool = False, written: Network | None = None,
           dtype: str | None = None) -> PageData:
    """All the report's data for `model` at bound `values` (from `Network.bind`). A served `model` (a phase)
    comes with the spec as `written` (not served: what the decode curve serves at each context) and the
    `dtype` both were built in."""
    efficiency = efficiency or Efficiency()
    phase = getattr(model, "phase", None)
    report = build_report(model, pass_, values)
    roof = estimate(model, report, values, gpu, fusion, efficiency) if gpu else None
    # The closed forms keep formula's default symbols (the free dims and those marked keep): only the dims
    # given with --set are substituted; --batch and the spec's defaults are the page's numbers, not the forms'
    symbols = choose_symbols(model, None, False, sets)
    trains = model.trains and phase is None  # a served model runs forward only
    passes = ("forward", "train") if trains else ("forward",)
    totals = {p: formulas(model, p, None, False, sets, depth=0).totals() for p in passes}
    notes = list(report.notes)
    if not model.trains:
        notes.append("no train forms: the model runs quantised weights on a native int8 / fp8 GEMM (no backward "
                     "pass modelled; docs/conventions.md#quantised-weights)")
    elif phase is not None:
        notes.append(f"no train forms: the model is served ({phase}), forward only")
    elif note := flash_backward_note(model, "train"):
        notes.append(note)
    if roof:
        notes.extend(roof.notes)
    data = PageData(model, report, roof, gpu, symbols, _row_forms(model, symbols, quiet, trains), totals,
                    validation=validation, compare=compare, notes=notes)
    if phase is not None:
        tokens = int(sympy.Mul(*(sympy.sympify(s) for s in model.in_shape[:2])).xreplace(values))
        data.served = Served(str(phase), getattr(model, "context_dim", None), tokens)
    data.memory = _memory(model, values, pass_, gpu)
    if gpu is not None:
        batch = int(sympy.sympify(model.in_shape[0]).xreplace(values))
        data.curve = decode_curve(written or model, gpu, batch, sets, dtype, fusion, efficiency)
    if varies:
        varied = {n for n, _ in varies}
        for name in varied & set(sets):
            raise UsageError(f"{name} is both varied (--vary) and set (--set); give it once")
        fixed = {d.name: int(values[d.symbol]) for d in model.dims.free() if d.name not in varied}
        grid, swept = sweep(model, varies, pass_, fixed)
        times = grid_times(model, grid, pass_, gpu, fixed, fusion, efficiency, quiet) if gpu else None
        data.sweep = SweepData(grid, dict(swept), times)
    return data
