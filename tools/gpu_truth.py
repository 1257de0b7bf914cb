#!/usr/bin/env python3
"""The prepared GPU run: every measurement costspec still needs from a real GPU, in one script.

Run it on the lent H100 through the device tool (docs/ncu.md, "Running the GPU truth script"):

    python3 tools/gpu_truth.py                      # call 1: writes $OUT/gpu_truth.tar.gz, summary.json, ...
    python3 tools/gpu_truth.py --resume .gpu_truth  # call 2: skips what call 1 finished

It prints the plan (steps, budgets) first, runs the steps in order of priority, each under its own
timeout, records a step that fails or times out and goes on, and stops starting steps before the
call's deadline (``--deadline``, 540 s: the device tool allows 600 s a command); what is left is
``deferred`` and done by the next call with ``--resume``. Everything goes under a work folder and is
packed into ``--out`` (default ``$OUT``) within the device tool's limits on what comes back (at most
8 files, 16 MiB each, 64 MiB in all, names of letters, digits, ``._-``):

* ``gpu_truth.tar.gz``: ``ncu/`` raw-page CSVs + JSON sidecars of the captures, ``probe/`` the GEMM
  probe, ``time/`` ``costspec time`` JSON, ``compare/``, ``calib/``, ``eval/`` the offline
  analyses, ``env/`` versions and ncu's metric names, ``logs/`` one log per step, ``summary.json``;
* ``summary.json``: the state (every step: status, seconds, files, result), the versions, the calls;
* ``gpu_truth.log``: what was printed; ``ncu_reports.tar.gz``: the ``.ncu-rep`` reports that fit.

The steps: the versions; a cuBLAS/cuSPARSELt/flash GEMM probe under ncu (are the Tensor-Core
counters 2*M*N*K on Hopper; wgmma in the aggregates, ``op_hgmma`` or both); ``costspec ncu run``
captures of toy_mlp (fp32 forward, train), vit_b (bf16 batch 8: L=1 and L=2 train, which also time
the full captures, then the full forward and train), llama_1b (L=2 prefill; decode when costspec
has a ``--phase`` option), a 2:4-sparse spec; ``costspec time`` for vit_b/vit_l (batch 1, 8, 64,
256, forward and train) and llama_1b against the roofline of the GPU found; then, offline (here or
later with ``--offline``), ``ncu compare`` of every capture, ``ncu calibrate`` on toy_mlp and the
1-block vit_b, ``eval --calibration`` for vit_b / vit_l. ``--dry-run`` prints the plan and the
exact commands. ``--fake`` (or ``COSTSPEC_GPU_TRUTH_FAKE=1``) runs everything offline with the
fakes of ``tools/gpu_truth_fakes.py`` in place of ncu, nvidia-smi and CUDA: every number is then
synthetic and marked FAKE in every file (``tests/ncu/test_gpu_truth.py`` runs it).

The captures run the command that ``costspec ncu run --print-command --arch CC`` prints (one line,
the runner and metric list of costspec), with two deliberate differences recorded in each sidecar:
``--clock-control none`` (``--clock-control base`` to keep costspec's default: ncu then locks the
clocks to base while it profiles; the device notes ask to leave the card's clocks alone and saw ncu
work with ``none``) and metrics that this ncu does not know left out (learnt from ncu's error, with
one retry). The sidecar is completed as ``costspec ncu run`` completes it (ncu version, command,
kernels).
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
TOOLS = Path(__file__).resolve().parent
FAKES = TOOLS / "gpu_truth_fakes.py"
FAKE_ENV = "COSTSPEC_GPU_TRUTH_FAKE"
FAKE_FAIL_ENV = "COSTSPEC_GPU_TRUTH_FAKE_FAIL"  # fake mode: step ids (patterns) whose tool fails
FAKE_HANG_ENV = "COSTSPEC_GPU_TRUTH_FAKE_HANG"  # fake mode: step ids (patterns) whose tool hangs
FAKE_MARK = "FAKE: synthetic numbers from tools/gpu_truth.py --fake (no GPU), not a measurement"

ARCHIVE, REPORTS, SUMMARY, LOG = "gpu_truth.tar.gz", "ncu_reports.tar.gz", "summary.json", "gpu_truth.log"
MiB = 1024 * 1024
OUT_LIMITS = {"files": 8, "file_bytes": 16 * MiB, "total_bytes": 64 * MiB, "depth": 2}
OUT_NAME = re.compile(r"[A-Za-z0-9._-]+")
FILE_BUDGET = 15 * MiB  # what one packed file may hold (under the 16 MiB limit)
DEFAULT_DEADLINE = 540.0  # seconds from the start of the call; the device tool stops a command at 600
PACK_RESERVE = 20.0  # seconds kept for packing at the end of a call
EXPECTED_SHARE = 0.5  # a step is started when at least this share of its budget is left
DONE = ("ok", "skipped")  # statuses a resumed call does not run again
RETRY = ("failed", "timeout")  # ... run again only with --retry-failed

TOY, VIT_B, VIT_L, LLAMA = "specs/toy_mlp.yaml", "specs/vit_b.yaml", "specs/vit_l.yaml", "specs/llama_1b.yaml"
SPARSE = "work:inputs/sparse24.yaml"  # written by the script into the work folder
SPARSE_SPEC = """\
# yaml-language-server: $schema=../schemas/costspec.schema.json
# Written by tools/gpu_truth.py: two 2:4-sparse bf16 linear layers (the analytic side prices them on
# Sparse Tensor Cores; costspec's generated module runs the weights dense, so the capture shows the
# dense kernels next to the sparse analytic FLOPs).
costspec: 1
name: sparse24
dims:
  M: {value: 4096, doc: tokens}
  D: {value: 4096, doc: width}
precision: {dtype: bf16, sparsity: "2:4"}
input: [M, D]
layers:
  - linear: {out: D}
    name: fc1
  - linear: {out: D}
    name: fc2
"""
DEFAULT_PROBE_CASES = ",".join([
    "mm:bf16:4096x4096x4096", "mm:bf16:8192x8192x8192", "mm:bf16:128x4096x4096", "mm:bf16:1576x2304x768",
    "mm:fp16:4096x4096x4096", "mm:tf32:4096x4096x4096", "mm:fp32:1024x1024x1024", "mm:fp8:4096x4096x4096",
    "sparse24:bf16:4096x4096x4096", "sdpa:bf16:8x12x197x64"])
PROBE_REGEX = "regex:^sm__(ops_path_tensor_|inst_executed_pipe_tensor).*"
# The CUDA-core probe: kernel -> (the counter its one instruction should land in, lanes (FLOPs) it does)
FP16_PROBE_KERNELS = {
    "probe_hfma2_packed": ("hfma", 4), "probe_hfma_scalar": ("hfma", 2), "probe_hmul_scalar": ("hmul", 1),
    "probe_hadd2_packed": ("hadd", 2), "probe_bf16_hfma2_packed": ("hfma", 4), "probe_ffma_scalar": ("ffma", 2)}
FP16_PROBE_ARGS = ("256", "264", "256")  # iterations, blocks (2 x 132 SMs), threads per block
FP16_PROBE_SOURCE = r"""// Written by tools/gpu_truth.py: one FP instruction per thread and iteration (a dependent chain).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
#define IDX (blockIdx.x * blockDim.x + threadIdx.x)
__global__ void probe_hfma2_packed(__half2* p, int n) {
  __half2 a = p[IDX], b = __floats2half2_rn(1.0f, 0.999f), c = __floats2half2_rn(0.001f, 0.002f);
  for (int k = 0; k < n; ++k) a = __hfma2(a, b, c);
  p[IDX] = a;
}
__global__ void probe_hfma_scalar(__half* p, int n) {
  __half a = p[IDX], b = __float2half(0.999f), c = __float2half(0.001f);
  for (int k = 0; k < n; ++k) a = __hfma(a, b, c);
  p[IDX] = a;
}
__global__ void probe_hmul_scalar(__half* p, int n) {
  __half a = p[IDX], b = __float2half(0.999f);
  for (int k = 0; k < n; ++k) a = __hmul(a, b);
  p[IDX] = a;
}
__global__ void probe_hadd2_packed(__half2* p, int n) {
  __half2 a = p[IDX], c = __floats2half2_rn(0.001f, 0.002f);
  for (int k = 0; k < n; ++k) a = __hadd2(a, c);
  p[IDX] = a;
}
__global__ void probe_bf16_hfma2_packed(__nv_bfloat162* p, int n) {
  __nv_bfloat162 a = p[IDX], b = __floats2bfloat162_rn(1.0f, 0.999f), c = __floats2bfloat162_rn(0.001f, 0.002f);
  for (int k = 0; k < n; ++k) a = __hfma2(a, b, c);
  p[IDX] = a;
}
__global__ void probe_ffma_scalar(float* p, int n) {
  float a = p[IDX];
  for (int k = 0; k < n; ++k) a = fmaf(a, 0.999f, 0.001f);
  p[IDX] = a;
}
int main(int argc, char** argv) {
  if (argc != 4) { std::fprintf(stderr, "usage: fp16probe ITERATIONS BLOCKS THREADS\n"); return 2; }
  int n = std::atoi(argv[1]), blocks = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  void* buf;
  CHECK(cudaMalloc(&buf, (size_t)blocks * threads * 4));
  CHECK(cudaMemset(buf, 0, (size_t)blocks * threads * 4));
  probe_hfma2_packed<<<blocks, threads>>>((__half2*)buf, n); CHECK(cudaGetLastError());
  probe_hfma_scalar<<<blocks, threads>>>((__half*)buf, n); CHECK(cudaGetLastError());
  probe_hmul_scalar<<<blocks, threads>>>((__half*)buf, n); CHECK(cudaGetLastError());
  probe_hadd2_packed<<<blocks, threads>>>((__half2*)buf, n); CHECK(cudaGetLastError());
  probe_bf16_hfma2_packed<<<blocks, threads>>>((__nv_bfloat162*)buf, n); CHECK(cudaGetLastError());
  probe_ffma_scalar<<<blocks, threads>>>((float*)buf, n); CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::printf("fp16probe: 6 kernels, %d iterations x %d threads\n", n, blocks * threads);
  return 0;
}
"""
COUNTER_BLOCKED = ("ERR_NVGPUCTRPERM", "LibraryNotLoaded", "Failed to initialize the profiler",
                   "does not have permission")


# ===================================================================================================
# The plan
# ===================================================================================================
@dataclass
class Step:
    id: str
    kind: str  # env | probe | capture | time | compare | calibrate | eval
    budget: float  # seconds: the step's timeout
    what: str
    spec: str | None = None
    batch: int | None = None
    sets: dict[str, int] = field(default_factory=dict)
    pass_: str = "forward"
    dtype: str | None = None
    needs: tuple[str, ...] = ()
    gpu: bool = True  # needs the GPU machine (compare, calibrate and eval do not)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def expected(self) -> float:
        """The time a step is started with at least: a share of its budget; offline steps run in
        this process in seconds."""
        return min(self.budget, 5.0) if not self.gpu else self.budget * EXPECTED_SHARE


def _capture(stem: str, spec: str, budget: float, dtype: str, pass_: str, batch: int | None = None,
             sets: dict | None = None, what: str = "", **extra) -> list[Step]:
    cid = f"ncu.{stem}"
    steps = [Step(cid, "capture", budget, what or f"costspec ncu run {spec} ({pass_}, {dtype})", spec, batch,
                  dict(sets or {}), pass_, dtype, extra={"stem": stem, **extra}),
             Step(f"compare.{stem}", "compare", 30, f"costspec ncu compare on {cid}", needs=(cid,), gpu=False,
                  extra={"capture": cid})]
    return steps


def build_plan() -> list[Step]:
    """Every step, in order of priority (a call runs them in this order while its time lasts)."""
    vit_guard = {"from": ("ncu.vit_b.bf16.b8.L1.train", "ncu.vit_b.bf16.b8.L2.train"), "dim": "L", "full": 12}
    vit_cal = "calibrate.vit_b.bf16.b8.L1.train"
    steps = [Step("env", "env", 45, "versions (GPU, driver, CUDA, ncu, torch, transformers, costspec), ncu's "
                                    "metric names, costspec's options")]
    steps.append(Step("probe.gemm", "probe", 150, "GEMM probe under ncu, costspec's 9.0 metrics: Tensor-Core "
                                                  "counters vs 2*M*N*K (cuBLAS, fp8, 2:4 cuSPARSELt, flash)",
                      extra={"metrics": "costspec"}))
    steps.append(Step("probe.fp16", "fp16probe", 120, "CUDA-core probe (nvcc, ncu): one HFMA2 / HFMA / HMUL / HADD2 / "
                                                      "bf16 HFMA2 / FFMA per thread and iteration: how ncu counts "
                                                      "packed and scalar half instructions"))
    steps += _capture("toy_mlp.fp32.forward", TOY, 75, "fp32", "forward")
    steps += _capture("toy_mlp.fp32.train", TOY, 90, "fp32", "train")
    steps.append(Step("export.toy_mlp.fp32.train.details", "export", 60, "ncu --import of the toy train report: the "
                                                                        "details page (NVTX columns without --nvtx?)",
                      needs=("ncu.toy_mlp.fp32.train",), extra={"capture": "ncu.toy_mlp.fp32.train"}))
    steps.append(Step("calibrate.toy_mlp.fp32.train", "calibrate", 30, "costspec ncu calibrate toy_mlp (train)",
                      needs=("ncu.toy_mlp.fp32.train",), gpu=False, extra={"capture": "ncu.toy_mlp.fp32.train"}))
    steps += _capture("vit_b.bf16.b8.L1.train", VIT_B, 120, "bf16", "train", 8, {"L": 1},
                      "costspec ncu run vit_b --set L=1 (one block; calibration, and the time per block)")
    steps.append(Step(vit_cal, "calibrate", 30, "costspec ncu calibrate vit_b L=1 (train)",
                      needs=("ncu.vit_b.bf16.b8.L1.train",), gpu=False,
                      extra={"capture": "ncu.vit_b.bf16.b8.L1.train"}))
    steps += _capture("vit_b.bf16.b8.L2.train", VIT_B, 150, "bf16", "train", 8, {"L": 2},
                      "costspec ncu run vit_b --set L=2 (repeat instances; with L=1, the time per block)")
    steps += _capture("llama_1b.bf16.L2.forward", LLAMA, 120, "bf16", "forward", None, {"L": 2})
    steps += _capture("llama_1b.bf16.L2.decode", LLAMA, 120, "bf16", "forward", None, {"L": 2},
                      "costspec ncu run llama_1b --phase decode (when costspec has --phase)", phase="decode")
    steps += _capture("sparse24.bf16.forward", SPARSE, 75, "bf16", "forward",
                      what="costspec ncu run on a 2:4-sparse spec (two bf16 linear layers, 4096^2)")
    for pass_, budget in (("forward", 240), ("train", 480)):
        stem = f"vit_b.bf16.b8.{pass_}"
        steps += _capture(stem, VIT_B, budget, "bf16", pass_, 8, guard=vit_guard)
        steps.append(Step(f"compare.{stem}.calibrated", "compare", 30, f"ncu compare {stem} --calibration (L=1)",
                          needs=(f"ncu.{stem}", vit_cal), gpu=False,
                          extra={"capture": f"ncu.{stem}", "calibration": vit_cal}))
    for spec, name in ((VIT_B, "vit_b"), (VIT_L, "vit_l")):
        steps.append(Step(f"eval.{name}.bf16.b8.train.calibrated", "eval", 30,
                          f"costspec eval {name} --batch 8 --pass train --calibration (vit_b L=1)", spec, 8,
                          pass_="train", needs=(vit_cal,), gpu=False, extra={"calibration": vit_cal}))
    steps.append(Step("time.llama_1b.bf16.b1.forward", "time", 45, "costspec time llama_1b (16 blocks) forward",
                      LLAMA, 1, {}, "forward", "bf16"))
    steps.append(Step("time.llama_1b.bf16.L2.b1.forward", "time", 30, "costspec time llama_1b --set L=2 forward",
                      LLAMA, 1, {"L": 2}, "forward", "bf16"))
    for batch in (1, 8):  # decode: one new token per sequence after 2,048 cached ones (time per token)
        steps.append(Step(f"time.llama_1b.bf16.b{batch}.decode", "time", 45,
                          f"costspec time llama_1b --phase decode --context 2048 --batch {batch} (16 blocks)",
                          LLAMA, batch, {}, "forward", "bf16", extra={"phase": "decode", "context": 2048}))
    for spec, name, base in ((VIT_B, "vit_b", 30), (VIT_L, "vit_l", 40)):
        for batch in (1, 8, 64, 256):
            for pass_ in ("forward", "train"):
                budget = base + (base if batch == 256 and pass_ == "train" else 0)
                steps.append(Step(f"time.{name}.bf16.b{batch}.{pass_}", "time", budget,
                                  f"costspec time {name} --batch {batch} --pass {pass_}", spec, batch, {}, pass_,
                                  "bf16"))
    steps.append(Step("probe.gemm_regex", "probe", 120, f"GEMM probe with --metrics {PROBE_REGEX} (does regex "
                                                        "expand on 9.0; _sparsity_on counters)",
                      extra={"metrics": "regex"}))
    return steps


def estimate_restriction(w1: float, w2: float, share: float, full: int, timeout: float,
                         margin: float = 0.85) -> tuple[int | None, float]:
    """(the dim value to capture at, or None for the full value; the estimated seconds of the full
    capture) from the wall times of the L=1 and L=2 captures: est = w1 + (full - 1) * (w2 - w1) * share,
    `share` being the part of a block's kernels the capture runs (1 for train, the forward share else)."""
    per_block = max(w2 - w1, 0.1) * max(min(share, 1.0), 0.05)
    estimate = w1 + (full - 1) * per_block
    if estimate <= margin * timeout:
        return None, estimate
    fit = int((margin * timeout - w1) // per_block) + 1
    return max(2, min(fit, full - 1)), estimate


def decide(step: Step, remaining: float) -> tuple[bool, float]:
    """(start the step now, its timeout): started when the time left holds at least its expected
    time (EXPECTED_SHARE of its budget); the timeout is its budget, or what is left if that is less."""
    if remaining < min(step.expected, step.budget):
        return False, 0.0
    return True, min(step.budget, remaining)


def probe_cases(text: str) -> list[dict]:
    """`kind:dtype:dims` items: mm (M x N x K, C = A @ B), sparse24 (F.linear with a 2:4 weight,
    M x N x K), sdpa (B x H x S x D). flops = the dense-equivalent count (2*M*N*K, 4*B*H*S^2*D);
    executed_flops = what a 2:4 kernel executes (half)."""
    cases = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        kind, dtype, shape = item.split(":")
        dims = [int(x) for x in shape.split("x")]
        if kind == "sdpa":
            b, h, s, d = dims
            flops = 4 * b * h * s * s * d
        else:
            m, n, k = dims
            flops = 2 * m * n * k
        cases.append({"name": f"{kind}_{dtype}_{shape}", "kind": kind, "dtype": dtype, "dims": dims, "flops": flops,
                      "executed_flops": flops // 2 if kind == "sparse24" else flops})
    return cases


# ===================================================================================================
# The GEMM probe program (runs on the GPU, under ncu)
# ===================================================================================================
def _probe_fn(torch, case: dict) -> Callable[[], Any]:
    import torch.nn.functional as F  # noqa: N812

    kind, dtype, dims = case["kind"], case["dtype"], case["dims"]
    dev = "cuda"
    if kind == "sdpa":
        b, h, s, d = dims
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        return lambda: F.scaled_dot_product_attention(q, k, v)
    m, n, kk = dims
    if kind == "sparse24":
        from torch.sparse import to_sparse_semi_structured

        w = torch.randn(n, kk, device=dev, dtype=torch.bfloat16)
        mask = torch.tensor([1, 1, 0, 0], device=dev, dtype=torch.bool).tile(n, kk // 4)
        ws = to_sparse_semi_structured(w * mask)
        x = torch.randn(m, kk, device=dev, dtype=torch.bfloat16)
        return lambda: F.linear(x, ws)
    if dtype == "fp8":
        a = torch.randn(m, kk, device=dev).to(torch.float8_e4m3fn)
        bt = torch.randn(n, kk, device=dev).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev)
        return lambda: torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[dtype]
    a = torch.randn(m, kk, device=dev, dtype=tdtype)
    b = torch.randn(kk, n, device=dev, dtype=tdtype)

    def run():
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        try:
            return a @ b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
    return run


def gemm_probe_program(cases_text: str, sidecar: str | None) -> int:
    import torch

    torch.manual_seed(0)
    runs, errors = [], {}
    for case in probe_cases(cases_text):
        try:
            runs.append((case, _probe_fn(torch, case)))
        except Exception as exc:  # noqa: BLE001 - recorded: one case must not stop the others
            errors[case["name"]] = f"{type(exc).__name__}: {exc}"
    for _ in range(3):  # warm-up: handles, heuristics, cuSPARSELt plans, outside the profiled region
        for case, fn in list(runs):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001
                errors[case["name"]] = f"{type(exc).__name__}: {exc}"
                runs.remove((case, fn))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for case, fn in runs:
        torch.cuda.nvtx.range_push(f"probe:{case['name']}")
        fn()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    if sidecar:
        major, minor = torch.cuda.get_device_capability()
        Path(sidecar).write_text(json.dumps({
            "gpu": torch.cuda.get_device_name(), "compute_capability": f"{major}.{minor}",
            "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
            "cases": [c for c, _ in runs], "errors": errors}, indent=2) + "\n", encoding="utf-8")
    for name, error in errors.items():
        print(f"probe case {name}: {error}", file=sys.stderr)
    return 0


# ===================================================================================================
# Running things
# ===================================================================================================
def costspec_cli(args: list[str]) -> tuple[int, str, str]:
    """Run a costspec command in this process (its CLI, as `python -m costspec ARGS`): (rc, stdout, stderr)."""
    from costspec.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception as exc:  # noqa: BLE001 - recorded as the step's failure
            rc = 3
            err.write(f"{type(exc).__name__}: {exc}\n")
    return rc, out.getvalue(), err.getvalue()


def run_command(cmd: list[str], log: Path, timeout: float, env: dict, stdout: Path | None = None,
                cwd: Path = ROOT, header: str = "") -> tuple[int | None, float, bool]:
    """Run `cmd` in its own process group, its output appended to `log` (stdout to `stdout` if given);
    on timeout the group is stopped (TERM, then KILL). (exit status or None, seconds, timed out)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as log_f, contextlib.ExitStack() as stack:
        out_f = stack.enter_context(open(stdout, "wb")) if stdout else log_f
        log_f.write(f"{header}$ {shlex.join(cmd)}\n".encode())
        log_f.flush()
        start = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out_f, stderr=log_f, start_new_session=True)
        except OSError as exc:
            log_f.write(f"cannot start: {exc}\n".encode())
            return 127, time.monotonic() - start, False
        try:
            return proc.wait(timeout=max(timeout, 0.1)), time.monotonic() - start, False
        except subprocess.TimeoutExpired:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            log_f.write(f"\n[gpu_truth] stopped after {timeout:.0f} s (its timeout)\n".encode())
            return None, time.monotonic() - start, True


def capture_output(cmd: list[str], env: dict, timeout: float = 60) -> tuple[int, str]:
    try:
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        return done.returncode, (done.stdout + done.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, f"{type(exc).__name__}: {exc}"


def tree_hash() -> str:
    """sha256 over costspec/, specs/ and these tools (paths and bytes): names the code that ran."""
    digest = hashlib.sha256()
    files = sorted([*ROOT.glob("costspec/**/*.py"), *ROOT.glob("costspec/data/**/*.yaml"),
                    *ROOT.glob("costspec/data/**/*.json"), *ROOT.glob("specs/*.yaml"), *TOOLS.glob("gpu_truth*.py")])
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def costspec_commit(env: dict) -> str | None:
    rc, out = capture_output(["git", "-C", str(ROOT), "rev-parse", "HEAD"], env, 20)
    if rc == 0 and re.fullmatch(r"[0-9a-f]{40}", out):
        return out
    for source in (os.environ.get("COSTSPEC_COMMIT"), ROOT / ".gpu_truth" / "commit"):
        if isinstance(source, Path):
            source = source.read_text().strip() if source.is_file() else None
        if source:
            return source.strip()
    return None


def gpu_key(name: str | None) -> str | None:
    """The costspec catalog key of a GPU name from nvidia-smi / torch."""
    n = (name or "").lower()
    for needle, key in (("h200", "h200"), ("h100 pcie", "h100-pcie"), ("h100", "h100-sxm"), ("b200", "b200"),
                        ("a100-sxm4-40gb", "a100-40gb"), ("a100", "a100-80gb"), ("l40s", "l40s"), ("l4", "l4"),
                        ("a10", "a10"), ("4090", "rtx-4090"), ("t4", "t4"), ("v100", "v100-sxm2")):
        if needle in n:
            return key
    return None


def results_folder(key: str | None) -> str:
    return (key or "unknown").split("-")[0]


def check_out_dir(out: Path) -> list[str]:
    """What in `out` breaks the device tool's limits on files that come back (empty: all come back)."""
    problems = []
    files = [p for p in out.rglob("*") if p.is_file()]
    if len(files) > OUT_LIMITS["files"]:
        problems.append(f"{len(files)} files (at most {OUT_LIMITS['files']})")
    total = sum(p.stat().st_size for p in files)
    if total > OUT_LIMITS["total_bytes"]:
        problems.append(f"{total} bytes in all (at most {OUT_LIMITS['total_bytes']})")
    for path in out.rglob("*"):
        rel = path.relative_to(out)
        if any(not OUT_NAME.fullmatch(part) for part in rel.parts):
            problems.append(f"{rel}: a name with characters other than letters, digits, '._-'")
        if path.is_file() and len(rel.parts) - 1 > OUT_LIMITS["depth"]:
            problems.append(f"{rel}: more than {OUT_LIMITS['depth']} folders down")
        if path.is_file() and path.stat().st_size > OUT_LIMITS["file_bytes"]:
            problems.append(f"{rel}: {path.stat().st_size} bytes (at most {OUT_LIMITS['file_bytes']})")
        if path.is_symlink():
            problems.append(f"{rel}: a link")
    return problems


def pack(archive: Path, base: Path, files: list[Path], limit: int = FILE_BUDGET) -> list[str]:
    """tar.gz `files` (relative to `base`) into `archive`; while it is over `limit`, drop the largest file.
    Returns the names left out."""
    left_out: list[str] = []
    files = sorted(files, key=lambda p: str(p))
    while True:
        with tarfile.open(archive, "w:gz") as tar:
            for path in files:
                tar.add(path, arcname=str(path.relative_to(base)), recursive=False)
        if archive.stat().st_size <= limit or not files:
            return left_out
        largest = max(files, key=lambda p: p.stat().st_size)
        files.remove(largest)
        left_out.append(str(largest.relative_to(base)))


# ===================================================================================================
# The run
# ===================================================================================================
class Run:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.fake: bool = bool(args.fake or os.environ.get(FAKE_ENV))
        self.t0 = time.monotonic()
        self.deadline: float = args.deadline
        self.work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="gpu_truth-"))
        self.out = Path(args.out).resolve()
        self.plan = build_plan()
        for item in args.budget:
            sid, _, seconds = item.partition("=")
            for step in self.plan:
                if fnmatch.fnmatch(step.id, sid):
                    step.budget = float(seconds)
        self.state: dict[str, Any] = {"gpu_truth": 1, "fake": self.fake, "steps": {}, "calls": [], "versions": {}}
        self.pythonpath = [str(ROOT)]
        self.cc = args.arch or "9.0"
        self.gpu_key: str | None = args.gpu
        self.bad_metrics: set[str] = set()
        self.ncu_blocked: str | None = None
        self.capabilities: dict[str, Any] = {}
        self.call = 0
        self.tool_dirs: list[str] = []  # folders of ncu / nvcc when they are not on PATH

    def find_tools(self) -> None:
        """Put ncu's and nvcc's folders on PATH when PATH lacks them (where the CUDA image keeps them)."""
        for tool, candidates in (("ncu", ["/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/bin/ncu",
                                          "/usr/local/cuda/nsight-compute*/ncu"]),
                                 ("nvcc", ["/usr/local/cuda/bin/nvcc"])):
            if shutil.which(tool):
                continue
            found = sorted(p for pattern in candidates for p in Path("/").glob(pattern.lstrip("/")))
            if found:
                self.tool_dirs.append(str(found[-1].parent))
                self.say(f"{tool} is not on PATH: using {found[-1]}")

    # -- output ---------------------------------------------------------------------------------
    def say(self, text: str = "") -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed stdout must not stop the run: the log has it
            print(text, flush=True)
        with open(self.work / LOG, "a", encoding="utf-8") as log:
            log.write(text + "\n")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def remaining(self) -> float:
        return self.deadline - PACK_RESERVE - self.elapsed()

    # -- environment ----------------------------------------------------------------------------
    def env(self, step: Step | None = None, extra: dict | None = None) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*self.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        env["PYTHONUNBUFFERED"] = "1"
        if self.tool_dirs:
            env["PATH"] = os.pathsep.join([*self.tool_dirs, env.get("PATH", "")])
        env.update(extra or {})
        if self.fake:
            env[FAKE_ENV] = "1"
            env["PATH"] = os.pathsep.join([str(self.work / "fakebin"), env.get("PATH", "")])
            for var, flag in ((FAKE_FAIL_ENV, "COSTSPEC_FAKE_TOOL_FAIL"), (FAKE_HANG_ENV, "COSTSPEC_FAKE_TOOL_HANG")):
                env.pop(flag, None)
                patterns = [p for p in os.environ.get(var, "").split(",") if p]
                if step is not None and any(fnmatch.fnmatch(step.id, p) for p in patterns):
                    env[flag] = "1"
        return env

    def setup_fakes(self) -> None:
        fakebin = self.work / "fakebin"
        fakebin.mkdir(parents=True, exist_ok=True)
        for tool in ("ncu", "nvidia-smi"):
            path = fakebin / tool
            path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKES))} {tool} "$@"\n')
            path.chmod(0o755)

    def ensure_deps(self) -> str | None:
        """None when costspec's dependencies import; else what is missing and how to carry it."""
        names = {"yaml": "pyyaml", "jsonschema": "jsonschema", "sympy": "sympy", "click": "click"}
        missing = [m for m in names if importlib.util.find_spec(m) is None]
        wheels = Path(self.args.wheels).resolve() if self.args.wheels else ROOT / ".whl"
        if missing and sorted(wheels.glob("*.whl")):
            site = self.work / "site"
            cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                   "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, sorted(wheels.glob("*.whl")))]
            rc, text = capture_output(cmd, dict(os.environ), 180)
            self.say(f"installed the carried wheels from {wheels} into {site}: rc {rc} {text[-300:]}")
            sys.path.insert(0, str(site))
            self.pythonpath.append(str(site))
            importlib.invalidate_caches()
            missing = [m for m in names if importlib.util.find_spec(m) is None]
        if not missing:
            return None
        return (f"costspec needs {', '.join(names[m] for m in missing)}, which this Python does not have "
                f"({sys.executable}). The GPU image has no jsonschema: carry its wheels as .whl/ (docs/ncu.md, "
                "'Running the GPU truth script': jsonschema, referencing, rpds-py, jsonschema-specifications for "
                "CPython 3.12 manylinux x86_64) and name .whl in carry, or pass --wheels DIR.")

    # -- state ----------------------------------------------------------------------------------
    def record(self, sid: str) -> dict | None:
        return self.state["steps"].get(sid)

    def ok(self, sid: str) -> dict | None:
        rec = self.record(sid)
        return rec if rec and rec.get("status") == "ok" else None

    def path(self, rel: str) -> Path:
        return self.work / rel

    def spec_path(self, spec: str) -> str:
        return str(self.work / spec[len("work:"):]) if spec.startswith("work:") else spec

    def resume(self, source: Path) -> None:
        archives = [source] if source.is_file() else [source / ARCHIVE, source / REPORTS]
        found = False
        for archive in archives:
            if archive.is_file():
                with tarfile.open(archive, "r:gz") as tar:
                    tar.extractall(self.work, filter="data")
                found = found or archive.name != REPORTS
        summary = self.work / SUMMARY
        if not found or not summary.is_file():
            raise SystemExit(f"gpu_truth: --resume {source}: no {ARCHIVE} with a {SUMMARY} there")
        previous = json.loads(summary.read_text(encoding="utf-8"))
        if bool(previous.get("fake")) != self.fake:
            raise SystemExit(f"gpu_truth: --resume {source}: that run was {'fake' if previous.get('fake') else 'real'}"
                             f", this one is {'fake' if self.fake else 'real'}")
        self.state = previous
        env = self.ok("env")
        if env:
            self.restore_env(env.get("data", {}))
        for rec in self.state["steps"].values():
            for metric in (rec.get("data") or {}).get("dropped_metrics", []):
                self.bad_metrics.add(metric)

    def restore_env(self, data: dict) -> None:
        self.cc = self.args.arch or data.get("compute_capability") or self.cc
        self.gpu_key = self.args.gpu or data.get("gpu_key") or self.gpu_key
        self.capabilities = data.get("capabilities", {})

    # -- the plan -------------------------------------------------------------------------------
    def selected(self, step: Step) -> bool:
        only = [p for item in self.args.only for p in item.split(",") if p]
        skip = [p for item in self.args.skip for p in item.split(",") if p]
        if only and not any(fnmatch.fnmatch(step.id, p) for p in only):
            return False
        return not any(fnmatch.fnmatch(step.id, p) for p in skip)

    def print_plan(self) -> None:
        total = sum(s.budget for s in self.plan)
        gpu_total = sum(s.budget for s in self.plan if s.gpu)
        mode = "FAKE (no GPU: ncu, nvidia-smi and CUDA are fakes)" if self.fake else "real"
        self.say(f"gpu_truth: {len(self.plan)} steps, budgets {total:.0f} s in all ({gpu_total:.0f} s on the GPU); "
                 f"this call: deadline {self.deadline:.0f} s, a step starts when {EXPECTED_SHARE:.0%} of its budget "
                 f"is left; mode {mode}")
        self.say(f"{'#':>3}  {'step':<40} {'budget':>6}  {'gpu':<3}  what")
        for i, step in enumerate(self.plan, 1):
            mark = "" if self.selected(step) else "  (not selected)"
            self.say(f"{i:>3}  {step.id:<40} {step.budget:>5.0f}s  {'yes' if step.gpu else 'no':<3}  {step.what}{mark}")

    def commands(self, step: Step) -> list[str]:
        """The exact commands a step runs (for --dry-run and the log)."""
        if step.kind == "capture":
            if step.extra.get("phase") and not self.capabilities.get("decode"):
                return ["# skipped: costspec has no --phase option yet (the step records the reason)"]
            plan = self.capture_plan(step, step.sets, self.path(f"ncu/{step.extra['stem']}.csv"))
            if isinstance(plan, str):
                return [f"# {plan}"]
            env = " ".join(f"{k}={v}" for k, v in plan["env"].items())
            return [f"{env} {shlex.join(self.adjust(plan['command']))}"]
        if step.kind == "probe":
            name = step.id.split(".", 1)[1]
            cmd = self.probe_command(step, self.path(f"probe/{name}.csv"), self.path(f"probe/{name}.json"))
            return [f"LC_ALL=C {shlex.join(cmd)}"]
        if step.kind == "time":
            return [shlex.join(self.time_command(step))]
        if step.kind == "fp16probe":
            exe = self.path("probe/fp16probe")
            return [f"nvcc -O3 -arch=sm_{self.cc.replace('.', '')} -o {exe} {exe}.cu",
                    f"LC_ALL=C {shlex.join(self.fp16_probe_command(exe, self.path('probe/fp16.csv')))}"]
        if step.kind == "export":
            from costspec.ncu.metrics import build_export_command

            stem = self.path("ncu/toy_mlp.fp32.train")
            return [f"LC_ALL=C {shlex.join(build_export_command(f'{stem}.ncu-rep', f'{stem}.details.csv', 'details'))}"]
        if step.kind == "env":
            return ["nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv,"
                    "noheader", "ncu --version", "nvcc --version", "ncu --query-metrics --chip gh100",
                    f"{sys.executable} -c 'import torch, transformers ...'", "costspec eval --help; costspec ncu run "
                                                                             "--help  (is there --phase?)"]
        return [f"costspec {shlex.join(args)}" for args in self.offline_args(step, dry=True)]

    # -- step kinds -----------------------------------------------------------------------------
    def adjust(self, cmd: list[str]) -> list[str]:
        """The printed ncu command with this run's clock control and without the metrics ncu refused."""
        cmd = list(cmd)
        if "--clock-control" in cmd:
            cmd[cmd.index("--clock-control") + 1] = self.args.clock_control
        if "--metrics" in cmd and self.bad_metrics:
            at = cmd.index("--metrics") + 1
            cmd[at] = ",".join(m for m in cmd[at].split(",") if m not in self.bad_metrics)
        return cmd

    @staticmethod
    def left_out(printed: list[str], ran: list[str]) -> list[str]:
        """The metrics of costspec's printed command that the command run did not ask for."""
        def metrics(cmd: list[str]) -> list[str]:
            return cmd[cmd.index("--metrics") + 1].split(",") if "--metrics" in cmd else []
        return [m for m in metrics(printed) if m not in metrics(ran)]

    def capture_plan(self, step: Step, sets: dict, csv: Path) -> dict | str:
        args = ["ncu", "run", self.spec_path(step.spec or ""), *(["--batch", str(step.batch)] if step.batch else []),
                *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")], "--pass", step.pass_,
                "--dtype", step.dtype or "bf16", "-o", str(csv), "--print-command", "--arch", self.cc,
                "--format", "json"]
        if step.extra.get("phase"):
            args[3:3] = ["--phase", step.extra["phase"]]
        rc, out, err = costspec_cli(args)
        if rc != 0:
            return f"costspec {shlex.join(args)} exited {rc}: {err.strip()[-500:]}"
        return json.loads(out)

    def probe_command(self, step: Step, csv: Path, sidecar: Path) -> list[str]:
        from costspec.ncu.metrics import build_command

        program = [sys.executable, str(TOOLS / "gpu_truth.py"), "--gemm-probe-program", "--probe-cases",
                   self.args.probe_cases, "--probe-sidecar", str(sidecar)]
        cmd = build_command(program, self.cc, str(csv.with_suffix(".ncu-rep")), nvtx=True, log_file=str(csv),
                            profile_from_start=False)
        if step.extra.get("metrics") == "regex":
            cmd[cmd.index("--metrics") + 1] = PROBE_REGEX
        return self.adjust(cmd)

    def time_command(self, step: Step) -> list[str]:
        args = [step.spec or "", "--batch", str(step.batch or 1),
                *[a for k, v in step.sets.items() for a in ("--set", f"{k}={v}")], "--pass", step.pass_,
                "--dtype", step.dtype or "bf16", *(["--gpu", self.gpu_key] if self.gpu_key else []),
                "--format", "json", "-q"]
        if step.extra.get("phase"):
            args += ["--phase", step.extra["phase"], "--context", str(step.extra["context"])]
        if self.fake:
            return [sys.executable, str(FAKES), "time", *args]
        return [sys.executable, "-m", "costspec", "time", *args]

    def offline_args(self, step: Step, dry: bool = False) -> list[list[str]]:
        capture = self.record(step.extra.get("capture", "")) or {}
        planned = next((s for s in self.plan if s.id == step.extra.get("capture")), None)
        data = capture.get("data") or {}
        if not data.get("csv") and planned is not None:  # not captured yet: where it will be
            data = {"csv": f"ncu/{planned.extra['stem']}.csv", "spec": planned.spec}
        csv = str(self.path(data["csv"])) if data.get("csv") else ""
        spec = self.spec_path(data.get("spec") or step.spec or "")
        cal_step = step.extra.get("calibration")
        calibration = (str(self.path(f"calib/{self.calibration_name(cal_step)}.yaml")) if cal_step else None)
        if step.kind == "compare":  # JSON only: the table is `costspec ncu compare` without --format, anywhere
            phase = planned.extra.get("phase") if planned is not None else None
            return [["ncu", "compare", spec, csv, *(["--calibration", calibration] if calibration else []),
                     *(["--phase", phase] if phase else []), "--format", "json"]]
        if step.kind == "calibrate":
            return [["ncu", "calibrate", spec, csv, "-o", str(self.path(f"calib/{self.calibration_name(step.id)}"
                                                                        ".yaml")), "--format", "json"]]
        if step.kind == "eval":
            return [["eval", self.spec_path(step.spec or ""), "--batch", str(step.batch), "--pass", step.pass_,
                     "--calibration", calibration or "", "--format", "json"]]
        return []

    @staticmethod
    def calibration_name(step_id: str) -> str:
        return step_id[len("calibrate."):]

    def step_env(self, step: Step) -> dict:
        d: dict[str, Any] = {}
        versions: dict[str, Any] = {"python": sys.version.split()[0], "python_executable": sys.executable}
        env = self.env(step)
        for fields in ("name,driver_version,memory.total,compute_cap,clocks.max.sm", "name,driver_version,memory.total"):
            rc, text = capture_output(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], env, 30)
            if rc == 0 and text:  # (an older driver refuses the whole query for one unknown field)
                values = [v.strip() for v in text.splitlines()[0].split(",")]
                versions["gpu"] = dict(zip(fields.split(","), values))
                break
            versions["gpu_error"] = text[-300:]
        rc, text = capture_output(["nvidia-smi"], env, 30)
        (self.path("env")).mkdir(exist_ok=True)
        self.path("env/nvidia-smi.txt").write_text(self.marked_text(text) + "\n", encoding="utf-8")
        rc, text = capture_output(["ncu", "--version"], env, 60)
        versions["ncu"] = text.splitlines()[-1].strip() if rc == 0 and text else None
        nvcc = shutil.which("nvcc", path=env.get("PATH")) or ("/usr/local/cuda/bin/nvcc"
                                                              if Path("/usr/local/cuda/bin/nvcc").exists() else None)
        if nvcc and not self.fake:
            rc, text = capture_output([nvcc, "--version"], env, 60)
            versions["nvcc"] = text.splitlines()[-1].strip() if rc == 0 and text else None
        if self.fake:
            versions["torch"] = {"fake": True}
        else:
            code = ("import json, torch\nd = {'torch': torch.__version__, 'cuda': torch.version.cuda, "
                    "'cudnn': torch.backends.cudnn.version(), 'gpu_available': torch.cuda.is_available()}\n"
                    "try:\n import transformers; d['transformers'] = transformers.__version__\n"
                    "except Exception as e: d['transformers'] = repr(e)\n"
                    "if torch.cuda.is_available():\n p = torch.cuda.get_device_properties(0)\n"
                    " d.update(device=p.name, cc=f'{p.major}.{p.minor}', sms=p.multi_processor_count, "
                    "memory=p.total_memory, l2=getattr(p, 'L2_cache_size', None))\nprint(json.dumps(d))")
            rc, text = capture_output([sys.executable, "-c", code], env, 90)
            try:
                versions["torch"] = json.loads(text.splitlines()[-1])
            except (ValueError, IndexError):
                versions["torch"] = {"error": text[-500:]}
        if not versions.get("gpu") and (versions.get("torch") or {}).get("device"):  # no nvidia-smi, but CUDA
            versions["gpu"] = {"name": versions["torch"]["device"], "compute_cap": versions["torch"].get("cc"),
                               "from": "torch (nvidia-smi did not answer)"}
        from costspec.core.version import __version__

        versions["costspec"] = {"version": __version__, "commit": costspec_commit(env), "tree_sha256": tree_hash()}
        gpu_name = (versions.get("gpu") or {}).get("name") or (versions.get("torch") or {}).get("device")
        cc = (versions.get("gpu") or {}).get("compute_cap") or (versions.get("torch") or {}).get("cc")
        d["compute_capability"] = self.args.arch or (cc if cc and re.fullmatch(r"\d+\.\d+", cc) else "9.0")
        d["gpu_key"] = self.args.gpu or gpu_key(gpu_name)
        d["results_folder"] = results_folder(d["gpu_key"])
        d["capabilities"] = self.detect_capabilities()
        # ncu's metric names for the chip, checked against costspec's list (recorded; the captures learn
        # from ncu's own errors which names it refuses)
        from costspec.ncu.metrics import ARCHS, metrics_for

        chip = ARCHS[d["compute_capability"]].chip.lower() if d["compute_capability"] in ARCHS else "gh100"
        rc, text = capture_output(["ncu", "--query-metrics", "--chip", chip], env, 60)
        self.path(f"env/query-metrics.{chip}.txt").write_text(self.marked_text(text) + "\n", encoding="utf-8")
        wanted = metrics_for(d["compute_capability"]) if d["compute_capability"] in ARCHS else []
        listed = [m for m in wanted if re.search(rf"(?<![\w]){re.escape(m.removesuffix('.sum'))}(?![\w])", text)]
        d["metrics_not_listed_by_query"] = [m for m in wanted if m not in listed]
        d["query_metrics_rc"] = rc
        d["versions"] = versions
        self.restore_env(d)
        self.state["versions"] = versions
        if self.state["calls"]:
            self.state["calls"][-1]["versions"] = versions
        (self.path("env/versions.json")).write_text(json.dumps(self.marked({**d}), indent=2) + "\n",
                                                    encoding="utf-8")
        gpu = (versions.get("gpu") or {}).get("name", "no GPU found")
        torch_v = (versions.get("torch") or {}).get("torch", "-")
        result = (f"{gpu}, driver {(versions.get('gpu') or {}).get('driver_version', '-')}, {versions.get('ncu')}, "
                  f"torch {torch_v}, CC {d['compute_capability']}, --gpu {d['gpu_key']}")
        if not versions.get("gpu"):
            return {"status": "failed", "reason": f"nvidia-smi: {versions.get('gpu_error')}", "data": d,
                    "result": result, "files": ["env/versions.json"]}
        return {"status": "ok", "data": d, "result": result,
                "files": ["env/versions.json", "env/nvidia-smi.txt", f"env/query-metrics.{chip}.txt"]}

    @staticmethod
    def detect_capabilities() -> dict[str, bool]:
        """costspec's options that some steps depend on (a decode phase may come later)."""
        caps = {}
        for name, args in (("eval_phase", ["eval", "--help"]), ("ncu_run_phase", ["ncu", "run", "--help"])):
            rc, out, _ = costspec_cli(args)
            caps[name] = rc == 0 and "--phase" in out
        caps["decode"] = caps["eval_phase"] and caps["ncu_run_phase"]
        return caps

    def write_inputs(self) -> None:
        """The spec files this script writes (the 2:4-sparse spec)."""
        target = self.path(SPARSE[len("work:"):])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((f"# {FAKE_MARK}\n" if self.fake else "") + SPARSE_SPEC, encoding="utf-8")

    def ncu_error_lines(self, log: Path) -> list[str]:
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        return [line for line in text.splitlines() if "==ERROR==" in line or "ERR_NVGPU" in line]

    def run_ncu(self, step: Step, cmd: list[str], env: dict, log: Path, csv: Path, timeout: float) -> dict:
        """Run an ncu command; when ncu refuses metrics by name, leave them out and try again while
        time is left. Returns {rc, wall_s, timed_out, command, dropped, errors}."""
        started = time.monotonic()
        dropped: list[str] = []
        while True:
            left = timeout - (time.monotonic() - started)
            rc, wall, timed_out = run_command(cmd, log, left, env, header=self.marked_text(""))
            result = {"rc": rc, "wall_s": round(wall, 2), "timed_out": timed_out, "command": cmd,
                      "dropped": dropped, "errors": []}
            if rc == 0 or timed_out:
                return result
            errors = self.ncu_error_lines(log) + (self.ncu_error_lines(csv) if csv.exists() else [])
            result["errors"] = errors[-10:]
            if any(any(b in e for b in COUNTER_BLOCKED) for e in errors):
                self.ncu_blocked = f"ncu cannot read the counters here: {errors[-1][:200]}"
                return result
            metrics = cmd[cmd.index("--metrics") + 1].split(",") if "--metrics" in cmd else []
            refused = [m for m in metrics
                       if any(re.search(rf"(?<![\w]){re.escape(m.removesuffix('.sum'))}(?:\.sum)?(?![\w])", e)
                              for e in errors)]
            if not refused or timeout - (time.monotonic() - started) < 10:
                return result
            self.say(f"   ncu refused {', '.join(refused)}: left out, trying again")
            self.bad_metrics.update(refused)
            dropped += refused
            cmd = self.adjust(cmd)
            for path in (csv, csv.with_suffix(".ncu-rep")):
                path.unlink(missing_ok=True)

    def step_probe(self, step: Step, timeout: float) -> dict:
        if self.ncu_blocked:
            return {"status": "blocked", "reason": self.ncu_blocked}
        name = step.id.split(".", 1)[1]
        csv, sidecar, log = self.path(f"probe/{name}.csv"), self.path(f"probe/{name}.json"), self.path(
            f"logs/{step.id}.log")
        csv.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.probe_command(step, csv, sidecar)
        from costspec.ncu.metrics import NCU_ENV

        run = self.run_ncu(step, cmd, self.env(step, dict(NCU_ENV)), log, csv, timeout)
        data = {"csv": f"probe/{name}.csv", "sidecar": f"probe/{name}.json", "wall_s": run["wall_s"],
                "command": shlex.join(run["command"]), "dropped_metrics": run["dropped"],
                "clock_control": self.args.clock_control}
        if run["timed_out"]:
            return {"status": "timeout", "data": data, "reason": f"ncu ran past {timeout:.0f} s"}
        if run["rc"] != 0:
            return {"status": "failed", "data": data, "reason": f"ncu exited {run['rc']}: {' | '.join(run['errors'])}"}
        summary = self.probe_summary(csv, sidecar)
        summary_path = self.path(f"probe/{name}.summary.json")
        summary_path.write_text(json.dumps(self.marked(summary), indent=2) + "\n", encoding="utf-8")
        if sidecar.exists() and self.fake:
            self.mark_json(sidecar)
        data["answers"] = summary["answers"]
        files = [data["csv"], data["sidecar"], f"probe/{name}.summary.json"]
        return {"status": "ok", "data": data, "files": files, "result": summary["line"]}

    def fp16_probe_command(self, exe: Path, csv: Path) -> list[str]:
        from costspec.ncu.metrics import build_command

        return self.adjust(build_command([str(exe), *FP16_PROBE_ARGS], self.cc, str(csv.with_suffix(".ncu-rep")),
                                         nvtx=False, log_file=str(csv)))

    def step_fp16probe(self, step: Step, timeout: float) -> dict:
        if self.ncu_blocked:
            return {"status": "blocked", "reason": self.ncu_blocked}
        started = time.monotonic()
        src, exe = self.path("probe/fp16probe.cu"), self.path("probe/fp16probe")
        csv, log = self.path("probe/fp16.csv"), self.path(f"logs/{step.id}.log")
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text((f"// {FAKE_MARK}\n" if self.fake else "") + FP16_PROBE_SOURCE, encoding="utf-8")
        data: dict[str, Any] = {"source": "probe/fp16probe.cu", "csv": "probe/fp16.csv", "args": FP16_PROBE_ARGS}
        if self.fake:
            exe.write_text(f"#!/bin/sh\n# {FAKE_MARK}\nexit 0\n", encoding="utf-8")  # never run: the fake ncu
        else:
            env = self.env(step)
            nvcc = shutil.which("nvcc", path=env.get("PATH")) or "/usr/local/cuda/bin/nvcc"
            arch = "sm_" + self.cc.replace(".", "")
            rc, wall, timed_out = run_command([nvcc, "-O3", f"-arch={arch}", "-o", str(exe), str(src)], log,
                                              min(90.0, timeout), env)
            data["nvcc_s"] = round(wall, 2)
            if rc != 0 or timed_out:
                return {"status": "timeout" if timed_out else "failed", "data": data,
                        "reason": f"nvcc {'ran too long' if timed_out else f'exited {rc}'} (see the step log)"}
        from costspec.ncu.metrics import NCU_ENV

        left = timeout - (time.monotonic() - started)
        run = self.run_ncu(step, self.fp16_probe_command(exe, csv), self.env(step, dict(NCU_ENV)), log, csv, left)
        data.update(wall_s=run["wall_s"], command=shlex.join(run["command"]), dropped_metrics=run["dropped"])
        if run["timed_out"]:
            return {"status": "timeout", "data": data, "reason": f"ncu ran past {left:.0f} s"}
        if run["rc"] != 0:
            return {"status": "failed", "data": data, "reason": f"ncu exited {run['rc']}: {' | '.join(run['errors'])}"}
        from costspec.ncu.parse import parse_csv

        iterations, blocks, threads = (int(a) for a in FP16_PROBE_ARGS)
        expected = iterations * blocks * threads
        kernels: dict[str, dict] = {}
        for record in parse_csv(csv):
            name = next((k for k in FP16_PROBE_KERNELS if k in record.kernel_name), None)
            if name is None:
                continue
            ops = {op: record.metrics.get(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum")
                   for op in ("fadd", "fmul", "ffma", "hadd", "hmul", "hfma", "dadd", "dmul", "dfma")}
            op, lanes = FP16_PROBE_KERNELS[name]
            counted = ops.get(op) or 0
            kernels[name] = {"counters": ops, "expected_instructions": expected, "expected_counter": op,
                             "flops_per_instruction": lanes, "counted_per_instruction": counted / expected}
        answers = {
            "counter_per_instruction": {k: round(v["counted_per_instruction"], 4) for k, v in kernels.items()},
            "bf16_hfma2_lands_in_hfma": (kernels.get("probe_bf16_hfma2_packed", {}).get("counted_per_instruction", 0)
                                         > 0.99) if kernels else None,
            "scalar_and_packed_hfma_count_alike": (
                abs(kernels["probe_hfma_scalar"]["counted_per_instruction"]
                    - kernels["probe_hfma2_packed"]["counted_per_instruction"]) < 0.01
                if {"probe_hfma_scalar", "probe_hfma2_packed"} <= set(kernels) else None)}
        summary = {"kernels": kernels, "answers": answers, "expected_instructions_per_kernel": expected,
                   "reading": "counted_per_instruction 1 = the counter counts thread instructions (a packed HFMA2 "
                              "is one, as a scalar HFMA): the lanes (FLOPs) must then come from the instruction, not "
                              "the counter; see docs/ncu.md section 4 (FP16 lanes)"}
        self.path("probe/fp16.summary.json").write_text(json.dumps(self.marked(summary), indent=2) + "\n",
                                                        encoding="utf-8")
        data["answers"] = answers
        line = ", ".join(f"{k.removeprefix('probe_')} {v}" for k, v in answers["counter_per_instruction"].items())
        return {"status": "ok", "data": data, "result": f"counts per instruction: {line}",
                "files": [data["source"], data["csv"], "probe/fp16.summary.json"]}

    def step_export(self, step: Step, timeout: float) -> dict:
        capture = self.ok(step.extra["capture"]) or {}
        data = capture.get("data") or {}
        report = self.path(data.get("report", ""))
        if not report.is_file():
            return {"status": "failed", "reason": f"no report {data.get('report')} (the capture exported none)"}
        from costspec.ncu.metrics import NCU_ENV, build_export_command
        from costspec.ncu.parse import parse_csv

        out = self.path(data["csv"].removesuffix(".csv") + ".details.csv")
        cmd = build_export_command(str(report), str(out), page="details")
        log = self.path(f"logs/{step.id}.log")
        rc, wall, timed_out = run_command(cmd, log, timeout, self.env(step, dict(NCU_ENV)), header=self.marked_text(""))
        rel = str(out.relative_to(self.work))
        if timed_out or rc != 0:
            return {"status": "timeout" if timed_out else "failed", "reason": f"ncu --import exited {rc}"}
        records = parse_csv(out)
        raw = parse_csv(self.path(data["csv"]))
        with_nvtx = sum(1 for r in records if r.nvtx_stack)
        result = {"details": rel, "kernels": len(records), "raw_kernels": len(raw), "kernels_with_nvtx": with_nvtx,
                  "nvtx_without_--nvtx": with_nvtx > 0, "wall_s": round(wall, 2)}
        return {"status": "ok", "data": result, "files": [rel],
                "result": f"{len(records)} kernels (raw {len(raw)}), {with_nvtx} with NVTX stacks"}

    def probe_summary(self, csv: Path, sidecar: Path) -> dict:
        """Per probe case: the counters summed over its kernels, against the expected FLOPs."""
        from costspec.ncu.kernels import flops_from_metrics
        from costspec.ncu.parse import parse_csv

        facts = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.exists() else {}
        cases = {c["name"]: c for c in facts.get("cases") or probe_cases(self.args.probe_cases)}
        per_case: dict[str, dict] = {}
        for record in parse_csv(csv):
            name = next((n[len("probe:"):] for n in reversed(record.nvtx_stack) if n.startswith("probe:")), None)
            if name is None:
                continue
            entry = per_case.setdefault(name, {"kernels": [], "counters": {}, "costspec_tc": 0.0,
                                               "costspec_tc_aggregate": 0.0, "cuda": 0.0})
            entry["kernels"].append(record.kernel_name[:160])
            for metric, value in record.metrics.items():
                if metric.startswith(("sm__ops_path_tensor", "sm__inst_executed_pipe_tensor", "smsp__sass")):
                    entry["counters"][metric] = entry["counters"].get(metric, 0.0) + value
            flops = flops_from_metrics(record.metrics, cc=self.cc)
            entry["costspec_tc"] += flops["tensor"]
            entry["costspec_tc_aggregate"] += flops["tensor_aggregate"] or 0.0
            entry["cuda"] += flops["cuda_fp32"] + flops["cuda_fp16"] + flops["cuda_fp64"]
        lines, checks = [], {"tc_equals_2mnk": [], "wgmma_in_aggregate": [], "hmma_zero_for_wgmma": []}
        for name, entry in per_case.items():
            case = cases.get(name, {})
            expected = case.get("flops") or 0
            counted = entry["costspec_tc"] if case.get("dtype") != "fp32" else entry["cuda"]
            entry["expected_flops"] = expected
            entry["ratio_costspec_tc"] = counted / expected if expected else None
            entry["ratio_aggregate"] = entry["costspec_tc_aggregate"] / expected if expected else None
            counters = entry["counters"]
            ops = {m: v for m, v in counters.items() if m.startswith("sm__ops_path_tensor_") and m.endswith(".sum")}
            wgmma = sum(v for m, v in ops.items() if re.search(r"_op_[hib]gmma_", m))
            mma_sync = sum(v for m, v in ops.items() if re.search(r"_op_[hibd]mma_", m))
            plain = {m: v for m, v in ops.items() if "_op_" not in m}
            unsplit = {m: v for m, v in plain.items() if "_sparsity_" not in m}
            aggregate = sum((unsplit or plain).values())
            entry.update(wgmma_ops=wgmma, mma_sync_ops=mma_sync, aggregate_ops=aggregate,
                         nonzero_tensor_counters=sorted(m for m, v in ops.items() if v))
            if case.get("kind") == "mm" and case.get("dtype") in ("bf16", "fp16", "tf32") and expected:
                checks["tc_equals_2mnk"].append(abs(counted / expected - 1) < 0.01)
            if wgmma:
                checks["wgmma_in_aggregate"].append(abs(aggregate - wgmma - mma_sync) <= 0.01 * wgmma)
                checks["hmma_zero_for_wgmma"].append(mma_sync == 0)
            ratio = entry["ratio_costspec_tc"]
            lines.append(f"{name}: {'-' if ratio is None else f'{ratio:.3f}'}")
        answers = {k: (all(v) if v else None) for k, v in checks.items()}
        head = next(iter(per_case.items()), None)
        line = "no probe kernel attributed" if head is None else (
            f"TC/2MNK {head[0]} = {head[1]['ratio_costspec_tc'] or 0:.3f}; tc==2MNK: {answers['tc_equals_2mnk']}, "
            f"wgmma in aggregate: {answers['wgmma_in_aggregate']}, hmma 0 for wgmma: {answers['hmma_zero_for_wgmma']}")
        return {"cases": per_case, "answers": answers, "errors": facts.get("errors", {}), "line": line,
                "ratios": lines, "gpu": facts.get("gpu")}

    def restriction(self, step: Step, timeout: float) -> tuple[dict, str | None]:
        guard = step.extra.get("guard")
        if not guard:
            return {}, None
        r1, r2 = (self.ok(sid) for sid in guard["from"])
        if not (r1 and r2):
            return {}, "no L=1 and L=2 captures to estimate the full capture from: captured in full"
        d1, d2 = r1["data"], r2["data"]
        share = 1.0
        if step.pass_ == "forward":
            blocks = max(d2["kernels"] - d1["kernels"], 1)
            share = (d2["kernels_by_phase"].get("forward", 0) - d1["kernels_by_phase"].get("forward", 0)) / blocks
        value, estimate = estimate_restriction(d1["wall_s"], d2["wall_s"], share, guard["full"], timeout)
        note = (f"estimated {estimate:.0f} s for {guard['dim']}={guard['full']} from the L=1/L=2 captures "
                f"({d1['wall_s']:.0f} s, {d2['wall_s']:.0f} s)")
        if value is None:
            return {}, note + f": fits its {timeout:.0f} s"
        return {guard["dim"]: value}, note + (f": over 85% of its {timeout:.0f} s, so captured at "
                                              f"{guard['dim']}={value} (every block is the same repeat body)")

    def step_capture(self, step: Step, timeout: float) -> dict:
        if step.extra.get("phase") and not self.capabilities.get("decode"):
            return {"status": "skipped", "reason": "costspec has no --phase option (costspec eval --help / ncu run "
                                                   "--help): no decode step to capture yet"}
        if self.ncu_blocked:
            return {"status": "blocked", "reason": self.ncu_blocked}
        if step.spec == SPARSE:
            self.write_inputs()
        restricted, note = self.restriction(step, timeout)
        sets = {**step.sets, **restricted}
        stem = step.extra["stem"] + "".join(f".{k}{v}" for k, v in restricted.items())
        csv, log = self.path(f"ncu/{stem}.csv"), self.path(f"logs/{step.id}.log")
        csv.parent.mkdir(parents=True, exist_ok=True)
        plan = self.capture_plan(step, sets, csv)
        if isinstance(plan, str):
            return {"status": "failed", "reason": plan}
        env = self.env(step, plan["env"])
        if self.fake:
            from gpu_truth_fakes import ORACLE_ENV, model_oracle

            oracle = self.path(f"fake/{stem}.oracle.json")
            oracle.parent.mkdir(parents=True, exist_ok=True)
            oracle.write_text(json.dumps(model_oracle(costspec_cli, self.spec_path(step.spec or ""), step.batch, sets,
                                                      step.pass_, step.dtype or "bf16", step.extra.get("phase"))),
                              encoding="utf-8")
            env[ORACLE_ENV] = str(oracle)
        cmd = self.adjust(plan["command"])
        if note:
            self.say(f"   {note}")
        run = self.run_ncu(step, cmd, env, log, csv, timeout)
        data: dict[str, Any] = {"csv": f"ncu/{stem}.csv", "sidecar": f"ncu/{stem}.json", "report": f"ncu/{stem}.ncu-rep",
                                "spec": step.spec, "wall_s": run["wall_s"], "dropped_metrics": run["dropped"],
                                "clock_control": self.args.clock_control, "restricted": restricted or None,
                                "restriction_note": note}
        return self.captured(step, plan, run, data, restricted)

    def captured(self, step: Step, plan: dict, run: dict, data: dict, restricted: dict) -> dict:
        """The capture's record once ncu has run: its CSV read, kernels per phase, the sidecar completed."""
        csv = self.path(data["csv"])
        timeout = step.budget
        if run["timed_out"]:
            return {"status": "timeout", "data": data, "reason": f"ncu ran past {timeout:.0f} s"}
        if run["rc"] != 0:
            return {"status": "failed", "data": data, "reason": f"ncu exited {run['rc']}: {' | '.join(run['errors'])}"}
        from costspec.ncu.parse import parse_csv

        try:
            records = parse_csv(csv)
        except Exception as exc:  # noqa: BLE001 - a CSV costspec cannot read is this step's failure
            return {"status": "failed", "data": data, "reason": f"the CSV does not parse: {exc}"}
        by_phase: dict[str, int] = {}
        for record in records:
            stack = record.nvtx_stack
            phase = ("backward" if "costspec:backward" in stack else
                     "forward" if "costspec:forward" in stack or "costspec:loss" in stack else "none")
            by_phase[phase] = by_phase.get(phase, 0) + 1
        data.update(kernels=len(records), kernels_by_phase=by_phase, **self.csv_facts(csv, records))
        sidecar_path = self.path(data["sidecar"])
        if not sidecar_path.exists():
            return {"status": "failed", "data": data, "reason": "the runner wrote no sidecar"}
        sidecar = json.loads(sidecar_path.read_text(encoding="utf-8"))
        sidecar.update({"ncu_version": (self.state.get("versions") or {}).get("ncu"),
                        "command": " ".join(f"{k}={v}" for k, v in plan["env"].items()) + " "
                                   + shlex.join(run["command"]),
                        "csv": data["csv"], "report": data["report"], "kernels": len(records),
                        "gpu_truth": {"step": step.id, "wall_s": run["wall_s"], "clock_control": self.args.clock_control,
                                      "metrics_left_out": self.left_out(plan["command"], run["command"]),
                                      "restricted": restricted or None,
                                      "costspec_printed_command": shlex.join(plan["command"])}})
        sidecar_path.write_text(json.dumps(self.marked(sidecar), indent=2) + "\n", encoding="utf-8")
        files = [data["csv"], data["sidecar"]]
        return {"status": "ok", "data": data, "files": files,
                "result": f"{len(records)} kernels ({', '.join(f'{k} {v}' for k, v in by_phase.items())}), "
                          f"{run['wall_s']:.0f} s" + (f", at {restricted}" if restricted else "")}

    @staticmethod
    def csv_facts(csv: Path, records: list) -> dict:
        """What the raw page looks like (open questions of docs/ncu.md): the NVTX column's name, the units
        printed, whether the layer ranges arrived."""
        import csv as csv_module

        lines = csv.read_text(encoding="utf-8", errors="replace").splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
        header, units = (list(csv_module.reader(lines[start:start + 2])) + [[], []])[:2] if start is not None else ([],
                                                                                                                   [])
        printed = {h: u for h, u in zip(header, units) if h.startswith(("gpu__time", "dram__", "sm__ops", "smsp__"))}
        return {"nvtx_columns": [h for h in header if "Range" in h], "printed_units": printed,
                "kernels_with_nvtx": sum(1 for r in records if r.nvtx_stack)}

    def step_time(self, step: Step, timeout: float) -> dict:
        name = step.id[len("time."):]
        out, log = self.path(f"time/{name}.json"), self.path(f"logs/{step.id}.log")
        out.parent.mkdir(parents=True, exist_ok=True)
        env = self.env(step)
        if self.fake:
            from gpu_truth_fakes import ORACLE_ENV, eval_oracle

            oracle = self.path(f"fake/time.{name}.oracle.json")
            oracle.parent.mkdir(parents=True, exist_ok=True)
            oracle.write_text(json.dumps(eval_oracle(costspec_cli, step.spec or "", step.batch, step.sets, step.pass_,
                                                     self.gpu_key, step.extra.get("phase"),
                                                     step.extra.get("context"))), encoding="utf-8")
            env[ORACLE_ENV] = str(oracle)
        rc, wall, timed_out = run_command(self.time_command(step), log, timeout, env, stdout=out,
                                          header=self.marked_text(""))
        data = {"json": f"time/{name}.json", "wall_s": round(wall, 2)}
        if (timed_out or rc != 0) and out.exists() and not out.stat().st_size:
            out.unlink()  # nothing was printed: no empty file in the results
        if timed_out:
            return {"status": "timeout", "data": data, "reason": f"costspec time ran past {timeout:.0f} s"}
        if rc != 0:
            tail = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
                    if line.strip() and not line.startswith(("$ ", FAKE_MARK))][-3:]
            return {"status": "failed", "data": data, "reason": f"exit {rc}: {' | '.join(tail)[-400:]}"}
        try:
            timing = json.loads(out.read_text(encoding="utf-8"))
        except ValueError as exc:
            return {"status": "failed", "data": data, "reason": f"not JSON: {exc}"}
        if self.fake:
            self.mark_json(out)
        total = timing.get("total") or {}
        data.update(step_s=timing.get("step_s"), estimate_s=timing.get("estimate_total_s"), ratio=total.get("ratio"))
        ratio = total.get("ratio")
        return {"status": "ok", "data": data, "files": [data["json"]],
                "result": f"step {1e3 * (timing.get('step_s') or 0):.3g} ms"
                          + (f", measured/roofline {ratio:.2f}" if ratio else "")}

    def step_offline(self, step: Step, timeout: float) -> dict:
        folder = {"compare": "compare", "calibrate": "calib", "eval": "eval"}[step.kind]
        name = self.calibration_name(step.id) if step.kind == "calibrate" else step.id.split(".", 1)[1]
        self.path(folder).mkdir(parents=True, exist_ok=True)
        commands = self.offline_args(step)
        rc, out, err = costspec_cli(commands[0])
        log = self.path(f"logs/{step.id}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{FAKE_MARK}\n" if self.fake else "")
            f.write(f"$ costspec {shlex.join(commands[0])}\n{err}\n")
        if rc != 0:
            return {"status": "failed", "reason": f"costspec {commands[0][0]} exited {rc}: {err.strip()[-500:]}"}
        data = json.loads(out)
        json_path = self.path(f"{folder}/{name}.json")
        json_path.write_text(json.dumps(self.marked(data), indent=2) + "\n", encoding="utf-8")
        files = [str(json_path.relative_to(self.work))]
        if step.kind == "calibrate":
            yaml_path = self.path(f"calib/{name}.yaml")
            if self.fake:
                yaml_path.write_text(f"# {FAKE_MARK}\n" + yaml_path.read_text(encoding="utf-8"), encoding="utf-8")
            files.append(str(yaml_path.relative_to(self.work)))
        return {"status": "ok", "files": files, "result": self.offline_line(step, data)}

    @staticmethod
    def offline_line(step: Step, data: dict) -> str:
        def pct(x):
            return "-" if x is None else f"{100 * x:+.1f}%"
        if step.kind == "compare":
            parts = []
            for phase, table in (data.get("tables") or {}).items():
                total = table.get("total") or {}
                parts.append(f"{phase[:3]}: TC {pct(total.get('tc_rel_diff'))} CUDA {pct(total.get('cuda_rel_diff'))}"
                             f" ({total.get('kernels')} kernels)")
            return "; ".join(parts) + " measured vs analytic"
        if step.kind == "calibrate":
            parts = []
            for phase in ("forward", "backward"):
                eps = ((data.get(phase) or {}).get("epsilon") or {}).get("gemm") or {}
                if eps:
                    parts.append(f"{phase[:3]} eps[gemm] {eps.get('exact')} ({eps.get('value', 0):.4f})")
            return "; ".join(parts) or "no gemm coefficient"
        total = ((data.get("tables") or {}).get("executed") or {}).get("total") or {}
        ratio = total.get("ratio")
        return f"executed/analytic {ratio:.4f}" if ratio else "no executed table"

    # -- fake marks -----------------------------------------------------------------------------
    def marked(self, data: dict) -> dict:
        return {"fake": True, "fake_note": FAKE_MARK, **data} if self.fake else data

    def marked_text(self, text: str) -> str:
        return f"{FAKE_MARK}\n{text}" if self.fake else text

    def mark_json(self, path: Path) -> None:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and not data.get("fake_note"):
            path.write_text(json.dumps(self.marked(data), indent=2) + "\n", encoding="utf-8")

    # -- the loop -------------------------------------------------------------------------------
    def reread(self, step: Step) -> dict | None:
        """With --reread: a capture or probe whose ncu run finished (rc 0) in an earlier call but whose
        CSV costspec could not read then is read again from the files that call left, without a GPU
        (after a parser fix). None when there is nothing to read again."""
        prev = self.record(step.id) or {}
        data = dict(prev.get("data") or {})
        name = step.id.split(".", 1)[1]
        csv_rel = data.get("csv") or (f"probe/{name}.csv" if step.kind == "probe" else None)
        if prev.get("status") != "failed" or not csv_rel or not self.path(csv_rel).exists():
            return None
        reason = prev.get("reason", "")
        if step.kind == "capture" and not reason.startswith("the CSV does not parse"):
            return None
        command = self.logged_command(self.path(f"logs/{step.id}.log"))
        if command is None:
            return None
        note = f"ncu ran in call {prev.get('call')}; its CSV was read again offline in call {self.call}"
        if step.kind == "probe":
            data.update(csv=csv_rel, sidecar=f"probe/{name}.json", wall_s=prev.get("seconds"),
                        command=shlex.join(command), dropped_metrics=[], clock_control=self.args.clock_control)
            summary = self.probe_summary(self.path(csv_rel), self.path(data["sidecar"]))
            self.path(f"probe/{name}.summary.json").write_text(json.dumps(self.marked(summary), indent=2) + "\n",
                                                              encoding="utf-8")
            data.update(answers=summary["answers"], reread=note)
            return {"status": "ok", "data": data, "result": summary["line"],
                    "files": [data["csv"], data["sidecar"], f"probe/{name}.summary.json"]}
        restricted = data.get("restricted") or {}
        plan = self.capture_plan(step, {**step.sets, **restricted}, self.path(csv_rel))
        if isinstance(plan, str):
            return {"status": "failed", "data": data, "reason": plan}
        run = {"rc": 0, "wall_s": data.get("wall_s"), "timed_out": False, "command": command,
               "dropped": data.get("dropped_metrics") or [], "errors": []}
        rec = self.captured(step, plan, run, {**data, "reread": note}, restricted)
        rec["result"] = (rec.get("result") or "") + " (read again offline)"
        return rec

    @staticmethod
    def logged_command(log: Path) -> list[str] | None:
        """The last ncu command a step's log records (its `$ ` lines): what ran on the GPU."""
        if not log.exists():
            return None
        lines = [line[2:] for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
                 if line.startswith("$ ncu ") or line.startswith("$ LC_ALL=C ncu ")]
        return shlex.split(lines[-1]) if lines else None

    def run_step(self, step: Step, timeout: float) -> dict:
        kinds: dict[str, Callable[[Step, float], dict]] = {
            "env": lambda s, t: self.step_env(s), "probe": self.step_probe, "capture": self.step_capture,
            "time": self.step_time, "compare": self.step_offline, "calibrate": self.step_offline,
            "fp16probe": self.step_fp16probe, "export": self.step_export,
            "eval": self.step_offline}
        try:
            return kinds[step.kind](step, timeout)
        except Exception as exc:  # noqa: BLE001 - a step's bug must not stop the others
            import traceback

            log = self.path(f"logs/{step.id}.log")
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as f:
                f.write(traceback.format_exc())
            return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}

    def execute(self) -> None:
        redo = [p for item in self.args.redo for p in item.split(",") if p]
        for step in self.plan:
            if not self.selected(step):
                continue
            prev = self.record(step.id)
            forced = any(fnmatch.fnmatch(step.id, p) for p in redo)
            if step.kind == "env" and self.args.offline:
                continue  # (env runs in every call, on resume too: the machine may be another one)
            if prev and not forced and step.kind != "env" and not (self.args.reread and self.args.offline):
                if prev["status"] in DONE or (prev["status"] in RETRY and not self.args.retry_failed):
                    continue
            if prev and self.args.reread and self.args.offline and not forced and prev["status"] in DONE:
                continue
            if self.args.offline and step.gpu:
                if self.args.reread and step.kind in ("capture", "probe"):
                    rec = self.reread(step)
                    if rec is not None:
                        self.say(f"-> {step.id} (read again offline)")
                        self.finish(step, rec, 0.0)
                continue
            skipped = [n for n in step.needs if (self.record(n) or {}).get("status") == "skipped"]
            if skipped:
                reason = (self.record(skipped[0]) or {}).get("reason", "")
                self.finish(step, {"status": "skipped", "reason": f"{skipped[0]} was skipped: {reason}"}, 0.0)
                continue
            blocked = [n for n in step.needs if not self.ok(n)]
            if step.gpu and step.kind != "env" and not (self.ok("env") and self.state["versions"].get("gpu")):
                blocked = blocked or ["env (no GPU found)"]
            if blocked:
                self.finish(step, {"status": "blocked", "reason": f"needs {', '.join(blocked)}"}, 0.0)
                continue
            start, timeout = decide(step, self.remaining())
            if not start:
                self.finish(step, {"status": "deferred", "reason": f"{self.remaining():.0f} s left in this call, "
                                                                   f"expects {step.expected:.0f} s"}, 0.0)
                continue
            self.say(f"-> {step.id} (timeout {timeout:.0f} s, {self.remaining():.0f} s left in this call)")
            began = time.monotonic()
            rec = self.run_step(step, timeout)
            if rec["status"] == "timeout" and timeout < step.budget:
                rec["status"] = "cut"  # the call's deadline, not the step's budget, stopped it
            self.finish(step, rec, time.monotonic() - began)

    def finish(self, step: Step, rec: dict, seconds: float) -> None:
        rec = {"status": rec["status"], "seconds": round(seconds, 2), "budget": step.budget, "call": self.call,
               "kind": step.kind, "files": rec.get("files", []), "result": rec.get("result", ""),
               "reason": rec.get("reason", ""), "data": rec.get("data", {})}
        self.state["steps"][step.id] = rec
        if rec["status"] not in ("deferred", "blocked"):
            detail = rec["result"] or rec["reason"]
            self.say(f"   {step.id}: {rec['status']} in {seconds:.1f} s: {detail[:300]}")
        self.save_summary()

    def save_summary(self) -> None:
        self.state["fake"] = self.fake
        self.state["plan"] = [{"id": s.id, "kind": s.kind, "budget": s.budget, "gpu": s.gpu, "what": s.what}
                              for s in self.plan]
        if self.fake:
            self.state["fake_note"] = FAKE_MARK
        (self.work / SUMMARY).write_text(json.dumps(self.state, indent=2) + "\n", encoding="utf-8")

    # -- packing --------------------------------------------------------------------------------
    def pack_out(self) -> list[str]:
        self.out.mkdir(parents=True, exist_ok=True)
        for name in (ARCHIVE, REPORTS, SUMMARY, LOG):
            (self.out / name).unlink(missing_ok=True)
        skip_dirs = {"site", "fakebin", "fake", "__pycache__"}
        files, reports = [], []
        for path in sorted(self.work.rglob("*")):
            rel = path.relative_to(self.work)
            if not path.is_file() or path.is_symlink() or rel.parts[0] in skip_dirs or path.name == "fp16probe":
                continue  # (fp16probe: the probe's executable; its source probe/fp16probe.cu is packed)
            (reports if path.suffix == ".ncu-rep" else files).append(path)
        notes = []
        self.save_summary()
        left_out = pack(self.out / ARCHIVE, self.work, files)
        if left_out:
            notes.append(f"left out of {ARCHIVE} (over {FILE_BUDGET // MiB} MiB): {', '.join(left_out)}")
        if reports:
            left = pack(self.out / REPORTS, self.work, reports)
            if left:
                notes.append(f"reports left out of {REPORTS} (over {FILE_BUDGET // MiB} MiB): {', '.join(left)}")
        self.state.setdefault("packing", []).append({"call": self.call, "notes": notes})
        self.save_summary()
        shutil.copy(self.work / SUMMARY, self.out / SUMMARY)
        shutil.copy(self.work / LOG, self.out / LOG)
        return notes + check_out_dir(self.out)

    def summary_table(self) -> str:
        rows = []
        counts: dict[str, int] = {}
        for step in self.plan:
            rec = self.record(step.id)
            status = rec["status"] if rec else "pending"
            counts[status] = counts.get(status, 0) + 1
            earlier = rec and rec.get("call", self.call) != self.call
            detail = (rec or {}).get("result") or (rec or {}).get("reason") or ""
            secs = f"{rec['seconds']:.0f}" if rec and rec.get("seconds") else "-"
            rows.append(f"{step.id:<40} {status + ('*' if earlier else ''):<9} {secs:>5} {step.budget:>6.0f}  "
                        f"{detail[:110]}")
        head = f"{'step':<40} {'status':<9} {'secs':>5} {'budget':>6}  result"
        tally = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        todo = sum(counts.get(k, 0) for k in ("deferred", "cut", "pending"))
        retry = sum(counts.get(k, 0) for k in RETRY)
        tail = (f"{tally}. {'*: from an earlier call. ' if self.call > 1 else ''}"
                + (f"{todo} to do: call again with --resume (the files of this call). " if todo else "")
                + (f"{retry} failed or timed out: --resume ... --retry-failed runs them again (and what they "
                   "block). " if retry else "")
                + ("FAKE RUN: no number here was measured." if self.fake else ""))
        return "\n".join([f"== gpu_truth summary, call {self.call}" + (" (FAKE)" if self.fake else ""), head,
                          "-" * len(head), *rows, tail])

    def main(self) -> int:
        self.work.mkdir(parents=True, exist_ok=True)
        if self.args.resume:
            self.resume(Path(self.args.resume).resolve())
        self.call = len(self.state["calls"]) + 1
        self.state["calls"].append({"call": self.call, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                    "deadline_s": self.deadline, "offline": bool(self.args.offline),
                                    "argv": sys.argv[1:]})
        if self.fake:
            self.say(f"== {FAKE_MARK}")
            self.setup_fakes()
        else:
            self.find_tools()
        self.say(f"gpu_truth call {self.call}: work {self.work}, out {self.out}")
        problem = self.ensure_deps()
        if problem:
            self.say(f"gpu_truth: error: {problem}")
            self.state["error"] = problem
            self.pack_out()
            return 3
        sys.path.insert(0, str(ROOT))
        sys.path.insert(0, str(TOOLS))
        self.print_plan()
        if self.args.dry_run:
            self.write_inputs()
            self.capabilities = self.detect_capabilities()
            if not self.gpu_key:
                self.gpu_key = "h100-sxm"
                self.say("dry run: --gpu h100-sxm assumed for the roofline (a real call takes it from the GPU's name)")
            self.say("\ncommands (dry run: nothing is run):")
            for step in self.plan:
                if self.selected(step):
                    for command in self.commands(step):
                        self.say(f"[{step.id}] {command}")
            return 0
        try:
            self.execute()
        except KeyboardInterrupt:
            self.say("interrupted: packing what there is")
        finally:
            problems = self.pack_out()
        for problem in problems:
            self.say(f"gpu_truth: warning: {problem}")
        files = sorted(p.name for p in self.out.iterdir())
        self.say(f"wrote {', '.join(files)} to {self.out} in {self.elapsed():.0f} s")
        self.say(self.summary_table())
        shutil.copy(self.work / LOG, self.out / LOG)
        return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_truth.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu_truth_out",
                   help="where the packed results go (default $OUT, else ./gpu_truth_out)")
    p.add_argument("--work", default=None, help="work folder (default: a new temporary folder)")
    p.add_argument("--resume", default=None, metavar="DIR|ARCHIVE",
                   help=f"a previous call's {ARCHIVE} (or the folder holding it): steps done there are skipped")
    p.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE,
                   help="seconds this call may take; steps that do not fit are deferred (default %(default)s)")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN",
                   help="run only the steps matching (fnmatch, comma-separated, repeatable)")
    p.add_argument("--skip", action="append", default=[], metavar="PATTERN", help="do not run these steps")
    p.add_argument("--redo", action="append", default=[], metavar="PATTERN", help="run these again even if done")
    p.add_argument("--retry-failed", action="store_true", help="run failed and timed-out steps of --resume again")
    p.add_argument("--offline", action="store_true",
                   help="run only the steps that need no GPU (compare, calibrate, eval), on --resume's captures")
    p.add_argument("--reread", action="store_true",
                   help="with --offline: read again the CSVs of captures and probes that ncu wrote in an earlier "
                        "call but costspec could not read then (after a parser fix), then run what they unblock")
    p.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS", help="a step's timeout")
    p.add_argument("--clock-control", choices=("none", "base"), default="none",
                   help="ncu --clock-control for the captures (default none: the card's clocks are left alone)")
    p.add_argument("--arch", default=None, help="compute capability for the ncu metric list (default: the GPU's)")
    p.add_argument("--gpu", default=None, help="costspec catalog key for the roofline (default: from the GPU's name)")
    p.add_argument("--wheels", default=None, help="folder of wheels to install when a dependency is missing "
                                                  "(default .whl/ in the repository)")
    p.add_argument("--probe-cases", default=DEFAULT_PROBE_CASES, help="the GEMM probe's cases (kind:dtype:dims,...)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the exact commands, run nothing")
    p.add_argument("--fake", action="store_true", help=f"no GPU: fakes for ncu, nvidia-smi and CUDA (= {FAKE_ENV}=1)")
    p.add_argument("--gemm-probe-program", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--probe-sidecar", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.gemm_probe_program:
        return gemm_probe_program(args.probe_cases, args.probe_sidecar)
    for name in ("out", "work", "resume", "wheels"):  # relative to where it was started, before the chdir
        if getattr(args, name):
            setattr(args, name, str(Path(getattr(args, name)).resolve()))
    os.chdir(ROOT)
    return Run(args).main()


if __name__ == "__main__":
    sys.exit(main())
