"""`costspec formula`: closed-form Tensor-Core / CUDA-core FLOPs and parameters in the spec's symbols."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("formula")
@options.closed_forms
@options.dtype
@options.output_format("text", "json", default="text")
def formula_command(spec, keep, sets, pass_, per_layer, expand, dtype, fmt):
    """Print SPEC's costs as canonical polynomials in the kept symbols (totals; every layer with --per-layer)."""
    from costspec.analysis.backend_note import flash_backward_note
    from costspec.analysis.formula import formulas
    from costspec.export.formulas import RENDERERS
    from costspec.model import load

    model = load(spec, dtype)
    result = formulas(model, pass_, keep, expand, sets, depth=None if per_layer else 0)
    click.echo(RENDERERS[fmt](result))
    if fmt == "text" and (note := flash_backward_note(model, pass_)):
        click.echo(note)
