"""`costspec zoo`: the specs shipped with costspec, usable by name (`costspec eval vit_b`)."""
from __future__ import annotations

import re

import click

from costspec.cli import cli, options


def summary(doc: str) -> str:
    """A doc's first phrase, for one short line per spec: up to its first ':' or ';', without the
    parenthesised asides and a trailing ', as ...' (the full doc stays in --format json / csv)."""
    head = re.split(r"[:;]", doc, maxsplit=1)[0]
    head = re.sub(r"\s*\([^()]*\)", "", head)
    head = head.split("(")[0].split(", as ")[0]
    return head.strip(" ,.") or doc


@cli.command("zoo")
@options.output_format()
def zoo_command(fmt):
    """List the zoo's specs, one short line each (--format json: the full doc lines); pass a key (e.g.
    vit_b) wherever a SPEC path goes."""
    from costspec.core.render import render
    from costspec.core.results import Column, Result, Row, Table
    from costspec.core.zoo import zoo_dir, zoo_specs

    specs = zoo_specs()
    rows = [Row(z.key, z.key, 0, {"summary": summary(z.doc), "spec_name": z.name, "doc": z.doc}) for z in specs]
    columns = [Column("summary", "what it is", "text"), Column("spec_name", "spec name", "text", hidden=True),
               Column("doc", "doc", "text", hidden=True)]
    header = f"{len(specs)} specs in the zoo ({zoo_dir()}); use a key as SPEC: `costspec eval vit_b --batch 8`"
    click.echo(render(Result(header, [Table(columns, rows, label_title="key")], meta={"zoo_dir": str(zoo_dir())}),
                      fmt))
