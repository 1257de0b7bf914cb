"""Closed forms (`costspec.analysis.formula.ClosedForm`) as presentation MathML, which browsers render natively.

The written form follows the canonical `parts` (the order and grouping `costspec formula` prints),
not sympy's own ordering: L·(24 B S C² + 4 B S² C) + 1536 B C·(S − 1). Atoms other than dim
symbols (e.g. ⌊img/patch⌋ under --expand) go through sympy's presentation MathML printer.
"""
from __future__ import annotations

import re
from html import escape

import sympy

from costspec.analysis.formula import ClosedForm, Group, Term

_TIMES = '<mo>&#x2062;</mo><mspace width="0.2em"/>'  # invisible times and a thin space: 24 B S, as a paper prints it
_DOT = "<mo>&#x22C5;</mo>"


def _mi(name: str) -> str:
    """A dim name: d_model as d with subscript model, n1 as n with subscript 1, a word as one identifier."""
    numbered = re.fullmatch(r"([A-Za-z]+)([0-9]+)", name)
    if numbered:
        return f"<msub><mi>{escape(numbered[1])}</mi><mn>{numbered[2]}</mn></msub>"
    head, _, tail = name.partition("_")
    if head and tail and head.isalpha() and tail.isalnum():
        return f"<msub><mi>{escape(head)}</mi><mi>{escape(tail)}</mi></msub>"
    return f"<mi>{escape(name)}</mi>"


def _power(gen, exp: int) -> str:
    if isinstance(gen, sympy.Symbol):
        base = _mi(gen.name)
        return base if exp == 1 else f"<msup>{base}<mn>{exp}</mn></msup>"
    return sympy.mathml(gen ** exp, printer="presentation")


def _monomial(coeff: int, powers: tuple) -> str:
    body = [_power(g, e) for g, e in powers]
    c = abs(coeff)
    if c != 1 or not body:
        body.insert(0, f"<mn>{c}</mn>")
    return _TIMES.join(body)


def _paren(inner: str) -> str:
    return f'<mrow><mo stretchy="false">(</mo>{inner}<mo stretchy="false">)</mo></mrow>'


def _part(part: Term | Group) -> tuple[bool, str]:
    if isinstance(part, Term):
        return part.coeff < 0, _monomial(part.coeff, part.powers)
    inner = _sum(part.terms)
    if part.coeff == 1 and not part.factor:
        return False, _paren(inner)
    return part.coeff < 0, _monomial(part.coeff, part.factor) + _DOT + _paren(inner)


def _sum(parts) -> str:
    out = []
    for i, part in enumerate(parts):
        negative, text = _part(part)
        if i == 0:
            out.append(("<mo>&#x2212;</mo>" if negative else "") + text)
        else:
            out.append(("<mo>&#x2212;</mo>" if negative else "<mo>+</mo>") + text)
    return "".join(out) or "<mn>0</mn>"


def mathml_body(form: ClosedForm) -> str:
    """The expression as an <mrow> (no <math> wrapper)."""
    num = _sum(form.parts)
    if not form.denominator:
        return f"<mrow>{num}</mrow>"
    return f"<mfrac><mrow>{num}</mrow><mrow>{_sum(form.denominator)}</mrow></mfrac>"


def mathml(form: ClosedForm, lhs: str | None = None, display: bool = False) -> str:
    """`<math>` for the form, with `lhs =` in front when given (escaped)."""
    head = f"<mi>{escape(lhs)}</mi><mo>=</mo>" if lhs else ""
    mode = ' display="block"' if display else ""
    return (f'<math xmlns="http://www.w3.org/1998/Math/MathML" displaystyle="true"{mode}>'
            f"<mrow>{head}{mathml_body(form)}</mrow></math>")
