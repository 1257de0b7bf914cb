"""Closed forms (`costspec.analysis.formula.ClosedForm`) as presentation MathML, which browsers render natively.

The written form follows the canonical `parts` (the order and grouping `costspec formula` prints),
not sympy's own ordering: L·(24 B S C² + 4 B S² C) + 1536 B C·(S − 1). Atoms other than dim
symbols (e.g. ⌊img/patch⌋ under --expand) go through sympy's presentation MathML printer.
"""
from __future__ import annotations

import re
from html import escape
from html.entities import html5

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
    return _numeric_entities(sympy.mathml(gen ** exp, printer="presentation"))


def _numeric_entities(markup: str) -> str:
    """sympy's named entities (&InvisibleTimes;, ...) as numeric references: the page's MathML stays
    well-formed XML, not only HTML."""
    def numeric(m: re.Match) -> str:
        chars = html5.get(m[1] + ";")
        return "".join(f"&#x{ord(c):X};" for c in chars) if chars else m[0]
    return re.sub(r"&([A-Za-z][A-Za-z0-9]*);", numeric, markup)


def _monomial(coeff: int, powers: tuple) -> str:
    body = [_power(g, e) for g, e in powers]
    c = abs(coeff)
    if c != 1 or not body:
        body.insert(0, f"<mn>{c}</mn>")
    return _TIMES.join(body)


_OPEN, _CLOSE = '<mo stretchy="false">(</mo>', '<mo stretchy="false">)</mo>'


def _paren(inner: str) -> str:
    return f"<mrow>{_OPEN}{inner}{_CLOSE}</mrow>"


def _part(part: Term | Group) -> tuple[bool, str]:
    if isinstance(part, Term):
        return part.coeff < 0, _monomial(part.coeff, part.powers)
    inner = _sum(part.terms)
    if part.coeff == 1 and not part.factor:
        return False, _paren(inner)
    return part.coeff < 0, _monomial(part.coeff, part.factor) + _DOT + _paren(inner)


def _sign(i: int, negative: bool) -> str:
    return ("<mo>&#x2212;</mo>" if negative else "") if i == 0 else ("<mo>&#x2212;</mo>" if negative else "<mo>+</mo>")


def _sum(parts) -> str:
    return "".join(_sign(i, negative) + text for i, (negative, text) in enumerate(map(_part, parts))) or "<mn>0</mn>"


# -- line breaking ---------------------------------------------------------------------------------
# A long sum is set as several lines (an <mtable>, one left-aligned row per line) broken before a + or
# − at any depth, so that a table cell holding it need not be wider than `wrap` characters. Parentheses
# are plain operators (stretchy="false"), so a line may open one that a later line closes.
def _width(markup: str) -> float:
    """About how many characters wide `markup` is set (operators count double: their spacing)."""
    text = re.sub(r"<[^>]+>", " ", markup.replace("&#x2062;", ""))
    ops = len(re.findall(r"<mo\b", markup))
    return len(text.replace(" ", "")) + ops


def _pieces(parts) -> list[str]:
    """The sum's MathML cut before each + or − at every depth: joined, the pieces are the sum."""
    out: list[str] = []
    for i, part in enumerate(parts):
        negative = isinstance(part, Term) and part.coeff < 0 or isinstance(part, Group) and part.coeff < 0
        head = _sign(i, negative)
        if isinstance(part, Term):
            out.append(head + _monomial(part.coeff, part.powers))
            continue
        prefix = head + ("" if part.coeff == 1 and not part.factor else _monomial(part.coeff, part.factor) + _DOT)
        inner = _pieces(part.terms)
        inner[0] = prefix + _OPEN + inner[0]
        inner[-1] += _CLOSE
        out.extend(inner)
    return out


def _lines(form: ClosedForm, wrap: int) -> list[str] | None:
    """The form's numerator as lines of at most about `wrap` characters (None: it fits on one line; the
    denominator, a short polynomial such as `heads`, stays on one line under the fraction bar)."""
    pieces = _pieces(form.parts)
    if len(pieces) < 2 or sum(map(_width, pieces)) <= wrap:
        return None
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if _width(lines[-1]) + _width(piece) > wrap:
            lines.append(piece)
        else:
            lines[-1] += piece
    return lines


def mathml_body(form: ClosedForm, wrap: int | None = None) -> str:
    """The expression as an <mrow> (no <math> wrapper); longer than about `wrap` characters, as an
    <mtable class="lines"> of left-aligned lines, the second and later indented."""
    lines = _lines(form, wrap) if wrap else None
    if lines:
        rows = "".join(f'<mtr><mtd><mrow>{"" if i == 0 else _INDENT}{line}</mrow></mtd></mtr>'
                       for i, line in enumerate(lines))
        table = f'<mtable class="lines">{rows}</mtable>'
        return f"<mfrac>{table}<mrow>{_sum(form.denominator)}</mrow></mfrac>" if form.denominator else table
    num = _sum(form.parts)
    if not form.denominator:
        return f"<mrow>{num}</mrow>"
    return f"<mfrac><mrow>{num}</mrow><mrow>{_sum(form.denominator)}</mrow></mfrac>"


_INDENT = '<mspace width="1.2em"/>'


def mathml(form: ClosedForm, lhs: str | None = None, display: bool = False, wrap: int | None = None) -> str:
    """`<math>` for the form, with `lhs =` in front when given (escaped); lines of about `wrap` characters."""
    head = f"<mi>{escape(lhs)}</mi><mo>=</mo>" if lhs else ""
    mode = ' display="block"' if display else ""
    return (f'<math xmlns="http://www.w3.org/1998/Math/MathML" displaystyle="true"{mode}>'
            f"<mrow>{head}{mathml_body(form, wrap)}</mrow></math>")
