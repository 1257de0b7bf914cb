"""`costspec ncu run`: profile one step of a spec's torch module under Nsight Compute.

The command is ``LC_ALL=C ncu <costspec's metrics for the GPU's compute capability> ...
python -m costspec.ncu.runner SPEC ...`` (`costspec.ncu.metrics.build_command`):

* ``--nvtx --nvtx-push-pop-scope process``: layer ranges, including the backward's (autograd thread);
* ``--profile-from-start off``: only the step between cudaProfilerStart/Stop (after the warm-up);
* ``--csv --page raw --print-units base --print-metric-name name`` with ``--log-file OUT.csv``: ncu
  writes the raw page (one row per kernel, NVTX stack columns) to OUT.csv;
* ``--export OUT.ncu-rep``: the full report, to re-export other pages later
  (``ncu --import OUT.ncu-rep --csv --page details ...``);
* ``LC_ALL=C``: numbers with ``,`` thousands separators only.

The runner writes the sidecar ``OUT.json`` (GPU, compute capability, torch version, spec, dims,
pass, dtype); `execute` adds the ncu version and the command. `--print-command` only prints the
command (no GPU needed; the architecture comes from ``--arch`` or ``--gpu``).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from costspec.core.errors import CostspecError, UsageError
from costspec.core.safeio import NCU_CSV, InputError, check_not_input, read_text
from costspec.ncu.inputs import read_sidecar, sidecar_path, write_sidecar
from costspec.ncu.metrics import NCU_ENV, build_command, build_export_command, normalize_cc
from costspec.ncu.parse import parse_csv


class NoGpuError(CostspecError):
    """A command needs a CUDA GPU (or ncu) and there is none: exit 2."""


@dataclass
class RunPlan:
    command: list[str]
    env: dict[str, str]
    csv: Path
    report: Path
    sidecar: Path
    export_details: list[str]
    cc: str
    spec: str = ""  # the input, which no output may overwrite


def runner_argv(spec: str, batch: int | None, sets: Mapping[str, int], pass_: str, dtype: str, warmup: int,
                sidecar: str, python: str | None = None, backend: str | None = None, phase: str | None = None,
                context: int | None = None) -> list[str]:
    """The profiled program: ``python -m costspec.ncu.runner SPEC ...`` (`backend`: every attention layer's
    kernel family, as --backend; `phase` and `context`: a serving phase, as --phase and --context)."""
    argv = [python or sys.executable, "-m", "costspec.ncu.runner", str(spec)]
    if batch is not None:
        argv += ["--batch", str(batch)]
    if backend is not None:
        argv += ["--backend", backend]
    if phase is not None:
        argv += ["--phase", phase]
    if context is not None:
        argv += ["--context", str(context)]
    for name, value in sets.items():
        argv += ["--set", f"{name}={value}"]
    return argv + ["--pass", pass_, "--dtype", dtype, "--warmup", str(warmup), "--sidecar", str(sidecar)]


def resolve_arch(arch: str | None, gpu: str | None, catalog: str | None = None) -> str | None:
    """The compute capability from --arch (9.0, 90, sm_90) or from --gpu NAME (catalog's compute_capability)."""
    if arch and gpu:
        raise UsageError("give --arch or --gpu, not both")
    if arch:
        return normalize_cc(arch)
    if gpu:
        from costspec.analysis.gpus import get_gpu

        entry = get_gpu(gpu, catalog)
        if not entry.compute_capability:
            raise UsageError(f"GPU '{gpu}' has no compute_capability in the catalog; pass --arch")
        return normalize_cc(entry.compute_capability)
    return None


def _stem(out_csv: Path) -> Path:
    return out_csv.with_suffix("") if out_csv.suffix.lower() == ".csv" else out_csv


def plan_run(spec: str, out_csv: str, cc: str, batch: int | None, sets: Mapping[str, int], pass_: str, dtype: str,
             warmup: int, ncu: str = "ncu", backend: str | None = None, phase: str | None = None,
             context: int | None = None) -> RunPlan:
    """The ncu command (and where it writes) for one profiled step."""
    if dtype not in ("fp32", "tf32", "fp16", "bf16"):
        raise UsageError(f"costspec ncu run cannot run dtype {dtype}; use fp32, tf32, fp16 or bf16")
    csv_path = Path(out_csv)
    report = Path(str(_stem(csv_path)) + ".ncu-rep")
    sidecar = sidecar_path(csv_path)
    for output in (csv_path, report, sidecar, Path(str(_stem(csv_path)) + ".details.csv")):
        check_not_input(output, [spec])  # ncu and the runner write these: never over the spec
    argv = runner_argv(spec, batch, sets, pass_, dtype, warmup, str(sidecar), backend=backend, phase=phase,
                       context=context)
    command = build_command(argv, cc, str(report), nvtx=True, ncu=ncu, log_file=str(csv_path),
                            profile_from_start=False)
    details = build_export_command(str(report), str(_stem(csv_path)) + ".details.csv", page="details", ncu=ncu)
    return RunPlan(command, dict(NCU_ENV), csv_path, report, sidecar, details, normalize_cc(cc), str(spec))


def format_plan(plan: RunPlan) -> str:
    """The exact command as one shell line, plus the optional details-page export as a comment."""
    env = " ".join(f"{k}={v}" for k, v in plan.env.items())
    return (f"{env} {shlex.join(plan.command)}\n"
            f"# optional, the details page from the saved report: {env} {shlex.join(plan.export_details)}")


PRINT_COMMAND_HINT = ("; use --print-command --arch 9.0|8.0|... (or --gpu NAME) to print the ncu command and run it "
                      "on a GPU host")


def detect_gpu(hint: str = "") -> tuple[str, str]:
    """(device name, compute capability) of CUDA device 0; NoGpuError (exit 2) without one."""
    try:
        import torch
    except ImportError:
        raise NoGpuError("no GPU: torch is not installed (pip install torch, or pip install '.[torch]' in a "
                         "costspec checkout)" + hint) from None
    if not torch.cuda.is_available():
        raise NoGpuError("no CUDA GPU is available here (torch.cuda.is_available() is False)" + hint)
    major, minor = torch.cuda.get_device_capability()
    return torch.cuda.get_device_name(), f"{major}.{minor}"


def find_ncu(ncu: str = "ncu") -> str:
    path = shutil.which(ncu)
    if path is None:
        raise NoGpuError(f"'{ncu}' (Nsight Compute CLI) is not on PATH; install Nsight Compute or pass --ncu PATH, "
                         "or use --print-command")
    return path


def ncu_version(ncu: str) -> str | None:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else None


def execute(plan: RunPlan, ncu: str) -> dict:
    """Run the planned command; check that the CSV parses; complete and return the sidecar."""
    version = ncu_version(ncu)
    env = {**os.environ, **plan.env}
    done = subprocess.run(plan.command, env=env)
    if done.returncode != 0:
        tail = ""
        with contextlib.suppress(InputError):
            tail = "\n".join(read_text(plan.csv, NCU_CSV).splitlines()[-10:])
        raise CostspecError(f"ncu exited with status {done.returncode}" + (f"; last lines of {plan.csv}:\n{tail}"
                                                                            if tail else ""))
    kernels = parse_csv(plan.csv)  # a malformed or empty CSV fails here, naming file:line
    sidecar = read_sidecar(plan.csv) or {}
    sidecar.pop("costspec_ncu_sidecar", None)
    sidecar.update({"ncu_version": version, "command": format_plan(plan).splitlines()[0], "csv": str(plan.csv),
                    "report": str(plan.report), "kernels": len(kernels)})
    write_sidecar(plan.csv, sidecar, [plan.spec] if plan.spec else [])
    return sidecar
