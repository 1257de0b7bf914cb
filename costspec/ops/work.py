"""Work: what an op computes, symbolic and engine-neutral, and the primitive helpers ops compose.

Matmul-class FLOPs by class (gemm, conv, sdpa) and pointwise element counts by cost-table kind;
`costspec.tree.cost` routes them to Tensor / CUDA cores by precision and prices the pointwise kinds.
Also the memory traffic of a part (`Traffic`) and the geometry of its GEMMs (`Gemm`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence, TypeAlias

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Phase

Expr: TypeAlias = sympy.Expr
Shape: TypeAlias = tuple  # tuple of sympy expressions
ZERO = sympy.Integer(0)
ONE = sympy.Integer(1)


def merge_counts(a: Mapping[str, Expr], b: Mapping[str, Expr], k: Expr = ONE) -> dict[str, Expr]:
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, ZERO) + k * value
    return out


@dataclass(frozen=True)
class Work:
    """Symbolic work of one op (or part) for one pass.

    matmul:    class ("gemm", "conv", "sdpa", ...) -> FLOPs (2 per multiply-add)
    pointwise: kind (a cost-table key) -> number of elements processed
    """

    matmul: Mapping[str, Expr] = field(default_factory=dict)
    pointwise: Mapping[str, Expr] = field(default_factory=dict)

    def __add__(self, other: Work) -> Work:
        return Work(merge_counts(self.matmul, other.matmul), merge_counts(self.pointwise, other.pointwise))

    def scaled(self, k: Expr) -> Work:
        return Work({c: k * v for c, v in self.matmul.items()}, {c: k * v for c, v in self.pointwise.items()})


NO_WORK = Work()


@dataclass(frozen=True)
class Part:
    """A named piece of an op's work: a row in reports and, unless `own`, a torch submodule.

    `own` parts run in the op's own module (SDPA inside the attention module), not in a child.
    """

    name: str
    work: Work
    params: Expr = ZERO
    own: bool = False


def gemm(m: Expr, k: Expr, n: Expr) -> Work:
    """(m x k) @ (k x n): 2*m*k*n FLOPs (FLOP = 2 * MAC)."""
    return Work({"gemm": FLOPS_PER_MAC * m * k * n})


def pointwise(kind: str, elements: Expr) -> Work:
    """`elements` elements through one pointwise / reduction kind of the cost table."""
    return Work({}, {kind: elements})


def linear_forward(m: Expr, k: Expr, n: Expr, bias: bool) -> Work:
    """y = x W^T (+ b) on m rows: one GEMM, plus the bias add in its epilogue."""
    work = gemm(m, k, n)
    return work + pointwise("bias_add", m * n) if bias else work


def linear_backward(m: Expr, k: Expr, n: Expr, bias: bool, input_grad: bool) -> Work:
    """dW = dY^T X (always), dX = dY W (only when the input needs a gradient), db = sum of dY rows."""
    work = gemm(n, m, k)
    if input_grad:
        work = work + gemm(m, n, k)
    return work + pointwise("bias_grad", m * n) if bias else work


def linear_outputs(m: Expr, k: Expr, n: Expr, pass_: Phase, input_grad: bool) -> Expr:
    """GEMM output elements of y = x W^T on m rows: y (m*n) forward; dW (k*n) and dX (m*k) backward."""
    if pass_ == Phase.FORWARD:
        return m * n
    return k * n + (m * k if input_grad else ZERO)


def linear_traffic(part: str, m: Expr, k: Expr, n: Expr, bias: bool, pass_: Phase, input_grad: bool) -> Traffic:
    """Elements moved by y = x W^T + b on m rows (bias fused in the GEMM epilogue).

    forward: read x (m*k), W (k*n), b (n); write y (m*n).
    backward: dW reads dY (m*n) and x (m*k), writes dW (k*n) and db (n, summed in the same pass);
    dX (when needed) reads dY and W, writes dX (m*k).
    """
    b = n if bias else ZERO
    if pass_ == Phase.FORWARD:
        return Traffic(part, m * k + k * n + b, m * n)
    reads, writes = m * n + m * k, k * n + b
    if input_grad:
        reads, writes = reads + m * n + k * n, writes + m * k
    return Traffic(part, reads, writes)


def is_zero(value) -> bool:
    """Whether a size is 0 (an option left off: no window, no learned queries, no shared experts)."""
    return sympy.sympify(value) == 0


def above_one(n: Expr) -> Expr:
    """1 when the size n > 1, 0 when n = 1 (a whole number >= 1), as an expression: autograd sums a
    broadcast gradient over an axis only when that axis is longer than 1."""
    return sympy.Min(1, n - 1)


def numel(shape: Sequence[Expr]) -> Expr:
    out = sympy.Integer(1)
    for d in shape:
        out = out * d
    return out


@dataclass(frozen=True)
class Traffic:
    """Elements one part reads from and writes to device memory in one pass."""

    part: str
    reads: Expr
    writes: Expr


@dataclass(frozen=True)
class Gemm:
    """`count` independent (m x k) @ (k x n) products one forward call of a part runs (a batched
    matmul, or a convolution as its implicit GEMM: m = output pixels, n = output channels per group,
    k = input channels per group x kernel area).

    `kind`: gemm, conv or sdpa. `leading`: the dims that are row lengths (leading dimensions) of the
    operands in PyTorch's row-major layout, whose byte alignment decides how cuBLAS / cuDNN / the
    attention kernels can feed Tensor Cores; the others (a GEMM's token count m, the sequence inside
    a fused attention kernel) only quantize tiles. The backward GEMMs of a linear layer
    (dX = dY W, dW = dY^T X) have the same leading dims, so one forward geometry covers every pass.
    """

    part: str
    m: Expr
    n: Expr
    k: Expr
    count: Expr = sympy.Integer(1)
    kind: str = "gemm"
    leading: tuple[str, ...] = ("n", "k")
