"""Counting conventions, named once.

* 1 FLOP is one scalar add, multiply, divide, compare/select, or one call of a libm-style
  primitive (exp, log, erf, tanh, sqrt, rsqrt). A multiply-add is 2 FLOPs: FLOP = 2 * MAC,
  as in torch.utils.flop_counter (fvcore and ptflops report MACs, i.e. half of this).
* Matmul-class work (GEMM, conv, SDPA's QK^T and AV) is charged to Tensor Cores when the
  precision lets Tensor Cores run it (fp16, bf16, the fp8 formats, int8, the fp4 formats, or fp32
  with TF32 allowed: dtype `tf32`); in plain fp32 the same FLOPs run on CUDA cores, as cuBLAS
  sgemm executes them.
* Element sizes are exact: the block-scaled 4-bit formats carry their scales (nvfp4: 4-bit E2M1
  values plus one fp8 E4M3 scale per 16 elements = 9/16 byte per element; mxfp4: plus one E8M0
  scale per 32 elements = 17/32 byte), as sympy Rationals so byte counts stay exact.
* Everything else (bias and residual adds, scaling, activations, norms, softmax) is CUDA-core
  work: elements x FLOPs-per-element from the cost table (costspec/data/cost_table.yaml).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

FLOPS_PER_MAC = 2

# Bytes per element. `fp8` is fp8_e4m3 (the format inference and forward passes use); `fp4` is
# nvfp4, the 4-bit format Blackwell's Tensor Cores run natively with NVIDIA's scaling.
NVFP4_BLOCK, MXFP4_BLOCK = 16, 32  # elements per block scale (nvfp4: fp8 E4M3 scale; mxfp4: E8M0)
DTYPE_BYTES: dict[str, int | sympy.Rational] = {
    "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1,
    "fp4": sympy.Rational(1, 2) + sympy.Rational(1, NVFP4_BLOCK),
    "nvfp4": sympy.Rational(1, 2) + sympy.Rational(1, NVFP4_BLOCK),
    "mxfp4": sympy.Rational(1, 2) + sympy.Rational(1, MXFP4_BLOCK),
}
DTYPES = tuple(DTYPE_BYTES)
_TENSOR_CORE_DTYPES = {"tf32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "fp4", "nvfp4", "mxfp4"}
DTYPE_ALIASES = {"fp8": "fp8_e4m3", "fp4": "nvfp4"}
# The GPU catalog's Tensor-Core peak key of each dtype (both fp8 formats run at the fp8 peak, both
# 4-bit formats at the fp4 peak).
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8",
            "fp8_e5m2": "fp8", "int8": "int8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4"}
# Bytes of the element itself, without block scales (Tensor-Core alignment rules count elements).
ELEMENT_BITS = {"fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8,
                "fp4": 4, "nvfp4": 4, "mxfp4": 4}


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
    def bytes_per_element(self) -> int | sympy.Rational:
        """Bytes per stored element, block scales included (a Rational for the 4-bit formats)."""
        return DTYPE_BYTES[self.dtype]

    @property
    def element_bits(self) -> int:
        """Bits of one value, without block scales."""
        return ELEMENT_BITS[self.dtype]

    def __str__(self) -> str:
        return self.dtype

    @staticmethod
    def parse(dtype: str) -> str:
        """`dtype` checked against the known dtypes (a clear usage error otherwise)."""
        if dtype not in DTYPE_BYTES:
            from .errors import UsageError

            raise UsageError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        return dtype
