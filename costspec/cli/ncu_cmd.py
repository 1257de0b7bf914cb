"""`costspec ncu run | show | compare | calibrate`: Nsight Compute profiling, inspection, comparison and calibration."""
from __future__ import annotations

from pathlib import Path

import click

from costspec.cli import cli, options
from costspec.core.vocab import RUNNABLE_PASSES, Pass

_passes = click.option("--pass", "pass_", type=click.Choice(Pass.choices()), default=None,
                       help="Phases in the CSV (default: from the sidecar, else forward); train needs the "
                            "costspec:forward/backward ranges of `ncu run`.")


@cli.group("ncu")
def ncu_group() -> None:
    """Nsight Compute: profile a spec's module, compare with the analytic costs, calibrate."""


@ncu_group.command("run")
@options.spec_arg
@options.batch
@options.sets
@click.option("--pass", "pass_", type=click.Choice([p.value for p in RUNNABLE_PASSES]), default=Pass.FORWARD.value,
              show_default=True)
@click.option("--dtype", type=click.Choice(["fp32", "tf32", "fp16", "bf16"]), default=None,
              help="Run in this dtype (default: the spec's precision).")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True, help="Unprofiled steps first.")
@click.option("-o", "--output", "out", default=None, type=click.Path(dir_okay=False),
              help="OUT.csv (raw page); required to run, with --print-command it defaults to SPEC_STEM.ncu.csv.")
@click.option("--print-command", is_flag=True, help="Print the ncu command instead of running it (no GPU needed).")
@click.option("--arch", default=None, help="Target compute capability for --print-command, e.g. 9.0 or 8.0.")
@options.gpu(required=False)
@click.option("--ncu", "ncu", default="ncu", show_default=True, help="The ncu executable.")
@options.output_format("table", "json")
def run_command(spec, batch, sets, pass_, dtype, warmup, out, print_command, arch, gpu, catalog, ncu, fmt):
    """Profile one step of SPEC's torch module under ncu; writes OUT.csv and the sidecar OUT.json."""
    from costspec.model import load
    from costspec.ncu.run import PRINT_COMMAND_HINT, detect_gpu, execute, find_ncu, format_plan, plan_run, resolve_arch

    model = load(spec)
    model.bind(batch, sets)  # bad dims fail here, before anything runs
    cc = resolve_arch(arch, gpu, catalog)
    if cc is None:
        cc = detect_gpu(PRINT_COMMAND_HINT)[1]  # no GPU and no --arch/--gpu: NoGpuError, exit 2
    if out is None:
        options.require(print_command, "ncu run needs -o OUT.csv (where the raw page is written)")
        out = f"{Path(spec).stem}.ncu.csv"
    plan = plan_run(spec, out, cc, batch, sets, pass_, dtype or str(model.precision), warmup, ncu)
    if print_command:
        if fmt == "json":
            import json

            click.echo(json.dumps({"command": plan.command, "env": plan.env, "csv": str(plan.csv),
                                   "report": str(plan.report), "sidecar": str(plan.sidecar),
                                   "export_details": plan.export_details, "compute_capability": plan.cc}, indent=2))
        else:
            click.echo(format_plan(plan))
        return
    detect_gpu(PRINT_COMMAND_HINT)
    sidecar = execute(plan, find_ncu(ncu))
    if fmt == "json":
        import json

        click.echo(json.dumps(sidecar, indent=2))
    else:
        click.echo(f"wrote {plan.csv} ({sidecar['kernels']} kernels), {plan.sidecar}, {plan.report}")


@ncu_group.command("show")
@click.argument("csv", type=click.Path(dir_okay=False, exists=True))
@options.output_format()
def show_command(csv, fmt):
    """Per kernel launch of any ncu CSV export: class, TC/CUDA-core FLOPs, DRAM bytes, time, counters."""
    from costspec.core.render import render
    from costspec.ncu.show import show, to_result

    click.echo(render(to_result(show(csv)), fmt))


@ncu_group.command("compare")
@options.spec_arg
@click.argument("csv", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@options.batch
@options.sets
@_passes
@click.option("--calibration", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A calibration file: adds the predicted executed FLOPs and the residuals.")
@options.output_format()
def compare_command(spec, csv, batch, sets, pass_, calibration, fmt):
    """Analytic vs measured Tensor-Core / CUDA-core FLOPs per layer, from ncu CSV(s); no GPU needed."""
    from costspec.analysis.calibration import load_calibration
    from costspec.core.render import render
    from costspec.model import load
    from costspec.ncu.compare import compare, to_result
    from costspec.ncu.inputs import load_measured

    measured = load_measured(load(spec), list(csv), batch, sets, pass_)
    result = compare(measured, load_calibration(calibration) if calibration else None)
    click.echo(render(to_result(result), fmt))


@ncu_group.command("calibrate")
@options.spec_arg
@click.argument("csv", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@options.batch
@options.sets
@_passes
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False), help="calib.yaml to write.")
@options.output_format("table", "json")
def calibrate_command(spec, csv, batch, sets, pass_, out, fmt):
    """Fit epsilon (GEMM), rho (split-K) and kappa (pointwise kinds) per phase; write a calibration file."""
    import json

    from costspec.analysis.calibration import dump_calibration
    from costspec.core.safeio import check_not_input, write_text
    from costspec.model import load
    from costspec.ncu.calibrate import calibrate, render_summary
    from costspec.ncu.inputs import load_measured, sidecar_path

    inputs = [spec, *csv, *(sidecar_path(c) for c in csv)]
    check_not_input(out, inputs)  # before any work: a raw profile may need a GPU to recreate
    result = calibrate(load_measured(load(spec), list(csv), batch, sets, pass_), spec)
    write_text(out, dump_calibration(result.data), inputs)
    if fmt == "json":
        click.echo(json.dumps({**result.data, "written": out}, indent=2))
    else:
        click.echo(render_summary(result) + f"\nwrote {out}")
