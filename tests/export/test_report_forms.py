"""`costspec report`'s closed forms are formula's: the spec's symbols (the free dims and those marked keep),
with only the dims given by --set substituted; --batch and the spec's defaults are the page's numbers, not
the forms'. Checked on the gathered data and in the page as headless Chromium renders it (MathML)."""
from __future__ import annotations

import pytest

import costspec
from costspec.export.html_report import gather

from .browser_page import ROOT, browser

VIT_B_TC = "L*(24*B*C**2*S + 4*B*C*S**2) + 6*B*patch**2*C*(S - 1)"  # the textbook ViT forward GEMM FLOPs
VIT_B_PARAMS = "L*(12*C**2 + 13*C) + 3*patch**2*C + C*S + 4*C"


def test_forms_keep_the_spec_symbols_at_a_bound_batch():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    data = gather(model, model.bind(8, {}), "forward", {}, quiet=True)
    assert data.totals["forward"]["tc"].text() == VIT_B_TC
    assert data.totals["forward"]["params"].text() == VIT_B_PARAMS
    assert data.totals["train"]["tc"].text() == "L*(72*B*C**2*S + 14*B*C*S**2) + 12*B*patch**2*C*(S - 1)"
    assert {d.name: d.role for d in data.symbols.dims} == {
        "B": "kept", "img": "kept", "patch": "kept", "C": "kept", "heads": "kept", "L": "kept", "S": "derived"}
    # q, k, v: 3 x 2*B*S*C*C matmul FLOPs and 3*B*S*C bias adds, in each of the L blocks
    assert data.row_forms["blocks.attn.qkv"].forward.text() == "L*(6*B*C**2*S + 3*B*C*S)"
    assert data.report.total == 281_941_697_280  # the numbers stay those at B = 8


def test_set_substitutes_only_the_dims_it_names():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    data = gather(model, model.bind(2, {"L": 3}), "forward", {"L": 3}, quiet=True)
    roles = {d.name: d.role for d in data.symbols.dims}
    assert roles["L"] == "substituted" and roles["B"] == roles["C"] == "kept"
    assert data.totals["forward"]["tc"].text() == "6*B*patch**2*C*S + 72*B*C**2*S + 12*B*C*S**2 - 6*B*patch**2*C"


@pytest.mark.skipif(not browser.CHROMIUM, reason="headless Chromium is not installed (apt-get install chromium)")
def test_rendered_mathml_holds_the_symbols_and_the_textbook_vit_form(tmp_path, cli):
    out = tmp_path / "vit_b.html"
    result = cli("report", "vit_b", "--batch", "8", "-o", out)
    assert result.returncode == 0, result.stderr
    with browser.Browser() as chromium:
        page = chromium.open(out, 1280)
        page.wait_for("document.body.dataset.ready === '1'")
        cells = page.evaluate("""[...document.querySelectorAll('table.totals tbody tr')].map(tr => {
            const math = tr.querySelector('math');
            return {what: tr.cells[0].textContent, pass: tr.cells[1].textContent,
                    symbols: [...math.querySelectorAll('mi')].map(e => e.textContent),
                    numbers: [...math.querySelectorAll('mn')].map(e => e.textContent),
                    text: math.textContent.replace(/[\\u2062\\s]/g, ''),
                    width: math.getBoundingClientRect().width};
        })""")
    forms = {(c["what"], c["pass"]): c for c in cells}
    tc = forms[("TC FLOPs", "forward")]
    assert tc["text"] == "L\u22c5(24BC2S+4BCS2)+6Bpatch2C\u22c5(S\u2212" + "1)"
    assert set(tc["symbols"]) == {"L", "B", "C", "S", "patch"}
    assert tc["numbers"] == ["24", "2", "4", "2", "6", "2", "1"]
    assert forms[("parameters", "")]["text"] == "L\u22c5(12C2+13C)+3patch2C+CS+4C"
    for c in cells:  # every closed form is typeset in symbols, none is a bare number
        assert c["symbols"] and c["width"] > 20, c
