"""costspec.core.text: names are data in every output format; the terminal, LaTeX-comment and Markdown
sanitizers, and every renderer escaping names that bypass the loader."""
from __future__ import annotations

import dataclasses

import costspec
from costspec.analysis.formula import formulas
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

EVIL = "vit\n\\input{/etc/hostname}\\immediate\\write18{touch PWNED}% ^^M\\input{x}\r\x1b]0;title\x07\x1b[2J\u202e|`<b>"


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


# -- bindings ------------------------------------------------------------------------------------


# -- public API types ----------------------------------------------------------------------------


# -- zero divisors -------------------------------------------------------------------------------


TINY = "costspec: 1\nname: tiny\ninput: [2, 8]\nlayers:\n  - linear: {out: 8}\n    name: fc\n"
