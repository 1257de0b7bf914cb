"""`costspec eval`: per-layer Tensor-Core / CUDA-core FLOPs and parameters (and a roofline estimate).

A plain eval (no --gpu, --ladder, --lengths, --calibration or --alignment strict) is answered from the
compiled-spec cache when it holds the spec (`costspec.cli.eval_fast`): no sympy, no jsonschema. The
first such run builds the model and stores its compiled form. --no-cache builds the model and evaluates
it symbolically (`build_report`, the reference every compiled number is checked against).
"""
from __future__ import annotations

from dataclasses import dataclass

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings, Hardware, PassPrecision, Ragged, Serving


@dataclass(frozen=True)
class EvalView:
    """What eval shows besides the per-layer costs, and how: --depth, --calibration (predicted executed
    FLOPs), --format, --alignment (misaligned GEMMs) and --ladder (one row per precision instead); and
    --no-cache (build the model and evaluate it symbolically; neither read nor write the compiled-spec cache)."""

    depth: int | None
    calibration: str | None
    fmt: str
    alignment: str
    ladder: bool
    no_cache: bool = False


calibration = click.option("--calibration", type=options.InputFile("calibration"), default=None,
                           help="A calibration file from `costspec ncu calibrate`: adds predicted EXECUTED FLOPs "
                                "per layer.")
alignment = click.option("--alignment", type=click.Choice(["warn", "strict"]), default="warn", show_default=True,
                         help="Misaligned GEMMs (Tensor-Core rules): warn lists them; strict also charges them to "
                              "CUDA cores on GPUs that fall back (compute capability < 8.0; needs --gpu).")
ladder = click.option("--ladder", is_flag=True,
                      help="With --gpu: one row per precision the GPU runs (bytes, intensity, bound, time, speed-up "
                           "vs fp32 and bf16).")
no_cache = click.option("--no-cache", is_flag=True,
                        help="Build the model from the spec and evaluate it symbolically: neither read nor write "
                             "the compiled-spec cache (COSTSPEC_CACHE_DIR; COSTSPEC_NO_CACHE=1 turns it off).")
view_options = options.option_group("view", EvalView, options.depth, calibration, options.output_format(), alignment,
                                    ladder, no_cache)


@cli.command("eval")
@options.spec_arg
@options.bindings
@options.pass_precision
@options.hardware(required=False)
@view_options
@options.ragged
@options.serving
def eval_command(spec: str, dims: Bindings, run: PassPrecision, hardware: Hardware, view: EvalView, ragged: Ragged,
                 serving: Serving):
    """Evaluate SPEC's costs at concrete dims, per layer; with --gpu, bytes and time too. With --phase decode,
    the cost of one generated token per sequence after --context cached ones.

    The first plain evaluation of a spec (any --batch, --set, --pass, --dtype, --depth, --format; not --gpu,
    --ladder, --lengths, --lengths-file, --calibration, --alignment strict, --phase, --context, --backend or
    --checkpoint, which always build the model) stores the spec compiled to exact integer programs in the cache folder
    (COSTSPEC_CACHE_DIR, else $XDG_CACHE_HOME/costspec or ~/.cache/costspec; ~/Library/Caches/costspec on
    macOS), keyed by the spec's bytes and path, the dtype, the pass and the installed costspec. Later runs
    read it instead of building the model: the same output, in a fraction of the time. A damaged or stale
    entry is rebuilt. --no-cache (or COSTSPEC_NO_CACHE=1) builds the model and evaluates it symbolically."""
    from costspec.cli import eval_fast
    from costspec.core.render import render

    options.require(serving.phase is None or run.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {run.pass_})")
    plain = not (serving.rewrites or hardware.gpu or view.calibration or view.ladder or view.alignment != "warn"
                 or view.no_cache or ragged.lengths is not None or ragged.lengths_file is not None)
    key = eval_fast.entry_key(spec, run) if plain else None
    if key is not None and (result := eval_fast.cached_result(key, dims, run, view.depth)) is not None:
        click.echo(render(result, view.fmt))
        return
    model = serving.load(spec, run.dtype)
    if key is not None:
        eval_fast.remember(key, model, dims, run)
    lengths = ragged.read()
    if lengths is not None or view.ladder:
        result = _variant(model, dims, run, hardware, view, lengths, ragged.seq_dim)
    else:
        result = _costs(model, dims, run, hardware, view)
    click.echo(render(result, view.fmt))


def _costs(model, dims: Bindings, run: PassPrecision, hardware: Hardware, view: EvalView):
    """The per-layer costs, with the roofline (--gpu), misaligned GEMMs and predicted executed FLOPs."""
    from costspec.analysis.alignment import apply
    from costspec.analysis.backend_note import flash_backward_note
    from costspec.cli.eval_fast import shown

    values = dims.bind(model)
    if view.no_cache:  # the reference: the symbolic evaluation, no compiled form in between
        from costspec.analysis.evaluation import build_report

        report = build_report(model, run.pass_, values)
    else:
        report = model.report(run.pass_, values)
    if note := flash_backward_note(model, run.pass_):
        report.notes.append(note)
    device = hardware.device()
    report, _, aligned = apply(model, report, values, view.alignment, device.compute_capability if device else None)
    roof = None
    if device:
        from costspec.analysis.roofline import estimate

        roof = estimate(model, report, values, device, hardware.fusion, hardware.efficiency)
    result = shown(report, aligned, view.depth, roof)
    if model.phase is not None:
        from costspec.model import serving_note

        if note := serving_note(model, int(model.in_shape[0].xreplace(values)), roof.time_s if roof else None):
            result.notes.insert(0, note)
            result.meta["serving"] = {"phase": str(model.phase), "context_dim": model.context_dim}
    if view.calibration:
        from costspec.analysis.calibration import add_executed, executed_report, load_calibration

        add_executed(result, executed_report(model, values, run.pass_, load_calibration(view.calibration)),
                     view.depth)
    return result


def _variant(model, dims: Bindings, run: PassPrecision, hardware: Hardware, view: EvalView,
             lengths: list[int] | None, seq_dim: str):
    """The --lengths (padded vs packed) or --ladder (one row per precision) result."""
    options.require(not (view.ladder and lengths is not None), "--ladder and --lengths are separate views: give one")
    if view.ladder:
        from costspec.analysis.ladder import ladder as precision_ladder

        options.require(bool(hardware.gpu),
                        "--ladder needs --gpu NAME (the peaks and bandwidth it prices each precision with)")
        values = dims.bind(model)
        device = hardware.device()
        assert device is not None
        return precision_ladder(model, values, device, run.pass_, hardware.fusion, hardware.efficiency)
    from costspec.analysis.ragged import ragged

    assert lengths is not None
    options.require(dims.batch is None, "--lengths sets the batch (one sequence per length): drop --batch")
    return ragged(model, lengths, run.pass_, dims.sets, seq_dim, "B", fusion=hardware.fusion, depth=view.depth)
