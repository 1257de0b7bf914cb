"""`costspec eval`: per-layer Tensor-Core / CUDA-core FLOPs and parameters."""
from __future__ import annotations

import click

from . import cli, options


@cli.command("eval")
@options.spec_arg
@options.batch
@options.sets
@options.pass_
@options.depth
@options.output_format("table", "json", "csv", "markdown")
def eval_command(spec, batch, sets, pass_, depth, fmt):
    """Evaluate SPEC's costs at concrete dims, per layer."""
    from ..export.report import RENDERERS
    from ..model import load

    model = load(spec)
    report = model.report(pass_, model.bind(batch, sets))
    click.echo(RENDERERS[fmt](report, depth))
