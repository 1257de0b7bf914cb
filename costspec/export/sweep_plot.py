"""Plot a sweep: cost (or estimated time) against the first swept dim, one line per value of the second."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from costspec.analysis.sweep import Grid
from costspec.core.errors import MissingExtraError, UsageError

LABELS = {"total_flops": "total FLOPs", "tc_flops": "Tensor-Core FLOPs", "cuda_flops": "CUDA-core FLOPs",
          "params": "parameters", "time_s": "estimated time (s)", "bytes": "bytes moved"}


def wants_log(values) -> bool:
    """Log axes when the values span more than a factor of 8 (geometric sweeps such as B=1..1024:x2)."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > 8


def series(grid: Grid, column: Any) -> list[tuple[str, list[int], list[float]]]:
    """(label, xs, ys) per value of the second swept dim (one unlabelled series for a 1-D sweep)."""
    import numpy as np

    if len(grid.names) > 2:
        raise UsageError(f"--plot draws one or two swept dims; this sweep varies {len(grid.names)} "
                         f"({', '.join(grid.names)}): fix the others with --set")
    x = np.asarray(grid.columns[grid.names[0]])
    y = np.asarray(column, dtype=np.float64)
    if len(grid.names) == 1:
        order = np.argsort(x, kind="stable")
        return [("", x[order].tolist(), y[order].tolist())]
    second = np.asarray(grid.columns[grid.names[1]])
    out = []
    for value in sorted(set(second.tolist())):
        mask = second == value
        order = np.argsort(x[mask], kind="stable")
        out.append((f"{grid.names[1]}={value}", x[mask][order].tolist(), y[mask][order].tolist()))
    return out


def plot_sweep(grid: Grid, values: Mapping[str, Any], key: str, path: str, title: str) -> None:
    """Write a PNG/SVG/PDF of `values[key]` against the first swept dim."""
    if Path(path).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"--plot {path}: a plot is written as .png, .svg or .pdf")
    lines = series(grid, values[key])
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("matplotlib", "plot", "costspec sweep --plot") from None
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for label, xs, ys in lines:
        ax.plot(xs, ys, marker="o", ms=3, lw=1.5, label=label or None)
    xs_all = [x for _, xs, _ in lines for x in xs]
    ys_all = [y for _, _, ys in lines for y in ys]
    if wants_log(xs_all):
        ax.set_xscale("log", base=2)
    if wants_log(ys_all):
        ax.set_yscale("log")
    ax.set_xlabel(grid.names[0])
    ax.set_ylabel(LABELS.get(key, key))
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if any(label for label, _, _ in lines):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
