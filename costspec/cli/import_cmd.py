"""`costspec import hf CONFIG.json|DIR`: a readable spec from a Hugging Face config; `costspec import torch
TARGET`: a spec from the user's own model, traced on meta (costspec.trace), checked with validate --against."""
from __future__ import annotations

import json
from dataclasses import dataclass

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
@click.option("--backbone", is_flag=True,
              help="A causal LM without its LM head: the spec describes its *Model class (default: the whole LM).")
@options.import_parts
@options.output_format("yaml", "json", default="yaml")
def import_hf_command(source, output, dtype, backbone, parts: options.ImportParts, fmt):
    """Write a spec from SOURCE (a Hugging Face config.json, a model folder or a hub cache folder), read offline
    (docs/import.md)."""
    from costspec.core.errors import CostspecError
    from costspec.core.text import for_terminal
    from costspec.importer import check_command, described, import_hf, write_import
    from costspec.model import loads

    imported = import_hf(source, dtype, output, backbone, parts.tower, not parts.no_pooler)
    try:  # built before anything is written: a spec that does not load is a bug in its importer
        loads(imported.text, output or "<imported spec>")
    except CostspecError as exc:
        raise RuntimeError(f"the {imported.described} importer wrote a spec that does not load: {exc}") from None
    if output:
        write_import(imported, output)
    check = check_command(imported.family, output or "SPEC.yaml", imported.config_path, imported.output,
                          imported.described, "quantization_config" not in (imported.config.data if imported.config
                                                                             else {}), imported.hf_kwargs)
    if fmt == "json":
        click.echo(json.dumps({"written": output, **described(imported, check),
                               **({} if output else {"spec": imported.text})}, indent=2, default=str))
    elif output:
        click.echo(for_terminal(f"wrote {output}; check it with: {check}"), err=True)
    else:
        click.echo(imported.text, nl=False)


def _key_values(ctx, param, values) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


@dataclass(frozen=True)
class RealModel:
    """How `import torch` builds an hf:ModelClass target: --config, --config-set, --output-field."""

    config: str | None
    config_sets: dict[str, str]
    output_field: str | None


@dataclass(frozen=True)
class SpecWriting:
    """What `import torch` writes: --dtype, --allow-unmapped, --no-check."""

    dtype: str | None
    allow_unmapped: bool
    no_check: bool


@import_group.command("torch")
@click.argument("target", metavar="TARGET")
@click.option("--dim", "dims", multiple=True, metavar="NAME=INPUT:AXIS",
              help="Name an input axis as a dim (repeatable; S=input_ids:1, img=x:2,3). Axis 0 of every input is B.")
@click.option("-o", "--output", type=options.OutputFile(), default=None,
              help="Spec file to write (default: print the spec).")
@options.option_group(
    "real", RealModel,
    click.option("--config", type=options.InputFile("Hugging Face config"), default=None,
                 help="With hf:ModelClass: a Hugging Face config.json (default: the class's default config)."),
    click.option("--config-set", "config_sets", multiple=True, callback=_key_values, metavar="KEY=VALUE",
                 help="With hf:ModelClass: set a config key or a constructor argument (repeatable)."),
    click.option("--output-field", default=None, metavar="NAME",
                 help="The model output the spec ends at (pooler_output; a tuple index); default: its first tensor."))
@options.option_group(
    "writing", SpecWriting,
    click.option("--dtype", type=click.Choice(list(DTYPES)), default=None,
                 help="The spec's precision (default: the config's dtype, else the parameters')."),
    click.option("--allow-unmapped", is_flag=True,
                 help="Write the spec even when parts cannot be mapped, as `unmapped` layers eval lists."),
    click.option("--no-check", is_flag=True, help="Skip the validate --against check of the written spec."))
@options.option_group("display", options.Display, options.output_format("yaml", "json", default="yaml"),
                      click.option("--quiet", "-q", is_flag=True, help="No progress on stderr."))
def import_torch_command(target, dims, output, real: RealModel, writing: SpecWriting, display: options.Display):
    """Write a spec from TARGET (package.module:callable or hf:ModelClass) traced on meta; check it (docs/import.md)."""
    from costspec.trace.command import run_import

    report = run_import(target, dims, output, real.config, real.config_sets, real.output_field, writing.dtype,
                        writing.allow_unmapped, not writing.no_check, display.quiet)
    if display.fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        if not output:
            click.echo(report.text, nl=False)
        for line in report.lines():
            click.echo(line, err=not output)
    report.raise_if_failed()
