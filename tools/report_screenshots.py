"""Screenshots of `costspec report` at a desktop and a phone width, for docs/report.md.

    python tools/report_screenshots.py            # writes docs/images/report_vit_b_1280.png and _390.png

The page is the README's report (ViT-B/16, batch 8, H100, a batch sweep), photographed whole at each
viewport width by headless Chromium (tools/browser.py); tests/export/test_report_widths.py checks that
the page is no wider than the viewport at both widths, and that these images are.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import browser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (1280, 390)
REPORT = ["vit_b", "--batch", "8", "--gpu", "h100-sxm", "--vary", "B=1..256:x2"]


def shot_path(width: int) -> Path:
    return ROOT / "docs" / "images" / f"report_vit_b_{width}.png"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "vit_b.html"
        subprocess.run([sys.executable, "-m", "costspec", "report", *REPORT, "-o", str(page_path)], check=True,
                       cwd=ROOT)
        with browser.Browser() as chromium:
            for width in WIDTHS:
                page = chromium.open(page_path, width)
                page.wait_for("document.body.dataset.ready === '1'")
                size = page.screenshot(shot_path(width))
                print(f"{shot_path(width).relative_to(ROOT)}: {size[0]} x {size[1]} px")


if __name__ == "__main__":
    main()
