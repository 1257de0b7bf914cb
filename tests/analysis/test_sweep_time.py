"""sweep --gpu (vectorised roofline per point) equals `eval --gpu` point by point; --format, --plot."""
from __future__ import annotations

import csv
import io
import json

import pytest

import costspec
from costspec.analysis.gpus import get_gpu
from costspec.analysis.roofline import estimate
from costspec.analysis.sweep import make_grid, parse_vary, points
from costspec.analysis.sweep_time import grid_times
from costspec.export.sweep_plot import series
from tests.common import ROOT


def expected_bound(report, roof) -> str:
    """The bound of the whole model from eval's per-leaf rows: the engine with most time, '*' if mixed."""
    per: dict[str, float] = {}
    rows = report.rows
    for i, row in enumerate(rows):
        leaf = i + 1 == len(rows) or rows[i + 1].depth <= row.depth
        time_s, bound = row.values["est_time_s"], row.values["bound"]
        if leaf and time_s:
            per[bound] = per.get(bound, 0.0) + time_s
    top = max(per, key=lambda b: per[b])
    return top + ("*" if len(per) > 1 else "")


@pytest.mark.parametrize("spec, varies", [
    ("vit_b", ["B=1..64:x4", "img=224,384"]),
    ("llama_1b", ["B=1,3", "S=128,2048"]),
    ("toy_mlp", ["M=1..1024:x8"]),
    ("sam_vit_b", ["B=1,2"]),
])
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_grid_times_equal_eval_gpu_at_every_point(spec, varies, pass_):
    model = costspec.load(ROOT / f"specs/{spec}.yaml")
    gpu = get_gpu("h100-sxm")
    grid = make_grid(model, [parse_vary(v) for v in varies])
    times = grid_times(model, grid, pass_, gpu, quiet=True)
    for i, point in enumerate(points(grid)):
        values = model.bind(None, point)
        report = model.report(pass_, values)
        roof = estimate(model, report, values, gpu)
        assert int(times.bytes[i]) == roof.bytes
        assert times.time_s[i] == pytest.approx(roof.time_s, rel=1e-12)
        assert times.bound[i] == expected_bound(report, roof)


@pytest.mark.slow
def test_sweep_cli_formats(cli, tmp_path):
    args = ["sweep", "specs/vit_b.yaml", "--vary", "B=1..4:x2", "--gpu", "h100-sxm"]
    rows = list(csv.DictReader(io.StringIO(cli(*args).stdout)))
    assert [r["B"] for r in rows] == ["1", "2", "4"]
    assert {"tc_flops", "bytes", "time_s", "bound"} <= set(rows[0])
    # exact integers: ViT-B/16 forward at B=1 is 35,242,712,160 FLOPs (costspec eval specs/vit_b.yaml)
    assert rows[0]["total_flops"] == "35242712160"
    data = json.loads(cli(*args, "--format", "json").stdout)
    assert data["gpu"] == "h100-sxm" and data["varied"] == ["B"]
    assert [r["total_flops"] for r in data["rows"]] == [int(r["total_flops"]) for r in rows]
    assert [r["time_s"] for r in data["rows"]] == [float(r["time_s"]) for r in rows]
    table = cli(*args, "--format", "table").stdout
    assert "est. time" in table and "35.243 GFLOP" in table


@pytest.mark.slow
def test_sweep_plot_png_and_svg(cli, tmp_path):
    png, svg = tmp_path / "s.png", tmp_path / "s.svg"
    base = ["sweep", "specs/vit_b.yaml", "--vary", "B=1..16:x2", "--vary", "img=224,384"]
    assert cli(*base, "--gpu", "h100-sxm", "--plot", png).returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli(*base, "--plot", svg).returncode == 0
    text = svg.read_text()
    assert "<svg" in text and "img=384" in text  # one line per value of the second swept dim
    three = cli(*base, "--vary", "patch=16,32", "--plot", png)
    assert three.returncode == 2 and "one or two swept dims" in three.stderr
    bad = cli(*base, "--plot", tmp_path / "s.txt")
    assert bad.returncode == 2 and ".png, .svg or .pdf" in bad.stderr


def test_series_splits_by_the_second_dim():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    grid = make_grid(model, [("B", [4, 1, 2]), ("img", [224, 384])])
    import numpy as np

    lines = series(grid, np.asarray(grid.columns["B"]) * 10 + np.asarray(grid.columns["img"]))
    assert lines == [("img=224", [1, 2, 4], [234.0, 244.0, 264.0]), ("img=384", [1, 2, 4], [394.0, 404.0, 424.0])]
