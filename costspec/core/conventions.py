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
* 2:4 structured sparsity (`precision: {sparsity: "2:4"}`) prunes weights: the forward GEMM / conv
  of a part that holds a weight runs on Sparse Tensor Cores, which execute half its dense FLOPs.
  Backward GEMMs, attention's QK^T / AV and all pointwise work stay dense (docs/conventions.md).
* Quantised weights (`precision: {weights: int4, group: 128, compute: bf16}`): the weight matrices of
  GEMMs / convs are stored at the weights' width plus one scale (and, for int4, one 4-bit zero point)
  per `group` values along k; their GEMMs run at the compute dtype (docs/conventions.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sympy

    from costspec.core.errors import Location

FLOPS_PER_MAC = 2

# Bytes per element. `fp8` is fp8_e4m3 (the format inference and forward passes use); `fp4` is
# nvfp4, the 4-bit format Blackwell's Tensor Cores run natively with NVIDIA's scaling.
NVFP4_BLOCK, MXFP4_BLOCK = 16, 32  # elements per block scale (nvfp4: fp8 E4M3 scale; mxfp4: E8M0)
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "fp4", "nvfp4", "mxfp4")
if TYPE_CHECKING:
    DTYPE_BYTES: dict[str, int | sympy.Rational]  # in DTYPES order (built on first use: see __getattr__)
_TENSOR_CORE_DTYPES = {"tf32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "fp4", "nvfp4", "mxfp4"}
DTYPE_ALIASES = {"fp8": "fp8_e4m3", "fp4": "nvfp4"}
# The GPU catalog's Tensor-Core peak key of each dtype (both fp8 formats run at the fp8 peak, both
# 4-bit formats at the fp4 peak).
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8",
            "fp8_e5m2": "fp8", "int8": "int8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4"}
# Bytes of the element itself, without block scales (Tensor-Core alignment rules count elements).
ELEMENT_BITS = {"fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8,
                "fp4": 4, "nvfp4": 4, "mxfp4": 4}


# Structured sparsity. "2:4" is NVIDIA's 50% pattern (cuSPARSELt: 2:4 for 8- and 16-bit types, 1:2 for
# tf32, the same 50% of the values). Sparse Tensor Cores run the product with the pruned operand in
# half the dense time, so they execute 1/SPARSE_SPEEDUP of its dense FLOPs.
SPARSITY_PATTERNS = ("2:4",)
DENSE = "none"
SPARSE_SPEEDUP = 2
if TYPE_CHECKING:
    SPARSE_KEPT: sympy.Rational  # fraction of the weight's values stored: 1/2 (built on first use)


def _sympy_constant(name: str) -> Any:
    # The two sympy-valued constants are built when first read, so that importing the conventions (the CLI's
    # option lists do) does not import sympy: a warm `costspec eval` never needs it.
    if name not in globals():
        import sympy

        scaled = {"fp4": NVFP4_BLOCK, "nvfp4": NVFP4_BLOCK, "mxfp4": MXFP4_BLOCK}
        whole = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}
        globals()["DTYPE_BYTES"] = {d: whole[d] if d in whole else sympy.Rational(1, 2) + sympy.Rational(1, scaled[d])
                                    for d in DTYPES}
        globals()["SPARSE_KEPT"] = sympy.Rational(1, 2)
    return globals()[name]


def __getattr__(name: str) -> Any:
    if name in ("DTYPE_BYTES", "SPARSE_KEPT"):
        return _sympy_constant(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
# Matmul classes whose second operand is the layer's weight (attention's sdpa multiplies activations).
SPARSE_MATMUL_CLASSES = ("gemm", "conv")
# Parts that hold parameters but whose GEMM does not multiply by a weight matrix a sparse kernel could
# run: the decomposed relative positions multiply q by rows gathered from their tables per query.
DENSE_ONLY_PARTS = frozenset({"rel_pos"})


# Weight-only quantisation formats: (bytes per value, bytes per group of `group` values along k).
# int8: symmetric, an fp16 scale per group; int4: GPTQ / AWQ, an fp16 scale and a 4-bit zero point per
# group (qweight, scales, qzeros); fp8: e4m3 values, an fp32 scale per group (transformers' fine-grained
# fp8 weight_scale_inv); nf4: bitsandbytes' NormalFloat4, an fp32 absmax per block (no double quantisation).
# Exact fractions of the standard library: sympy is not imported on the eval path.
WEIGHT_FORMATS: dict[str, tuple[Fraction, Fraction]] = {
    "int8": (Fraction(1), Fraction(2)),
    "int4": (Fraction(1, 2), Fraction(5, 2)),
    "fp8": (Fraction(1), Fraction(4)),
    "nf4": (Fraction(1, 2), Fraction(4)),
}
DEFAULT_GROUP = 128
UNQUANTISED = "none"
# Compute dtypes a quantised weight runs with: the 16/32-bit formats dequantise it; int8 / fp8 weights can
# also feed an int8 / fp8 Tensor-Core GEMM directly (their own format).
DEQUANT_COMPUTE = ("fp32", "tf32", "fp16", "bf16")
NATIVE_COMPUTE = {"int8": ("int8",), "fp8": ("fp8", "fp8_e4m3")}
# The CUDA-core kind one weight value's dequantisation counts as, per use (docs/conventions.md): int4's
# (q - zero) * scale; the others' q * scale (nf4: a 16-entry table lookup, no arithmetic, then * absmax).
DEQUANT_KIND = {"int4": "dequant_zero", "int8": "dequant", "fp8": "dequant", "nf4": "dequant"}
# A native int8 / fp8 GEMM instead rescales each k-group's partial sum into the fp32 accumulator, per output.
NATIVE_RESCALE_KIND = "group_rescale"


def sparse_metadata_bits(dtype: str) -> int:
    """Index bits stored per kept value of a 2:4 weight: a 2-bit position in its group of 4 for 4-, 8- and
    16-bit values; tf32's 1:2 pattern is stored as the 2:4 pattern of its two 16-bit halves (4 bits)."""
    return 2 * max(1, ELEMENT_BITS[dtype] // 16)


@dataclass(frozen=True)
class Precision:
    """The numeric format a layer runs in, and so the engine its matmul-class FLOPs go to; with
    `sparsity` "2:4", its weight GEMMs run on Sparse Tensor Cores (forward only)."""

    dtype: str = "bf16"
    sparsity: str | None = None
    weights: str | None = None  # a WEIGHT_FORMATS key: weight matrices stored quantised; None: at `dtype`
    group: int = DEFAULT_GROUP  # values per scale along k (quantised weights only)
    lora: int | None = None  # rank of the LoRA adapter on each weight GEMM (the weight matrices frozen)

    @property
    def quantised(self) -> bool:
        """True when the weight matrices of GEMMs / convs are stored in a quantised format."""
        return self.weights is not None

    @property
    def native(self) -> bool:
        """True when quantised weights feed an int8 / fp8 Tensor-Core GEMM directly (no dequantisation)."""
        return self.weights is not None and self.dtype in NATIVE_COMPUTE.get(self.weights, ())

    @property
    def frozen_weights(self) -> bool:
        """True when the weight matrices get no gradient: quantised (inference weights, QLoRA's base) or
        adapted by LoRA (the adapters train instead)."""
        return self.weights is not None or self.lora is not None

    @property
    def sparse(self) -> bool:
        """True when the weight GEMMs of this precision run 2:4 sparse."""
        return self.sparsity is not None

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
        return _sympy_constant("DTYPE_BYTES")[self.dtype]

    @property
    def element_bits(self) -> int:
        """Bits of one value, without block scales."""
        return ELEMENT_BITS[self.dtype]

    def __str__(self) -> str:
        return self.dtype  # the dtype name: what torch builders, ncu runs and calibrations take

    @property
    def label(self) -> str:
        """The precision as report headers show it: the dtype, and the sparsity pattern when sparse."""
        lora = f", LoRA rank {self.lora}" if self.lora else ""
        if self.weights:
            return f"{self.dtype}, {self.weights} weights (group {self.group}){lora}"
        return (f"{self.dtype} {self.sparsity}" if self.sparsity else self.dtype) + lora

    def quantised_weight_bytes(self, n: sympy.Expr, k: sympy.Expr, count: sympy.Expr | int = 1) -> sympy.Expr:
        """Bytes of `count` quantised (n x k) weight matrices: n*k values at the format's width plus, per
        output row, ceiling(k / group) groups of scale (and zero point) bytes (int4, group 128, 4096 x 4096:
        4096*4096/2 + 4096*32*5/2 = 8,716,288 bytes, vs 33,554,432 in bf16)."""
        import sympy

        assert self.weights is not None
        value, per_group = (sympy.Rational(f.numerator, f.denominator) for f in WEIGHT_FORMATS[self.weights])
        return count * (n * k * value + n * sympy.ceiling(k / self.group) * per_group)

    def sparse_weight_bytes(self, weights: sympy.Expr) -> sympy.Expr:
        """Bytes of `weights` dense values stored 2:4 compressed: the kept half at the element size plus
        their position metadata (bf16: 1/2 x 2 B + 1/2 x 2 bits = 9/8 B per dense value, vs 2 B)."""
        import sympy

        kept = _sympy_constant("SPARSE_KEPT") * weights
        return kept * self.bytes_per_element + kept * sympy.Rational(sparse_metadata_bits(self.dtype), 8)

    @staticmethod
    def of_spec(value: Any, inherited: "Precision", where: "Location") -> "Precision":
        """The precision a spec's `precision:` value gives: a dtype string, or {dtype, sparsity} (keys left out
        keep the enclosing precision's). A sparse precision must run matmuls on Tensor Cores; `where` (a
        Location) places the error."""
        from costspec.core.errors import SpecError

        if isinstance(value, str):
            value = {"dtype": value}
        if "compute" in value and "dtype" in value and value["compute"] != value["dtype"]:
            raise SpecError(f"compute {value['compute']} and dtype {value['dtype']} disagree", where.child("compute"),
                            "one of them (compute is dtype's name beside quantised weights)")
        dtype = value.get("compute", value.get("dtype", inherited.dtype))
        sparsity = value.get("sparsity", inherited.sparsity or DENSE)
        sparsity = None if sparsity == DENSE else sparsity
        if sparsity is not None and sparsity not in SPARSITY_PATTERNS:
            raise SpecError(f"unknown sparsity {sparsity!r}", where.child("sparsity"),
                            '"2:4" (quoted: unquoted 2:4 is the base-60 integer 124 in YAML) or none')
        weights = value.get("weights", inherited.weights or UNQUANTISED)
        weights = None if weights == UNQUANTISED else weights
        group = value.get("group", inherited.group)
        lora = value.get("lora", inherited.lora or 0)
        if not isinstance(lora, int) or isinstance(lora, bool) or lora < 0:
            raise SpecError(f"lora {lora!r} is not a rank", where.child("lora"),
                            "the adapters' rank, a positive integer (0: no adapters)")
        precision = Precision(dtype, sparsity, weights, group, lora or None)
        if weights is not None:
            Precision._check_quantised(precision, where)
        if precision.sparse and not precision.tensor_cores:
            raise SpecError(f"sparsity {sparsity} runs on Sparse Tensor Cores, and {dtype} runs matmuls on CUDA "
                            "cores", where, "a Tensor-Core dtype (" + ", ".join(sorted(_TENSOR_CORE_DTYPES))
                            + ") or sparsity: none on this layer")
        return precision

    @staticmethod
    def _check_quantised(precision: "Precision", where: "Location") -> None:
        from costspec.core.errors import SpecError

        assert precision.weights is not None
        if precision.weights not in WEIGHT_FORMATS:
            raise SpecError(f"unknown weight format {precision.weights!r}", where.child("weights"),
                            ", ".join(WEIGHT_FORMATS) + " or none")
        if not isinstance(precision.group, int) or isinstance(precision.group, bool) or precision.group < 1:
            raise SpecError(f"group {precision.group!r} is not a positive integer", where.child("group"),
                            "values per scale along k, e.g. 128")
        allowed = DEQUANT_COMPUTE + NATIVE_COMPUTE.get(precision.weights, ())
        if precision.dtype not in allowed:
            raise SpecError(f"{precision.weights} weights do not run with compute {precision.dtype}", where,
                            "compute " + ", ".join(allowed))
        if precision.sparse:
            raise SpecError(f"{precision.weights} weights with sparsity {precision.sparsity}: 2:4 sparse quantised "
                            "weights are not modelled", where, "weights or sparsity, not both")

    @staticmethod
    def parse(dtype: str) -> str:
        """`dtype` checked against the known dtypes (a clear usage error otherwise)."""
        if dtype not in DTYPES:
            from costspec.core.errors import UsageError

            raise UsageError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        return dtype
