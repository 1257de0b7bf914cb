"""Render closed-form `Formulas` as LaTeX: one `align` environment and a symbol table.

Rows: one labelled equation per layer row (Tensor-Core FLOPs, then CUDA-core FLOPs; rows that are
zero in a section are left out), each section closed by its subtotal, then the total FLOPs and the
parameters. Labels are `costspec:<spec>:<pass>:<tc|cuda>:<dotted.name>` (characters outside
[A-Za-z0-9._:-] become '-'); names shown in the equations are escaped for LaTeX text mode.
The fragment needs amsmath; `standalone=True` wraps it in a document that pdflatex compiles.
"""
from __future__ import annotations

import re

import sympy

from costspec.analysis.formula import ClosedForm, Formulas, latex_summands
from costspec.core.text import for_latex_comment, for_latex_text

_ESCAPES = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "_": r"\_", "#": r"\#", "%": r"\%", "&": r"\&",
            "$": r"\$", "^": r"\textasciicircum{}", "~": r"\textasciitilde{}"}
_LABEL_BAD = re.compile(r"[^A-Za-z0-9._:-]+")
WIDTH = 80  # printed characters (roughly) per line before a long sum is broken over lines
_INVISIBLE = re.compile(r"\\(left|right|cdot|mathit|frac)|[{}^ ]")
SECTIONS = (("tc", r"\mathrm{TC}", "Tensor-Core FLOPs (GEMM, convolution and SDPA matmuls)"),
            ("cuda", r"\mathrm{CUDA}", "CUDA-core FLOPs (elementwise, reductions, norms, softmax, activations)"))


def tex_escape(text: str) -> str:
    """Text-mode escape of names and docs: _ # % & $ { } ^ ~ and backslash."""
    return "".join(_ESCAPES.get(ch, ch) for ch in for_latex_text(text))


def label_key(*parts: str) -> str:
    """A \\label key from names: only characters safe in every LaTeX label."""
    return ":".join(_LABEL_BAD.sub("-", p).strip("-") or "model" for p in parts)


def render_latex(result: Formulas, standalone: bool = False) -> str:
    """The formulas as an amsmath `align` plus a symbol table; a full document if `standalone`."""
    names = result.symbols.latex_names
    key = lambda *rest: label_key("costspec", result.spec_name, result.pass_, *rest)  # noqa: E731
    eqs: list[str] = []
    for section, mark, what in SECTIONS:
        eqs.append(f"% {what}\n")
        for row in result.rows:
            form = getattr(row, section)
            if form.expr != 0:
                lhs = rf"F^{{{mark}}}_{{\text{{\texttt{{{tex_escape(row.name)}}}}}}}"
                eqs.append(_equation(lhs, form, names, key(section, row.name)))
        eqs.append(_equation(rf"F^{{{mark}}}", getattr(result, section), names, key(section)))
        if section == "tc" and result.tc_dense is not None:  # 2:4 GEMMs above at their executed FLOPs
            eqs.append("% Tensor-Core FLOPs with the 2:4 sparse GEMMs counted dense (dense-equivalent)\n")
            eqs.append(_equation(r"F^{\mathrm{TC}}_{\text{dense-eq.}}", result.tc_dense, names, key("tc", "dense")))
    eqs.append(_equation("F", result.total, names, key("total")))
    eqs.append(_equation("P", result.params, names, key("params")))
    body = [f"% costspec latex: {for_latex_comment(result.spec_name)}, {result.pass_} pass, "
            f"precision {result.precision}. Generated from the spec; regenerate rather than edit.",
            "% F: FLOPs (1 multiply-add = 2 FLOPs), TC: Tensor Cores, CUDA: CUDA cores, P: parameters. "
            "Needs \\usepackage{amsmath}.",
            r"\begin{align}", _join(eqs), r"\end{align}", _symbol_table(result)]
    fragment = "\n".join(body) + "\n"
    if not standalone:
        return fragment
    title = tex_escape(f"{result.spec_name}: {result.pass_} pass")
    doc = tex_escape(result.doc) if result.doc else ""
    return "\n".join([
        r"\documentclass[a4paper]{article}",
        r"\usepackage{amsmath}",
        r"\setlength{\textwidth}{16cm}\setlength{\oddsidemargin}{0cm}\setlength{\evensidemargin}{0cm}",
        r"\allowdisplaybreaks",
        r"\begin{document}",
        rf"\section*{{{title}}}",
        doc + r"\par" if doc else "",
        rf"\noindent Per-layer rows give the total over all instances of the layer; "
        rf"$F^{{\mathrm{{TC}}}}$ and $F^{{\mathrm{{CUDA}}}}$ are the subtotals, $F$ the total FLOPs "
        rf"(1 multiply-add = 2 FLOPs) and $P$ the parameters. Precision: {tex_escape(result.precision)}.",
        fragment,
        r"\end{document}",
        "",
    ])


def _join(lines: list[str]) -> str:
    """Equations ended by \\\\ (but the last); comment lines (ending in a newline) stand on their own."""
    last = max(i for i, line in enumerate(lines) if not line.endswith("\n"))
    return "".join(line if line.endswith("\n") else line + (" \\\\\n" if i != last else "")
                   for i, line in enumerate(lines))


def _equation(lhs: str, form: ClosedForm, names, label: str) -> str:
    """`lhs &= rhs \\label{...}`, a long sum broken after whole summands onto `&\\quad {} + ...` lines."""
    full = form.latex(names)
    if form.denominator or _width(full) <= WIDTH:
        return rf"{lhs} &= {full} \label{{{label}}}"
    lines, current = [], ""
    for i, (sign, text) in enumerate(latex_summands(form, names)):
        piece = (("-" if sign == "-" else "") + text) if i == 0 else f"{sign} {text}"
        if current and _width(current) + _width(piece) > WIDTH:
            lines.append(current)
            current = piece
        else:
            current = f"{current} {piece}".strip()
    lines.append(current)
    first, *rest = lines
    out = rf"{lhs} &= {first}"
    for line in rest:
        out += " \\nonumber \\\\\n" + rf"  &\quad {{}} {line}"
    return out + rf" \label{{{label}}}"


def _width(latex: str) -> int:
    """About how many characters `latex` prints as (markup and exponent braces do not count)."""
    return len(_INVISIBLE.sub("", latex))


def _symbol_table(result: Formulas) -> str:
    """What each symbol means (the dims' docs), the kept derived dims' definitions, substituted values."""
    names = result.symbols.latex_names
    lines = [r"\par\noindent where\par\noindent", r"\begin{tabular}{@{}lll@{}}"]
    for d in result.symbols.dims:
        meaning = tex_escape(d.doc) if d.doc else "---"
        if d.role == "kept":
            value = f"symbol (spec value {d.value})"
        elif d.role in ("derived", "expanded"):
            definition = sympy.latex(d.definition, symbol_names=names, fold_short_frac=True)
            value = f"${d.latex} = {definition} = {d.value}$" + (" (written out)" if d.role == "expanded" else "")
        else:
            value = f"${d.value}$ (substituted)"
        lines.append(f"${d.latex}$ & {meaning} & {value} \\\\")
    lines.append(r"\end{tabular}")
    return "\n".join(lines)
