"""`costspec latex`: the closed forms as a LaTeX `align` with a symbol table."""
from __future__ import annotations

import click

from . import cli, options


@cli.command("latex")
@options.closed_forms
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), help="Write to FILE, not stdout.")
@click.option("--standalone", is_flag=True, help="A complete document that pdflatex compiles.")
def latex_command(spec, keep, sets, pass_, per_layer, expand, output, standalone):
    """LaTeX formulas of SPEC: one row per top-level layer (every level with --per-layer), subtotals, total."""
    from ..export.latex import render_latex
    from ..formula import formulas
    from ..model import load
    from ..safeio import check_not_input, write_text

    if output:
        check_not_input(output, [spec])  # before any work: the spec would be lost
    text = render_latex(formulas(load(spec), pass_, keep, expand, sets, depth=None if per_layer else 1), standalone)
    if output:
        write_text(output, text, [spec])
    else:
        click.echo(text, nl=False)
