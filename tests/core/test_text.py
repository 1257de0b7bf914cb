"""Issue 12 (engine): names are data in every output format; look-alike identifiers, ambiguous bindings
and wrong argument types are refused with a costspec error; zero divisors are exit 2, not 3."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import costspec
from costspec.analysis.formula import formulas
from costspec.core.errors import CostspecError, ExpressionError, UsageError
from costspec.core.expr import dim_symbol, parse_expr
from costspec.core.render import render
from costspec.core.results import Row
from costspec.core.text import (
    for_latex_comment,
    for_markdown,
    for_markdown_code,
    for_terminal,
)
from costspec.export.latex import render_latex
from costspec.export.report import eval_result
from tests.common import ROOT, run_cli

EVIL = "vit\n\\input{/etc/hostname}\\immediate\\write18{touch PWNED}% ^^M\\input{x}\r\x1b]0;title\x07\x1b[2J\u202e|`<b>"
TINY = "costspec: 1\nname: tiny\ninput: [2, 8]\nlayers:\n  - linear: {out: 8}\n    name: fc\n"


# -- sanitizers ----------------------------------------------------------------------------------
def test_terminal_text_has_no_control_characters():
    shown = for_terminal(EVIL)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in shown)
    assert "\\x1b]0;title\\x07" in shown and "\\r" in shown and "\\n" in shown and "\\u202e" in shown


def test_latex_comment_stays_one_inert_line():
    comment = "% " + for_latex_comment(EVIL)
    assert "\n" not in comment and "\r" not in comment
    assert "^^" not in comment  # TeX turns ^^M into an end of line before it sees the %


def test_markdown_text_and_code_spans_are_literal():
    assert for_markdown("a|b*c_<x>") == "a\\|b\\*c\\_\\<x\\>"
    assert for_markdown_code("a`b|c") == "``a`b\\|c``"
    assert for_markdown_code("fc") == "`fc`"


def _evil(obj, field: str):
    return dataclasses.replace(obj, **{field: EVIL})


def test_renderers_escape_names_that_bypass_the_loader():
    model = costspec.loads(TINY)
    result = _evil(formulas(model), "spec_name")
    for standalone in (False, True):
        tex = render_latex(result, standalone=standalone)
        assert not any(line.lstrip().startswith(("\\input", "\\immediate")) for line in tex.splitlines())
        # the raw name survives only inside the one-line header comment (inert), never as live LaTeX
        assert all(line.startswith("% costspec latex:") for line in tex.splitlines() if "\\input{" in line)
    report = _evil(model.evaluate(), "spec_name")
    report.table.rows[:] = [Row(EVIL, EVIL, r.depth, r.values) for r in report.rows]
    result = eval_result(report)
    for fmt in ("table", "markdown"):
        text = render(result, fmt)
        assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    table = render(result, "markdown")
    # 6 shown columns + the label: 8 cell borders on every row; the name's own '|' is escaped
    assert all(line.replace("\\|", "").count("|") == 8 for line in table.splitlines() if line.startswith("|"))


@pytest.mark.parametrize("name", ["ℂ", "Ｃ", "𝐂"])
def test_unicode_look_alikes_of_a_dim_are_refused(name):
    with pytest.raises(ExpressionError, match=f"non-ASCII character '{name}'.*a look-alike of 'C'"):
        parse_expr(f"2*{name}", {"C": dim_symbol("C")})


def test_layer_names_from_yaml_escapes_are_refused(write_spec):
    spec = write_spec(TINY.replace("name: fc", 'name: "fc\\e[31m"'))
    with pytest.raises(CostspecError, match="control character U\\+001B"):
        costspec.load(spec)
    docs = write_spec('costspec: 1\nname: t\ndoc: "two\\nlines\\tok"\ninput: [2, 8]\nlayers:\n  - linear: {out: 8}\n')
    assert costspec.load(docs).doc_line == "two\nlines\tok"  # prose may have line breaks and tabs


# -- bindings ------------------------------------------------------------------------------------
def test_batch_and_set_of_B_together_are_a_usage_error():
    r = run_cli("eval", ROOT / "specs/vit_b.yaml", "--batch", "4", "--set", "B=8")
    assert r.returncode == 2 and "--batch 4 and --set B=8 both bind B" in r.stderr


def test_formula_set_substitutes_the_value():
    r = run_cli("formula", ROOT / "specs/vit_b.yaml", "--set", "img=384")
    assert r.returncode == 0 and "img    image side in pixels; substituted: 384" in r.stdout
    assert "S = floor(img/patch)**2 + 1 = 577" in r.stdout  # (384 // 16)**2 + 1
    tex = run_cli("latex", ROOT / "specs/vit_b.yaml", "--set", "img=384").stdout
    assert "& $384$ (substituted)" in tex and "spec value 384" not in tex
    both = run_cli("formula", ROOT / "specs/vit_b.yaml", "--set", "img=384", "--keep", "img")
    assert both.returncode == 2 and "--keep img and --set img=384" in both.stderr


# -- public API types ----------------------------------------------------------------------------
def test_api_accepts_python_and_numpy_integers():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    expected = model.evaluate(B=8).tc
    assert model.evaluate(B=np.int64(8)).tc == expected
    assert model.evaluate(B=np.uint16(8)).tc == expected
    assert model.bind(batch=np.int32(8)) == model.bind(batch=8)


@pytest.mark.parametrize("value", ["8", 8.0, True, np.float64(8), None, [8]])
def test_api_refuses_floats_strings_and_bools_as_dims(value):
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError, match="a dim value is an integer"):
        model.evaluate(B=value)


def test_api_refuses_bad_paths_texts_and_keeps():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError, match="needs a file path"):
        costspec.load(None)
    with pytest.raises(UsageError, match="needs the spec text"):
        costspec.loads(None)
    with pytest.raises(UsageError, match="dim names are strings, got int 1"):
        model.latex(keep=[1])
    assert model.latex(keep="B,C") == model.latex(keep=["B", "C"])


# -- zero divisors -------------------------------------------------------------------------------
DIV = ("costspec: 1\nname: div\ndims:\n  B: 2\n  C: 64\n  K: 96\ninput: [B, C]\nlayers:\n"
       "  - linear: {out: \"C*2/(K-C)\"}\n")


def test_a_size_that_divides_by_zero_is_exit_2(write_spec):
    spec = write_spec(DIV)
    r = run_cli("eval", spec, "--set", "K=64")
    assert r.returncode == 2 and "division or modulo by zero" in r.stderr and "Traceback" not in r.stderr
    assert run_cli("eval", spec).returncode == 0  # 2*64/32 = 4


def test_a_derived_dim_that_divides_by_zero_is_a_spec_error(write_spec):
    spec = write_spec(DIV.replace("  K: 96\n", "  K: 96\n  X: \"C % (K - C) + 1\"\n"))
    model = costspec.load(spec)
    with pytest.raises(CostspecError, match="dim X = .* divides by zero"):
        model.evaluate(K=64)
