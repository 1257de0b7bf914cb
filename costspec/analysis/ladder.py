"""The precision ladder: one spec costed in every precision a GPU runs, side by side.

Each rung re-builds the model with the spec's dtype replaced (layers that pin their own precision
keep it) and prices it with the roofline: bytes shrink with the element size (block scales included
for nvfp4 / mxfp4), the matmul peak grows with the Tensor-Core rate of the format, pointwise work
stays at the fp32 CUDA-core peak (PyTorch computes elementwise ops in fp32 "opmath"). fp32 runs its
matmuls on CUDA cores; every other rung on Tensor Cores, where the catalog gives the GPU a peak.
"""
from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Mapping

from costspec.analysis.evaluation import build_report
from costspec.analysis.gpus import Gpu, matmul_dtype
from costspec.analysis.roofline import Efficiency, estimate
from costspec.core.conventions import Precision
from costspec.core.results import Column, Result, Row, Table

if TYPE_CHECKING:
    from costspec.tree.network import Network

LADDER = ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "nvfp4", "mxfp4")


def _bound(rows, walked_depths: list[int]) -> str:
    """The bound of the whole model: the engine (or memory) that holds most of the leaves' time."""
    times: dict[str, float] = {}
    for i, row in enumerate(rows):
        leaf = i + 1 >= len(rows) or walked_depths[i + 1] <= walked_depths[i]
        if leaf and row.est_time_s:
            times[row.bound] = times.get(row.bound, 0.0) + row.est_time_s
    return max(times, key=lambda k: times[k]) if times else "-"


def ladder(model: Network, values: Mapping, gpu: Gpu, pass_: str = "forward", fusion: str = "default",
           efficiency: Efficiency | None = None) -> Result:
    """One row per precision `gpu` supports: bytes, intensity, bound, time, speed-up vs fp32 and bf16."""
    efficiency = efficiency or Efficiency()
    rungs = [dtype for dtype in LADDER if gpu.supports(dtype)]
    sparse = any(op.precision.sparse for op in model.op_nodes())
    if sparse:  # 2:4 layers run only on Sparse Tensor Cores: the rungs with a sparse peak on this GPU
        rungs = [d for d in rungs if Precision(d).tensor_cores and matmul_dtype(d) in gpu.tensor_sparse]
    rows: list[Row] = []
    times: dict[str, float] = {}
    for dtype in rungs:
        rung = model.with_precision(dtype)
        report = build_report(rung, pass_, values)
        roof = estimate(rung, report, values, gpu, fusion, efficiency)
        depths = [r.depth for r in report.rows]
        times[dtype] = roof.time_s
        size = Precision(dtype).bytes_per_element
        rows.append(Row(dtype, dtype, 0, {
            "element": str(size), "engine": "TC" if Precision(dtype).tensor_cores else "CUDA",
            "flops": report.total, "bytes": roof.bytes,
            "intensity": Fraction(report.total, roof.bytes) if roof.bytes else None,
            "bound": _bound(roof.rows, depths), "time": roof.time_s}))
    for row in rows:
        t = row.values["time"]
        row.values["vs_fp32"] = times["fp32"] / t if t and "fp32" in times else None
        row.values["vs_bf16"] = times["bf16"] / t if t and "bf16" in times else None
    columns = [Column("element", "bytes/elem", "text"), Column("engine", "matmul on", "text"),
               Column("flops", "FLOPs", "flops"), Column("bytes", "bytes", "bytes"),
               Column("intensity", "FLOP/byte", "number"), Column("bound", "bound", "text"),
               Column("time", "est. time", "seconds"), Column("vs_fp32", "vs fp32", "ratio"),
               Column("vs_bf16", "vs bf16", "ratio")]
    dims = " ".join(f"{k}={int(v)}" for k, v in sorted(((str(s), v) for s, v in values.items())))
    skipped = [d for d in LADDER if d not in rungs]
    notes = [f"precision ladder on {gpu.name} (compute capability {gpu.compute_capability}): one row per dtype with a "
             "Tensor-Core peak in the catalog (fp32 runs its matmuls on CUDA cores); fp8_e4m3 and fp8_e5m2 share the "
             "fp8 peak, nvfp4 and mxfp4 the fp4 peak; int8 counts integer ops as FLOPs",
             "bytes per element include block scales: nvfp4 = 1/2 + 1/16 (one fp8 E4M3 scale per 16 values), "
             "mxfp4 = 1/2 + 1/32 (one E8M0 scale per 32); pointwise work stays at the fp32 CUDA-core peak",
             "vs fp32 / vs bf16 = estimated time in that dtype / time in this one (roofline, "
             f"fusion {fusion})"]
    if skipped:
        why = "(no catalog peak, or no sparse peak for this spec's 2:4 layers)" if sparse else "(no catalog peak)"
        notes.append(f"not run by {gpu.key} on Tensor Cores {why}: {', '.join(skipped)}")
    header = f"{model.name} | precision ladder | {gpu.key} | pass: {pass_} | {dims}"
    return Result(header, [Table(columns, rows)], notes=notes,
                  meta={"spec": model.name, "gpu": gpu.key, "pass": pass_, "rungs": rungs})
