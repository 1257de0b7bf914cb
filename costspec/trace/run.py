"""Run a built model once under the recorder and compile what ran into layers (`record`), and run it
at the other sizes the fit needs (`runs`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from costspec.against.target import first_tensor
from costspec.core.errors import CostspecError, UsageError
from costspec.trace.fit import FitError, Sample, align, same_structure
from costspec.trace.graph import Compiler, Unmapped
from costspec.trace.ir import Gap, Layer, Seq, trim
from costspec.trace.leaf import is_leaf
from costspec.trace.patterns import PATTERNS
from costspec.trace.record import CONST, Recorder
from costspec.trace.repeats import fold
from costspec.trace.target import Axis, Built, Target, default_axes

TORCH_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp32"}


@dataclass
class Run:
    """What one run of the model compiled to."""

    layers: list[Layer]
    unmapped: list[Unmapped]
    input_name: str
    input_shape: list[int]
    input_ids: bool  # the input is integer ids (an embedding reads it)
    dtype: str  # the parameters' precision
    model: str  # the root module's class


def record(built: Built, output_field: str | None = None) -> Run:
    """Run `built` once on meta under the recorder; its layers from the first input to the output."""
    module = built.module
    recorder = Recorder(module, is_leaf)
    names = list(built.inputs)
    with torch.no_grad(), recorder:
        for i, name in enumerate(names):
            t = built.inputs[name]
            if i == 0:
                recorder.add_input(t, name)
            else:  # further inputs (masks, ids of another kind) are read as constants
                recorder.new_value(t, CONST, name=name)
        out = module(*built.inputs.values()) if built.positional else module(**built.inputs)
    output = first_tensor(out, output_field)
    end = recorder.values.get(id(output))
    root = recorder.root
    if end is None or root is None:
        raise UsageError("the model's output is not a tensor it computed from its input")
    compiler = Compiler(list(PATTERNS))
    seq = compiler.scope(root, end)
    layers: list[Layer] = [seq] if isinstance(seq, Gap) else fold(seq.layers)
    first = built.inputs[names[0]]
    params = [p for p in module.parameters() if p.is_floating_point()]
    dtype = TORCH_DTYPES.get(params[0].dtype if params else torch.get_default_dtype(), "fp32")
    return Run(layers, compiler.unmapped, names[0], list(first.shape), not first.is_floating_point(), dtype,
               type(module).__name__)


@dataclass
class Fitted:
    """The layers with sizes as expressions of the dims, and how they were found."""

    run: Run  # the base run (its layers' sizes are ints)
    layers: list[Layer]
    input_shape: list
    dims: dict[str, int]  # dim -> base value
    axes: dict[str, list[Axis]]
    fixed: dict[str, str]  # dims left at their base value -> why
    samples: list[Sample] = field(default_factory=list)
    seconds: float = 0.0


def _variations(value: int) -> list[int]:
    out = [2 * value, value + 1, value // 2, 3 * value, value - 1]
    return [v for v in dict.fromkeys(out) if v >= 1 and v != value]


def runs(target: Target, named: dict[str, list[Axis]], output_field: str | None = None,
         progress=lambda text: None) -> Fitted:
    """Run the model at its base sizes, once per dim changed alone and once with all changed; fit."""
    started = time.monotonic()
    base_model = dict(target.model_dims)
    built = _users(lambda: target.build(base_model), f"{target.name}: building the model")
    target.axes = {**target.axes, **named}
    axes = default_axes(built.inputs, target.axes)
    target.axes = axes
    dims = dict(base_model)
    for dim, listed in axes.items():
        sizes = {built.inputs[a.input].shape[a.axis] for a in listed if a.input in built.inputs}
        if not sizes:
            raise UsageError(f"--dim {dim}: the model's inputs are {', '.join(built.inputs)}")
        if len(sizes) > 1:
            raise UsageError(f"--dim {dim}: the axes it names have different sizes ({sorted(sizes)})")
        size = sizes.pop()
        if dim in dims and dims[dim] != size:
            raise UsageError(f"dim {dim} is {dims[dim]} as an argument and {size} as an input axis")
        dims[dim] = size
    progress(f"tracing {target.name} at {_text(dims)}")
    base = _users(lambda: record(target.build(dims), output_field), f"{target.name}: running the model on meta")
    samples, results = [Sample(dict(dims))], [base.layers]
    shapes = [base.input_shape]
    fixed: dict[str, str] = {}
    symbols = symbols_of(dims)
    varied: dict[str, int] = {}
    for dim, value in dims.items():
        why = ""
        for candidate in _variations(value):
            trial = {**dims, dim: candidate}
            progress(f"tracing {target.name} at {dim}={candidate}")
            try:
                run = record(target.build(trial), output_field)
                same_structure(base.layers, run.layers)
            except FitError as exc:
                why = str(exc)
                continue
            except Exception as exc:  # the model refuses this size: try another
                why = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                continue
            samples.append(Sample(trial))
            results.append(run.layers)
            shapes.append(run.input_shape)
            varied[dim] = candidate
            break
        else:
            if dim in target.axes and dim in named:
                raise FitError(f"--dim {dim}: the model does not run, or changes more than its sizes, at any other "
                               f"value of {dim} than {value} ({why})")
            fixed[dim] = why
    # every dim changed at once, each to another value than its own run's: once to a multiple (3v, which
    # keeps divisibility), once off it (v + 1: a floor division shows) when the model runs there
    for pick in (lambda v, used: 3 * v, lambda v, used: v + 1 if v + 1 != used else v + 2):
        if not varied:
            break
        trial = {**dims, **{d: pick(dims[d], used) for d, used in varied.items()}}
        if any(s.dims == trial for s in samples):
            continue
        progress(f"tracing {target.name} at {_text(trial)}")
        try:
            run = record(target.build(trial), output_field)
            same_structure(base.layers, run.layers)
        except Exception:  # noqa: BLE001 - a combination the model refuses: the other runs stand
            continue
        samples.append(Sample(trial))
        results.append(run.layers)
        shapes.append(run.input_shape)
    free = {d: v for d, v in dims.items() if d not in fixed}
    symbols = symbols_of(free)
    samples = [Sample({d: s.dims[d] for d in free}) for s in samples]
    layers = align(results, samples, symbols, "")
    trim(layers)
    input_shape = align(shapes, samples, symbols, "input")
    return Fitted(base, layers, input_shape, dims, axes, fixed, samples, time.monotonic() - started)


def _users(step, what: str):
    """`step()`, with an error of the user's code (or of the model on meta) as a UsageError naming it."""
    try:
        return step()
    except CostspecError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: any error is bad input here, not a costspec bug
        raise UsageError(f"{what} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") \
            from None


def symbols_of(dims: dict[str, int]):
    import sympy

    return {d: sympy.Symbol(d, integer=True, positive=True) for d in dims}


def _text(dims: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in dims.items())


__all__ = ["Fitted", "Run", "Seq", "record", "runs"]
