"""`costspec roofline`: the roofline plot of a spec on a named GPU."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("roofline")
@options.spec_arg
@options.gpu(required=True)
@options.batch
@options.sets
@options.pass_
@options.fusion
@options.efficiency
@click.option("--depth", type=click.IntRange(min=1), default=3, show_default=True, help="Tree levels to plot.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="roofline.png or .svg")
@click.option("--format", "fmt", type=click.Choice(["none", "table", "json", "csv", "markdown"]), default="none",
              show_default=True, help="Also print the plotted rows (bytes, intensity, bound, time) in this format.")
def roofline_command(spec, gpu, catalog, batch, sets, pass_, fusion, efficiency, depth, output, fmt):
    """Draw SPEC's layers on the roofline of GPU (both compute roofs and the memory roof)."""
    from costspec.analysis.gpus import get_gpu
    from costspec.analysis.roofline import estimate
    from costspec.core.safeio import check_not_input
    from costspec.export.roofline_plot import plot_roofline
    from costspec.model import load

    check_not_input(output, [spec, catalog])  # before any work: an input would be lost
    model = load(spec)
    values = model.bind(batch, sets)
    report = model.report(pass_, values)
    roof = estimate(model, report, values, get_gpu(gpu, catalog), fusion, efficiency)
    plot_roofline(report, roof, model.precision.dtype, output, depth, [spec, catalog])
    click.echo(f"wrote {output}: {len(report.rows)} layers, estimated {roof.time_s * 1e3:.4g} ms", err=True)
    if fmt != "none":
        from costspec.core.render import render
        from costspec.export.report import eval_result

        click.echo(render(eval_result(report, depth, roof), fmt))
