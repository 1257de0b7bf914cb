"""`costspec report`: one self-contained HTML page, checked as text and rendered in headless Chromium."""
from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import costspec
from costspec.analysis.formula import choose_symbols, closed_form
from costspec.analysis.gpus import get_gpu
from costspec.analysis.sweep import parse_vary
from costspec.export.html_page import render_page
from costspec.export.html_report import gather
from costspec.export.mathml import mathml
from tests.common import ROOT, SPECS, load_once
from tests.export.browser_page import browser

MATH = re.compile(r"<math\b.*?</math>", re.S)


def page(spec, batch=None, gpu=None, vary=(), **kw) -> tuple[costspec.Model, str]:
    model = costspec.load(spec)
    values = model.bind(batch, {})
    data = gather(model, values, "forward", {}, get_gpu(gpu) if gpu else None,
                  varies=[parse_vary(v) for v in vary], quiet=True, **kw)
    return model, render_page(data)


def test_page_is_self_contained_and_has_every_section():
    model, html = page(ROOT / "specs/vit_b.yaml", 8, "h100-sxm", ["B=1..256:x2"])
    # nothing fetched at view time: no external src/href, no @import, no url(http...)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(http" not in html
    for section in ('id="layers"', 'id="formulas"', 'id="roofline"', 'id="sweep"'):
        assert section in html
    rows = re.findall(r'<tr data-depth="\d+" data-name="([^"]*)"', html)
    names = [r.name for r in model.evaluate("forward", B=8).rows]
    assert rows == names * 2  # the layer tree and the per-layer closed forms
    # 7 totals (TC / CUDA / total x forward / train, params) + 3 per layer
    assert len(MATH.findall(html)) == 7 + 3 * len(names)
    assert html.count("<svg") == 4  # roofline, memory by kind, FLOPs vs B, time vs B
    for math in MATH.findall(html):
        ET.fromstring(math)  # well-formed MathML (raises otherwise)


def test_json_sections_read_both_json_layouts():
    """validate / ncu compare JSON as rows per phase, and the one-renderer layout ({tables: {t: {rows}}})."""
    from costspec.export.json_html import json_sections

    phases = json_sections({"spec": "<x>", "ok": False, "phases": {"forward": [
        {"name": "a.b", "label": "b", "depth": 1, "matmul_ok": False, "flops": 1234567}]}})
    assert "&lt;x&gt;" in phases and "1,234,567" in phases and 'class="badrow"' in phases
    assert "padding-left:1.5em" in phases  # depth 1 indents the layer name
    tables = json_sections({"spec": "s", "tables": {"backward": {"columns": [], "rows": [
        {"name": "fc", "label": "fc", "depth": 0, "measured": 42}], "total": {"name": "total", "label": "total",
                                                                            "depth": 0, "measured": 42}}}})
    assert tables.count("<tr") == 3 and "tables: backward" in tables


def test_mathml_of_a_closed_form():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    form = closed_form(model.cost("forward").params, choose_symbols(model))
    # params = L*(12*C**2 + 13*C) + 3*patch**2*C + C*S + 4*C (ViT-B: 12 per block x C^2 weights, ...)
    assert form.text() == "L*(12*C**2 + 13*C) + 3*patch**2*C + C*S + 4*C"
    root = ET.fromstring(mathml(form, "P"))
    ns = "{http://www.w3.org/1998/Math/MathML}"
    text = "".join(root.itertext())
    assert text.replace("\u2062", "").replace(" ", "") == "P=L\u22c5(12C2+13C)+3patch2C+CS+4C"
    assert [e.text for e in root.iter(f"{ns}mn")] == ["12", "2", "13", "3", "2", "4"]


def test_spec_strings_are_escaped(write_spec):
    evil = "<script>alert(1)</script> & \"q\""
    path = write_spec(f"""costspec: 1
name: '{evil}'
doc: '{evil}'
dims:
  M: {{value: 4, doc: '<img src=x onerror=alert(2)>'}}
  D: 8
input: [M, D]
layers:
  - linear: {{out: D}}
""")
    _, html = page(path)
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;q&quot;" in html
    assert html.count("<script>") == 1  # only the page's own script


def test_validation_and_compare_sections(tmp_path, cli):
    out = tmp_path / "r.html"
    cmp = tmp_path / "cmp.json"
    compare = cli("ncu", "compare", "specs/toy_mlp.yaml", "tests/data/ncu/toy_forward.details.csv",
                  "--format", "json")
    assert compare.returncode == 0, compare.stderr
    cmp.write_text(compare.stdout)
    result = cli("report", "specs/toy_mlp.yaml", "--compare", cmp, "-o", out)
    assert result.returncode == 0, result.stderr
    html = out.read_text()
    assert 'id="ncu"' in html and "toy_forward.details.csv" in html
    # the compare JSON's per-layer rows are a table: cuda_measured of layers = 2,727,606,586 (the toy capture)
    assert "2,727,606,586" in html


def test_report_refuses_bad_inputs(tmp_path, cli):
    bad = tmp_path / "v.json"
    bad.write_text('{"spec": 1,\n "x": }')
    result = cli("report", "specs/toy_mlp.yaml", "--validation", bad, "-o", tmp_path / "r.html")
    assert result.returncode == 2 and f"{bad}: not valid JSON" in result.stderr and "line 2 column" in result.stderr
    result = cli("report", "specs/toy_mlp.yaml", "-o", tmp_path / "r.txt")
    assert result.returncode == 2 and "HTML" in result.stderr


# ---------------------------------------------------------------------------------------------
# A real browser: every zoo spec's report rendered by headless Chromium
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chrome():
    """One headless Chromium for the module's pages (tools/browser.py), each page in its own tab; None when
    Chromium is not installed."""
    if not browser.CHROMIUM:
        yield None
        return
    with browser.Browser() as running:
        yield running


def rendered(chrome: browser.Browser, html: Path) -> tuple[str, list[str], bytes]:
    """The page at a 1400 x 2000 viewport: its DOM once loaded (what `chromium --dump-dom` prints), the
    errors the tab reported (uncaught exceptions, console and log errors) and a PNG of the viewport."""
    page = chrome.open(html, 1400, 2000)
    try:
        dom = page.evaluate("document.documentElement.outerHTML")
        shot = base64.b64decode(page.send("Page.captureScreenshot", {"format": "png"})["data"])
        return dom, page.errors(), shot
    finally:
        page.close()


def rendered_checks(dom: str, errors: list[str], rows: int, maths: int) -> None:
    assert 'data-ready="1"' in dom  # the page's script ran to its end
    assert re.search(r'<div id="js-errors"></div>', dom), "a script error was written into the page"
    assert errors == []
    assert len(re.findall(r'<tr data-depth="\d+"', dom)) == 2 * rows
    assert len(re.findall(r"<math\b", dom)) == maths
    # collapsed below depth 2 by the script: deep rows hidden, top rows shown
    assert re.search(r'<tr data-depth="0"[^>]*>', dom)
    assert not re.search(r'<tr data-depth="0"[^>]* hidden', dom)


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_every_zoo_report_is_well_formed_and_renders_in_chromium(spec, tmp_path, cli, chrome):
    out = tmp_path / "report.html"
    args = ["report", spec, "--gpu", "h100-sxm", "-o", out]
    if "B" in load_once(spec).dims.dims:
        args += ["--vary", "B=1..64:x4"]
    assert cli(*args).returncode == 0
    html = out.read_text(encoding="utf-8")
    rows = len(load_once(spec).evaluate("forward").rows)
    maths = MATH.findall(html)
    assert len(maths) == 7 + 3 * rows
    for math in maths:
        ET.fromstring(math)  # well-formed MathML (raises on malformed markup)
    if chrome is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    dom, errors, shot = rendered(chrome, out)
    rendered_checks(dom, errors, rows, 7 + 3 * rows)
    assert len(shot) > 20_000
    assert shot[16:24] == (1400).to_bytes(4, "big") + (2000).to_bytes(4, "big")  # PNG IHDR size


@pytest.mark.skipif(not browser.CHROMIUM, reason="headless Chromium is not installed (apt-get install chromium)")
def test_chromium_reports_a_script_error(tmp_path, chrome):
    """The checks above can fail: a page whose script throws is caught, and so is an error logged to the
    console before the page's own error handler exists."""
    model = costspec.load(ROOT / "specs/toy_mlp.yaml")
    html = render_page(gather(model, model.bind(), "forward", {}, quiet=True))
    broken = tmp_path / "broken.html"
    broken.write_text(html.replace("document.body.dataset.ready = '1';", "undefinedFunction();"))
    dom, errors, _ = rendered(chrome, broken)
    assert 'data-ready="1"' not in dom
    assert "JS error" in dom and any("undefinedFunction" in e for e in errors)
    logged = tmp_path / "logged.html"
    logged.write_text(html.replace("<body>", "<body><script>console.error('early failure')</script>", 1))
    dom, errors, _ = rendered(chrome, logged)
    assert 'data-ready="1"' in dom and errors == ["early failure"]
