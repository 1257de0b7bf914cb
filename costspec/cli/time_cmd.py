"""`costspec time`: measured per-layer time on CUDA vs the roofline estimate."""
from __future__ import annotations

from dataclasses import dataclass

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings, Display, Hardware, PassPrecision, Serving


@dataclass(frozen=True)
class Steps:
    """Unmeasured steps first (--warmup), then the timed ones (--repeats) whose median is reported."""

    warmup: int
    repeats: int


steps_options = options.option_group(
    "steps", Steps,
    click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True),
    click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True))


@cli.command("time")
@options.spec_arg
@options.bindings
@options.run_pass_precision
@steps_options
@options.hardware(required=False, estimate=False)
@options.display()
@options.serving_run
def time_command(spec: str, dims: Bindings, run: PassPrecision, steps: Steps, hardware: Hardware, display: Display,
                 serving: Serving):
    """Time every layer of SPEC's torch module on CUDA (median of repeats); with --gpu, vs the roofline.
    --backend math runs PyTorch's math SDPA, eager explicit matmuls, flash torch's fused kernels."""
    from costspec.core.progress import status
    from costspec.core.render import render
    from costspec.ncu.run import detect_gpu
    from costspec.runtime.timing import add_estimate, time_layers, to_result

    options.require(serving.phase is None or run.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {run.pass_})")
    model = serving.load(spec)
    values = dims.bind(model)
    detect_gpu()  # no CUDA GPU: says so, exit 2
    with status(f"time: {model.name} ({run.pass_}, {steps.warmup} warmup + {steps.repeats} timed steps)",
                display.quiet):
        timing = time_layers(model, values, run.pass_, run.dtype, steps.warmup, steps.repeats)
    if hardware.gpu:
        from costspec.analysis.roofline import estimate

        report = model.report(run.pass_, values)
        device = hardware.device()
        assert device is not None
        timing = add_estimate(timing, estimate(model, report, values, device))
    click.echo(render(to_result(timing), display.fmt))
