"""`costspec ncu run | show | compare | calibrate`: Nsight Compute profiling, inspection, comparison and calibration."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings, PassPrecision, Serving
from costspec.core.vocab import RUNNABLE_PASSES, Pass


@dataclass(frozen=True)
class Profile:
    """How `ncu run` profiles: --warmup steps, the CSV it writes (-o), --print-command instead of running,
    the target compute capability (--arch, or that of --gpu in --catalog) and the ncu executable (--ncu)."""

    warmup: int
    out: str | None
    print_command: bool
    arch: str | None
    gpu: str | None
    catalog: str | None
    ncu: str


@dataclass(frozen=True)
class Measurement:
    """ncu CSV export(s) of one step, the dims they were profiled at (--batch, --set) and their phases (--pass)."""

    csv: tuple[str, ...]
    batch: int | None
    sets: Mapping[str, int]
    pass_: str | None

    def load(self, model):
        """The measured kernels, attributed to the model's layers."""
        from costspec.ncu.inputs import load_measured

        return load_measured(model, list(self.csv), self.batch, self.sets, self.pass_)


run_pass_options = options.option_group(
    "run", PassPrecision,
    click.option("--pass", "pass_", type=click.Choice([p.value for p in RUNNABLE_PASSES]),
                 default=Pass.FORWARD.value, show_default=True),
    options.run_dtype)
profile_options = options.option_group(
    "profile", Profile,
    click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True, help="Unprofiled steps first."),
    click.option("-o", "--output", "out", default=None, type=options.OutputFile(),
                 help="OUT.csv (raw page); required to run, with --print-command it defaults to SPEC_STEM.ncu.csv."),
    click.option("--print-command", is_flag=True, help="Print the ncu command instead of running it (no GPU needed)."),
    click.option("--arch", default=None, help="Target compute capability for --print-command, e.g. 9.0 or 8.0."),
    options.gpu(required=False), options.catalog,
    click.option("--ncu", "ncu", default="ncu", show_default=True, help="The ncu executable."))
measurement_options = options.option_group(
    "measured", Measurement,
    click.argument("csv", nargs=-1, required=True, type=options.InputFile("ncu CSV")),
    options.batch, options.sets,
    click.option("--pass", "pass_", type=click.Choice(Pass.choices()), default=None,
                 help="Phases in the CSV (default: from the sidecar, else forward); train needs the "
                      "costspec:forward/backward ranges of `ncu run`."))


@cli.group("ncu")
def ncu_group() -> None:
    """Nsight Compute: profile a spec's module, compare with the analytic costs, calibrate."""


@ncu_group.command("run")
@options.spec_arg
@options.bindings
@run_pass_options
@profile_options
@options.output_format("table", "json")
@options.serving_run
def run_command(spec: str, dims: Bindings, run: PassPrecision, profile: Profile, fmt: str, serving: Serving):
    """Profile one step of SPEC's torch module under ncu; writes OUT.csv and the sidecar OUT.json."""
    import json

    from costspec.ncu.run import PRINT_COMMAND_HINT, detect_gpu, execute, find_ncu, format_plan, plan_run, resolve_arch

    options.require(serving.phase is None or run.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {run.pass_})")
    model = serving.load(spec)
    dims.bind(model)  # bad dims fail here, before anything runs
    cc = resolve_arch(profile.arch, profile.gpu, profile.catalog)
    if cc is None:
        cc = detect_gpu(PRINT_COMMAND_HINT)[1]  # no GPU and no --arch/--gpu: NoGpuError, exit 2
    out = profile.out
    if out is None:
        options.require(profile.print_command, "ncu run needs -o OUT.csv (where the raw page is written)")
        out = f"{Path(spec).stem}.ncu.csv"
    plan = plan_run(spec, out, cc, dims.batch, dims.sets, run.pass_, run.dtype or str(model.precision),
                    profile.warmup, profile.ncu, serving.backend, serving.phase, serving.context)
    if profile.print_command:
        if fmt == "json":
            click.echo(json.dumps({"command": plan.command, "env": plan.env, "csv": str(plan.csv),
                                   "report": str(plan.report), "sidecar": str(plan.sidecar),
                                   "export_details": plan.export_details, "compute_capability": plan.cc}, indent=2))
        else:
            click.echo(format_plan(plan))
        return
    detect_gpu(PRINT_COMMAND_HINT)
    sidecar = execute(plan, find_ncu(profile.ncu))
    if fmt == "json":
        click.echo(json.dumps(sidecar, indent=2))
    else:
        click.echo(f"wrote {plan.csv} ({sidecar['kernels']} kernels), {plan.sidecar}, {plan.report}")


@ncu_group.command("show")
@click.argument("csv", type=options.InputFile("ncu CSV"))
@options.output_format()
def show_command(csv: str, fmt: str):
    """Per kernel launch of any ncu CSV export: class, TC/CUDA-core FLOPs, DRAM bytes, time, counters."""
    from costspec.core.render import render
    from costspec.ncu.show import show, to_result

    click.echo(render(to_result(show(csv)), fmt))


@ncu_group.command("compare")
@options.spec_arg
@measurement_options
@click.option("--calibration", type=options.InputFile("calibration"), default=None,
              help="A calibration file: adds the predicted executed FLOPs and the residuals.")
@options.output_format()
@options.serving_run
def compare_command(spec: str, measured: Measurement, calibration: str | None, fmt: str, serving: Serving):
    """Analytic vs measured Tensor-Core / CUDA-core FLOPs per layer, from ncu CSV(s); no GPU needed."""
    from costspec.analysis.calibration import load_calibration
    from costspec.core.render import render
    from costspec.ncu.compare import compare, to_result

    result = compare(measured.load(serving.load(spec)), load_calibration(calibration) if calibration else None)
    click.echo(render(to_result(result), fmt))


@ncu_group.command("calibrate")
@options.spec_arg
@measurement_options
@click.option("-o", "--output", "out", required=True, type=options.OutputFile(), help="calib.yaml to write.")
@options.output_format("table", "json")
@options.backend
def calibrate_command(spec: str, measured: Measurement, out: str, fmt: str, backend: str | None):
    """Fit epsilon (GEMM), rho (split-K) and kappa (pointwise kinds) per phase; write a calibration file."""
    import json

    from costspec.core.safeio import check_not_input, write_text
    from costspec.model import load
    from costspec.ncu.calibrate import calibrate, calibration_text, render_summary
    from costspec.ncu.inputs import sidecar_path

    inputs: list[str | Path] = [spec, *measured.csv, *(sidecar_path(c) for c in measured.csv)]
    check_not_input(out, inputs)  # before any work: a raw profile may need a GPU to recreate
    result = calibrate(measured.load(load(spec, backend=backend)), spec)
    write_text(out, calibration_text(result, out), inputs)  # read back first: never a file its reader refuses
    if fmt == "json":
        click.echo(json.dumps({**result.data, "written": out}, indent=2))
    else:
        click.echo(render_summary(result) + f"\nwrote {out}")
