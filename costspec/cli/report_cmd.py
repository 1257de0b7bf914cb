"""`costspec report`: one self-contained HTML page with the layer tree, closed forms, roofline and sweeps."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("report")
@options.spec_arg
@options.batch
@options.sets
@options.pass_
@options.dtype
@options.gpu(required=False)
@options.fusion
@options.efficiency
@click.option("--vary", "varies", multiple=True, metavar="NAME=VALUES",
              help="Add sweep curves over a dim: B=1..256:x2 or img=224,384 (repeatable; the second dim gives one "
                   "line per value).")
@click.option("--validation", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A `costspec validate --format json` output to show as the validation section.")
@click.option("--compare", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A `costspec ncu compare --format json` output to show as the Nsight Compute section.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="report.html")
@options.output_format("table", "json")
def report_command(spec, batch, sets, pass_, dtype, gpu, catalog, fusion, efficiency, varies, validation, compare,
                   quiet, output, fmt):
    """Write SPEC's costs as one HTML page (no network needed to view it: CSS, JS, SVG and MathML inline)."""
    from costspec.analysis.sweep import parse_vary
    from costspec.core.errors import UsageError
    from costspec.core.safeio import check_not_input, write_text
    from costspec.export.html_page import render_page
    from costspec.export.html_report import gather, read_json
    from costspec.model import load

    if not output.lower().endswith((".html", ".htm")):
        raise UsageError(f"-o {output}: the report is an HTML file (.html)")
    check_not_input(output, [spec] + [p for p in (validation, compare, catalog) if p])
    model = load(spec, dtype)
    values = model.bind(batch, sets)
    device = None
    if gpu:
        from costspec.analysis.gpus import get_gpu

        device = get_gpu(gpu, catalog)
    data = gather(model, values, pass_, sets, device, fusion, efficiency, [parse_vary(v) for v in varies],
                  read_json(validation, "--validation") if validation else None,
                  read_json(compare, "--compare") if compare else None, quiet)
    page = render_page(data)
    inputs = [spec] + [p for p in (validation, compare, catalog) if p]
    write_text(output, page, inputs)  # atomic; refuses to overwrite an input
    if fmt == "json":
        import json

        click.echo(json.dumps({"written": output, "bytes": len(page.encode("utf-8")), "spec": model.name,
                               "layers": len(data.report.rows)}, indent=2))
    else:
        click.echo(f"wrote {output} ({len(page) / 1024:.0f} KiB): {len(data.report.rows)} layers", err=True)
