"""`costspec zoo`: the specs shipped with costspec, usable by name (`costspec eval vit_b`)."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("zoo")
@options.output_format()
def zoo_command(fmt):
    """List the zoo's specs with their doc lines; pass a key (e.g. vit_b) wherever a SPEC path goes."""
    from costspec.core.render import render
    from costspec.core.results import Column, Result, Row, Table
    from costspec.core.zoo import zoo_dir, zoo_specs

    specs = zoo_specs()
    rows = [Row(z.key, z.key, 0, {"spec_name": z.name, "doc": z.doc}) for z in specs]
    table = Table([Column("spec_name", "spec name", "text"), Column("doc", "doc", "text")], rows, label_title="key")
    header = (f"{len(specs)} specs in the zoo ({zoo_dir()}); pass a key where a SPEC path goes, e.g. "
              "`costspec eval vit_b --batch 8`")
    click.echo(render(Result(header, [table], meta={"zoo_dir": str(zoo_dir())}), fmt))
