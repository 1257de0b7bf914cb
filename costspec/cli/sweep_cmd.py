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
    """Evaluate SPEC over the cartesian product of --vary values (exact integers, CSV, streamed).

    Every number equals what `costspec eval` prints at that point: floor, ceil and % are integer
    arithmetic, values beyond 64 bits are Python integers. Every point is checked first, the way
    `eval` checks one binding (constraints, derived dims, every layer's sizes, divisions by zero);
    an invalid point is an error naming it and nothing is printed. The grid (at most 20,000,000
    points) is evaluated and written in chunks of 65,536 points: memory does not grow with it.
    """
    import sys

    from ..model import load
    from ..sweep import parse_vary, write_csv

    model = load(spec)
    grid = [parse_vary(v) for v in varies]
    if output:
        with open(output, "w", encoding="utf-8") as f:
            rows = write_csv(model, grid, f, pass_, sets)
        click.echo(f"wrote {rows} rows to {output}", err=True)
    else:
        write_csv(model, grid, sys.stdout, pass_, sets)
