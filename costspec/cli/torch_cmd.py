"""`costspec torch`: the torch module built from a spec, one line per submodule."""
from __future__ import annotations

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings


@cli.command("torch")
@options.spec_arg
@options.bindings
@options.depth
@options.output_format()
def torch_command(spec: str, dims: Bindings, depth: int | None, fmt: str):
    """Print the torch module built from SPEC (module paths = layer names) with parameter counts."""
    from costspec.core.render import render
    from costspec.model import load
    from costspec.runtime.torch_budget import check_torch_build
    from costspec.runtime.torch_build import build_module, describe, import_torch

    model = load(spec)
    values = dims.bind(model)
    check_torch_build(model, values)  # before importing torch (seconds)
    torch = import_torch("costspec torch")
    with torch.device("meta"):  # shapes and parameter counts only: no memory, no init
        module, _ = build_module(model, values)
    click.echo(render(describe(module, depth), fmt))
