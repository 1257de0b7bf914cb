"""LaTeX export: the emitted equations parse back (sympy's LaTeX parser) to the engine's numbers."""
import re
import shutil
import subprocess
import types
from functools import lru_cache

import pytest
import sympy

import costspec
from costspec.analysis.formula import formulas
from costspec.export.latex import label_key, render_latex, tex_escape
from costspec.tree.walk import node_cost
from tests.common import ROOT, formulas_once, load_once, zoo_params

LABEL = re.compile(r"\\label\{([^}]*)\}")


class _IntegerLiterals(types.ModuleType):
    """sympy, as the LaTeX converter sees it, with `Number("123")` built as `Integer(123)` directly: sympy's
    own `Number(str)` goes through `sympify` -> `parse_expr`, which re-runs `from sympy import *` per literal
    (two thirds of the converter's time on the zoo's formulas). Any other literal goes to sympy.Number."""

    def __getattr__(self, name):
        return getattr(sympy, name)

    @staticmethod
    def Number(text):
        return sympy.Integer(int(text)) if isinstance(text, str) and text.isdigit() else sympy.Number(text)


def parse_latex(tex: str) -> sympy.Expr:
    """sympy.parsing.latex.parse_latex (sympy's ANTLR grammar and converter), with ANTLR's two-stage strategy:
    SLL prediction first, which either gives exactly the tree full-context LL prediction gives or stops at
    a syntax error; only then the full LL parse (sympy's own parse_latex). Full-context prediction over the
    zoo's nested floors was three quarters of the parse time (40-48 s per resnet50 / swin_tiny pass)."""
    import antlr4  # needs antlr4-python3-runtime 4.11 (the `test` extra)
    from antlr4.atn.PredictionMode import PredictionMode
    from antlr4.error.Errors import ParseCancellationException
    from antlr4.error.ErrorStrategy import BailErrorStrategy
    from sympy.parsing.latex import _parse_latex_antlr as antlr_latex
    from sympy.parsing.latex import parse_latex as full_parse

    tex = tex.strip()
    lexer = antlr_latex.LaTeXLexer(antlr4.InputStream(tex))
    lexer.removeErrorListeners()
    lexer.addErrorListener(antlr_latex.MathErrorListener(tex))
    parser = antlr_latex.LaTeXParser(antlr4.CommonTokenStream(lexer))
    parser.removeErrorListeners()
    parser._interp.predictionMode = PredictionMode.SLL
    parser._errHandler = BailErrorStrategy()
    try:
        relation = parser.math().relation()
    except ParseCancellationException:
        return full_parse(tex)
    converter_sympy, antlr_latex.sympy = antlr_latex.sympy, _IntegerLiterals("sympy")
    try:
        return antlr_latex.convert_relation(relation)
    finally:
        antlr_latex.sympy = converter_sympy


@lru_cache(maxsize=None)
def parse(rhs: str) -> sympy.Expr:
    expr = parse_latex(rhs)
    # \min / \max parse as undefined functions named min / max: read them as sympy's Min / Max
    lattice = {"min": sympy.Min, "max": sympy.Max}
    return expr.replace(lambda e: isinstance(e, sympy.core.function.AppliedUndef) and e.func.__name__ in lattice,
                        lambda e: lattice[e.func.__name__](*e.args))


def symbol_reader(dims):
    """(rewrite, to_dim): sympy's LaTeX lexer reads 'd' + a letter as a differential, so it cannot read
    \\mathit{heads}; multi-character symbol names are swapped for Q_{i} placeholders before parsing."""
    swaps, to_dim = [], {}
    for i, d in enumerate(dims):
        if len(d.latex) == 1:
            to_dim[sympy.Symbol(d.latex)] = d.symbol
        else:
            swaps.append((d.latex, f"Q_{{{i}}}"))
            to_dim[sympy.Symbol(f"Q_{{{i}}}")] = d.symbol
    swaps.sort(key=lambda pair: -len(pair[0]))

    def rewrite(tex: str) -> str:
        for name, placeholder in swaps:
            tex = tex.replace(name, placeholder)
        return tex

    return rewrite, to_dim


def equations(tex: str) -> dict[str, str]:
    """label -> right-hand side of every equation in the align, continuation lines joined."""
    body = tex.split(r"\begin{align}", 1)[1].split(r"\end{align}", 1)[0]
    body = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("%"))
    chunks = LABEL.split(body)
    out = {}
    for text, label in zip(chunks[0::2], chunks[1::2]):
        rhs = text.split("&=", 1)[1]
        for junk in (r"\nonumber", "\\\\", "&", r"\quad", "{}"):
            rhs = rhs.replace(junk, " ")
        out[label] = rhs.strip()
    return out


def check_round_trip(spec, pass_, **options):
    """Every equation: parsed LaTeX == the formula == the engine's expression; values == eval's integers."""
    model = load_once(spec)
    values = model.bind()
    report, forward = model.report(pass_, values), model.report("forward", values)
    result = formulas_once(spec, pass_, depth=None, **options)
    rewrite, to_dim = symbol_reader(result.symbols.dims)
    key = lambda *rest: label_key("costspec", model.name, pass_, *rest)  # noqa: E731
    expected = {key("tc"): (result.tc, model.cost(pass_).tc, report.tc),
                key("cuda"): (result.cuda, model.cost(pass_).cuda, report.cuda),
                key("total"): (result.total, model.cost(pass_).flops, report.total),
                key("params"): (result.params, model.cost("forward").params, forward.params)}
    rows = {r.name: r for r in report.rows}
    engine = {node.name: node_cost(node, pass_, mult, rg) for node, _, mult, rg in model.walk()}
    for row in result.rows:
        for section in ("tc", "cuda"):
            number = getattr(rows[row.name], f"{section}_flops")
            expected[key(section, row.name)] = (getattr(row, section), getattr(engine[row.name], section), number)
    found = equations(render_latex(result))
    substituted = {d.symbol: d.value for d in result.symbols.dims if d.role == "substituted"}
    dims = model.dims
    for label, (form, engine_expr, number) in expected.items():
        if label not in found:  # rows that are zero in a section are left out
            assert number == 0 and form.expr == 0, label
            continue
        back = parse(rewrite(found[label])).xreplace(to_dim)
        assert sympy.expand(back - form.expr) == 0, (label, found[label])
        same = sympy.expand(dims.expand(back).xreplace(substituted) - dims.expand(engine_expr).xreplace(substituted))
        assert same == 0, (label, found[label])
        assert back.xreplace(values) == number, label
    return found


# the largest spec's round trips take most of the file's time: the fast profile (-m "not slow") leaves them out
LARGE = {"deepencoder", "sam_vit_b", "clip_vit_l14"}
BY_SIZE = zoo_params(slow=LARGE)


@pytest.mark.parametrize("spec", BY_SIZE)
@pytest.mark.parametrize("pass_", ["forward", "backward", "train"])
def test_every_spec_round_trips_through_parse_latex(spec, pass_):
    check_round_trip(spec, pass_)


@pytest.mark.parametrize("spec", BY_SIZE)
def test_round_trip_with_substituted_and_expanded_dims(spec):
    model = load_once(spec)
    free = [d.name for d in model.dims.free()]
    derived = [d.name for d in model.dims.derived()]
    check_round_trip(spec, "train", keep=free[::2] + derived)
    check_round_trip(spec, "forward", expand=True)


def test_vit_b_latex_reads_as_the_textbook_form():
    tex = render_latex(formulas(costspec.load("specs/vit_b.yaml"), "forward", keep=["B", "S", "C", "L"], depth=1))
    assert (r"F^{\mathrm{TC}} &= L \cdot \left(24 B S C^{2} + 4 B S^{2} C\right) + 1536 B C \cdot \left(S - 1\right)"
            r" \label{costspec:vit_b_16:forward:tc}") in tex
    assert r"F^{\mathrm{TC}}_{\text{\texttt{patch\_embed}}} &= 1536 B C" in tex
    assert r"$\mathit{img}$ & image side in pixels & $224$ (substituted)" in tex
    assert r"$S$ & tokens (patches + class token) & $S = \left\lfloor" in tex


def test_names_are_escaped_and_labels_safe():
    assert tex_escape(r"a_b#c%d&e$f{g}h^i~j\k") == \
        r"a\_b\#c\%d\&e\$f\{g\}h\textasciicircum{}i\textasciitilde{}j\textbackslash{}k"
    assert label_key("costspec", "my net", "blocks[2,5].attn_1") == "costspec:my-net:blocks-2-5-.attn_1"


def test_long_sums_break_over_lines_and_still_parse():
    spec = ROOT / "specs/vit_h.yaml"
    found = check_round_trip(spec, "train", expand=True)
    tex = render_latex(formulas_once(spec, "train", expand=True))
    assert r"\nonumber \\" in tex and found


def test_cli_writes_a_file(cli, tmp_path):
    out = tmp_path / "vit_b.tex"
    result = cli("latex", "specs/vit_b.yaml", "--keep", "B,S,C,L", "-o", out, "--standalone")
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert text.startswith(r"\documentclass") and text.rstrip().endswith(r"\end{document}")
    assert result.stdout == ""


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed (apt-get install texlive-latex-base)")
@pytest.mark.parametrize("spec", zoo_params())
def test_standalone_compiles_with_pdflatex(spec, tmp_path):
    (tmp_path / "f.tex").write_text(render_latex(formulas_once(spec, "train", depth=None), standalone=True))
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "f.tex"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]
    assert (tmp_path / "f.pdf").stat().st_size > 0
