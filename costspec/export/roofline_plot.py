"""Draw a roofline: both compute roofs and the memory roof, one labelled point per layer."""
from __future__ import annotations

from collections.abc import Sequence

from costspec.analysis.evaluation import Report
from costspec.analysis.gpus import POINTWISE_DTYPE
from costspec.analysis.roofline import RooflineReport
from costspec.core.errors import MissingExtraError
from costspec.core.safeio import write_with


def plot_roofline(report: Report, roof: RooflineReport, dtype: str, path: str, depth: int = 2,
                  inputs: Sequence[str | None] = ()) -> None:
    """Write a roofline PNG/SVG: x = FLOPs/byte, y = achieved FLOP/s at the estimated time;
    one point per leaf row up to `depth`, sized by its share of the time. The file is written
    atomically and never over one of `inputs` (`costspec.core.safeio.write_with`)."""
    from pathlib import Path

    from costspec.core.errors import UsageError

    if Path(path).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"-o {path}: the roofline is written as .png, .svg or .pdf")
    fig, _labels = roofline_figure(report, roof, dtype, depth)
    import matplotlib.pyplot as plt

    try:
        write_with(path, lambda temp: fig.savefig(temp, format=Path(path).suffix.lower()[1:]), inputs)
    finally:
        plt.close(fig)


def roofline_figure(report: Report, roof: RooflineReport, dtype: str, depth: int = 2):
    """The roofline as a matplotlib figure, and its point labels (matplotlib Annotations), placed so
    that no two labels overlap and none overlaps the legend."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("matplotlib", "plot", "costspec roofline") from None
    gpu = roof.gpu
    bw = gpu.bandwidth
    tc_peak = gpu.tensor_peak(dtype) if dtype in gpu.tensor else None
    cuda_peak = gpu.cuda_peak(POINTWISE_DTYPE)
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    xs = [10 ** (k / 20) for k in range(-40, 101)]  # 0.01 .. 1e5 FLOP/byte
    for peak, label, style in ((tc_peak, f"Tensor Cores {dtype} {tc_peak / 1e12 if tc_peak else 0:g} TFLOP/s", "-"),
                               (cuda_peak, f"CUDA cores fp32 {cuda_peak / 1e12:g} TFLOP/s", "--")):
        if peak:
            ax.plot(xs, [min(peak, bw * x) for x in xs], style, lw=1.6, label=label)
    ax.plot(xs, [bw * x for x in xs], ":", color="grey", lw=1, label=f"memory {gpu.memory_bw_gbps:g} GB/s")
    total = roof.time_s or 1.0
    rows = [(r, rr) for r, rr in zip(report.rows, roof.rows)
            if rr.est_time_s > 0 and rr.intensity and r.depth < depth and _is_leaf(report, r, depth)]
    top = max(p for p in (tc_peak, cuda_peak) if p)
    lows = [r.total_flops / rr.est_time_s for r, rr in rows] + [bw * xs[0]]
    ax.set_ylim(max(min(lows) / 3, top / 1e7), top * 2.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("FLOP/s at the estimated time")
    ax.set_title(f"{report.spec_name} ({report.pass_}, {dtype}) on {gpu.name}: "
                 f"{roof.time_s * 1e3:.3g} ms, point area = time share")
    ax.grid(True, which="both", alpha=0.25)
    legend = ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    points = []
    for r, rr in sorted(rows, key=lambda p: -p[1].est_time_s):  # the largest by time get the nearest spots
        achieved = r.total_flops / rr.est_time_s
        ax.scatter([rr.intensity], [achieved], s=20 + 600 * rr.est_time_s / total, alpha=0.6)
        points.append((r.name, rr.intensity, achieved))
    return fig, _place_labels(fig, ax, points, [legend])


def _place_labels(fig, ax, points, keep_clear) -> list:
    """Label each (text, x, y) point: the label goes beside its point, or is moved up or down (with a leader
    line) to the nearest spot where its measured box overlaps no label placed before and none of the
    artists in `keep_clear` (the legend), inside the axes."""
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = [a.get_window_extent(renderer) for a in keep_clear]
    labels = []
    for text, x, y in points:
        probe = ax.text(0, 0, text, fontsize=7, transform=None)
        box = probe.get_window_extent(renderer)
        probe.remove()
        width, height = box.width, box.height + 2
        px, py = ax.transData.transform((x, y))
        spot = None
        for step in range(40):  # 0, +1, -1, +2, -2, ... label heights away from the point
            dy = (step + 1) // 2 * height * (1 if step % 2 else -1)
            for dx in (6, -6 - width):
                candidate = Bbox.from_bounds(px + dx, py + dy, width, height)
                inside = frame.x0 <= candidate.x0 and candidate.x1 <= frame.x1 and frame.y0 <= candidate.y0 \
                    and candidate.y1 <= frame.y1
                if inside and not any(candidate.overlaps(b) for b in taken):
                    spot = (dx, dy, candidate)
                    break
            if spot:
                break
        if spot is None:  # nowhere free inside the axes: leave this label out rather than draw it over another
            continue
        dx, dy, candidate = spot
        leader = {"arrowstyle": "-", "lw": 0.4, "color": "0.4"} if abs(dy) >= height else None
        labels.append(ax.annotate(text, (x, y), xytext=(dx, dy + 1), textcoords="offset pixels", fontsize=7,
                                  ha="left", va="bottom", arrowprops=leader))
        taken.append(candidate)
    return labels


def _is_leaf(report: Report, row, depth: int) -> bool:
    """A row with no visible children at this depth (children are the following deeper rows)."""
    i = report.rows.index(row)
    nxt = report.rows[i + 1] if i + 1 < len(report.rows) else None
    return nxt is None or nxt.depth <= row.depth or nxt.depth >= depth
