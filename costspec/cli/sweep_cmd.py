"""`costspec sweep`: costs over a grid of dims, vectorised; with --gpu, roofline time and bound per point."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("sweep")
@options.spec_arg
@click.option("--vary", "varies", multiple=True, required=True, metavar="NAME=VALUES",
              help="A dim and its values: B=1..1024:x2, B=1..8, B=1..9:+2 or img=224,384 (repeatable).")
@options.sets
@options.pass_
@options.dtype
@options.gpu(required=False)
@options.fusion
@options.efficiency
@options.output_format("csv", "json", "table", default="csv")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, metavar="OUT.png|svg",
              help="Also draw total FLOPs (estimated time with --gpu) against the first swept dim, one line per "
                   "value of the second (matplotlib).")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write here (default stdout).")
@options.lengths
@options.lengths_file
@options.seq_dim
def sweep_command(spec, varies, sets, pass_, dtype, gpu, catalog, fusion, efficiency, fmt, plot, quiet, output,
                  lengths, lengths_file, seq_dim):
    """Evaluate SPEC over the cartesian product of --vary values (exact integers; CSV by default)."""
    from costspec.analysis.backend_note import flash_backward_note
    from costspec.analysis.sweep import parse_vary, sweep, to_csv
    from costspec.core.render import render
    from costspec.core.safeio import check_not_input
    from costspec.export.sweep_result import sweep_result, with_times
    from costspec.model import load

    if output:
        check_not_input(output, [spec])  # before any work: the spec would be lost
    model = load(spec, dtype)
    ragged_lengths = options.ragged_lengths(lengths, lengths_file)
    if ragged_lengths is not None:
        from costspec.analysis.ragged import ragged_sweep_csv

        options.require(fmt == "csv" and not gpu and not plot, "--lengths sweeps print CSV totals (padded vs "
                        "packed per grid point): drop --gpu, --plot and --format")
        size, text = ragged_sweep_csv(model, [parse_vary(v) for v in varies], ragged_lengths, pass_, sets, seq_dim)
        _write(text, output, size, spec)
        return
    if fmt == "csv" and not gpu and not plot:  # plain costs: streamed in chunks, memory does not grow with the grid
        _stream(model, [parse_vary(v) for v in varies], output, spec, pass_, sets)
        return
    grid, values = sweep(model, [parse_vary(v) for v in varies], pass_, sets)
    times, notes = None, []
    if note := flash_backward_note(model, pass_):
        notes.append(note)  # in table / json output; CSV stays plain rows
    if gpu:
        from costspec.analysis.gpus import get_gpu
        from costspec.analysis.sweep_time import grid_times

        device = get_gpu(gpu, catalog)
        times = grid_times(model, grid, pass_, device, sets, fusion, efficiency, quiet)
        notes.append(f"roofline on {device.name}: time = sum over kernels of max(TC FLOPs / TC peak, CUDA FLOPs / "
                     f"CUDA peak, bytes / {device.memory_bw_gbps:g} GB/s); fusion: {fusion}; bound: the engine with "
                     "most of the time ('*': the kernels' bounds differ)")
    columns = with_times(values, times)
    if fmt == "csv":
        text = to_csv(grid, columns)
    else:
        meta = {"spec": model.name, "pass": pass_, "precision": model.precision.label, "fixed": dict(sets),
                "varied": list(grid.names), "gpu": gpu}
        text = render(sweep_result(grid, columns, meta, notes), fmt)
    if plot:
        from costspec.export.sweep_plot import plot_sweep

        key = "time_s" if times is not None else "total_flops"
        title = f"{model.name} | {pass_} | {model.precision}" + (f" | {gpu}" if gpu else "")
        plot_sweep(grid, columns, key, plot, title)
        click.echo(f"wrote {plot}", err=True)
    _write(text, output, grid.size, spec)


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
