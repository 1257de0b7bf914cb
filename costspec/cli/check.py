"""`costspec check`: schema and semantic checks, without evaluating costs."""
from __future__ import annotations

import click

from ..errors import CostspecError
from . import cli


@cli.command("check")
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
def check_command(specs):
    """Check each SPEC (schema, dims, shapes, divisibility); one line per problem, exit 2 if any."""
    from ..check import check_file

    failed = 0
    for path in specs:
        problems = check_file(path)
        for problem in problems:
            click.echo(f"{problem}", err=False)
        if problems:
            failed += 1
        else:
            click.echo(f"{path}: ok")
    if failed:
        raise CostspecError(f"{failed} of {len(specs)} spec(s) failed the checks")
