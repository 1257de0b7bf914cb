"""`costspec import hf CONFIG.json|DIR`: a readable spec from a Hugging Face config."""
from __future__ import annotations

import json

import click

from costspec.cli import cli, options
from costspec.core.conventions import DTYPES


@cli.group("import")
def import_group() -> None:
    """Write a spec from an existing model's configuration."""


@import_group.command("hf")
@click.argument("source", type=options.InputFile("Hugging Face config", dir_okay=True))
@click.option("-o", "--output", type=options.OutputFile(), default=None,
              help="Spec file to write (default: print the spec).")
@click.option("--dtype", type=click.Choice(list(DTYPES)), default=None,
              help="The spec's precision (default: the config's torch_dtype; float32 when it names none).")
@options.output_format("yaml", "json", default="yaml")
def import_hf_command(source, output, dtype, fmt):
    """Write a spec from SOURCE (a Hugging Face config.json or a folder holding it), read offline (docs/import.md)."""
    from costspec.core.errors import CostspecError
    from costspec.core.text import for_terminal
    from costspec.importer import check_command, import_hf, write_import
    from costspec.model import loads

    imported = import_hf(source, dtype, output)
    try:  # built before anything is written: a spec that does not load is a bug in its importer
        loads(imported.text, output or "<imported spec>")
    except CostspecError as exc:
        raise RuntimeError(f"the {imported.family.hf_class} importer wrote a spec that does not load: {exc}") from None
    if output:
        write_import(imported, output)
    check = check_command(imported.family, output or "SPEC.yaml", imported.config_path, imported.output)
    if fmt == "json":
        click.echo(json.dumps({"written": output, "family": imported.family.model_types[0],
                               "hf_class": imported.family.hf_class, "check": check,
                               **({} if output else {"spec": imported.text})}, indent=2))
    elif output:
        click.echo(for_terminal(f"wrote {output}; check it with: {check}"), err=True)
    else:
        click.echo(imported.text, nl=False)
