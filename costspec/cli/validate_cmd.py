"""`costspec validate`: analytic costs vs FlopCounterMode and the aten ops of the spec's torch module."""
from __future__ import annotations

import click

from . import cli, options


@cli.command("validate")
@options.spec_arg
@options.batch
@options.sets
@options.validate_pass
@options.device
@options.rtol
@options.output_format()
@options.quiet
def validate_command(spec, batch, sets, pass_, device, rtol, fmt, quiet):
    """Build SPEC's torch module, count it, and compare per layer with the spec's formulas (this checks
    the engine against itself; exit 1 on any mismatch)."""
    from ..export.render import render
    from ..model import load
    from ..progress import status
    from ..validate import check, to_result, validate

    model = load(spec)
    values = model.bind(batch, sets)
    with status(f"validate: building and counting {model.name} ({pass_}, {device})", quiet):
        result = validate(model, values, pass_, device, rtol)
    click.echo(render(to_result(result), fmt))
    check(result)
