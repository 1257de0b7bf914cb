"""Exact integer costs per row at bound dims: the table every per-layer command starts from.

`build_report` walks the model tree once (`costspec.walk`) and fills one `Table` row per report
row with the row's total contribution to the model (all its instances) for one pass: Tensor-Core
and CUDA-core FLOPs, parameters, the engine its matmul-class FLOPs go to, and its instance count.
Consumers attach further columns to the same rows (the roofline its bytes and time, a calibration
its executed FLOPs).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import sympy

from .errors import ExpressionError, SpecError
from .expr import as_exact_int
from .ops.base import layer_notes
from .results import Column, Row, Table
from .tree import Node, RepeatNode
from .vocab import Pass
from .walk import NO_GRAD, matmul_engine, node_cost, walk

if TYPE_CHECKING:
    from .model import Model

COLUMNS = (
    Column("tc_flops", "TC FLOPs", "flops"),
    Column("cuda_flops", "CUDA FLOPs", "flops"),
    Column("total_flops", "total", "flops"),
    Column("params", "params", "params"),
    Column("share", "share", "percent"),
    Column("matmul_engine", "matmul on", "text"),
    Column("kind", "kind", "text", hidden=True),
    Column("count", "count", "count", hidden=True),
    Column("repeat", "repeat", "count", hidden=True),
)


@dataclass
class Report:
    """Evaluated costs of a model for one pass at bound dims: one table row per report row."""

    spec_name: str
    pass_: Pass
    precision: str
    dims: dict[str, int]
    table: Table
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return self.table.rows

    def _total(self, key: str) -> int:
        assert self.table.total is not None
        return int(self.table.total.values[key])

    @property
    def tc(self) -> int:
        return self._total("tc_flops")

    @property
    def cuda(self) -> int:
        return self._total("cuda_flops")

    @property
    def params(self) -> int:
        return self._total("params")

    @property
    def total(self) -> int:
        return self.tc + self.cuda


def exact_int(expr, values: Mapping[sympy.Symbol, sympy.Integer], node: Node) -> int:
    """An expression of the dims at bound `values`, as an exact int (a located SpecError if it is not one)."""
    try:
        value = sympy.sympify(expr).xreplace(values)
    except (ZeroDivisionError, TypeError):
        value = sympy.nan
    if value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise SpecError(f"cost of '{node.name or 'model'}' divides by zero at these dims", node.loc,
                        "positive sizes")
    try:
        return as_exact_int(value, f"cost of '{node.name or 'model'}'", node.loc)
    except ExpressionError as exc:
        raise SpecError(f"cost of '{node.name or 'model'}' is not an exact integer: {exc.message}", node.loc,
                        "sizes that divide evenly") from None


def build_report(model: Model, pass_: Pass | str, values: Mapping[sympy.Symbol, sympy.Integer]) -> Report:
    """Rows and totals for `pass_` at bound dim `values`."""
    pass_ = Pass.parse(pass_, "pass")
    rows = []
    for step in walk(model.root):
        node = step.node
        cost = node_cost(node, pass_, step.instances, step.grad)
        tc, cuda = exact_int(cost.tc, values, node), exact_int(cost.cuda, values, node)
        rows.append(Row(node.name, node.label, step.depth, {
            "tc_flops": tc, "cuda_flops": cuda, "total_flops": tc + cuda,
            "params": exact_int(cost.params, values, node), "matmul_engine": matmul_engine(node),
            "kind": node.kind, "count": exact_int(step.instances, values, node),
            "repeat": exact_int(node.times, values, node) if isinstance(node, RepeatNode) else None}))
    total = node_cost(model.root, pass_, sympy.Integer(1), NO_GRAD)
    tc, cuda = exact_int(total.tc, values, model.root), exact_int(total.cuda, values, model.root)
    total_row = Row("", "total", 0, {"tc_flops": tc, "cuda_flops": cuda, "total_flops": tc + cuda,
                                     "params": exact_int(total.params, values, model.root), "share": 1.0,
                                     "matmul_engine": None, "kind": "model", "count": 1, "repeat": None})
    for row in rows:
        row.values["share"] = row.values["total_flops"] / (tc + cuda) if tc + cuda else None
    dims = {str(s): int(v) for s, v in values.items()}
    return Report(model.name, pass_, str(model.precision), dims, Table(list(COLUMNS), rows, total_row),
                  layer_notes(model.op_nodes()))


__all__ = ["COLUMNS", "Report", "build_report", "exact_int"]
