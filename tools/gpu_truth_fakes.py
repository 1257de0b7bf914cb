#!/usr/bin/env python3
"""Fakes for `tools/gpu_truth.py --fake`: `ncu`, `nvidia-smi` and `costspec time` without a GPU.

Everything these fakes write is synthetic and says so: every CSV has a ``==PROF== FAKE`` line
before its header, every JSON a ``"fake": true`` key, every text a FAKE line. They exist so that
the whole GPU truth script (planning, running under timeouts, resuming, packing, and costspec's
``ncu compare`` / ``ncu calibrate`` / ``eval --calibration`` on what was "measured") runs offline,
in ``tests/ncu/test_gpu_truth.py``; only the GPU itself is left untested.

* ``gpu_truth_fakes.py ncu ARGS``: parses the command line the real ncu would get
  (``--metrics``, ``--log-file``, ``--export``, the profiled program) and writes the raw page
  (the column set of ``tests/data/ncu/raw_new_nvtx.csv``: header, units row, one row per kernel,
  NVTX push/pop stacks as ``tests/ncu/synth_ncu.py`` writes them), the runner's JSON sidecar and a
  placeholder report. The kernels are derived from the spec: the script prepares, in fake mode
  only, the analytic per-slot terms of the profiled spec (`model_oracle`, in the file named by
  ``COSTSPEC_GPU_TRUTH_FAKE_ORACLE``) where a real ncu would run the program; per slot and phase
  one matmul kernel per instance (Tensor-Core counters of the dtype, ``FAKE_EPS`` more than the
  analytic matmul FLOPs, the slot's pointwise work fused in its epilogue), a split-K reduce in the
  forward (``FAKE_RHO`` FLOPs per GEMM output element) and one pointwise kernel for slots without
  matmul work (``1 + FAKE_KAPPA`` times the analytic FLOPs). ``toy_mlp`` at its own dims in fp32
  gets the kernels of the reconstructed toy study instead (``tests/data/ncu/make_toy_fixtures.py``),
  so that ``ncu calibrate`` must find the study's coefficients again (epsilon 7/1024, rho 3).
  ``--version`` and ``--query-metrics`` answer as ncu does. The GEMM probe program
  (``gpu_truth.py --gemm-probe-program``) gets one wgmma kernel per case with exactly 2*M*N*K.
* ``gpu_truth_fakes.py nvidia-smi ARGS``: a FAKE H100 for ``--query-gpu``, a banner otherwise.
* ``gpu_truth_fakes.py time ARGS``: the arguments of ``costspec time``; prints JSON in the layout of
  ``costspec time --format json`` from the ``costspec eval --gpu`` rows in the oracle file (measured =
  ``FAKE_TIME_FACTOR`` x estimated).

Failure injection (set by gpu_truth.py for the steps named in ``COSTSPEC_GPU_TRUTH_FAKE_FAIL`` /
``..._HANG``): ``COSTSPEC_FAKE_TOOL_FAIL=1`` makes a fake exit 1 with an ``==ERROR==`` line;
``COSTSPEC_FAKE_TOOL_HANG=1`` makes it sleep until it is killed. ``COSTSPEC_FAKE_NCU_UNKNOWN_METRICS``
(comma-separated) names metrics that this fake ncu does not know: ``--query-metrics`` leaves them
out and a profile asking for one fails with ncu's ``Failed to find metric`` error.

Only this file's `model_oracle` and `eval_oracle` import costspec (in the script's process); the
fake executables themselves import only the standard library, so each call costs a Python start.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import os
import re
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORACLE_ENV = "COSTSPEC_GPU_TRUTH_FAKE_ORACLE"
FAIL_ENV = "COSTSPEC_FAKE_TOOL_FAIL"
HANG_ENV = "COSTSPEC_FAKE_TOOL_HANG"
UNKNOWN_METRICS_ENV = "COSTSPEC_FAKE_NCU_UNKNOWN_METRICS"

FAKE_GPU = "NVIDIA H100 80GB HBM3 (FAKE)"
FAKE_DRIVER = "580.159.04"
FAKE_NCU_VERSION = "Version 2025.3.1.0 (build 36398880) (public-release) FAKE"
FAKE_LINE = "FAKE: synthetic numbers written by tools/gpu_truth_fakes.py without a GPU, not a measurement"
FAKE_EPS = {"forward": Fraction(1, 64), "backward": Fraction(1, 32)}  # Tensor-Core matmul overhead
FAKE_RHO = 1  # split-K reduce FLOPs per GEMM output element (forward)
FAKE_KAPPA = 1  # pointwise kernels execute (1 + kappa) x the analytic FLOPs
FAKE_TIME_FACTOR = 1.7  # fake measured time = factor x the roofline estimate

PID = "4242"
PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
START_END = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
ATTRIBUTE_COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", PUSH_POP, START_END, "Kernel Name", "Context",
                     "Stream", "Block Size", "Grid Size", "Device", "CC", "device__attribute_display_name"]
T = "sm__ops_path_tensor_"
FADD, FMUL, FFMA = (f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in ("fadd", "fmul", "ffma"))
GMMA_INST = "sm__inst_executed_pipe_tensor_op_gmma.sum"
DRAM_READ, DRAM_WRITE, DURATION = "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"
# dtype -> (wgmma counter, its aggregate) on CC 9.0
TC_COUNTERS = {
    "bf16": (f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum", f"{T}src_bf16_dst_fp32.sum"),
    "fp16": (f"{T}op_hgmma_src_fp16_sparsity_off.sum", f"{T}src_fp16.sum"),
    "tf32": (f"{T}op_hgmma_src_tf32_dst_fp32_sparsity_off.sum", f"{T}src_tf32_dst_fp32.sum"),
    "fp8": (f"{T}src_fp8_sparsity_off.sum", f"{T}src_fp8_sparsity_off.sum"),
}
# kernel names as they appear on Hopper (phase, engine): the kernel classes costspec reads from them
# (gemm: nvjet/xmma, attention: flash, conv: fprop/dgrad/wgrad) decide the calibration classes.
NAMES = {
    "gemm": {"tc": "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_bias_TNT",
             "cuda": "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_warpgroupsize1x1x1_execute_kernel__5x_cublas"},
    "attention": {"tc": "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
                        "cutlass::bfloat16_t>, false, false, false, false, true, true, false>(Flash_fwd_params)",
                  "cuda": "void pytorch_flash::flash_fwd_kernel<float>(Flash_fwd_params)"},
    "conv": {"tc": "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize"
                   "1x1x1_g1_execute_kernel__5x_cudnn",
             "cuda": "sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nhwc_execute_kernel__5x_cudnn"},
}
BACKWARD_ATTENTION = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, "
                      "128, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, false, false, false, false, false, true, "
                      "false>(Flash_bwd_params)")
SPLITK = ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, "
          "false>(cublasLt::cublasSplitKParams<float>, const float *, const __nv_bfloat16 *, __nv_bfloat16 *, "
          "const float *, const float *)")
POINTWISE = {
    "norm": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
            "const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
    "softmax": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
               "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)",
    "elementwise": "void at::native::vectorized_elementwise_kernel<4, at::native::fake_pointwise_functor<c10::BFloat16>, "
                   "at::detail::Array<char *, 3>>(int, T2, T3)",
}
GATHER = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, "
          "true>(at::cuda::detail::TensorInfo<T1, T3>, at::cuda::detail::TensorInfo<const T1, T3>, "
          "at::cuda::detail::TensorInfo<const T2, T3>, int, int, T3, T3, long)")
LOSS = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
        "at::native::sum_functor<float, float, float>::operator ()(at::TensorIterator &)::[lambda(float, float) "
        "(instance 1)]>, unsigned int, float, 4>>(T3)")
SEED = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char *, 1>>"
        "(int, T2, T3)")


# ---------------------------------------------------------------------------------------------------
# The repository's fixture generators (with a fallback, should they move)
# ---------------------------------------------------------------------------------------------------
def _load(path: Path, name: str):
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def nvtx_cell(stack) -> str:
    """The push/pop cell of a raw page row (tests/ncu/synth_ncu.py's format)."""
    synth = _load(ROOT / "tests" / "ncu" / "synth_ncu.py", "_gpu_truth_synth_ncu")
    if synth is not None:
        return synth.nvtx_cell(tuple(stack))
    if not stack:
        return ""
    return f"{PID}  " + "  ".join(f'"<default domain>:{n}:none:none:none:none:none:none"' for n in stack) + " "


def toy_launches():
    """(forward, backward) launches of the reconstructed toy study, or None without the generator."""
    toy = _load(ROOT / "tests" / "data" / "ncu" / "make_toy_fixtures.py", "_gpu_truth_make_toy_fixtures")
    if toy is None:
        return None
    return toy.forward(), toy.backward()


# ---------------------------------------------------------------------------------------------------
# Oracles: prepared by gpu_truth.py in its own process (costspec imported once there)
# ---------------------------------------------------------------------------------------------------
def _eval_rows(cli, spec: str, batch: int | None, sets: dict, pass_: str, extra: list[str]) -> dict:
    args = ["eval", spec, *(["--batch", str(batch)] if batch else []),
            *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")], "--pass", pass_, "--format", "json", *extra]
    rc, out, err = cli(args)
    if rc != 0:
        raise RuntimeError(f"costspec {' '.join(args)} failed: {err.strip()[-400:]}")
    return json.loads(out)


def model_oracle(cli, spec: str, batch: int | None, sets: dict, pass_: str, dtype: str,
                 phase: str | None = None, context: int | None = None) -> dict:
    """What the fake ncu needs to know of the profiled spec: per phase, each slot's analytic terms and
    the NVTX paths of its instances. `cli(args) -> (rc, stdout, stderr)` runs costspec's CLI. `phase`
    and `context`: a served model (`ncu run --phase decode`)."""
    import costspec
    from costspec.analysis.slots import RangeResolver, analytic_slots

    model = costspec.load(spec, phase=phase, context=context)
    values = model.bind(batch, sets)
    resolver = RangeResolver(model)
    report = _eval_rows(cli, spec, batch, sets, "forward", serve_args(phase, context))
    repeats = {row["name"]: int(row["repeat"]) for row in report["rows"] if row.get("repeat")}
    dims = {str(k): int(v) for k, v in values.items()}
    phases = ["forward", "backward"] if pass_ == "train" else ["forward"]
    slots: dict[str, list] = {}
    for phase in phases:
        entries = []
        for name, terms in analytic_slots(model, values, phase).items():
            paths = _instance_paths(resolver, name, repeats)
            entries.append({
                "slot": name, "paths": paths,
                "ranges": {p: [q for q in _prefixes(p) if resolver.slot(q) is not None] for p in paths},
                "tc": int(terms.tc), "cuda": int(terms.cuda),
                "matmul": {c: int(v) for c, v in terms.matmul.items()},
                "pointwise_flops": str(sum(terms.pointwise_flops.values(), Fraction(0))),
                "pointwise_kinds": sorted(terms.pointwise),
                "gemm_outputs": int(terms.gemm_outputs), "tensor_cores": bool(terms.tensor_cores)})
        slots[phase] = entries
    toy_dims = {"M": 128, "D": 1024, "N": 10}
    return {"fake": True, "spec": spec, "model": model.name, "dims": dims, "pass": pass_, "dtype": dtype,
            "batch": batch, "sets": sets, "slots": slots,
            "toy": model.name == "toy_mlp" and dims == toy_dims and dtype == "fp32",
            "eps": {k: str(v) for k, v in FAKE_EPS.items()}, "rho": FAKE_RHO, "kappa": FAKE_KAPPA}


def _prefixes(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _instance_paths(resolver, slot: str, repeats: dict) -> list[str]:
    """The torch module paths (NVTX ranges) of a slot's instances; the first repeat on the way is
    expanded (deeper ones keep instance 0). [] when no path resolves to the slot."""
    parts = slot.split(".")
    path, first = parts[0], None
    for part in parts[1:]:
        if resolver.slot(f"{path}.{part}") is None and resolver.slot(f"{path}.0") is not None:
            if first is None:
                first = path
            path += ".0"
        path += "." + part
    if resolver.slot(path) != slot:
        return []
    if first is None:
        return [path]
    rest = path[len(first) + 2:]
    return [f"{first}.{i}{rest}" for i in range(max(1, repeats.get(first, 1)))]


_EVALS: dict[tuple, tuple[int, dict]] = {}


def serve_args(phase: str | None, context: int | None) -> list[str]:
    return [*(["--phase", phase] if phase else []), *(["--context", str(context)] if context else [])]


def eval_oracle(cli, spec: str, batch: int | None, sets: dict, pass_: str, gpu: str | None,
                phase: str | None = None, context: int | None = None) -> dict:
    """The `costspec eval --gpu` report the fake `costspec time` turns into "measured" times. One eval
    per spec, dims, pass and serving phase; other batch sizes scale its times (fake numbers need no more)."""
    key = (spec, tuple(sorted(sets.items())), pass_, gpu, phase, context)
    if key not in _EVALS:
        _EVALS[key] = (batch or 1, _eval_rows(cli, spec, batch, sets, pass_,
                                              [*(["--gpu", gpu] if gpu else []), *serve_args(phase, context)]))
    base, data = _EVALS[key]
    scale = (batch or 1) / base

    def scaled(row: dict) -> dict:
        return {**row, "est_time_s": row["est_time_s"] * scale} if row.get("est_time_s") else row
    roofline = data.get("roofline") or {}
    if roofline.get("est_time_s"):
        roofline = {**roofline, "est_time_s": roofline["est_time_s"] * scale}
    dims = {**data["dims"], **({"B": batch} if batch and "B" in data["dims"] else {})}
    report = {**data, "dims": dims, "roofline": roofline, "rows": [scaled(r) for r in data["rows"]],
              "total": scaled(data["total"])}
    return {"fake": True, "eval": report}


# ---------------------------------------------------------------------------------------------------
# fake ncu
# ---------------------------------------------------------------------------------------------------
VALUE_FLAGS = {"--target-processes", "--nvtx-push-pop-scope", "--profile-from-start", "--clock-control",
               "--cache-control", "--replay-mode", "--print-units", "--print-metric-name", "--print-kernel-base",
               "--page", "--metrics", "--export", "-o", "--log-file", "--chip", "--import", "-k", "--kernel-name",
               "-c", "--launch-count", "-s", "--launch-skip", "--nvtx-include", "--nvtx-exclude", "--section",
               "--set", "--query-metrics-mode", "--pipeline-boost-state"}
BOOL_FLAGS = {"--nvtx", "--csv", "--force-overwrite", "-f", "--version", "--query-metrics", "--list-sets",
              "--print-summary"}


class FakeNcuError(Exception):
    pass


def parse_ncu_argv(argv: list[str]) -> tuple[dict, list[str]]:
    """(ncu options, the profiled program's argv) of an ncu command line."""
    opts: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in BOOL_FLAGS:
            opts[arg] = True
            i += 1
        elif arg in VALUE_FLAGS:
            if i + 1 >= len(argv):
                raise FakeNcuError(f"option {arg} needs a value")
            opts[arg] = argv[i + 1]
            i += 2
        elif arg.startswith("-"):
            raise FakeNcuError(f"unrecognised option '{arg}'")
        else:
            break
    if opts.get("--print-metric-name") and opts.get("--page", "details") == "raw":
        # what ncu 2025.3 answered on the H100 (exit 1)
        raise FakeNcuError("==ERROR== Option '--print-metric-name' is only supported for the details page.")
    return opts, argv[i:] if i < len(argv) else []


def _runner_args(program: list[str]) -> argparse.Namespace:
    """The arguments of ``python -m costspec.ncu.runner`` (as costspec.ncu.runner parses them)."""
    at = program.index("costspec.ncu.runner")
    p = argparse.ArgumentParser(prog="costspec.ncu.runner (fake)")
    p.add_argument("spec")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--set", dest="sets", action="append", default=[])
    p.add_argument("--pass", dest="pass_", default="forward")
    p.add_argument("--dtype", default=None)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sidecar", default=None)
    p.add_argument("--backend", default=None)
    p.add_argument("--phase", default=None)
    p.add_argument("--context", type=int, default=None)
    args, _ = p.parse_known_args(program[at + 1:])
    return args


def _split(total: int, n: int) -> list[int]:
    base = total // n
    return [base] * (n - 1) + [total - base * (n - 1)]


class Kernels:
    """Builds the rows of a fake capture."""

    def __init__(self, metrics: list[str]):
        self.metrics = metrics
        self.rows: list[dict] = []

    def add(self, name: str, stack, counts: dict, block: str = "(128, 1, 1)", grid: str = "(132, 1, 1)") -> None:
        values = {m: 0 for m in self.metrics}
        for metric, value in counts.items():
            if metric in values:
                values[metric] = int(value)
        cuda = values.get(FADD, 0) + values.get(FMUL, 0) + 2 * values.get(FFMA, 0)
        tensor = sum(v for m, v in values.items() if m.startswith(T))
        if DRAM_READ in values:
            values[DRAM_READ] = 1_048_576 + (cuda + tensor) // 512
        if DRAM_WRITE in values:
            values[DRAM_WRITE] = 524_288 + (cuda + tensor) // 1024
        if DURATION in values:
            values[DURATION] = 2_048 + (cuda + tensor) // 400_000
        self.rows.append({"kernel": name, "stack": tuple(stack), "values": values, "block": block, "grid": grid})


def _cuda_counts(flops: int) -> dict:
    return {FFMA: flops // 2, FADD: flops % 2}


def _matmul_kernels(k: Kernels, entry: dict, phase: str, dtype: str, stack_of) -> None:
    paths = entry["paths"]
    pointwise = int(Fraction(entry["pointwise_flops"]))
    eps = FAKE_EPS[phase]
    for n, (mclass, flops) in enumerate(sorted(entry["matmul"].items())):
        kclass = {"gemm": "gemm", "sdpa": "attention", "conv": "conv"}.get(mclass, "gemm")
        on_tc = entry["tensor_cores"] and dtype in TC_COUNTERS
        name = NAMES[kclass]["tc" if on_tc else "cuda"]
        if kclass == "attention" and phase == "backward":
            name = BACKWARD_ATTENTION
        executed = int(flops * (1 + eps))
        fused = pointwise if n == 0 else 0  # the slot's pointwise work runs in the epilogue
        for path, part, fused_part in zip(paths, _split(executed, len(paths)), _split(fused, len(paths))):
            counts = _cuda_counts(fused_part)
            if on_tc:
                wgmma, aggregate = TC_COUNTERS[dtype]
                counts.update({wgmma: part, aggregate: part, GMMA_INST: part // 131_072})
            else:
                extra = _cuda_counts(part)
                counts = {FFMA: counts[FFMA] + extra[FFMA], FADD: counts[FADD] + extra[FADD]}
            k.add(name, stack_of(path), counts, "(384, 1, 1)", "(66, 2, 1)")
            if phase == "forward" and mclass == "gemm" and entry["gemm_outputs"]:
                outputs = _split(entry["gemm_outputs"], len(paths))[paths.index(path)]
                k.add(SPLITK, stack_of(path), {FADD: outputs * FAKE_RHO}, "(32, 16, 1)", "(32, 8, 1)")


def _pointwise_name(kinds: list[str]) -> str:
    if any("norm" in kind for kind in kinds):
        return POINTWISE["norm"]
    if any("softmax" in kind for kind in kinds):
        return POINTWISE["softmax"]
    return POINTWISE["elementwise"]


def oracle_kernels(oracle: dict, metrics: list[str], dtype: str) -> list[dict]:
    """The kernel rows of a capture of the oracle's spec (see the module docstring)."""
    k = Kernels(metrics)
    model, train = oracle["model"], oracle["pass"] == "train"
    if oracle.get("toy") and (toy := toy_launches()) is not None:
        forward, backward = toy
        names = {"fadd": FADD, "fmul": FMUL, "ffma": FFMA}

        def restack(stack, phase):
            return (phase, model, *(s for s in stack if s != "toy"))
        for launch in forward:
            k.add(launch["kernel"], restack(launch["stack"], "costspec:forward"),
                  {names[o]: v for o, v in launch["counts"].items()}, launch["block"], launch["grid"])
        if train:
            loss, *rest = backward
            k.add(loss["kernel"], ("costspec:loss",), {names[o]: v for o, v in loss["counts"].items()})
            for launch in rest:
                k.add(launch["kernel"], restack(launch["stack"], "costspec:backward"),
                      {names[o]: v for o, v in launch["counts"].items()}, launch["block"], launch["grid"])
        return k.rows
    for phase in ("forward", "backward") if train else ("forward",):
        entries = oracle["slots"][phase]
        if phase == "backward":
            k.add(LOSS, ("costspec:loss",), {FADD: 1_000_003})
            k.add(SEED, ("costspec:backward",), {})
            entries = list(reversed(entries))
        phase_range = f"costspec:{phase}"
        for entry in entries:
            ranges = entry.get("ranges", {})
            if not entry["paths"]:  # no NVTX path resolves to the slot: the model's own range
                entry, ranges = {**entry, "paths": [""]}, {"": []}

            def stack_of(path, ranges=ranges, phase_range=phase_range):
                return (phase_range, model, *ranges.get(path, [path]))
            if entry["matmul"]:
                _matmul_kernels(k, entry, phase, dtype, stack_of)
                continue
            pointwise = int(Fraction(entry["pointwise_flops"]) * (1 + FAKE_KAPPA))
            name = _pointwise_name(entry["pointwise_kinds"]) if pointwise else GATHER
            for path, part in zip(entry["paths"], _split(pointwise, len(entry["paths"]))):
                k.add(name, stack_of(path), _cuda_counts(part))
    return k.rows


PROBE_KINDS = {"mm", "sparse24", "sdpa"}


def probe_kernels(cases: list[dict], metrics: list[str]) -> list[dict]:
    """One wgmma kernel per probe case with exactly the expected Tensor-Core FLOPs (fp32: CUDA cores)."""
    k = Kernels(metrics)
    for case in cases:
        dtype, flops = case["dtype"], case["flops"]
        if dtype == "fp32":
            k.add(NAMES["gemm"]["cuda"], (f"probe:{case['name']}",), _cuda_counts(flops))
            continue
        wgmma, aggregate = TC_COUNTERS.get(dtype, TC_COUNTERS["bf16"])
        if case["kind"] == "sparse24":
            wgmma = wgmma.replace("_sparsity_off", "_sparsity_on")
            flops = case["executed_flops"]
        name = NAMES["attention" if case["kind"] == "sdpa" else "gemm"]["tc"]
        k.add(name, (f"probe:{case['name']}",), {wgmma: flops, aggregate: flops, GMMA_INST: flops // 131_072})
    return k.rows


def _unit(metric: str) -> str:
    if metric.startswith("dram__bytes"):
        return "byte"
    if metric == DURATION:
        return "nsecond"
    if metric.startswith(T):
        return ""
    return "inst"


def raw_page(rows: list[dict], metrics: list[str], cc: str = "9.0") -> str:
    """The raw page as `ncu --csv --page raw --print-units base --log-file` writes it (with the
    ==PROF== lines before the header)."""
    # as on the H100 (ncu 2025.3): every requested .sum counter comes with its per-unit .avg/.max/.min
    # rollups, the averages fractional; plain numbers under LC_ALL=C
    columns = sorted({*metrics, *(f"{m[:-4]}.{r}" for m in metrics if m.endswith(".sum") for r in ROLLUPS)})
    buf = io.StringIO()
    buf.write(f"==PROF== Connected to process {PID} (/opt/torch/.venv/bin/python3)\n==PROF== {FAKE_LINE}\n")
    for i, row in enumerate(rows):
        short = re.sub(r"<.*|\(.*", "", row["kernel"].removeprefix("void "))
        buf.write(f'==PROF== Profiling "{short}" - {i}: 0%....50%....100% - 11 passes\n')
    buf.write(f"==PROF== Disconnected from process {PID}\n")
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(ATTRIBUTE_COLUMNS + columns)
    writer.writerow([""] * len(ATTRIBUTE_COLUMNS) + [_unit(m) for m in columns])
    for i, row in enumerate(rows):
        writer.writerow([str(i), PID, "python3", "127.0.0.1", _threads_cell(row["stack"]), "", row["kernel"], "1",
                         "7", row["block"], row["grid"], "0", cc, FAKE_GPU]
                        + [_rollup(row["values"], m) for m in columns])
    return buf.getvalue()


ROLLUPS = ("avg", "max", "min")
UNITS_PER_GPU = 132  # the H100's SMs: what .avg divides by


def _rollup(values: dict, metric: str) -> str:
    if metric in values:
        return str(values[metric])
    base, _, kind = metric.rpartition(".")
    total = values.get(f"{base}.sum", 0)
    if kind == "avg":
        return f"{total / UNITS_PER_GPU:.2f}"
    return str(-(-total // UNITS_PER_GPU) if kind == "max" else total // UNITS_PER_GPU)


def _threads_cell(stack) -> str:
    """Under --nvtx-push-pop-scope process, a backward kernel's cell holds two threads' stacks: the
    main thread's (costspec:backward) and autograd's own, each after its thread id (seen on the H100)."""
    stack = tuple(stack)
    if "costspec:backward" not in stack or stack[-1] == "costspec:backward":
        return nvtx_cell(stack)
    cut = stack.index("costspec:backward") + 1
    main, autograd = nvtx_cell(stack[:cut]).rstrip(), nvtx_cell(stack[cut:])
    return f"{main} {int(PID) + 28}" + autograd[len(PID):]


def fake_ncu(argv: list[str]) -> int:
    unknown = {m for m in os.environ.get(UNKNOWN_METRICS_ENV, "").split(",") if m}
    if "--version" in argv:
        print(f"NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
              f"{FAKE_NCU_VERSION}")
        return 0
    if "--query-metrics" in argv:
        return _query_metrics(unknown)
    try:
        opts, program = parse_ncu_argv(argv)
    except FakeNcuError as exc:
        print(f"==ERROR== {exc} (fake ncu)", file=sys.stderr)
        return 1
    log = Path(opts["--log-file"]) if "--log-file" in opts else None
    if os.environ.get(HANG_ENV):
        time.sleep(3600)

    def fail(message: str) -> int:
        text = f"==PROF== {FAKE_LINE}\n==ERROR== {message}\n"
        if log is not None:
            log.write_text(text, encoding="utf-8")
        print(text, end="", file=sys.stderr)
        return 1

    if "--import" in opts:
        return _export(Path(opts["--import"]), log, opts.get("--page", "raw"), fail)
    metrics = expand_metrics([m for m in opts.get("--metrics", "").split(",") if m], unknown)
    bad = [m for m in metrics if m in unknown]
    if bad:
        return fail(f"Failed to find metric {bad[0]}")
    if os.environ.get(FAIL_ENV):
        return fail("The application returned an error code (1). (fake failure injected by the test)")
    if not program:
        return fail("no application to profile")
    if log is None:
        return fail("this fake ncu writes only with --log-file")
    cc = "9.0"
    if "costspec.ncu.runner" in program:
        args = _runner_args(program)
        oracle = json.loads(Path(os.environ[ORACLE_ENV]).read_text(encoding="utf-8"))
        if (oracle["spec"], oracle["pass"]) != (args.spec, args.pass_):
            return fail(f"the oracle is for {oracle['spec']} {oracle['pass']}, the program runs {args.spec} "
                        f"{args.pass_}")
        dtype = args.dtype or oracle["dtype"]
        rows = oracle_kernels(oracle, metrics, dtype)
        if args.sidecar:
            sets = dict(s.split("=", 1) for s in args.sets)
            bind = {k: int(v) for k, v in sets.items()}
            if args.batch is not None:
                bind["B"] = args.batch
            facts = {"costspec_ncu_sidecar": 1, "fake": True, "note": FAKE_LINE, "gpu": FAKE_GPU,
                     "compute_capability": cc, "torch_version": "FAKE", "cuda_version": "FAKE", "spec": args.spec,
                     "spec_name": oracle["model"], "pass": args.pass_, "dtype": dtype, "warmup": args.warmup,
                     "backend": args.backend, "phase": args.phase, "context": args.context,
                     "bind": bind, "dims": oracle["dims"], "runner_argv": program}
            Path(args.sidecar).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    elif "--gemm-probe-program" in program:
        at = program.index("--probe-cases")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from gpu_truth import probe_cases  # the script's own case parser

        cases = probe_cases(program[at + 1])
        rows = probe_kernels(cases, metrics)
        if "--probe-sidecar" in program:
            sidecar = Path(program[program.index("--probe-sidecar") + 1])
            sidecar.write_text(json.dumps({"fake": True, "note": FAKE_LINE, "gpu": FAKE_GPU, "cases": cases,
                                           "errors": {}}, indent=2) + "\n", encoding="utf-8")
    elif Path(program[0]).name == "fp16probe":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from gpu_truth import FP16_PROBE_KERNELS

        iterations, blocks, threads = (int(a) for a in program[1:4])
        k = Kernels(metrics)
        for name, (op, _) in FP16_PROBE_KERNELS.items():  # as if each counted one per thread instruction
            k.add(f"{name}(void *, int)", (), {f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum":
                                               iterations * blocks * threads}, f"({threads}, 1, 1)", f"({blocks}, 1, 1)")
        rows = k.rows
    else:
        return fail(f"this fake ncu profiles only costspec's runner and the probes, not {program[:3]}")
    log.write_text(raw_page(rows, metrics, cc), encoding="utf-8")
    if "--export" in opts:
        Path(opts["--export"]).write_text(f"{FAKE_LINE}\n(a placeholder for the .ncu-rep report)\n", encoding="utf-8")
    return 0


def known_metrics() -> set[str]:
    """The metric names this fake ncu knows: costspec's lists for every architecture, and the
    ``_sparsity_on`` twin of every ``_sparsity_off`` counter."""
    names: set[str] = {FADD, FMUL, FFMA, DRAM_READ, DRAM_WRITE, DURATION, GMMA_INST}
    try:
        metrics = _metrics_module()
        for cc in metrics.ARCHS:
            names.update(metrics.metrics_for(cc))
    except Exception:  # noqa: BLE001 - a fake: the short list will do
        names.update(m for pair in TC_COUNTERS.values() for m in pair)
    return names | {m.replace("_sparsity_off", "_sparsity_on") for m in names if "_sparsity_off" in m}


def _metrics_module():
    """costspec/ncu/metrics.py, loaded on its own: it needs only costspec.core.errors, so this short-lived
    process stubs that instead of importing costspec (sympy and all: a second per call)."""
    import types

    errors = types.ModuleType("costspec.core.errors")
    errors.CostspecError = type("CostspecError", (Exception,), {})  # type: ignore[attr-defined]
    errors.UsageError = type("UsageError", (errors.CostspecError,), {})  # type: ignore[attr-defined]
    for name in ("costspec", "costspec.core"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules.setdefault("costspec.core.errors", errors)
    module = _load(ROOT / "costspec" / "ncu" / "metrics.py", "_gpu_truth_ncu_metrics")
    if module is None:
        raise ImportError("costspec/ncu/metrics.py is not there")
    return module


def expand_metrics(metrics: list[str], unknown: set[str]) -> list[str]:
    """``regex:PATTERN`` items replaced by the known names they match (as ncu expands them)."""
    if not any(m.startswith("regex:") for m in metrics):
        return metrics
    known = sorted(known_metrics() - unknown)
    out: list[str] = []
    for item in metrics:
        if item.startswith("regex:"):
            pattern = re.compile(item[len("regex:"):])
            out += [m for m in known if pattern.search(m) and m not in out]
        elif item not in out:
            out.append(item)
    return out


def _export(report: Path, log: Path | None, page: str, fail) -> int:
    """``ncu --import REPORT --page details|raw --log-file OUT``: this fake's reports sit next to the raw page
    it wrote (same stem), which it turns into the details page (one row per kernel and metric, the columns of
    tests/data/ncu/make_toy_fixtures.py)."""
    raw = report.with_suffix(".csv")
    if not report.is_file() or not raw.is_file() or log is None:
        return fail(f"cannot import {report}")
    lines = raw.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    header, units, data = rows[0], rows[1], rows[2:]
    if page == "raw":
        log.write_text("".join(lines), encoding="utf-8")
        return 0
    toy = _load(ROOT / "tests" / "data" / "ncu" / "make_toy_fixtures.py", "_gpu_truth_make_toy_fixtures")
    head = toy.HEADER if toy is not None else ATTRIBUTE_COLUMNS[:13] + ["Section Name", "Metric Name", "Metric Unit",
                                                                        "Metric Value"]
    first = ATTRIBUTE_COLUMNS.index("device__attribute_display_name") + 1
    buf = io.StringIO()
    buf.write(f"==PROF== {FAKE_LINE}\n")
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(head)
    for row in data:
        cells = dict(zip(header, row))
        for metric, unit in zip(header[first:], units[first:]):
            values = {**cells, "Section Name": "Command line profiler metrics", "Metric Name": metric,
                      "Metric Unit": unit, "Metric Value": cells[metric]}
            writer.writerow([values.get(column, "") for column in head])
    log.write_text(buf.getvalue(), encoding="utf-8")
    return 0


def _query_metrics(unknown: set[str]) -> int:
    names = known_metrics()
    print(f"# {FAKE_LINE}")
    print("Device GH100 (FAKE)\n------------------------------------------------------------------------------")
    print("Metric Name                                              Metric Description")
    for name in sorted(names - unknown):
        print(f"{name.removesuffix('.sum'):<56} Counter (fake description)")
    return 0


# ---------------------------------------------------------------------------------------------------
# fake nvidia-smi
# ---------------------------------------------------------------------------------------------------
def fake_nvidia_smi(argv: list[str]) -> int:
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query:
        values = {"name": FAKE_GPU, "driver_version": FAKE_DRIVER, "memory.total": "81559 MiB", "compute_cap": "9.0",
                  "clocks.max.sm": "1980 MHz", "clocks.sm": "345 MHz", "pci.bus_id": "00000000:00:05.0",
                  "uuid": "GPU-00000000-fake"}
        print(", ".join(values.get(field.strip(), "[N/A]") for field in query.split(",")))
        return 0
    print(f"+-- NVIDIA-SMI {FAKE_DRIVER}  (FAKE nvidia-smi: {FAKE_LINE}) --+\n|  0  {FAKE_GPU}  81559MiB |")
    return 0


# ---------------------------------------------------------------------------------------------------
# fake `costspec time`
# ---------------------------------------------------------------------------------------------------
def fake_time(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="costspec time (fake)")
    p.add_argument("spec")
    p.add_argument("-b", "--batch", type=int, default=None)
    p.add_argument("--set", dest="sets", action="append", default=[])
    p.add_argument("--pass", dest="pass_", default="forward")
    p.add_argument("--dtype", default=None)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--gpu", default=None)
    p.add_argument("--format", default="table")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--phase", default=None)  # (the oracle was prepared for it)
    p.add_argument("--context", type=int, default=None)
    args = p.parse_args(argv)
    if os.environ.get(HANG_ENV):
        time.sleep(3600)
    if os.environ.get(FAIL_ENV):
        print("costspec: error: CUDA out of memory (fake failure injected by the test)", file=sys.stderr)
        return 2
    report = json.loads(Path(os.environ[ORACLE_ENV]).read_text(encoding="utf-8"))["eval"]
    train = args.pass_ == "train"

    def timed(row: dict) -> dict:
        est = row.get("est_time_s")
        measured = FAKE_TIME_FACTOR * est if est else None
        fwd = None if measured is None else (measured / 3 if train else measured)
        bwd = None if measured is None or not train else measured - fwd
        return {"name": row["name"], "label": row["label"], "depth": row["depth"], "forward_s": fwd,
                "backward_s": bwd, "measured_s": measured, "estimate_s": est if args.gpu else None,
                "ratio": FAKE_TIME_FACTOR if est and args.gpu else None}

    total = timed(report["total"])
    estimate = (report.get("roofline") or {}).get("est_time_s")
    out = {"fake": True, "spec": report["spec"], "pass": args.pass_, "dims": report["dims"], "device": "cuda (FAKE)",
           "dtype": args.dtype or report["precision"], "warmup": args.warmup, "repeats": args.repeats,
           "gpu": args.gpu, "model_forward_s": total["forward_s"], "model_backward_s": total["backward_s"] or 0.0,
           "step_s": (total["measured_s"] or 0.0) * 1.05, "estimate_total_s": estimate,
           "columns": [{"key": k, "title": k, "kind": "seconds"} for k in ("forward_s", "backward_s", "measured_s",
                                                                            "estimate_s")]
           + [{"key": "ratio", "title": "measured/est.", "kind": "ratio"}],
           "rows": [timed(r) for r in report["rows"]], "total": total, "notes": [FAKE_LINE]}
    print(json.dumps(out, indent=2))
    return 0


TOOLS = {"ncu": fake_ncu, "nvidia-smi": fake_nvidia_smi, "time": fake_time}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in TOOLS:
        print(f"usage: gpu_truth_fakes.py {{{','.join(TOOLS)}}} ARGS...", file=sys.stderr)
        return 2
    return TOOLS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
