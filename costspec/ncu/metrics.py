"""Which Nsight Compute metrics costspec collects, per GPU architecture, and the ncu command line.

Everything here comes from ``shared/reference/ncu-metrics-and-gpu-peaks.md`` ("the notes"):

* §1: CUDA-core FP thread-instruction counters
  ``smsp__sass_thread_inst_executed_op_<op>_pred_on.sum`` for fadd/fmul/ffma, hadd/hmul/hfma,
  dadd/dmul/dfma. They are the same on every architecture.
* §2.2: Tensor-Core ``sm__ops_path_tensor_*`` counters. The names are those of ncu's
  ``SpeedOfLight_HierarchicalTensorRooflineChart.section`` (2025 copy, one block per chip from
  CC_75 to CC_121; the source of each list is in ``docs/ncu.md``). Only dense work is counted:
  where ncu's roofline uses a ``_sparsity_off``/``_sparsity_on`` pair we list ``_sparsity_off``.
  Hopper (9.0) is counted per instruction family, wgmma (``op_hgmma``/``op_igmma``/``op_bgmma``)
  plus mma.sync (``op_hmma``/``op_imma``/``op_bmma``), because its aggregates (``src_fp16``, ...)
  have no sparsity split; the aggregates are collected too, as a cross-check
  (:attr:`ArchMetrics.tensor_aggregate`), never added. On 10.3 there is no FP8 aggregate
  (``src_fp4_fp6_dst_*`` replaces ``src_fp4_fp6_fp8_dst_*``): FP8 is the tcgen05
  ``op_utcqmma_src_fp8_*`` counters. Volta (7.0) has no ops counter.
* Blackwell packed FP32 (CC 10.0 and 10.3): ``smsp__sass_thread_inst_executed_op_{fadd2,fmul2,
  ffma2}_pred_on.sum`` count FADD2/FMUL2/FFMA2 thread instructions, 2 lanes each (NVIDIA's 2025
  ``SpeedOfLight_Roofline.py`` rule reads them for ``cc_major == 10 and cc_minor in (0, 3)``; its
  weights are discussed in ``docs/ncu.md`` section 4).
* §2.3: instruction-count cross-checks (``ComputeWorkloadAnalysis.section``): hmma/imma/dmma,
  gmma on 9.0, the ``_v2`` names on 8.9 and ``subpipe`` names on 10.0/12.0.
* §3: ``dram__bytes_read.sum``, ``dram__bytes_write.sum``, ``gpu__time_duration.sum``.
* §4/§5: CSV flags, NVTX push/pop scope, and clock/cache control.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from costspec.core.errors import CostspecError, UsageError


class UnknownArchError(CostspecError):
    """A compute capability that costspec has no metric list for."""


# -- CUDA cores (notes §1) -----------------------------------------------------------------------

CUDA_CORE_OPS: tuple[str, ...] = ("fadd", "fmul", "ffma", "hadd", "hmul", "hfma", "dadd", "dmul", "dfma")


def cuda_core_metric(op: str) -> str:
    """The thread-level, predicated-on instruction counter for one FP op, e.g. ``ffma``."""
    return f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"


CUDA_CORE_METRICS: tuple[str, ...] = tuple(cuda_core_metric(op) for op in CUDA_CORE_OPS)

# Blackwell GB10x packed FP32: one thread instruction does 2 lanes.
PACKED_FP32_OPS: tuple[str, ...] = ("fadd2", "fmul2", "ffma2")
PACKED_FP32_METRICS: tuple[str, ...] = tuple(cuda_core_metric(op) for op in PACKED_FP32_OPS)

# -- bytes and time (notes §3) -------------------------------------------------------------------

DRAM_BYTES_READ = "dram__bytes_read.sum"
DRAM_BYTES_WRITE = "dram__bytes_write.sum"
DURATION = "gpu__time_duration.sum"
MEMORY_AND_TIME_METRICS: tuple[str, ...] = (DRAM_BYTES_READ, DRAM_BYTES_WRITE, DURATION)

# -- Tensor Cores (notes §2.2, §2.3) -------------------------------------------------------------

TENSOR_OPS_PREFIX = "sm__ops_path_tensor_"
TENSOR_PIPE_INST = "sm__inst_executed_pipe_tensor.sum"
# Volta has no ops counter. Notes §2.3 (NERSC): FLOPs = 512 x tensor-pipe instructions, valid
# for Volta HMMA.884 only.
VOLTA_FLOPS_PER_TENSOR_INST = 512

# The order in which dtypes are listed in metric lists and dicts.
DTYPE_ORDER: tuple[str, ...] = ("fp16", "bf16", "tf32", "fp8", "fp4_fp6", "fp4", "int8", "int4", "int1", "fp64")


def _ops(*bases: str) -> tuple[str, ...]:
    return tuple(f"{TENSOR_OPS_PREFIX}{base}.sum" for base in bases)


def _inst(*names: str) -> tuple[str, ...]:
    return tuple(f"sm__inst_executed_pipe_tensor_{name}.sum" for name in names)


@dataclass(frozen=True)
class ArchMetrics:
    """The counters that exist for one compute capability.

    ``tensor`` maps a dtype name to the ``.sum`` counters whose sum is that dtype's dense
    Tensor-Core op count. One op is one FLOP (an FMA counts 2), as in notes §2.1.
    ``tensor_aggregate`` maps a dtype to aggregate counters that cover the same work again
    (Hopper ``src_fp16`` over wgmma + mma.sync): collected as a cross-check, never added.
    ``packed_fp32`` lists the 2-lane FP32 instruction counters (Blackwell 10.0/10.3).
    """

    cc: str
    chip: str
    tensor: Mapping[str, tuple[str, ...]]
    inst: tuple[str, ...]
    tensor_aggregate: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    packed_fp32: tuple[str, ...] = ()


# Turing has no bf16/tf32 tensor path, so src_fp16_bf16_tf32_dst_fp32 on 7.5 is FP16 work.
_TURING = {
    "fp16": _ops("src_fp16_bf16_tf32_dst_fp32", "src_fp16_dst_fp16"),
    "int8": _ops("src_int8"),
    "int4": _ops("src_int4"),
    "int1": _ops("src_int1"),
}
# GA100, GA10x and GA10y share one list in the section file (GA10x checked in its SuffixTable).
_AMPERE = {
    "fp16": _ops("src_fp16_dst_fp16_sparsity_off", "src_fp16_dst_fp32_sparsity_off"),
    "bf16": _ops("src_bf16_dst_fp32_sparsity_off"),
    "tf32": _ops("src_tf32_dst_fp32_sparsity_off"),
    "int8": _ops("src_int8_sparsity_off"),
    "int4": _ops("src_int4_sparsity_off"),
    "int1": _ops("src_int1"),
    "fp64": _ops("src_fp64"),
}
_ADA = {**_AMPERE, "fp8": _ops("src_fp8_sparsity_off")}
# Hopper: wgmma (op_hgmma/op_igmma/op_bgmma) + mma.sync (op_hmma/op_imma/op_bmma), dense. Public
# notes say op_hmma reads 0 for wgmma work, so both families are needed. FP8 (wgmma only) and
# FP64 (DMMA) have no per-instruction counter: their aggregates are counted.
_HOPPER = {
    "fp16": _ops("op_hgmma_src_fp16_sparsity_off", "op_hmma_src_fp16_dst_fp16_sparsity_off",
                 "op_hmma_src_fp16_dst_fp32_sparsity_off"),
    "bf16": _ops("op_hgmma_src_bf16_dst_fp32_sparsity_off", "op_hmma_src_bf16_dst_fp32_sparsity_off"),
    "tf32": _ops("op_hgmma_src_tf32_dst_fp32_sparsity_off", "op_hmma_src_tf32_dst_fp32_sparsity_off"),
    "fp8": _ops("src_fp8_sparsity_off"),
    "int8": _ops("op_igmma_src_int8_sparsity_off", "op_imma_src_int8_sparsity_off"),
    "int1": _ops("op_bgmma_src_int1", "op_bmma_src_int1"),
    "fp64": _ops("src_fp64"),
}
# src_fp16 covers FP16 and FP32 accumulate, dense and sparse: a cross-check of the sums above.
_HOPPER_AGGREGATE = {
    "fp16": _ops("src_fp16"),
    "bf16": _ops("src_bf16_dst_fp32"),
    "tf32": _ops("src_tf32_dst_fp32"),
    "int8": _ops("src_int8"),
    "int1": _ops("src_int1"),
}
# GB100: FP8 and FP6/FP4 issued as kind::f8f6f4 share one counter, so "fp8" here includes them.
# src_fp4_dst_fp32 is the dedicated MX/NV FP4 path.
_BLACKWELL_DC = {
    "fp16": _ops("src_fp16_dst_fp16", "src_fp16_dst_fp32"),
    "bf16": _ops("src_bf16_dst_fp32"),
    "tf32": _ops("src_tf32_dst_fp32"),
    "fp8": _ops("src_fp4_fp6_fp8_dst_fp16", "src_fp4_fp6_fp8_dst_fp32"),
    "fp4": _ops("src_fp4_dst_fp32"),
    "int8": _ops("src_int8"),
    "fp64": _ops("src_fp64"),
}
# GB11x (10.3, B300): no FP8 aggregate; src_fp4_fp6_dst_* holds FP6/FP4 issued as kind::f8f6f4 and
# FP8 is read from the tcgen05 counters op_utcqmma_src_fp8_*. No int8 tensor path in the section.
_BLACKWELL_ULTRA = {
    "fp16": _ops("src_fp16_dst_fp16", "src_fp16_dst_fp32"),
    "bf16": _ops("src_bf16_dst_fp32"),
    "tf32": _ops("src_tf32_dst_fp32"),
    "fp8": _ops("op_utcqmma_src_fp8_dst_fp16_sparsity_off", "op_utcqmma_src_fp8_dst_fp32_sparsity_off"),
    "fp4_fp6": _ops("src_fp4_fp6_dst_fp16", "src_fp4_fp6_dst_fp32"),
    "fp4": _ops("src_fp4_dst_fp32"),
    "int8": _ops("src_int8"),
    "fp64": _ops("src_fp64"),
}
_BLACKWELL_GEFORCE = {
    "fp16": _ops("src_fp16_dst_fp16", "src_fp16_dst_fp32"),
    "bf16": _ops("src_bf16_dst_fp32"),
    "tf32": _ops("src_tf32_dst_fp32"),
    "fp8": _ops("src_fp8_dst_fp16_sparsity_off", "src_fp8_dst_fp32_sparsity_off"),
    "fp4_fp6": _ops("src_fp4_fp6_dst_fp16_sparsity_off", "src_fp4_fp6_dst_fp32_sparsity_off"),
    "fp4": _ops("src_fp4_dst_fp32_sparsity_off"),
    "int8": _ops("src_int8"),
    "fp64": _ops("src_fp64"),
}


def _arch(cc: str, chip: str, tensor: dict[str, tuple[str, ...]], inst: tuple[str, ...],
          aggregate: dict[str, tuple[str, ...]] | None = None, packed_fp32: bool = False) -> ArchMetrics:
    ordered = {dtype: tensor[dtype] for dtype in DTYPE_ORDER if dtype in tensor}
    checks = {dtype: (aggregate or {})[dtype] for dtype in DTYPE_ORDER if dtype in (aggregate or {})}
    return ArchMetrics(cc, chip, MappingProxyType(ordered), (TENSOR_PIPE_INST, *inst), MappingProxyType(checks),
                       PACKED_FP32_METRICS if packed_fp32 else ())


ARCHS: Mapping[str, ArchMetrics] = MappingProxyType({
    a.cc: a
    for a in (
        _arch("7.0", "GV100", {}, _inst("op_hmma")),
        _arch("7.5", "TU10x", _TURING, _inst("op_hmma", "op_imma")),
        _arch("8.0", "GA100", _AMPERE, _inst("op_hmma", "op_imma", "op_dmma")),
        _arch("8.6", "GA10x", _AMPERE, _inst("op_hmma", "op_imma")),
        _arch("8.7", "GA10y", _AMPERE, _inst("op_hmma", "op_imma")),
        _arch("8.9", "AD10x", _ADA, _inst("op_hmma_v2", "op_imma_v2")),
        _arch("9.0", "GH100", _HOPPER, _inst("op_hmma", "op_imma", "op_dmma", "op_gmma"), _HOPPER_AGGREGATE),
        _arch("10.0", "GB100", _BLACKWELL_DC, _inst("subpipe_hmma", "subpipe_imma", "subpipe_dmma"),
              packed_fp32=True),
        _arch("10.3", "GB11x", _BLACKWELL_ULTRA, _inst("subpipe_hmma", "subpipe_imma"), packed_fp32=True),
        _arch("11.0", "GB10b", _BLACKWELL_DC, _inst("subpipe_hmma", "subpipe_imma")),
        _arch("12.0", "GB20x", _BLACKWELL_GEFORCE, _inst("subpipe_hmma", "subpipe_imma")),
        _arch("12.1", "GB20b", _BLACKWELL_GEFORCE, _inst("subpipe_hmma", "subpipe_imma")),
    )
})

_CC_FORMS = re.compile(r"(?:sm_?|cc_?)?(\d+)\.?(\d)", re.IGNORECASE)


def normalize_cc(cc: str) -> str:
    """``"9.0"``, ``"90"``, ``"sm_90"`` and ``"CC_90"`` all become ``"9.0"``; raises for unknown ones."""
    match = _CC_FORMS.fullmatch(str(cc).strip())
    key = f"{int(match.group(1))}.{match.group(2)}" if match else str(cc)
    if key not in ARCHS:
        raise UnknownArchError(
            f"no ncu metric list for compute capability {cc!r}; known: {', '.join(ARCHS)}"
        )
    return key


def arch(cc: str) -> ArchMetrics:
    """The :class:`ArchMetrics` of one compute capability."""
    return ARCHS[normalize_cc(cc)]


def tensor_counters_by_dtype(cc: str) -> dict[str, list[str]]:
    """dtype name (fp16, bf16, tf32, fp8, int8, fp64, ...) -> dense ``.sum`` counters to add up.

    Volta (7.0) returns ``{}``. Its tensor FLOPs are ``512 x sm__inst_executed_pipe_tensor.sum``
    (see :data:`VOLTA_FLOPS_PER_TENSOR_INST`).
    """
    return {dtype: list(counters) for dtype, counters in arch(cc).tensor.items()}


def metrics_for(cc: str) -> list[str]:
    """Every metric ``ncu --metrics`` should collect on this architecture, in a fixed order.

    CUDA-core counters (with the packed FP32 ones on 10.0/10.3), Tensor-Core ops counters
    (dense), their aggregates where they are a cross-check (9.0), instruction cross-checks, DRAM
    bytes and duration.
    """
    spec = arch(cc)
    names = [*CUDA_CORE_METRICS, *spec.packed_fp32]
    for counters in spec.tensor.values():
        names.extend(counters)
    for counters in spec.tensor_aggregate.values():
        names.extend(counters)
    names.extend(spec.inst)
    names.extend(MEMORY_AND_TIME_METRICS)
    return list(dict.fromkeys(names))


def all_known_metrics() -> frozenset[str]:
    """The union of :func:`metrics_for` over every architecture (all of them are numbers)."""
    return frozenset(name for cc in ARCHS for name in metrics_for(cc))


# -- the units of the counters costspec reads ----------------------------------------------------

DRAM_BYTES_TOTAL = "dram__bytes.sum"
SOL_DURATION = "GPU Speed Of Light Throughput :: Duration"  # the label of a details page printed with labels
_TENSOR_INST_PREFIXES = ("sm__inst_executed_pipe_tensor", "smsp__inst_executed_pipe_tensor")
_INSTRUCTION_UNITS = ("inst", "")  # ncu prints `inst` (base units) or, for some exports, no unit
_OPS_UNITS = ("", "op", "inst")  # ncu prints the Tensor-Core ops counters without a unit


def is_flop_counter(metric: str) -> bool:
    """A counter that FLOPs are computed from: the CUDA-core FP instruction counters, the Tensor-Core
    ops counters and the tensor-pipe instruction counters (Volta's FLOPs, the cross-checks)."""
    if metric in _FLOP_INSTRUCTION_COUNTERS:
        return True
    # Only the .sum rollup is read: the raw page also prints .avg/.min/.max per SM, and an average
    # is fractional (38725.82 inst, seen on the H100).
    return metric.endswith(".sum") and metric.startswith((TENSOR_OPS_PREFIX, *_TENSOR_INST_PREFIXES))


_FLOP_INSTRUCTION_COUNTERS = frozenset((*CUDA_CORE_METRICS, *PACKED_FP32_METRICS))


def expected_units(metric: str) -> tuple[str, ...] | None:
    """The base units (``parse.normalize_unit``; ``""`` = printed without one) a counter costspec reads
    may carry, or None for a metric it does not read. A value in any other unit (``Mbyte`` on an
    instruction counter, an unknown unit) is not a count of that counter."""
    if metric.startswith(TENSOR_OPS_PREFIX) and metric.endswith(".sum"):
        return _OPS_UNITS
    if is_flop_counter(metric):
        return _INSTRUCTION_UNITS
    if metric in (DRAM_BYTES_READ, DRAM_BYTES_WRITE, DRAM_BYTES_TOTAL):
        return ("byte", "")
    if metric in (DURATION, SOL_DURATION):
        return ("second", "")
    return None


# -- the ncu command line (notes §4, §5) -----------------------------------------------------------

# ncu's own defaults for the settings that change what is measured, passed explicitly so that
# the command records them. Notes §5.2/5.3: clocks locked to base (not boost), caches flushed
# before every replay pass (cold L2). Keep a copy next to every CSV.
RECORDED_SETTINGS: Mapping[str, str] = MappingProxyType({
    "--clock-control": "base",
    "--cache-control": "all",
    "--replay-mode": "kernel",
})

# ncu formats numbers for the locale. Run it under the C locale so that "," is only ever a
# thousands separator (notes §4, "Number formatting").
NCU_ENV: Mapping[str, str] = MappingProxyType({"LC_ALL": "C"})

# Output flags shared by collection and re-export: base units, demangled kernel names, CSV.
# The raw page's columns are metric names already; ncu 2025.3 refuses --print-metric-name there
# ("only supported for the details page", seen on the H100), so only the details page gets it.
_OUTPUT_FLAGS = (
    "--print-units", "base",
    "--print-kernel-base", "demangled",
    "--csv",
)


def _report_stem(out_report: str) -> str:
    return out_report[: -len(".ncu-rep")] if out_report.endswith(".ncu-rep") else out_report


def build_command(
    python_argv: list[str],
    cc: str,
    out_report: str,
    nvtx: bool = True,
    *,
    ncu: str = "ncu",
    log_file: str | None = None,
    profile_from_start: bool = True,
) -> list[str]:
    """The ncu command line that profiles ``python_argv`` with costspec's metrics for ``cc``.

    * ``--target-processes all`` profiles child processes too (DataLoader workers, torchrun).
    * ``--nvtx --nvtx-push-pop-scope process``: autograd launches backward kernels from another
      thread. With the default ``thread`` scope, the ranges pushed on the Python thread would
      not enclose them (notes §5.5).
    * ``--export out_report`` keeps the ``.ncu-rep`` file, so both CSV pages can be exported
      again later (:func:`build_export_command`). ``--log-file`` receives ncu's own output
      (``==PROF==`` lines and the raw page as CSV), apart from the program's stdout. By default
      it is ``<out_report without .ncu-rep>.log``.
    * The :data:`RECORDED_SETTINGS` are ncu's defaults, written out explicitly.
    * ``profile_from_start=False`` adds ``--profile-from-start off``: only kernels between
      ``cudaProfilerStart`` and ``cudaProfilerStop`` are profiled (``costspec.ncu.runner`` brackets
      the one measured step with them, after its warm-up).

    Run it with :data:`NCU_ENV` added to the environment.
    """
    if not python_argv:
        raise UsageError("build_command needs the command to profile (python_argv is empty)")
    command = [
        ncu,
        "--target-processes", "all",
    ]
    if nvtx:
        command += ["--nvtx", "--nvtx-push-pop-scope", "process"]
    if not profile_from_start:
        command += ["--profile-from-start", "off"]
    for flag, value in RECORDED_SETTINGS.items():
        command += [flag, value]
    command += [
        *_OUTPUT_FLAGS,
        "--page", "raw",
        "--metrics", ",".join(metrics_for(cc)),
        "--export", out_report,
        "--force-overwrite",
        "--log-file", log_file if log_file is not None else _report_stem(out_report) + ".log",
    ]
    return command + list(python_argv)


def build_export_command(report: str, out_csv: str, page: str = "raw", *, ncu: str = "ncu") -> list[str]:
    """``ncu --import`` command that writes one page (``raw`` or ``details``) of a report as CSV."""
    if page not in ("raw", "details"):
        raise UsageError(f"ncu CSV page must be 'raw' or 'details', not {page!r}")
    names = ["--print-metric-name", "name"] if page == "details" else []
    return [ncu, "--import", report, *_OUTPUT_FLAGS, *names, "--page", page, "--log-file", out_csv]
