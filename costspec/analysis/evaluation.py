"""Exact integer costs per row at bound dims: the table every per-layer command starts from.

`build_report` walks the model tree once (`costspec.tree.walk`) and fills one `Table` row per report
row with the row's total contribution to the model (all its instances) for one pass: Tensor-Core
and CUDA-core FLOPs, parameters, the engine its matmul-class FLOPs go to, and its instance count.
Consumers attach further columns to the same rows (the roofline its bytes and time, a calibration
its executed FLOPs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import sympy

from costspec.analysis.reporting import (
    COLUMNS,
    SPARSE_COLUMNS,
    SPARSE_NOTE,
    Report,
    active_params_note,
    columns,
    unpatterned_note,
)
from costspec.core.conventions import SPARSE_MATMUL_CLASSES
from costspec.core.errors import ExpressionError, SpecError
from costspec.core.expr import as_exact_int
from costspec.core.results import Row, Table
from costspec.core.vocab import Pass
from costspec.ops.opdef import layer_notes
from costspec.tree.cost import runs_sparse
from costspec.tree.nodes import Node, OpNode, RepeatNode
from costspec.tree.walk import NO_GRAD, matmul_engine, node_cost, walk

if TYPE_CHECKING:
    from costspec.tree.cost import Cost
    from costspec.tree.network import Network


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


def build_report(model: Network, pass_: Pass | str, values: Mapping[sympy.Symbol, sympy.Integer]) -> Report:
    """Rows and totals for `pass_` at bound dim `values`."""
    pass_ = Pass.parse(pass_, "pass")
    sparse = any(op.precision.sparse for op in model.op_nodes())
    rows = []
    for step in walk(model.root):
        node = step.node
        cost = node_cost(node, pass_, step.instances, step.grad)
        tc, cuda = exact_int(cost.tc, values, node), exact_int(cost.cuda, values, node)
        rows.append(Row(node.name, node.label, step.depth, {
            "tc_flops": tc, "cuda_flops": cuda, "total_flops": tc + cuda,
            "params": exact_int(cost.params, values, node), "matmul_engine": matmul_engine(node),
            "kind": node.kind, "count": exact_int(step.instances, values, node),
            "repeat": exact_int(node.times, values, node) if isinstance(node, RepeatNode) else None,
            **(_sparse_values(cost, values, node) if sparse else {})}))
    total = node_cost(model.root, pass_, sympy.Integer(1), NO_GRAD)
    tc, cuda = exact_int(total.tc, values, model.root), exact_int(total.cuda, values, model.root)
    total_row = Row("", "total", 0, {"tc_flops": tc, "cuda_flops": cuda, "total_flops": tc + cuda,
                                     "params": exact_int(total.params, values, model.root), "share": 1.0,
                                     "matmul_engine": None, "kind": "model", "count": 1, "repeat": None,
                                     **(_sparse_values(total, values, model.root, row=False) if sparse else {})})
    for row in rows:
        row.values["share"] = row.values["total_flops"] / (tc + cuda) if tc + cuda else None
    dims = {str(s): int(v) for s, v in values.items()}
    notes = layer_notes(model.op_nodes()) + ([SPARSE_NOTE, *_unpatterned(model, values)] if sparse else [])
    notes += _active_params(model, values, total_row.values["params"])
    return Report(model.name, pass_, model.precision.label, dims, Table(columns(sparse), rows, total_row), notes)


def _active_params(model: Network, values: Mapping[sympy.Symbol, sympy.Integer], total: int) -> list[str]:
    """The model's parameters one token uses, where some layers use fewer than all of theirs (experts)."""
    unused, layers = 0, []
    for step in walk(model.root):
        node = step.node
        if not isinstance(node, OpNode):
            continue
        if (idle := node.unused_params) is not None:
            unused += exact_int(step.instances * idle, values, node)
            layers.append(node.name)
    return active_params_note(total, unused, layers)


def _unpatterned(model: Network, values: Mapping[sympy.Symbol, sympy.Integer]) -> list[str]:
    """A note naming the 2:4 GEMMs whose reduction dim is not a whole number of groups of 4 at these dims."""
    odd = []
    for op in model.op_nodes():
        if not op.precision.sparse:
            continue
        parts = {p.name for p in op.fwd_parts if runs_sparse(op.precision, p.name, p.params)}
        for g in op.op.gemms(op.call):
            k = sympy.sympify(g.k).xreplace(values)
            if g.part in parts and g.kind in SPARSE_MATMUL_CLASSES and k.is_Integer and int(k) % 4:
                odd.append(f"{op.name}{'.' + g.part if g.part else ''} (k={int(k)})")
    return unpatterned_note(odd)


def _sparse_values(cost: Cost, values: Mapping[sympy.Symbol, sympy.Integer], node: Node, row: bool = True) -> dict:
    """The dense-equivalent and sparse-executed Tensor-Core FLOPs of a row; its engine marked 2:4 when
    some of its GEMMs run sparse."""
    sparse_tc = exact_int(cost.sparse_tc, values, node)
    out: dict[str, int | str] = {"tc_flops_dense_equivalent": exact_int(cost.tc_dense, values, node),
                                 "sparse_tc_flops": sparse_tc}
    if sparse_tc and row:
        out["matmul_engine"] = matmul_engine(node) + " 2:4"
    return out


__all__ = ["COLUMNS", "SPARSE_COLUMNS", "SPARSE_NOTE", "Report", "build_report", "exact_int"]
