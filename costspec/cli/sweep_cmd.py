"""`costspec sweep`: costs over a grid of dims, vectorised; with --gpu, roofline time and bound per point."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import click

from costspec.cli import cli, options
from costspec.cli.options import Hardware, PassPrecision, Ragged, Serving


@dataclass(frozen=True)
class Grid:
    """The swept dims (--vary NAME=VALUES, repeatable) and the fixed ones (--set)."""

    varies: tuple[str, ...]
    sets: Mapping[str, int]

    def axes(self) -> list:
        from costspec.analysis.sweep import parse_vary

        return [parse_vary(v) for v in self.varies]


@dataclass(frozen=True)
class SweepOutput:
    """--format, --plot, --quiet and -o (default stdout)."""

    fmt: str
    plot: str | None
    quiet: bool
    output: str | None


vary = click.option("--vary", "varies", multiple=True, required=True, metavar="NAME=VALUES",
                    help="A dim and its values: B=1..1024:x2, B=1..8, B=1..9:+2 or img=224,384 (repeatable).")
grid_options = options.option_group("grid", Grid, vary, options.sets)
output_options = options.option_group(
    "out", SweepOutput, options.output_format("csv", "json", "table", default="csv"),
    click.option("--plot", type=options.OutputFile(), default=None, metavar="OUT.png|svg",
                 help="Also draw total FLOPs (estimated time with --gpu) against the first swept dim, one line per "
                      "value of the second (matplotlib)."),
    click.option("--quiet", "-q", is_flag=True, help="No progress on stderr."),
    click.option("-o", "--output", type=options.OutputFile(), default=None, help="Write here (default stdout)."))


@cli.command("sweep")
@options.spec_arg
@grid_options
@options.pass_precision
@options.hardware(required=False)
@output_options
@options.ragged
@options.serving
def sweep_command(spec: str, grid: Grid, run: PassPrecision, hardware: Hardware, out: SweepOutput, ragged: Ragged,
                  serving: Serving):
    """Evaluate SPEC over the cartesian product of --vary values (exact integers; CSV by default). Served
    (--phase decode), --vary N=... sweeps the context."""
    from costspec.core.safeio import check_not_input

    if out.output:
        check_not_input(out.output, [spec])  # before any work: the spec would be lost
    options.require(serving.phase is None or run.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {run.pass_})")
    model = serving.load(spec, run.dtype)
    lengths = ragged.read()
    if lengths is not None:
        from costspec.analysis.ragged import ragged_sweep_csv

        options.require(out.fmt == "csv" and not hardware.gpu and not out.plot, "--lengths sweeps print CSV totals "
                        "(padded vs packed per grid point): drop --gpu, --plot and --format")
        size, text = ragged_sweep_csv(model, grid.axes(), lengths, run.pass_, grid.sets, ragged.seq_dim)
        _write(text, out.output, size, spec)
        return
    if out.fmt == "csv" and not hardware.gpu and not out.plot:  # plain costs: streamed in chunks, memory does not
        _stream(model, grid.axes(), out.output, spec, run.pass_, grid.sets)  # grow with the grid
        return
    _check_memory(grid, hardware, out)
    text, rows = _evaluated(model, grid, run, hardware, out)
    _write(text, out.output, rows, spec)


def _check_memory(grid: Grid, hardware: Hardware, out: SweepOutput) -> None:
    """Refuse, before any work, a grid larger than the limit of an output that holds every point in memory."""
    from costspec.analysis.sweep import MAX_POINTS_GPU, MAX_POINTS_IN_MEMORY, check_in_memory

    if out.fmt != "csv" or out.plot:
        why = f"--format {out.fmt}" if out.fmt != "csv" else "--plot"
        check_in_memory(grid.axes(), why, MAX_POINTS_IN_MEMORY)
    elif hardware.gpu:
        check_in_memory(grid.axes(), "--gpu", MAX_POINTS_GPU)


def _evaluated(model, grid: Grid, run: PassPrecision, hardware: Hardware, out: SweepOutput) -> tuple[str, int]:
    """The whole grid evaluated at once (with times on --gpu), rendered and plotted; and its size."""
    from costspec.analysis.backend_note import flash_backward_note
    from costspec.analysis.sweep import sweep, to_csv
    from costspec.core.render import render
    from costspec.export.sweep_result import sweep_result, with_times

    points, values = sweep(model, grid.axes(), run.pass_, grid.sets)
    times, notes = None, []
    if note := flash_backward_note(model, run.pass_):
        notes.append(note)  # in table / json output; CSV stays plain rows
    device = hardware.device()
    if device:
        from costspec.analysis.sweep_time import grid_times

        times = grid_times(model, points, run.pass_, device, grid.sets, hardware.fusion, hardware.efficiency,
                           out.quiet)
        notes.append(f"roofline on {device.name}: time = sum over kernels of max(TC FLOPs / TC peak, CUDA FLOPs / "
                     f"CUDA peak, bytes / {device.memory_bw_gbps:g} GB/s); fusion: {hardware.fusion}; bound: the "
                     "engine with most of the time ('*': the kernels' bounds differ)")
    columns = with_times(values, times)
    if out.fmt == "csv":
        text = to_csv(points, columns)
    else:
        meta = {"spec": model.name, "pass": run.pass_, "precision": model.precision.label, "fixed": dict(grid.sets),
                "varied": list(points.names), "gpu": hardware.gpu}
        text = render(sweep_result(points, columns, meta, notes), out.fmt)
    if out.plot:
        from costspec.export.sweep_plot import plot_sweep

        key = "time_s" if times is not None else "total_flops"
        title = f"{model.name} | {run.pass_} | {model.precision}" + (f" | {hardware.gpu}" if hardware.gpu else "")
        plot_sweep(points, columns, key, out.plot, title)
        click.echo(f"wrote {out.plot}", err=True)
    return text, points.size


def _stream(model, varies, output: str | None, spec: str, pass_: str, sets) -> None:
    """The CSV of the grid, evaluated and written in chunks (`costspec.analysis.sweep.write_csv`); to -o atomically."""
    import sys

    from costspec.analysis.sweep import write_csv
    from costspec.core.safeio import atomic_output

    if output:
        with atomic_output(output, [spec]) as f:
            rows = write_csv(model, varies, f, pass_, sets)
        click.echo(f"wrote {rows} rows to {output}", err=True)
    else:
        write_csv(model, varies, sys.stdout, pass_, sets)


def _write(text: str, output: str | None, rows: int, spec: str) -> None:
    from costspec.core.safeio import write_text

    if output:
        write_text(output, text + "\n", [spec])
        click.echo(f"wrote {rows} rows to {output}", err=True)
    else:
        click.echo(text)
