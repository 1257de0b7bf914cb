"""A sweep's grid and values as a `Result` (for --format json / table) or CSV columns."""
from __future__ import annotations

from typing import Any, Mapping

from costspec.analysis.sweep import Grid
from costspec.analysis.sweep_time import GridTimes
from costspec.core.results import Column, Kind, Result, Row, table_of

_KINDS: dict[str, Kind] = {"tc_flops": "flops", "cuda_flops": "flops", "total_flops": "flops", "params": "params",
                           "bytes": "bytes", "time_s": "seconds", "bound": "text", "tc_flops_dense_equivalent": "flops"}
_TITLES = {"tc_flops": "TC FLOPs", "cuda_flops": "CUDA FLOPs", "total_flops": "total", "params": "params",
           "bytes": "bytes", "time_s": "est. time", "bound": "bound", "tc_flops_dense_equivalent": "TC dense-eq."}


def with_times(values: Mapping[str, Any], times: GridTimes | None) -> dict[str, Any]:
    """The sweep's value columns plus bytes, time_s and bound when there are roofline times."""
    out = dict(values)
    if times is not None:
        out.update({"bytes": times.bytes, "time_s": times.time_s, "bound": times.bound})
    return out


def sweep_result(grid: Grid, values: Mapping[str, Any], meta: Mapping[str, Any], notes: list[str]) -> Result:
    """One row per grid point (named like 'B=8 img=224'), one column per swept dim and value."""
    names = grid.names + [n for n in values if n not in grid.names]
    import numpy as np

    cols = {n: np.asarray(grid.columns[n] if n in grid.columns else values[n]).tolist() for n in names}
    size = grid.size
    rows = []
    for i in range(size):
        label = " ".join(f"{n}={cols[n][i]}" for n in grid.names) or "spec values"
        rows.append(Row(label, label, 0, {n: cols[n][i] for n in names}))
    columns = [Column(n, _TITLES.get(n, n), _KINDS.get(n, "count")) for n in names]
    header = f"{meta.get('spec', '')} | pass: {meta.get('pass', '')} | precision: {meta.get('precision', '')} | " \
             f"{size} points"
    return Result(header, [table_of(rows, columns)], notes=list(notes), meta=dict(meta))
