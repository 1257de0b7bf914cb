"""`Cost`: symbolic FLOPs routed to Tensor / CUDA cores, plus parameters and the work breakdown."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import sympy

from .conventions import Precision
from .ops.base import ZERO, Work, _merge


@dataclass(frozen=True)
class Cost:
    """Symbolic cost of one node instance for one pass.

    tc / cuda: FLOPs charged to Tensor Cores / CUDA cores.
    params:    parameter count (forward only; 0 in backward costs).
    matmul:    matmul-class FLOPs by class (gemm, conv, sdpa), whichever engine ran them.
    pointwise: elements by cost-table kind (priced into `cuda`).
    """

    tc: sympy.Expr = ZERO
    cuda: sympy.Expr = ZERO
    params: sympy.Expr = ZERO
    matmul: Mapping[str, sympy.Expr] = field(default_factory=dict)
    pointwise: Mapping[str, sympy.Expr] = field(default_factory=dict)

    @property
    def flops(self) -> sympy.Expr:
        return self.tc + self.cuda

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.tc + other.tc, self.cuda + other.cuda, self.params + other.params,
                    _merge(self.matmul, other.matmul), _merge(self.pointwise, other.pointwise))

    def scaled(self, k: sympy.Expr) -> "Cost":
        if k == 1:
            return self
        return Cost(k * self.tc, k * self.cuda, k * self.params,
                    {c: k * v for c, v in self.matmul.items()}, {c: k * v for c, v in self.pointwise.items()})

    def without_params(self) -> "Cost":
        return Cost(self.tc, self.cuda, ZERO, self.matmul, self.pointwise)


ZERO_COST = Cost()


def route(work: Work, params: sympy.Expr, precision: Precision, table: Mapping[str, sympy.Expr]) -> Cost:
    """Charge `work` to engines: matmul-class FLOPs to Tensor Cores when the precision allows,
    pointwise elements x cost-table FLOPs-per-element to CUDA cores."""
    mm = sum(work.matmul.values(), ZERO)
    pw = sum((table[kind] * n for kind, n in work.pointwise.items()), ZERO)
    tc, cuda = (mm, pw) if precision.tensor_cores else (ZERO, mm + pw)
    return Cost(tc, cuda, params, dict(work.matmul), dict(work.pointwise))
