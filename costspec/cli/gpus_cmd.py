"""`costspec gpus`: the GPU catalog."""
from __future__ import annotations

import click

from costspec.cli import cli, options


@cli.command("gpus")
@click.option("--catalog", type=options.InputFile("GPU catalog"), default=None,
              help="A YAML catalog of your own GPUs, added to (or overriding) the built-in one.")
@options.output_format()
def gpus_command(catalog, fmt):
    """List the GPUs with their Tensor-Core peaks (dense; bf16 also 2:4 sparse), CUDA-core peaks and bandwidth."""
    from costspec.analysis.gpus import catalog as load_catalog
    from costspec.analysis.gpus import catalog_result
    from costspec.core.render import render

    click.echo(render(catalog_result(load_catalog(catalog)), fmt))
