"""`costspec eval`: per-layer Tensor-Core / CUDA-core FLOPs and parameters (and a roofline estimate)."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("eval")
@options.spec_arg
@options.batch
@options.sets
@options.pass_
@options.depth
@options.dtype
@options.gpu(required=False)
@options.fusion
@options.efficiency
@click.option("--calibration", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A calibration file from `costspec ncu calibrate`: adds predicted EXECUTED FLOPs per layer.")
@options.output_format()
@options.alignment
@options.lengths
@options.lengths_file
@options.seq_dim
@options.ladder
def eval_command(spec, batch, sets, pass_, depth, dtype, gpu, catalog, fusion, efficiency, calibration, fmt, alignment,
                 lengths, lengths_file, seq_dim, ladder):
    """Evaluate SPEC's costs at concrete dims, per layer; with --gpu, bytes and time too."""
    from costspec.analysis.backend_note import flash_backward_note
    from costspec.core.render import render
    from costspec.export.report import eval_result
    from costspec.model import load

    model = load(spec, dtype)
    ragged_lengths = options.ragged_lengths(lengths, lengths_file)
    if ragged_lengths is not None or ladder:
        click.echo(_variant(model, batch, sets, pass_, depth, gpu, catalog, fusion, efficiency, fmt, ragged_lengths,
                            seq_dim, ladder))
        return
    values = model.bind(batch, sets)
    report = model.report(pass_, values)
    if note := flash_backward_note(model, pass_):
        report.notes.append(note)
    roof = None
    device = None
    if gpu:
        from costspec.analysis.gpus import get_gpu

        device = get_gpu(gpu, catalog)
    from costspec.analysis.alignment import apply

    report, _, aligned = apply(model, report, values, alignment, device.compute_capability if device else None)
    if device:
        from costspec.analysis.roofline import estimate

        roof = estimate(model, report, values, device, fusion, efficiency)
    result = eval_result(report, depth, roof)
    if aligned:
        result.sections["Tensor-Core alignment (misaligned GEMM leading dims)"] = aligned
        result.meta["tensor_core_alignment"] = aligned
    if calibration:
        from costspec.analysis.calibration import add_executed, executed_report, load_calibration

        add_executed(result, executed_report(model, values, pass_, load_calibration(calibration)), depth)
    click.echo(render(result, fmt))


def _variant(model, batch, sets, pass_, depth, gpu, catalog, fusion, efficiency, fmt, ragged_lengths, seq_dim,
             ladder) -> str:
    """The --lengths (padded vs packed) or --ladder (one row per precision) result, rendered."""
    from costspec.core.render import render

    options.require(not (ladder and ragged_lengths is not None), "--ladder and --lengths are separate views: "
                    "give one")
    if ladder:
        from costspec.analysis.gpus import get_gpu
        from costspec.analysis.ladder import ladder as precision_ladder

        options.require(bool(gpu), "--ladder needs --gpu NAME (the peaks and bandwidth it prices each precision with)")
        return render(precision_ladder(model, model.bind(batch, sets), get_gpu(gpu, catalog), pass_, fusion,
                                       efficiency), fmt)
    from costspec.analysis.ragged import ragged

    options.require(batch is None, "--lengths sets the batch (one sequence per length): drop --batch")
    return render(ragged(model, ragged_lengths, pass_, sets, seq_dim, "B", fusion, depth), fmt)
