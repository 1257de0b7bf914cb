"""`costspec check`: schema and semantic checks, without evaluating costs."""
from __future__ import annotations

import json

import click

from costspec.cli import cli, options
from costspec.core.errors import CostspecError


@cli.command("check")
@click.argument("specs", nargs=-1, required=True, type=options.InputFile("spec", zoo=True))
@options.output_format("table", "json")
def check_command(specs, fmt):
    """Check each SPEC (schema, dims, shapes, divisibility): every problem found, one line each; exit 2 if any."""
    from costspec.core.render import plain
    from costspec.model import check_file

    failed = 0
    report = []
    for path in specs:
        problems = check_file(path)
        failed += bool(problems)
        report.append({"spec": path, "ok": not problems, "problems": [_problem(p) for p in problems]})
        if fmt == "table":
            for problem in problems:
                click.echo(plain(str(problem)))
            if not problems:
                click.echo(f"{plain(path)}: ok")
    if fmt == "json":
        click.echo(json.dumps(report, indent=2))
    if failed:
        raise CostspecError(f"{failed} of {len(specs)} spec(s) failed the checks")


def _problem(problem) -> dict:
    where = problem.location
    return {"message": problem.message, "expected": problem.expected,
            "file": where.file if where else None, "line": where.line if where else None,
            "column": where.column if where else None, "path": where.path if where else None}
