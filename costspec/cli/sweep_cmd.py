"""`costspec sweep`: costs over a grid of dims, vectorised."""
from __future__ import annotations

import click

from . import cli, options


@cli.command("sweep")
@options.spec_arg
@click.option("--vary", "varies", multiple=True, required=True, metavar="NAME=VALUES",
              help="A dim and its values: B=1..1024:x2, B=1..8, B=1..9:+2 or img=224,384 (repeatable).")
@options.sets
@options.pass_
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write CSV here (default stdout).")
def sweep_command(spec, varies, sets, pass_, output):
    """Evaluate SPEC over the cartesian product of --vary values (exact integers, CSV)."""
    from ..model import load
    from ..safeio import check_not_input, write_text
    from ..sweep import parse_vary, sweep, to_csv

    if output:
        check_not_input(output, [spec])  # before any work: the spec would be lost
    model = load(spec)
    grid, values = sweep(model, [parse_vary(v) for v in varies], pass_, sets)
    text = to_csv(grid, values)
    if output:
        write_text(output, text + "\n", [spec])
        click.echo(f"wrote {grid.size} rows to {output}", err=True)
    else:
        click.echo(text)
