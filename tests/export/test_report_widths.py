"""The report at every width, as headless Chromium lays it out: at 1280 px no table is clipped (none needs
its scroll box); at 390 px nothing sticks out of the page (wide tables scroll inside their box, charts
scale down); the roofline's point labels never overlap, in the page and in the matplotlib PNG."""
from __future__ import annotations

import struct

import pytest

import costspec
from costspec.analysis.gpus import get_gpu
from costspec.analysis.roofline import estimate

from .browser_page import LAYOUT, ROOT, browser, overlapping

needs_chromium = pytest.mark.skipif(not browser.CHROMIUM,
                                    reason="headless Chromium is not installed (apt-get install chromium)")
README_REPORT = ["--batch", "8", "--gpu", "h100-sxm", "--vary", "B=1..256:x2"]


def png_size(path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


@needs_chromium
@pytest.mark.parametrize("spec", ["vit_b", "resnet50"])
def test_report_fits_a_desktop_and_a_phone(spec, tmp_path, cli):
    out = tmp_path / f"{spec}.html"
    result = cli("report", spec, *README_REPORT, "-o", out)
    assert result.returncode == 0, result.stderr
    with browser.Browser() as chromium:
        layouts = {}
        for width in (1280, 390):
            page = chromium.open(out, width)
            page.wait_for("document.body.dataset.ready === '1'")
            layouts[width] = page.evaluate(LAYOUT)
            assert png_size(tmp_path / "shot.png")[0] == width if page.screenshot(tmp_path / "shot.png") else True
    for width, layout in layouts.items():
        assert layout["errors"] == "" and layout["ready"]
        assert layout["page"] <= layout["viewport"] == width, layout  # the page never scrolls sideways
        assert layout["outside"] == [], layout["outside"]  # nothing sticks out of the page
        assert layout["labels"] and overlapping(layout["labels"]) == []
    assert layouts[1280]["scrolled"] == []  # every column of every table visible at 1280 px
    # at 390 px the wide tables scroll inside their own box; the charts are scaled, never scrolled
    assert {s["table"] for s in layouts[390]["scrolled"]} >= {"tree", "forms"}
    assert all(s["table"] for s in layouts[390]["scrolled"])  # a chart has no table class: none scrolls


@needs_chromium
def test_the_docs_screenshots_are_as_wide_as_their_viewport():
    for width in (1280, 390):  # tools/report_screenshots.py writes them
        path = ROOT / "docs" / "images" / f"report_vit_b_{width}.png"
        assert png_size(path)[0] == width, path


@pytest.mark.parametrize("spec", ["vit_b", "resnet50", "llama_1b"])
def test_png_roofline_labels_do_not_overlap(spec):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from costspec.export.roofline_plot import roofline_figure

    model = costspec.load(ROOT / "specs" / f"{spec}.yaml")
    values = model.bind(8, {})
    report = model.report("forward", values)
    roof = estimate(model, report, values, get_gpu("h100-sxm"))
    fig, labels = roofline_figure(report, roof, model.precision.dtype)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        # the text's own box (an Annotation's extent also spans its leader line)
        boxes = [(a.get_text(), Text.get_window_extent(a, renderer)) for a in labels]
        legend = fig.axes[0].get_legend().get_window_extent(renderer)
        frame = fig.axes[0].get_window_extent(renderer)
    finally:
        plt.close(fig)
    assert len(boxes) >= 5
    for i, (name, box) in enumerate(boxes):
        assert not box.overlaps(legend), name
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, name
        for other, second in boxes[i + 1:]:
            assert not box.overlaps(second), (name, other)
