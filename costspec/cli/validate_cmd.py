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
@click.option("--force", is_flag=True, help="Run on cpu even when the estimated memory exceeds what is available.")
@options.output_format("table", "json")
def validate_command(spec, batch, sets, pass_, device, rtol, force, fmt):
    """Build SPEC's torch module, count it, and compare per layer; exit 1 on any mismatch."""
    from ..model import load
    from ..validate import RENDERERS, check, validate

    model = load(spec)
    result = validate(model, model.bind(batch, sets), pass_, device, rtol, force)
    click.echo(RENDERERS[fmt](result))
    check(result)
