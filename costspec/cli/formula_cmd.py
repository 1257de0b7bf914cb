"""`costspec formula`: closed-form Tensor-Core / CUDA-core FLOPs and parameters in the spec's symbols."""
from __future__ import annotations

import click

from costspec.cli import cli, options
from costspec.cli.options import ClosedForm, Serving


@cli.command("formula")
@options.spec_arg
@options.closed_form
@options.dtype
@options.output_format("text", "json", default="text")
@options.serving
def formula_command(spec: str, form: ClosedForm, dtype: str | None, fmt: str, serving: Serving):
    """Print SPEC's costs as canonical polynomials in the kept symbols (totals; every layer with --per-layer)."""
    from costspec.analysis.backend_note import flash_backward_note
    from costspec.analysis.formula import formulas
    from costspec.core.dims import CLI_WORDS
    from costspec.export.formulas import RENDERERS

    options.require(serving.phase is None or form.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {form.pass_})")
    model = serving.load(spec, dtype)
    result = formulas(model, form.pass_, form.keep, form.expand, form.substituted(),
                      depth=None if form.per_layer else 0, words=CLI_WORDS)
    click.echo(RENDERERS[fmt](result))
    if fmt == "text" and (note := flash_backward_note(model, form.pass_)):
        click.echo(note)
