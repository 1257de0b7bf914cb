"""`costspec zoo`: the specs shipped with costspec, usable by name (`costspec eval vit_b`)."""
from __future__ import annotations

import textwrap

import click

from . import cli, options


@cli.command("zoo")
@options.output_format("table", "json", "csv", "markdown")
def zoo_command(fmt):
    """List the zoo's specs with their doc lines; pass a key (e.g. vit_b) wherever a SPEC path goes."""
    from ..export.render import plain, render
    from ..results import Column, Result, Row, table_of
    from ..zoo import zoo_dir, zoo_specs

    specs = zoo_specs()
    if fmt == "table":  # long doc lines read better wrapped under their key than in a right-aligned column
        width = max(len(z.key) for z in specs)
        lines = [f"{len(specs)} specs in the zoo ({zoo_dir()}); pass a key where a SPEC path goes, "
                 "e.g. `costspec eval vit_b --batch 8`", ""]
        for z in specs:
            lines.append(f"{z.key:<{width}}  {plain(z.name)}")
            lines += textwrap.wrap(plain(z.doc), 100, initial_indent=" " * (width + 4),
                                   subsequent_indent=" " * (width + 4))
        click.echo("\n".join(lines))
        return
    rows = [Row(z.key, z.key, 0, {"spec_name": z.name, "doc": z.doc}) for z in specs]
    table = table_of(rows, [Column("spec_name", "spec name", "text"), Column("doc", "doc", "text")])
    result = Result("costspec zoo", [table], meta={"zoo_dir": str(zoo_dir())})
    click.echo(render(result, fmt))
