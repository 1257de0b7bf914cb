"""Roofline estimates: bytes moved, arithmetic intensity, bound and time per layer on a named GPU.

Each leaf (an op, or a named part of one) runs as its own kernel(s): its time is the largest of
TC FLOPs / Tensor-Core peak(dtype), CUDA FLOPs / CUDA-core peak, bytes / memory bandwidth,
each divided by an efficiency factor (1 = datasheet peak). A block's time is the sum of its
leaves' times (kernels run one after another), never the max of its sums.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import sympy

from costspec.analysis.evaluation import Report
from costspec.analysis.gpus import POINTWISE_DTYPE, Gpu
from costspec.core.conventions import SPARSE_MATMUL_CLASSES, SPARSE_SPEEDUP, Precision
from costspec.core.results import Column, Row
from costspec.core.vocab import Fusion, Pass, Phase
from costspec.ops.work import ZERO, Gemm
from costspec.tree.cost import holds_weight_matrix
from costspec.tree.nodes import GroupNode, Node, OpNode, PartNode, RepeatNode
from costspec.tree.walk import GradState, walk

if TYPE_CHECKING:
    from costspec.tree.network import Network

COLUMNS = (Column("bytes", "bytes", "bytes"), Column("intensity", "FLOP/B", "number"), Column("bound", "bound", "text"),
           Column("est_time_s", "est. time", "seconds"))

@dataclass(frozen=True)
class Efficiency:
    """Fractions of the datasheet peaks actually reached (from flags or a calibration file)."""

    tc: float = 1.0
    cuda: float = 1.0
    memory: float = 1.0


@dataclass
class RooflineReport:
    """The roofline of one report: its columns are attached to the report's own rows (`rows`)."""

    gpu: Gpu
    fusion: Fusion
    rows: list[Row]  # the report's rows, with bytes, intensity, bound and est_time_s attached
    bytes: int
    time_s: float
    mfu: float | None  # TC FLOPs / (time x TC peak of the spec's dtype)
    notes: list[str] = field(default_factory=list)

    @property
    def times(self) -> dict[str, float]:
        """row name -> estimated seconds."""
        return {r.name: r.values["est_time_s"] for r in self.rows}


# ----------------------------------------------------------------------------------------------
# Traffic (elements -> bytes), following the same instance logic as costs
# ----------------------------------------------------------------------------------------------
def _op_traffic(op: OpNode, pass_: Phase, in_rg: bool, fusion: Fusion) -> dict[str, sympy.Expr]:
    if pass_ == Phase.BACKWARD and not op.runs_backward(in_rg):
        return {}
    size = op.precision.bytes_per_element
    out = {t.part: (t.reads + t.writes) * size for t in op.op.traffic(op.call, pass_, in_rg, fusion)}
    if pass_ == Phase.FORWARD and op.precision.sparse:
        for part, gemms in _weight_gemms(op).items():
            if part in out:  # the weight is read compressed: kept values + metadata instead of dense values
                weights = sum((g.n * g.k * g.count for g in gemms), ZERO)
                out[part] = out[part] - weights * size + op.precision.sparse_weight_bytes(weights)
    if pass_ == Phase.FORWARD and op.precision.quantised:
        for part, gemms in _weight_gemms(op).items():
            if part in out:  # the weight is read at its stored width, with its groups' scales
                for g in gemms:
                    out[part] = out[part] - g.n * g.k * g.count * size + op.precision.quantised_weight_bytes(
                        g.n, g.k, g.count)
    return out


def _weight_gemms(op: OpNode) -> dict[str, list[Gemm]]:
    """The GEMMs / convs per part that multiply by the part's weight matrix (n x k; `count` of them for
    grouped convs and experts), from the op's GEMM geometry: those that run 2:4 sparse, or read a quantised
    weight (parts that hold parameters, not `DENSE_ONLY_PARTS`)."""
    weight_parts = {p.name for p in op.fwd_parts if holds_weight_matrix(p.name, p.params)}
    out: dict[str, list[Gemm]] = {}
    for g in op.op.gemms(op.call):
        if g.part in weight_parts and g.kind in SPARSE_MATMUL_CLASSES:
            out.setdefault(g.part, []).append(g)
    return out


def node_bytes(node: Node, pass_: Phase, in_rg: bool, fusion: Fusion) -> sympy.Expr:
    """Bytes moved by one instance of `node` in the phase `pass_`."""
    if isinstance(node, PartNode):
        return _op_traffic(node.owner, pass_, in_rg, fusion).get(node.local, ZERO)
    if isinstance(node, OpNode):
        return sum(_op_traffic(node, pass_, in_rg, fusion).values(), ZERO)
    if pass_ == Phase.FORWARD:
        return sum((child.count * node_bytes(child, pass_, in_rg, fusion) for child in node.children), ZERO)
    out = sum((k * node_bytes(child, pass_, rg, fusion) for child, rg, k in node.backward_terms(in_rg)), ZERO)
    if node.checkpoint and node.runs_recompute(in_rg):  # its forward again (`Node.recompute`)
        if isinstance(node, RepeatNode):
            out += sum((node.checkpointed(g) * node_bytes(g, Phase.FORWARD, in_rg, fusion) for g in node.children
                        if isinstance(g, GroupNode)), ZERO)
        else:
            out += node_bytes(node, Phase.FORWARD, in_rg, fusion)
    return out


def total_bytes(node: Node, pass_: Pass | str, mult: sympy.Expr, grad: GradState, fusion: Fusion | str
                ) -> sympy.Expr:
    """Bytes of all `mult` instances of `node`; `train` = forward + backward."""
    pass_ = Pass.parse(pass_, "pass")
    fusion = Fusion.parse(fusion, "--fusion")
    if pass_ is Pass.TRAIN:
        return total_bytes(node, Phase.FORWARD, mult, grad, fusion) + total_bytes(node, Phase.BACKWARD, mult, grad,
                                                                                  fusion)
    if pass_ is Pass.FORWARD:
        return mult * node_bytes(node, Phase.FORWARD, grad.first, fusion)
    out = sum((k * node_bytes(node, Phase.BACKWARD, rg, fusion) for rg, k in grad.split(mult)), ZERO)
    if grad.recompute != 0:  # inside a checkpointed part: its forward's bytes again
        out += grad.recompute * node_bytes(node, Phase.FORWARD, grad.first, fusion)
    return out


# ----------------------------------------------------------------------------------------------
# Estimates
# ----------------------------------------------------------------------------------------------
def leaf_precision(node: Node):
    op = node.owner if isinstance(node, PartNode) else node
    assert isinstance(op, OpNode)
    return op.precision


def estimate(model: Network, report: Report, values: Mapping, gpu: Gpu, fusion: Fusion | str = Fusion.DEFAULT,
             efficiency: Efficiency | None = None) -> RooflineReport:
    """Bytes, intensity, bound and time for every row of `report` (same pass, same dims), attached to
    the report's table as columns."""
    fusion = Fusion.parse(fusion, "--fusion")
    efficiency = efficiency or Efficiency()
    walked = list(walk(model.root))
    rows: list[tuple[int, float | None]] = []
    times: list[float] = [0.0] * len(walked)
    bounds: list[dict[str, float]] = [dict() for _ in walked]
    for i, ((node, depth, mult, in_rg), row) in enumerate(zip(walked, report.rows)):
        nbytes = int(sympy.sympify(total_bytes(node, report.pass_, mult, in_rg, fusion)).xreplace(values))
        leaf = not node.children
        if leaf:
            prec = leaf_precision(node)
            terms = {
                "TC": tc_seconds(gpu, prec, row.tc_flops, row.get("sparse_tc_flops") or 0) / efficiency.tc,
                "CUDA": row.cuda_flops / (gpu.cuda_peak(POINTWISE_DTYPE if prec.tensor_cores else prec.dtype)
                                    * efficiency.cuda) if row.cuda_flops else 0.0,
                "memory": nbytes / (gpu.bandwidth * efficiency.memory) if nbytes else 0.0,
            }
            bound = max(terms, key=lambda k: terms[k])
            times[i] = terms[bound]
            bounds[i] = {bound: times[i]} if times[i] else {}
            # Add this leaf's time and bound to every enclosing row (rows are pre-order).
            for j in range(i - 1, -1, -1):
                if walked[j][1] < depth and _encloses(walked, j, i):
                    times[j] += times[i]
                    if times[i]:
                        bounds[j][bound] = bounds[j].get(bound, 0.0) + times[i]
        rows.append((nbytes, (row.total_flops / nbytes) if nbytes else None))
    bound_of = ["-" if not b else (next(iter(b)) if len(b) == 1 else max(b, key=lambda k: b[k]) + "*")
                for b in bounds]
    total_time = sum(times[i] for i, w in enumerate(walked) if w[1] == 0)
    nbytes = sum(r[0] for r, w in zip(rows, walked) if w[1] == 0)
    table = report.table
    table.attach(COLUMNS[0], {r.name: b for r, (b, _) in zip(report.rows, rows)}, nbytes)
    table.attach(COLUMNS[1], {r.name: x for r, (_, x) in zip(report.rows, rows)})
    table.attach(COLUMNS[2], {r.name: b for r, b in zip(report.rows, bound_of)})
    table.attach(COLUMNS[3], {r.name: t for r, t in zip(report.rows, times)}, total_time)
    mfu = None
    if total_time and report.tc and model.precision.tensor_cores:
        # the share of the time the Tensor Cores need at their peak (dense or 2:4 sparse)
        mfu = tc_seconds(gpu, model.precision, report.tc, report.sparse_tc) / total_time
    notes = [f"roofline on {gpu.name}: time = max(TC FLOPs / TC peak, CUDA FLOPs / CUDA peak, bytes / "
             f"{gpu.memory_bw_gbps:g} GB/s) per kernel, summed; fusion: {fusion}; "
             f"efficiency tc={efficiency.tc:g} cuda={efficiency.cuda:g} memory={efficiency.memory:g}; "
             "'*' marks a block whose leaves have different bounds (the dominant one shown)"]
    if report.sparse:
        notes.append("2:4 sparse GEMMs run at the catalog's sparse Tensor-Core peak, which (as datasheets print it) "
                     "counts their dense-equivalent FLOPs: their time is dense-equivalent FLOPs / sparse peak; "
                     "their weights are read compressed (the kept half plus its position metadata)")
    return RooflineReport(gpu, fusion, report.rows, nbytes, total_time, mfu, notes)


def tc_seconds(gpu: Gpu, precision: Precision, tc: float, sparse_tc: float) -> float:
    """Seconds the Tensor Cores need for `tc` executed FLOPs at peak, `sparse_tc` of them on Sparse Tensor
    Cores. The datasheet's sparse peak counts a 2:4 GEMM's dense-equivalent FLOPs (SPARSE_SPEEDUP x executed)."""
    if not tc:
        return 0.0
    dense = tc - sparse_tc
    seconds = dense / gpu.tensor_peak(precision.dtype) if dense else 0.0
    if sparse_tc:
        seconds += SPARSE_SPEEDUP * sparse_tc / gpu.sparse_tensor_peak(precision.dtype)
    return seconds


def _encloses(walked, j: int, i: int) -> bool:
    """True when row j is an ancestor of row i in the pre-order walk."""
    depth_j = walked[j][1]
    for k in range(j + 1, i + 1):
        if walked[k][1] <= depth_j:
            return False
    return True
