"""Counting conventions, named once.

* 1 FLOP is one scalar add, multiply, divide, compare/select, or one call of a libm-style
  primitive (exp, log, erf, tanh, sqrt, rsqrt). A multiply-add is 2 FLOPs: FLOP = 2 * MAC,
  as in torch.utils.flop_counter (fvcore and ptflops report MACs, i.e. half of this).
* Matmul-class work (GEMM, conv, SDPA's QK^T and AV) is charged to Tensor Cores when the
  precision lets Tensor Cores run it (fp16, bf16, fp8, or fp32 with TF32 allowed: dtype `tf32`);
  in plain fp32 the same FLOPs run on CUDA cores, as cuBLAS sgemm executes them.
* Everything else (bias and residual adds, scaling, activations, norms, softmax) is CUDA-core
  work: elements x FLOPs-per-element from the cost table (costspec/data/cost_table.yaml).
"""
from __future__ import annotations

from dataclasses import dataclass

FLOPS_PER_MAC = 2

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
DTYPES = tuple(DTYPE_BYTES)
_TENSOR_CORE_DTYPES = {"tf32", "fp16", "bf16", "fp8"}


@dataclass(frozen=True)
class Precision:
    """The numeric format a layer runs in, and so the engine its matmul-class FLOPs go to."""

    dtype: str = "bf16"

    @property
    def tensor_cores(self) -> bool:
        """True when matmul-class work runs on Tensor Cores in this precision."""
        return self.dtype in _TENSOR_CORE_DTYPES

    @property
    def engine(self) -> str:
        """Short name of the engine matmul-class FLOPs are charged to."""
        return "TC" if self.tensor_cores else "CUDA"

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        return self.dtype

    @staticmethod
    def parse(dtype: str) -> str:
        """`dtype` checked against the known dtypes (a clear usage error otherwise)."""
        if dtype not in DTYPE_BYTES:
            from .errors import UsageError

            raise UsageError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        return dtype
