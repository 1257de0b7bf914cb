"""`costspec report`: one self-contained HTML page with the layer tree, closed forms, roofline and sweeps."""
from __future__ import annotations

from dataclasses import dataclass

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings, Hardware, PassPrecision, Serving


@dataclass(frozen=True)
class Page:
    """What the page holds besides the costs (--vary sweeps, --validation, --compare), where it is
    written (-o) and whether progress shows (--quiet)."""

    varies: tuple[str, ...]
    validation: str | None
    compare: str | None
    quiet: bool
    output: str

    def inputs(self, spec: str, catalog: str | None) -> list[str]:
        """The files the page is made from, which writing it must not overwrite."""
        return [spec] + [p for p in (self.validation, self.compare, catalog) if p]


page_options = options.option_group(
    "page", Page,
    click.option("--vary", "varies", multiple=True, metavar="NAME=VALUES",
                 help="Add sweep curves over a dim: B=1..256:x2 or img=224,384 (repeatable; the second dim gives one "
                      "line per value)."),
    click.option("--validation", type=options.InputFile("validation JSON"), default=None,
                 help="A `costspec validate --format json` output to show as the validation section."),
    click.option("--compare", type=options.InputFile("ncu compare JSON"), default=None,
                 help="A `costspec ncu compare --format json` output to show as the Nsight Compute section."),
    click.option("--quiet", "-q", is_flag=True, help="No progress on stderr."),
    click.option("-o", "--output", required=True, type=options.OutputFile(), help="report.html"))


@cli.command("report")
@options.spec_arg
@options.bindings
@options.pass_precision
@options.hardware(required=False)
@page_options
@options.output_format("table", "json")
@options.serving
def report_command(spec: str, dims: Bindings, run: PassPrecision, hardware: Hardware, page: Page, fmt: str,
                   serving: Serving):
    """Write SPEC's costs as one HTML page (no network needed to view it: CSS, JS, SVG and MathML inline).
    With --phase decode, the costs of one generated token per sequence after --context cached ones (and with
    --gpu, the time per step and tokens/s)."""
    from costspec.analysis.sweep import parse_vary
    from costspec.core.errors import UsageError
    from costspec.core.safeio import check_not_input, write_text
    from costspec.export.html_page import render_page
    from costspec.export.html_report import gather, read_json
    from costspec.model import load, serve, serving_note

    if not page.output.lower().endswith((".html", ".htm")):
        raise UsageError(f"-o {page.output}: the report is an HTML file (.html)")
    options.require(serving.phase is None or run.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {run.pass_})")
    check_not_input(page.output, page.inputs(spec, hardware.catalog))
    written = load(spec, run.dtype, backend=serving.backend)
    model = serve(written, serving.phase, serving.context, run.dtype)
    values = dims.bind(model)
    data = gather(model, values, run.pass_, dims.sets, hardware.device(), hardware.fusion, hardware.efficiency,
                  [parse_vary(v) for v in page.varies],
                  read_json(page.validation, "--validation") if page.validation else None,
                  read_json(page.compare, "--compare") if page.compare else None, page.quiet, written, run.dtype)
    if data.served is not None and (note := serving_note(model, int(model.in_shape[0].xreplace(values)),
                                                         data.roof.time_s if data.roof else None)):
        data.notes.insert(0, note)
    html = render_page(data)
    write_text(page.output, html, page.inputs(spec, hardware.catalog))  # atomic; refuses to overwrite an input
    if fmt == "json":
        import json

        click.echo(json.dumps({"written": page.output, "bytes": len(html.encode("utf-8")), "spec": model.name,
                               "layers": len(data.report.rows)}, indent=2))
    else:
        click.echo(f"wrote {page.output} ({len(html) / 1024:.0f} KiB): {len(data.report.rows)} layers", err=True)
