"""`costspec gpus`: the GPU catalog."""
from __future__ import annotations

import click

from . import cli


@cli.command("gpus")
@click.option("--catalog", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A YAML catalog of your own GPUs, added to (or overriding) the built-in one.")
def gpus_command(catalog):
    """List the GPUs with their dense Tensor-Core and CUDA-core peaks and memory bandwidth."""
    from ..gpus import catalog as load_catalog

    rows = [("key", "name", "CC", "TC bf16", "TC fp16", "TC tf32", "TC fp8", "CUDA fp32", "HBM GB/s", "mem GB")]
    for key, g in sorted(load_catalog(catalog).items()):
        peak = lambda table, dt: f"{table[dt]:g}" if dt in table else "-"  # noqa: E731
        rows.append((key, g.name, g.compute_capability, peak(g.tensor, "bf16"), peak(g.tensor, "fp16"),
                     peak(g.tensor, "tf32"), peak(g.tensor, "fp8"), peak(g.cuda, "fp32"), f"{g.memory_bw_gbps:g}",
                     f"{g.memory_gb:g}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    click.echo("Peaks in dense TFLOP/s (no 2:4 sparsity); sources in costspec/data/gpus.yaml.")
