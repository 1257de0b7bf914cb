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
@options.lengths
@options.lengths_file
@options.seq_dim
def sweep_command(spec, varies, sets, pass_, output, lengths, lengths_file, seq_dim):
    """Evaluate SPEC over the cartesian product of --vary values (exact integers, CSV)."""
    from ..model import load
    from ..sweep import parse_vary, sweep, to_csv

    model = load(spec)
    ragged_lengths = options.ragged_lengths(lengths, lengths_file)
    if ragged_lengths is not None:
        from ..ragged import ragged_sweep_csv

        size, text = ragged_sweep_csv(model, [parse_vary(v) for v in varies], ragged_lengths, pass_, sets, seq_dim)
    else:
        grid, values = sweep(model, [parse_vary(v) for v in varies], pass_, sets)
        size, text = grid.size, to_csv(grid, values)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        click.echo(f"wrote {size} rows to {output}", err=True)
    else:
        click.echo(text)
