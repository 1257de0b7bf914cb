"""Tensor-Core eligibility: the alignment rules of NVIDIA's libraries applied to every GEMM a model runs.

cuBLAS feeds Tensor Cores with 16-byte vector loads; a row whose length is not a multiple of 16 bytes
cannot use them. NVIDIA's *Matrix Multiplication Background User's Guide* (section "Tensor Core
Requirements") gives the rule per dtype: fp16/bf16 multiples of 8 elements, tf32 multiples of 4,
int8 multiples of 16 (so fp8 too: 1 byte), fp64 multiples of 2 -- i.e. 16 bytes -- and "most
efficient" at 128 bytes on A100 (fp16 64, tf32 32, int8 128). With cuBLAS < 11.0 / cuDNN < 7.6.3,
the libraries of Volta and Turing, a GEMM that breaks the rule does not run on Tensor Cores at all;
from cuBLAS 11 (Ampere and later) it always does, less efficiently. The cuBLAS guide ("Tensor Core
Usage") states the rule on the leading dimensions: for PyTorch's row-major y = x W^T these are K
(the rows of x and W) and N (the rows of y), never the token count M; the backward GEMMs (dX = dY W,
dW = dY^T X) have the same leading dims. 4-bit formats: 16 bytes = 32 elements.

Each op says which GEMMs it runs (`OpDef.gemms`); `check` evaluates them at bound dims and returns
one `Flag` per layer and dim that breaks the rule, with the nearest aligned sizes. `--alignment
strict` moves a flagged layer's Tensor-Core FLOPs to CUDA cores on GPUs that fall back (compute
capability < 8.0); `warn` (default) only lists the flags. No derating on Ampere and later: the
guides give no factor to apply, so costspec states the flag and keeps the Tensor-Core peak.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from costspec.analysis.reporting import Report
from costspec.core.errors import UsageError
from costspec.core.results import Row, Table

if TYPE_CHECKING:
    from costspec.core.conventions import Precision

ALIGN_BITS = 128  # 16-byte vector loads feed the Tensor Cores
PREFERRED_BITS = 1024  # 128 bytes: the guide's "most efficient" multiple on A100
FALLBACK_BELOW_CC = 8  # compute capability major below which a misaligned GEMM leaves Tensor Cores
ALIGNMENT_MODES = ("warn", "strict")
SOURCES = (
    "NVIDIA, Matrix Multiplication Background User's Guide, 'Tensor Core Requirements' "
    "(https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html)",
    "NVIDIA, cuBLAS documentation, 'Tensor Core Usage' (https://docs.nvidia.com/cuda/cublas/index.html)",
)


def multiples(precision: Precision) -> tuple[int, int]:
    """(required, preferred) element multiples for `precision`'s Tensor-Core GEMMs."""
    bits = precision.element_bits
    return ALIGN_BITS // bits, PREFERRED_BITS // bits


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class Flag:
    """One leading dim of one layer's GEMM that breaks the alignment rule."""

    layer: str  # the report row (op, or op.part)
    kind: str  # gemm, conv or sdpa
    dim: str  # "N" or "K"
    value: int
    dtype: str
    multiple: int
    preferred: int

    @property
    def padded(self) -> int:
        return round_up(self.value, self.multiple)

    @property
    def padded_preferred(self) -> int:
        return round_up(self.value, self.preferred)

    def text(self) -> str:
        what = {"conv": " (implicit GEMM of the convolution: K = in channels x kernel area; cuDNN pads the channels)",
                "sdpa": " (head dim of the attention)"}.get(self.kind, "")
        return (f"{self.layer}: {self.dim} = {self.value}{what} is not a multiple of {self.multiple}: pad to "
                f"{self.padded} (or {self.padded_preferred} for multiples of {self.preferred})")


def _size(expr, values: Mapping) -> int | None:
    import sympy

    value = sympy.sympify(expr).xreplace(values)
    return int(value) if value.is_Integer else None


# (layer, kind, dim "N" / "K", size or None where it is not an integer, dtype, required, preferred multiple)
GemmSize = tuple[str, str, str, int | None, str, int, int]


def check(model, values: Mapping) -> list[Flag]:
    """Every (layer, leading dim) whose size breaks the Tensor-Core rule of the layer's dtype, once each,
    in model order. Layers in plain fp32 run on CUDA cores and are not checked."""
    sizes: list[GemmSize] = []
    for node in model.op_nodes():
        precision = node.precision
        if not precision.tensor_cores:
            continue
        need, best = multiples(precision)
        rows = {child.local: child.name for child in node.children}
        for gemm in node.op.gemms(node.call):
            layer = rows.get(gemm.part, node.name)
            for dim in gemm.leading:
                sizes.append((layer, gemm.kind, dim.upper(), _size(getattr(gemm, dim), values), precision.dtype,
                              need, best))
    return flags(sizes)


def flags(sizes: Iterable[GemmSize]) -> list[Flag]:
    """The flags of GEMM leading dims at their sizes (`check`'s rule; the compiled path gives the sizes too)."""
    out: list[Flag] = []
    seen: set[tuple[str, str, int]] = set()
    for layer, kind, dim, size, dtype, need, best in sizes:
        key = (layer, dim, size or 0)
        if size is None or size % need == 0 or key in seen:
            continue
        seen.add(key)
        out.append(Flag(layer, kind, dim, size, dtype, need, best))
    return out


def falls_back(compute_capability: str) -> bool:
    """True on architectures whose libraries (cuBLAS < 11, cuDNN < 7.6.3: Volta, Turing) run a
    misaligned GEMM without Tensor Cores."""
    try:
        major = int(str(compute_capability).split(".")[0])
    except ValueError:
        raise UsageError(f"the GPU's compute capability {compute_capability!r} is not MAJOR.MINOR") from None
    return major < FALLBACK_BELOW_CC


def strict_report(report: Report, flags: list[Flag]) -> Report:
    """`report` with every flagged layer's Tensor-Core FLOPs charged to CUDA cores (the fallback of
    `--alignment strict` on an architecture that falls back), block rows and totals adjusted."""
    flagged = {f.layer for f in flags}
    moved = [row.tc_flops if row.name in flagged and not _has_children(report.rows, i) else 0
             for i, row in enumerate(report.rows)]
    totals = [0] * len(report.rows)
    stack: list[int] = []
    for i, row in enumerate(report.rows):
        while stack and report.rows[stack[-1]].depth >= row.depth:
            stack.pop()
        if moved[i]:
            totals[i] += moved[i]
            for j in stack:
                totals[j] += moved[i]
        stack.append(i)
    rows: list[Row] = [_moved(row, t, "CUDA(fallback)" if moved[i] else row.matmul_engine) if t else row
                       for i, (row, t) in enumerate(zip(report.rows, totals))]
    shift = sum(moved)
    assert report.table.total is not None
    total = _moved(report.table.total, shift, report.table.total.matmul_engine)
    return Report(report.spec_name, report.pass_, report.precision, report.dims,
                  Table(list(report.table.columns), rows, total), report.notes)


def _moved(row: Row, flops: int, engine: str | None) -> Row:
    """`row` with `flops` Tensor-Core FLOPs charged to CUDA cores instead."""
    return Row(row.name, row.label, row.depth, {**row.values, "tc_flops": row.tc_flops - flops,
                                               "cuda_flops": row.cuda_flops + flops, "matmul_engine": engine})


def _has_children(rows: list[Row], i: int) -> bool:
    return i + 1 < len(rows) and rows[i + 1].depth > rows[i].depth


def apply(model, report: Report, values: Mapping, mode: str, compute_capability: str | None
          ) -> tuple[Report, list[Flag], list[str]]:
    """The report to price under `--alignment mode`, the flags, and the lines that explain them."""
    if mode not in ALIGNMENT_MODES:
        raise UsageError(f"--alignment must be one of {', '.join(ALIGNMENT_MODES)}, got {mode!r}")
    found = check(model, values)
    if not found:
        return report, found, []
    lines = [f.text() for f in found]
    if mode == "strict":
        if compute_capability is None:
            raise UsageError("--alignment strict needs --gpu: the GPU's architecture decides whether a misaligned "
                             "GEMM falls back to CUDA cores")
        if falls_back(compute_capability):
            report = strict_report(report, found)
            lines.append(f"--alignment strict: compute capability {compute_capability} (cuBLAS < 11 / cuDNN < 7.6.3 "
                         "era) runs these layers without Tensor Cores: their matmul FLOPs are charged to CUDA cores")
        else:
            lines.append(f"--alignment strict: compute capability {compute_capability} runs misaligned GEMMs on Tensor "
                         "Cores (cuBLAS >= 11), less efficiently; no factor is published, so the peak is kept")
    return report, found, lines
