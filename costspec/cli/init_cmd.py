"""`costspec init NAME`: write a commented starter spec (editor completion via the schema line)."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("init")
@click.argument("name")
@click.option("-o", "--output", type=options.OutputFile(), default=None,
              help="File to write (default NAME.yaml).")
@click.option("--schema", default=None, metavar="PATH_OR_URL",
              help="Schema reference for the `# yaml-language-server: $schema=` line (default: the copy shipped "
                   "with costspec, relative to the new file).")
@options.output_format("table", "json")
def init_command(name, output, schema, fmt):
    """Write NAME.yaml: a small transformer spec with comments, ready for `costspec eval`; never overwrites."""
    from costspec.importer.starter import write_starter

    path = write_starter(name, output, schema)
    if fmt == "json":
        import json

        click.echo(json.dumps({"written": str(path), "next": f"costspec eval {path} --batch 8"}, indent=2))
    else:
        click.echo(f"wrote {path}; try: costspec eval {path} --batch 8", err=True)
