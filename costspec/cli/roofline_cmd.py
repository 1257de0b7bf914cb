"""`costspec roofline`: the roofline plot of a spec on a named GPU."""
from __future__ import annotations

from dataclasses import dataclass

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings, Hardware, PassPrecision, Serving


@dataclass(frozen=True)
class Plot:
    """The plot: the tree levels drawn (--depth), its file (-o), and the rows also printed (--format)."""

    depth: int
    output: str
    fmt: str


plot_options = options.option_group(
    "plot", Plot,
    click.option("--depth", type=click.IntRange(min=1), default=3, show_default=True, help="Tree levels to plot."),
    click.option("-o", "--output", required=True, type=options.OutputFile(), help="roofline.png or .svg"),
    click.option("--format", "fmt", type=click.Choice(["none", "table", "json", "csv", "markdown"]), default="none",
                 show_default=True, help="Also print the plotted rows (bytes, intensity, bound, time) in this format."))


@cli.command("roofline")
@options.spec_arg
@options.bindings
@options.pass_only
@options.hardware(required=True)
@plot_options
@options.serving
def roofline_command(spec: str, dims: Bindings, run: PassPrecision, hardware: Hardware, plot: Plot, serving: Serving):
    """Draw SPEC's layers on the roofline of GPU (both compute roofs and the memory roof); with --phase decode,
    one generated token per sequence after --context cached ones."""
    from costspec.analysis.roofline import estimate
    from costspec.core.safeio import check_not_input
    from costspec.export.roofline_plot import plot_roofline

    options.require(serving.phase is None or run.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {run.pass_})")
    check_not_input(plot.output, [spec, hardware.catalog])  # before any work: an input would be lost
    model = serving.load(spec)
    values = dims.bind(model)
    report = model.report(run.pass_, values)
    device = hardware.device()
    assert device is not None  # --gpu is required
    roof = estimate(model, report, values, device, hardware.fusion, hardware.efficiency)
    plot_roofline(report, roof, model.precision.dtype, plot.output, plot.depth, [spec, hardware.catalog])
    click.echo(f"wrote {plot.output}: {len(report.rows)} layers, estimated {roof.time_s * 1e3:.4g} ms", err=True)
    if model.phase is not None:
        from costspec.model import serving_note

        if note := serving_note(model, int(model.in_shape[0].xreplace(values)), roof.time_s):
            click.echo(note, err=True)
    if plot.fmt != "none":
        from costspec.core.render import render
        from costspec.export.report import eval_result

        click.echo(render(eval_result(report, plot.depth, roof), plot.fmt))
