"""Kernel-level helpers: classify a kernel by its name, find its layer, turn counters into FLOPs.

The counting conventions come from ``shared/reference/ncu-metrics-and-gpu-peaks.md``:

* §1: CUDA-core FLOPs as ncu's roofline sections count them. FP32 = fadd + fmul + 2*ffma, plus
  on Blackwell 10.0/10.3 the packed 2-lane instructions: 2*fadd2 + 2*fmul2 + 4*ffma2.
  FP64 = dadd + dmul + 2*dfma. FP16 = 2*hadd + 2*hmul + 4*hfma ("roofline"): ncu's half
  roofline counts every H* instruction as a packed half2, 2 lanes. The nvprof->ncu transition
  table says hadd + hmul + 2*hfma ("nvprof"). costspec defaults to "roofline", because that is
  what ncu's achieved FLOP/s shows. The notes' §7.2 asks for a half2 microbenchmark to confirm.
* §2.1/§2.2: Tensor-Core FLOPs = the sum of the ``sm__ops_path_tensor_*.sum`` counters, taken
  as they are (1 op = 1 FLOP). An aggregate and its own ``_sparsity_off/_on`` split must not
  both be added. Per-instruction counters (``op_<instr>_src_<dtype>``: Hopper wgmma ``hgmma``
  and mma.sync ``hmma``, Blackwell tcgen05 ``utc*mma``) are counted; an aggregate
  ``src_<dtype>`` that they break down again is a cross-check (``tensor_aggregate``), shown
  next to them and never added. Volta has no ops counter: 512 x ``sm__inst_executed_pipe_tensor.sum``.
* §5.6/§5.7: cuBLAS split-K adds a ``splitKreduce_kernel``, and epilogues put CUDA-core FLOPs
  inside GEMM kernels. So a layer's measured FLOPs are summed over every kernel in its NVTX
  range.
"""
from __future__ import annotations

import re
from typing import Collection, Literal, Mapping, Sequence, TypedDict

from costspec.core.errors import UsageError
from costspec.ncu.metrics import (
    CUDA_CORE_METRICS,
    PACKED_FP32_METRICS,
    TENSOR_OPS_PREFIX,
    TENSOR_PIPE_INST,
    VOLTA_FLOPS_PER_TENSOR_INST,
    arch,
    cuda_core_metric,
    normalize_cc,
    tensor_counters_by_dtype,
)

KERNEL_CLASSES: tuple[str, ...] = (
    "gemm", "splitk_reduce", "elementwise", "reduction", "attention", "conv", "norm", "softmax", "other",
)

# First match wins, so the order matters. Split-K reduces before reductions and GEMMs. RNG
# (distribution_*) before elementwise. Attention, conv (implicit_gemm), norms and softmax before
# the generic gemm/reduce/elementwise words.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("splitk_reduce", r"splitkreduce|reducesplitk|splitk_reduce"),
        ("other", r"distribution_|philox|curand"),
        ("attention", r"flash|fmha|attention|sdpa"),
        ("conv", r"conv(?!ert)|implicit_gemm|fprop|dgrad|wgrad|winograd"),
        ("norm", r"layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|\bbn_(?:fw|bw)"),
        ("softmax", r"softmax"),
        ("gemm", r"gemm|gemv|nvjet|xmma|matmul|\bdot_kernel"),
        ("reduction", r"reduc|triton_red_|triton_per_"),
        ("elementwise", r"elementwise|triton_poi_"),
    )
)


def base_name(kernel_name: str) -> str:
    """``void at::native::foo<4, bar>(int)`` -> ``at::native::foo``: no return type, templates or parameters."""
    name = kernel_name.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    cut = min((i for i in (name.find("<"), name.find("(")) if i >= 0), default=len(name))
    words = name[:cut].split()
    return words[-1] if words else name


def _match(text: str) -> str | None:
    for kind, pattern in _RULES:
        if pattern.search(text):
            return kind
    return None


def classify(kernel_name: str) -> str:
    """The kind of a kernel, read from its (demangled or function) name. One of :data:`KERNEL_CLASSES`.

    The bare function name is tried first, then the full name with template arguments. The
    second step finds ``cutlass::Kernel<cutlass_80_simt_sgemm_...>`` but does not turn
    ``reduce_kernel<..., NormOps>`` into a norm. Unrecognised kernels are ``"other"``.
    """
    return _match(base_name(kernel_name)) or _match(kernel_name) or "other"


def inner_range(nvtx_stack: Sequence[str], known_names: Collection[str]) -> str | None:
    """The innermost range of a push/pop stack (outermost first) that is a known layer name."""
    known = known_names if isinstance(known_names, (set, frozenset, dict)) else set(known_names)
    for name in reversed(nvtx_stack):
        if name in known:
            return name
    return None


class FlopBreakdown(TypedDict):
    """What :func:`flops_from_metrics` returns. FLOP counts are floats of whole numbers."""

    cuda_fp32: float
    cuda_fp64: float
    cuda_fp16: float
    tensor: float
    tensor_by_dtype: dict[str, float]  # only when cc is given (not on 7.0)
    tensor_counters: tuple[str, ...]  # the counters summed into "tensor"
    tensor_method: str  # "ops_counters", "volta_inst_x512" or "none"
    # cross-check: the same work counted from the aggregates (src_*) the op_* counters break down;
    # None when no aggregate was set aside
    tensor_aggregate: float | None
    tensor_aggregate_counters: tuple[str, ...]
    ignored: tuple[str, ...]  # tensor counters present but left out to avoid double counting
    cuda_counters: tuple[str, ...]  # the CUDA-core counters present (summed into cuda_*)
    missing: tuple[str, ...]  # expected counters that were absent, treated as 0
    # counters present as n/a (not collected) that the CUDA-core / Tensor-Core figure needs: that
    # figure is unknown (the sum over the other counters is not the kernel's FLOPs)
    cuda_not_collected: tuple[str, ...]
    tensor_not_collected: tuple[str, ...]
    fp16_convention: str


_FP16_WEIGHTS = {
    "roofline": {"hadd": 2, "hmul": 2, "hfma": 4},  # ncu half roofline section (half2 = 2 lanes)
    "nvprof": {"hadd": 1, "hmul": 1, "hfma": 2},  # nvprof flop_count_hp mapping
}


_TENSOR_COUNTER = re.compile(
    re.escape(TENSOR_OPS_PREFIX) + r"(?:op_(?P<op>[a-z0-9]+)_)?src_(?P<dtype>[a-z0-9_]+?)(?:_sparsity_(?:on|off))?\.sum"
)


def _covers(aggregate_dtype: str, op_dtype: str) -> bool:
    """Whether aggregate ``src_fp16`` covers op ``src_fp16_dst_fp32`` (its dtype fields are a prefix)."""
    head, tail = aggregate_dtype.split("_"), op_dtype.split("_")
    return tail[: len(head)] == head


class TensorCounters(TypedDict):
    """How the ``sm__ops_path_tensor_*.sum`` counters present are used."""

    used: list[str]  # summed into the Tensor-Core FLOPs
    aggregates: list[str]  # src_* aggregates that op_* counters break down again: the cross-check
    ignored: list[str]  # aggregates of a _sparsity_off/_on split that is present: never added


def tensor_counters(metrics: Mapping[str, float]) -> TensorCounters:
    """Sort the Tensor-Core ops counters present into used, cross-check aggregates, and left out.

    * ``X.sum`` is left out when ``X_sparsity_off.sum`` or ``X_sparsity_on.sum`` is present.
    * A ``src_<d>`` counter (no ``op_``) is an aggregate when an ``op_<instr>_src_<d'>`` counter
      is present whose dtype fields start with ``d`` (``src_fp16`` covers ``op_hgmma_src_fp16``
      and ``op_hmma_src_fp16_dst_fp32``): the per-instruction counters are added, the aggregate
      is kept as a cross-check.
    """
    present = [m for m in metrics if m.startswith(TENSOR_OPS_PREFIX) and m.endswith(".sum")]
    bases = {m[: -len(".sum")] for m in present}
    ignored = {
        base[: -len(split)] + ".sum"
        for base in bases for split in ("_sparsity_off", "_sparsity_on")
        if base.endswith(split) and base[: -len(split)] in bases
    }
    parsed = {m: _TENSOR_COUNTER.fullmatch(m) for m in present if m not in ignored}
    op_dtypes = [match["dtype"] for match in parsed.values() if match and match["op"]]
    aggregates = {
        m for m, match in parsed.items()
        if match and not match["op"] and any(_covers(match["dtype"], d) for d in op_dtypes)
    }
    used = [m for m in parsed if m not in aggregates]
    return TensorCounters(used=used, aggregates=[m for m in present if m in aggregates], ignored=sorted(ignored))


def flops_from_metrics(
    metrics: Mapping[str, float],
    fp16_convention: Literal["roofline", "nvprof"] = "roofline",
    *,
    cc: str | None = None,
    not_collected: Collection[str] = (),
) -> FlopBreakdown:
    """CUDA-core and Tensor-Core FLOPs of one kernel (or of summed kernels) from ncu counters.

    Missing counters count as 0 and are listed in ``missing``. These are the nine CUDA-core
    counters and, when ``cc`` is given, that architecture's tensor counters. With
    ``cc="7.0"``, tensor FLOPs come from ``512 x sm__inst_executed_pipe_tensor.sum``.
    ``not_collected``: the counters the CSV printed as n/a (``KernelRecord.missing``); those a
    figure is made of are listed in ``cuda_not_collected`` / ``tensor_not_collected``, and that
    figure is then not a count (the caller shows it as n/a). With ``cc`` given, a Tensor-Core
    counter outside that architecture's list (n/a on a chip without that path) does not count.
    """
    if fp16_convention not in _FP16_WEIGHTS:
        raise UsageError(f"fp16_convention must be one of {sorted(_FP16_WEIGHTS)}, not {fp16_convention!r}")
    missing = [name for name in CUDA_CORE_METRICS if name not in metrics]

    def count(op: str) -> float:
        return float(metrics.get(cuda_core_metric(op), 0.0))

    weights = _FP16_WEIGHTS[fp16_convention]
    sorted_counters = tensor_counters(metrics)
    used, ignored, aggregates = sorted_counters["used"], sorted_counters["ignored"], sorted_counters["aggregates"]
    tensor = float(sum(metrics[name] for name in used))
    aggregate_total = None
    if aggregates:  # what the aggregates give for the same work: the op_* they cover are swapped out
        aggregate_dtypes = [m["dtype"] for a in aggregates if (m := _TENSOR_COUNTER.fullmatch(a))]
        covered = {u for u in used if (m := _TENSOR_COUNTER.fullmatch(u)) and m["op"]
                   and any(_covers(d, m["dtype"]) for d in aggregate_dtypes)}
        aggregate_total = float(sum(metrics[m] for m in [*aggregates, *(u for u in used if u not in covered)]))
    method = "ops_counters" if used else "none"
    by_dtype: dict[str, float] = {}
    if cc is not None:
        arch_cc = normalize_cc(cc)
        missing += [name for name in arch(arch_cc).packed_fp32 if name not in metrics]
        for dtype, counters in tensor_counters_by_dtype(arch_cc).items():
            by_dtype[dtype] = float(sum(metrics.get(name, 0.0) for name in counters))
            missing += [name for name in counters if name not in metrics]
        if arch_cc == "7.0" and not used:
            if TENSOR_PIPE_INST in metrics:
                tensor = VOLTA_FLOPS_PER_TENSOR_INST * float(metrics[TENSOR_PIPE_INST])
                method = "volta_inst_x512"
            else:
                missing.append(TENSOR_PIPE_INST)
    na = set(not_collected)
    cuda_names = (*CUDA_CORE_METRICS, *(arch(cc).packed_fp32 if cc is not None else PACKED_FP32_METRICS))
    cuda_na = tuple(m for m in cuda_names if m in na)
    if cc is None:
        tensor_na = tuple(sorted(m for m in na if m.startswith(TENSOR_OPS_PREFIX)))
    else:
        arch_cc = normalize_cc(cc)
        listed = [m for counters in tensor_counters_by_dtype(arch_cc).values() for m in counters]
        listed += [TENSOR_PIPE_INST] if arch_cc == "7.0" else []
        tensor_na = tuple(m for m in listed if m in na)
    return FlopBreakdown(
        # Blackwell FADD2/FMUL2/FFMA2 do 2 lanes per thread instruction (0 where not collected)
        cuda_fp32=count("fadd") + count("fmul") + 2 * count("ffma")
        + 2 * count("fadd2") + 2 * count("fmul2") + 4 * count("ffma2"),
        cuda_fp64=count("dadd") + count("dmul") + 2 * count("dfma"),
        cuda_fp16=weights["hadd"] * count("hadd") + weights["hmul"] * count("hmul") + weights["hfma"] * count("hfma"),
        tensor=tensor,
        tensor_by_dtype=by_dtype,
        tensor_counters=tuple(used),
        tensor_method=method,
        tensor_aggregate=aggregate_total,
        tensor_aggregate_counters=tuple(aggregates),
        ignored=tuple(ignored),
        cuda_counters=tuple(m for m in (*CUDA_CORE_METRICS, *PACKED_FP32_METRICS) if m in metrics),
        missing=tuple(dict.fromkeys(missing)),
        cuda_not_collected=cuda_na,
        tensor_not_collected=tensor_na,
        fp16_convention=fp16_convention,
    )
