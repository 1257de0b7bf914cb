"""Shared by the browser tests: tools/browser.py (the headless Chromium driver) loaded as a module, and
what the tests measure in a rendered report page."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("costspec_tools_browser", ROOT / "tools" / "browser.py")
assert _spec and _spec.loader
browser = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(browser)

# The page's layout as the browser laid it out: its width against the viewport, every .scroll box whose
# content is wider than the box (a clipped column), every element that sticks out of the page on the right
# (outside a .scroll box), and the roofline's point labels as rendered boxes.
LAYOUT = r"""(() => {
  const de = document.documentElement, vw = de.clientWidth;
  const scrolled = [...document.querySelectorAll('.scroll')]
    .filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => ({table: e.firstElementChild.className, content: e.scrollWidth, box: e.clientWidth}));
  const outside = [...document.body.querySelectorAll('*')]
    .filter(e => !e.closest('.scroll') && e.getBoundingClientRect().right > vw + 0.5)
    .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : ''));
  const labels = [...document.querySelectorAll('svg.roofline text.pointlabel')].map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, top: r.top, right: r.right, bottom: r.bottom};
  });
  return {viewport: vw, page: de.scrollWidth, body: document.body.scrollWidth, scrolled, outside, labels,
          ready: document.body.dataset.ready === '1', errors: document.getElementById('js-errors').textContent};
})()"""


def overlapping(labels: list[dict]) -> list[tuple[str, str]]:
    """The pairs of label boxes that overlap (sharing an edge is not overlapping)."""
    out = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]:
                out.append((a["text"], b["text"]))
    return out
