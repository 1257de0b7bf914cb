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
@options.output_format()
def eval_command(spec, batch, sets, pass_, depth, dtype, gpu, catalog, fusion, efficiency, calibration, fmt):
    """Evaluate SPEC's costs at concrete dims, per layer; with --gpu, bytes and time too."""
    from ..export.render import render
    from ..export.report import eval_result
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
    result = eval_result(report, depth, roof)
    if calibration:
        from ..calibration import add_executed, executed_report, load_calibration

        add_executed(result, executed_report(model, values, pass_, load_calibration(calibration)), depth)
    click.echo(render(result, fmt))
