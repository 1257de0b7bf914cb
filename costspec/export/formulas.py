"""Render closed-form `Formulas` (costspec.analysis.formula) as plain text or JSON; LaTeX is in `latex.py`."""
from __future__ import annotations

import json

import sympy

from costspec.analysis.formula import ClosedForm, Formulas
from costspec.core.text import for_terminal


def render_json(result: Formulas) -> str:
    """JSON: each expression as a string, its LaTeX and its free symbols."""
    names = result.symbols.latex_names

    def one(form: ClosedForm) -> dict:
        return {"expr": form.text(), "latex": form.latex(names), "symbols": form.symbols}

    return json.dumps({
        "spec": result.spec_name, "pass": result.pass_, "precision": result.precision,
        "keep": [str(s) for s in result.symbols.order], "depth_symbols": [str(s) for s in result.symbols.depth],
        "expand": result.symbols.expand, "substituted": result.symbols.substituted,
        "dims": [{"name": d.name, "latex": d.latex, "doc": d.doc, "role": d.role, "value": d.value,
                  "definition": None if d.definition is None else sympy.sstr(d.definition)}
                 for d in result.symbols.dims],
        "totals": {k: one(v) for k, v in result.totals().items()},
        "rows": [{"name": r.name, "depth": r.depth, "kind": r.kind, "tc": one(r.tc), "cuda": one(r.cuda),
                  "params": one(r.params)} for r in result.rows],
    }, indent=2)


def render_text(result: Formulas) -> str:
    """Plain text: a header, rows (if any), the totals, and what the symbols mean."""
    sym = result.symbols
    keep = ", ".join(str(s) for s in sym.order) or "none"
    subst = ", ".join(f"{k}={v}" for k, v in sym.substituted.items()) or "none"
    lines = [f"{for_terminal(result.spec_name)} | pass: {result.pass_} | precision: {result.precision} | "
             f"keep: {keep} | substituted: {subst}"]
    for r in result.rows:
        pad = "  " * r.depth
        lines.append(f"{pad}{for_terminal(r.name)}")
        for what, form in (("TC", r.tc), ("CUDA", r.cuda), ("params", r.params)):
            lines.append(f"{pad}  {what:<7}{form.text()}")
    if result.rows:
        lines.append("")
    width = 12 if result.tc_dense is None else 13
    tc = [("TC FLOPs", result.tc)] if result.tc_dense is None else [  # 2:4 GEMMs: executed and dense-equivalent
        ("TC executed", result.tc), ("TC dense-eq.", result.tc_dense)]
    for what, form in (*tc, ("CUDA FLOPs", result.cuda), ("total FLOPs", result.total), ("params", result.params)):
        lines.append(f"{what:<{width}}= {form.text()}")
    lines.append("where")
    width = max(len(d.name) for d in sym.dims) if sym.dims else 0
    for d in sym.dims:
        meaning = for_terminal(d.doc) if d.doc else "(no doc)"
        if d.role == "kept":
            meaning += f" (spec value {d.value})"
        elif d.role in ("derived", "expanded"):
            meaning += f"; {d.name} = {sympy.sstr(d.definition)} = {d.value}"
            meaning += " (written out)" if d.role == "expanded" else ""
        else:
            meaning += f"; substituted: {d.value}"
        lines.append(f"  {d.name:<{width}}  {meaning}")
    return "\n".join(lines)


RENDERERS = {"text": render_text, "json": render_json}
