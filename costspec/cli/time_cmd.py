"""`costspec time`: measured per-layer time on CUDA vs the roofline estimate."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("time")
@options.spec_arg
@options.batch
@options.sets
@options.validate_pass
@click.option("--dtype", type=click.Choice(["fp32", "tf32", "fp16", "bf16"]), default=None,
              help="Run in this dtype (default: the spec's precision).")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True)
@options.gpu(required=False)
@options.output_format()
@options.quiet
def time_command(spec, batch, sets, pass_, dtype, warmup, repeats, gpu, catalog, fmt, quiet):
    """Time every layer of SPEC's torch module on CUDA (median of repeats); with --gpu, vs the roofline."""
    from costspec.core.render import render
    from costspec.model import load
    from costspec.ncu.run import detect_gpu
    from costspec.runtime.timing import add_estimate, time_layers, to_result

    model = load(spec)
    values = model.bind(batch, sets)
    detect_gpu()  # no CUDA GPU: says so, exit 2
    from costspec.core.progress import status

    with status(f"time: {model.name} ({pass_}, {warmup} warmup + {repeats} timed steps)", quiet):
        timing = time_layers(model, values, pass_, dtype, warmup, repeats)
    if gpu:
        from costspec.analysis.gpus import get_gpu
        from costspec.analysis.roofline import estimate

        timing = add_estimate(timing, estimate(model, model.report(pass_, values), values, get_gpu(gpu, catalog)))
    click.echo(render(to_result(timing), fmt))
