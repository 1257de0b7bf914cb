"""`Cost`: symbolic FLOPs routed to Tensor / CUDA cores, plus parameters and the work breakdown."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import sympy

from costspec.core.conventions import DENSE_ONLY_PARTS, SPARSE_MATMUL_CLASSES, SPARSE_SPEEDUP, Precision
from costspec.ops.work import ZERO, Work, merge_counts


@dataclass(frozen=True)
class Cost:
    """Symbolic cost of one node instance for one pass.

    tc / cuda: FLOPs charged to Tensor Cores / CUDA cores.
    params:    parameter count (forward only; 0 in backward costs).
    matmul:    matmul-class FLOPs by class (gemm, conv, sdpa), whichever engine ran them, counted
               dense (the work; what FlopCounterMode counts), also for 2:4 sparse layers.
    pointwise: elements by cost-table kind (priced into `cuda`).
    sparse_tc: the part of `tc` executed on Sparse Tensor Cores (2:4 weight GEMMs, forward): executed
               FLOPs, 1/SPARSE_SPEEDUP of the same GEMMs' dense FLOPs.
    """

    tc: sympy.Expr = ZERO
    cuda: sympy.Expr = ZERO
    params: sympy.Expr = ZERO
    matmul: Mapping[str, sympy.Expr] = field(default_factory=dict)
    pointwise: Mapping[str, sympy.Expr] = field(default_factory=dict)
    sparse_tc: sympy.Expr = ZERO

    @property
    def flops(self) -> sympy.Expr:
        return self.tc + self.cuda

    @property
    def tc_dense(self) -> sympy.Expr:
        """Tensor-Core FLOPs with the 2:4 GEMMs counted dense (dense-equivalent); `tc` when nothing is sparse."""
        return self.tc + (SPARSE_SPEEDUP - 1) * self.sparse_tc

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.tc + other.tc, self.cuda + other.cuda, self.params + other.params,
                    merge_counts(self.matmul, other.matmul), merge_counts(self.pointwise, other.pointwise),
                    self.sparse_tc + other.sparse_tc)

    def scaled(self, k: sympy.Expr) -> "Cost":
        if k == 1:
            return self
        return Cost(k * self.tc, k * self.cuda, k * self.params,
                    {c: k * v for c, v in self.matmul.items()}, {c: k * v for c, v in self.pointwise.items()},
                    k * self.sparse_tc)

    def without_params(self) -> "Cost":
        return Cost(self.tc, self.cuda, ZERO, self.matmul, self.pointwise, self.sparse_tc)


ZERO_COST = Cost()


def holds_weight_matrix(part: str, params: sympy.Expr) -> bool:
    """True when a part's GEMMs may multiply by its own weight matrix: it holds parameters (forward:
    backward parts are routed with none) and is not a part whose GEMM multiplies something else
    (`DENSE_ONLY_PARTS`)."""
    return params != 0 and part not in DENSE_ONLY_PARTS


def runs_sparse(precision: Precision, part: str, params: sympy.Expr) -> bool:
    """True when a part's weight GEMMs run 2:4 sparse in this pass: a sparse precision and a part that
    holds a weight matrix (`holds_weight_matrix`; backward parts run dense)."""
    return precision.sparse and holds_weight_matrix(part, params)


def route(work: Work, params: sympy.Expr, precision: Precision, table: Mapping[str, sympy.Expr],
          part: str = "") -> Cost:
    """Charge `work` to engines: matmul-class FLOPs to Tensor Cores when the precision allows,
    pointwise elements x cost-table FLOPs-per-element to CUDA cores. The weight GEMMs of a 2:4 sparse
    part (`runs_sparse`) execute 1/SPARSE_SPEEDUP of their dense FLOPs; `matmul` keeps the dense work."""
    mm = sum(work.matmul.values(), ZERO)
    pw = sum((table[kind] * n for kind, n in work.pointwise.items()), ZERO)
    if not precision.tensor_cores:
        return Cost(ZERO, mm + pw, params, dict(work.matmul), dict(work.pointwise))
    if not runs_sparse(precision, part, params):
        return Cost(mm, pw, params, dict(work.matmul), dict(work.pointwise))
    dense = sum((v for c, v in work.matmul.items() if c not in SPARSE_MATMUL_CLASSES), ZERO)
    sparse = sum((v for c, v in work.matmul.items() if c in SPARSE_MATMUL_CLASSES), ZERO) / SPARSE_SPEEDUP
    return Cost(dense + sparse, pw, params, dict(work.matmul), dict(work.pointwise), sparse)
