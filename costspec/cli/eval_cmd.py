"""`costspec eval`: per-layer Tensor-Core / CUDA-core FLOPs and parameters (and a roofline estimate)."""
from __future__ import annotations

from dataclasses import dataclass

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings, Hardware, PassPrecision, Ragged


@dataclass(frozen=True)
class EvalView:
    """What eval shows besides the per-layer costs, and how: --depth, --calibration (predicted executed
    FLOPs), --format, --alignment (misaligned GEMMs) and --ladder (one row per precision instead)."""

    depth: int | None
    calibration: str | None
    fmt: str
    alignment: str
    ladder: bool


calibration = click.option("--calibration", type=options.InputFile("calibration"), default=None,
                           help="A calibration file from `costspec ncu calibrate`: adds predicted EXECUTED FLOPs "
                                "per layer.")
alignment = click.option("--alignment", type=click.Choice(["warn", "strict"]), default="warn", show_default=True,
                         help="Misaligned GEMMs (Tensor-Core rules): warn lists them; strict also charges them to "
                              "CUDA cores on GPUs that fall back (compute capability < 8.0; needs --gpu).")
ladder = click.option("--ladder", is_flag=True,
                      help="With --gpu: one row per precision the GPU runs (bytes, intensity, bound, time, speed-up "
                           "vs fp32 and bf16).")
view_options = options.option_group("view", EvalView, options.depth, calibration, options.output_format(), alignment,
                                 ladder)


@cli.command("eval")
@options.spec_arg
@options.bindings
@options.pass_precision
@options.hardware(required=False)
@view_options
@options.ragged
def eval_command(spec: str, dims: Bindings, run: PassPrecision, hardware: Hardware, view: EvalView, ragged: Ragged):
    """Evaluate SPEC's costs at concrete dims, per layer; with --gpu, bytes and time too."""
    from costspec.core.render import render
    from costspec.model import load

    model = load(spec, run.dtype)
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
    from costspec.export.report import eval_result

    values = dims.bind(model)
    report = model.report(run.pass_, values)
    if note := flash_backward_note(model, run.pass_):
        report.notes.append(note)
    device = hardware.device()
    report, _, aligned = apply(model, report, values, view.alignment, device.compute_capability if device else None)
    roof = None
    if device:
        from costspec.analysis.roofline import estimate

        roof = estimate(model, report, values, device, hardware.fusion, hardware.efficiency)
    result = eval_result(report, view.depth, roof)
    if aligned:
        result.sections["Tensor-Core alignment (misaligned GEMM leading dims)"] = aligned
        result.meta["tensor_core_alignment"] = aligned
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
