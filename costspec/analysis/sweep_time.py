"""Roofline time and bound at every point of a sweep grid, vectorised.

The same model as `costspec.analysis.roofline.estimate`, per point: each leaf row (an op, or a named part
of one) is one kernel whose time is max(TC FLOPs / TC peak(dtype), CUDA FLOPs / CUDA peak,
bytes / bandwidth); the model's time is the sum over leaves. A point's bound is the engine that
accounts for most of that time, with '*' when the leaves do not all share it (as `eval --gpu`
marks blocks). Leaf costs and bytes are exact integer polynomials evaluated over the grid by
`costspec.analysis.sweep.evaluate_grid`; only the division by the peaks is floating point.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import sympy

from costspec.analysis.gpus import POINTWISE_DTYPE, Gpu
from costspec.analysis.roofline import Efficiency, total_bytes
from costspec.analysis.sweep import Grid, evaluate_grid
from costspec.core.conventions import SPARSE_SPEEDUP
from costspec.core.progress import progress
from costspec.tree.nodes import OpNode, PartNode
from costspec.tree.walk import node_cost

if TYPE_CHECKING:
    from costspec.tree.network import Network

BOUNDS = ("TC", "CUDA", "memory")


@dataclass
class GridTimes:
    """Per grid point: estimated seconds, total bytes, and the dominant bound."""

    time_s: Any  # float64 array
    bytes: Any  # int64 array
    bound: Any  # str array: TC, CUDA, memory (a trailing '*' when leaves differ), or '-'


def _leaves(model: Network, pass_: str, fusion: str):
    for node, _depth, mult, in_rg in model.walk():
        if node.children:
            continue
        cost = node_cost(node, pass_, mult, in_rg)
        op = node.owner if isinstance(node, PartNode) else node
        assert isinstance(op, OpNode), "a leaf row is an op or a part of one"
        precision = op.precision
        yield precision, cost.tc, cost.sparse_tc, cost.cuda, total_bytes(node, pass_, mult, in_rg, fusion)


def _tc_seconds(gpu: Gpu, precision, tc, sparse_tc):
    """`roofline.tc_seconds` over grid arrays: dense TC FLOPs at the dense peak, 2:4 GEMMs' dense-equivalent
    FLOPs (SPARSE_SPEEDUP x executed) at the sparse peak."""
    seconds = (tc - sparse_tc) / gpu.tensor_peak(precision.dtype)
    if precision.sparse and sparse_tc.any():
        seconds = seconds + SPARSE_SPEEDUP * sparse_tc / gpu.sparse_tensor_peak(precision.dtype)
    return seconds


def grid_times(model: Network, grid: Grid, pass_: str, gpu: Gpu, fixed: Mapping[str, int] | None = None,
               fusion: str = "default", efficiency: Efficiency | None = None, quiet: bool = False) -> GridTimes:
    """Roofline time, bytes and bound of `model` at every point of `grid` on `gpu`."""
    import numpy as np

    efficiency = efficiency or Efficiency()
    leaves = list(_leaves(model, pass_, fusion))
    per_bound = {b: np.zeros(grid.size) for b in BOUNDS}
    hits = {b: np.zeros(grid.size, dtype=bool) for b in BOUNDS}
    total_bytes_ = np.zeros(grid.size, dtype=np.int64)
    with progress("sweep --gpu: leaves", len(leaves), quiet) as tick:
        for precision, tc, sparse_tc, cuda, nbytes in leaves:
            exprs = {"tc": tc, "sparse_tc": sparse_tc, "cuda": cuda, "bytes": sympy.sympify(nbytes)}
            v = {k: np.asarray(a) for k, a in evaluate_grid(model, grid, exprs, fixed).items()}
            zero = np.zeros(grid.size)
            terms = {
                "TC": _tc_seconds(gpu, precision, v["tc"], v["sparse_tc"]) / efficiency.tc if np.any(v["tc"]) else zero,
                "CUDA": v["cuda"] / (gpu.cuda_peak(POINTWISE_DTYPE if precision.tensor_cores else precision.dtype)
                                     * efficiency.cuda) if np.any(v["cuda"]) else zero,
                "memory": v["bytes"] / (gpu.bandwidth * efficiency.memory),
            }
            stacked = np.vstack([terms[b] for b in BOUNDS])
            which = np.argmax(stacked, axis=0)
            time = stacked.max(axis=0)
            for i, b in enumerate(BOUNDS):
                mine = (which == i) & (time > 0)
                per_bound[b] += np.where(mine, time, 0.0)
                hits[b] |= mine
            total_bytes_ += v["bytes"]
            tick()
    stacked = np.vstack([per_bound[b] for b in BOUNDS])
    total = stacked.sum(axis=0)
    dominant = np.asarray(BOUNDS, dtype=object)[np.argmax(stacked, axis=0)]
    mixed = np.vstack([hits[b] for b in BOUNDS]).sum(axis=0) > 1
    bound = np.where(total > 0, np.where(mixed, dominant + "*", dominant), "-").astype(str)
    return GridTimes(total, total_bytes_, bound)
