"""`costspec latex`: the closed forms as a LaTeX `align` with a symbol table."""
from __future__ import annotations

import click

from costspec.cli import cli, options
from costspec.cli.options import ClosedForm


@cli.command("latex")
@options.spec_arg
@options.closed_form
@click.option("--output", "-o", type=options.OutputFile(), help="Write to FILE, not stdout.")
@click.option("--standalone", is_flag=True, help="A complete document that pdflatex compiles.")
@click.option("--format", "fmt", type=click.Choice(["latex", "json"]), default="latex", show_default=True,
              help="latex: the align environment; json: each formula's LaTeX and sympy text (as `formula`).")
@options.backend
def latex_command(spec: str, form: ClosedForm, output: str | None, standalone: bool, fmt: str, backend: str | None):
    """LaTeX formulas of SPEC: one row per top-level layer (every level with --per-layer), subtotals, total."""
    from costspec.analysis.formula import formulas
    from costspec.core.safeio import check_not_input, write_text
    from costspec.export.latex import render_latex
    from costspec.model import load

    if output:
        check_not_input(output, [spec])  # before any work: the spec would be lost
    result = formulas(load(spec, backend=backend), form.pass_, form.keep, form.expand, form.substituted(),
                      depth=None if form.per_layer else 1)
    if fmt == "json":
        from costspec.export.formulas import render_json

        text = render_json(result) + "\n"
    else:
        text = render_latex(result, standalone)
    if output:
        write_text(output, text, [spec])
    else:
        click.echo(text, nl=False)
