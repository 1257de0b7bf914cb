"""`costspec eval`: per-layer Tensor-Core / CUDA-core FLOPs and parameters (and a roofline estimate)."""
from __future__ import annotations

import click

from . import cli, options


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
@options.output_format("table", "json", "csv", "markdown")
def eval_command(spec, batch, sets, pass_, depth, dtype, gpu, catalog, fusion, efficiency, calibration, fmt):
    """Evaluate SPEC's costs at concrete dims, per layer; with --gpu, bytes and time too."""
    from ..export.report import RENDERERS
    from ..model import load

    from ..backend_note import flash_backward_note

    model = load(spec, dtype)
    values = model.bind(batch, sets)
    report = model.report(pass_, values)
    if note := flash_backward_note(model, pass_):
        report.notes.append(note)
    roof = None
    if gpu:
        from ..gpus import get_gpu
        from ..roofline import estimate

        roof = estimate(model, report, values, get_gpu(gpu, catalog), fusion, efficiency)
    text = RENDERERS[fmt](report, depth, roof)
    if calibration:
        from ..calibration import executed_report, load_calibration, with_executed

        text = with_executed(fmt, text, executed_report(model, values, pass_, load_calibration(calibration)), depth)
    click.echo(text)
