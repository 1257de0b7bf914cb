"""Closed-form cost formulas in the user's symbols (`costspec formula`, `costspec latex`).

The engine's expressions are exact but raw (`6*B*C*patch**2*floor(img/patch)**2 + L*(...)`).
This module turns them into the form a paper would print, in three steps:

1. **Choose the symbols** (`choose_symbols`). Kept: the `--keep` list, or by default the spec's
   free dims plus the dims it marks `keep: true`. Every other free dim is replaced by its value.
   A derived dim (S = (img//patch)**2 + 1) stays the symbol `S` when it is kept, or when it
   depends on a kept dim; otherwise it is a number. With `expand=True` every derived dim is
   replaced by its definition instead (then keeping a derived dim is a usage error).
2. **Eliminate through kept derived dims, where exact.** When S is kept, a subterm that is part
   of its definition is rewritten with S before values are substituted: the definition
   S = g + c gives g = S - c, so the patch embedding's floor(img/patch)**2 patches become S - 1.
   This is an identity, not an approximation: the formula stays right for every image size that
   S stands for, where substituting img = 224 would freeze 196 patches into the coefficient.
   Only whole powers of g are rewritten (no fractional powers of S - c); the rest is substituted.
3. **Canonical closed form** (`closed_form`): a polynomial in the kept symbols (and any leftover
   atoms such as floor(img/patch) under `--expand`) with integer coefficients (a rational
   expression is written over one integer or polynomial denominator), collected by the kept
   repeat counts ("depth": L), so that a repeated block reads L*(24*B*S*C**2 + 4*B*S**2*C).
   Terms go by descending degree; ties go to the larger term at the spec's dim values. Factors
   inside a monomial follow the keep order. In the depth-free remainder, a pair k*m*S - k*c*m
   (S a kept derived dim) is written k*m*(S - c), as the rewrite above meant: 1536*B*C*(S - 1).

Rows are the model's layer rows (`Network.walk`), each the total contribution of all its instances
(as in `costspec eval`), so a row inside `repeat: L` carries the factor L. Parameters do not
depend on the pass and always come from the forward pass. No I/O here; the renderers are
`costspec.export.formulas` (text, JSON) and `costspec.export.latex`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import sympy
from sympy.printing.latex import greek_letters_set

from costspec.core.budget import check_formula_rows, check_formula_terms
from costspec.core.dims import API_WORDS, Wording
from costspec.core.errors import UsageError
from costspec.core.vocab import Pass
from costspec.tree.nodes import RepeatNode
from costspec.tree.walk import node_cost, walk

if TYPE_CHECKING:
    from costspec.tree.network import Network

Power = tuple  # (generator, exponent): a kept symbol or a leftover atom such as floor(img/patch)


# ----------------------------------------------------------------------------------------------
# 1-2. Choosing the symbols
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DimInfo:
    """One dim as the formulas use it (for the symbol table)."""

    name: str
    symbol: sympy.Symbol
    latex: str  # its LaTeX name, e.g. B, \mathit{img}, d_{model}
    doc: str
    role: str  # kept | derived (a symbol, defined by `definition`) | expanded | substituted
    value: int  # at the spec's values (and --set)
    definition: sympy.Expr | None  # for derived dims, in other dims' symbols


@dataclass(frozen=True)
class Symbols:
    """Which dims stay symbols in the formulas, and how an engine expression is rewritten into them."""

    order: tuple[sympy.Symbol, ...]  # the symbols formulas may contain, in display order
    depth: tuple[sympy.Symbol, ...]  # kept repeat counts: formulas are collected by these
    values: Mapping[sympy.Symbol, sympy.Integer]  # every dim's value (for substitution and ordering)
    dims: tuple[DimInfo, ...]  # every dim, in spec order
    expand: bool
    _inline: Mapping[sympy.Symbol, sympy.Expr]  # derived dims written out by their definitions
    _shifts: tuple[tuple[sympy.Symbol, sympy.Expr, sympy.Expr], ...]  # (D, its definition, g) for D = g + c
    _substitute: Mapping[sympy.Symbol, sympy.Integer]  # free dims replaced by values

    @property
    def latex_names(self) -> dict[sympy.Symbol, str]:
        return {d.symbol: d.latex for d in self.dims}

    @property
    def substituted(self) -> dict[str, int]:
        return {d.name: d.value for d in self.dims if d.role == "substituted"}

    def apply(self, expr) -> sympy.Expr:
        """An engine expression (in dim symbols) written in the kept symbols only; exact."""
        expr = sympy.sympify(expr)
        for _ in range(len(self._inline) + 1):
            if not expr.free_symbols & set(self._inline):
                break
            expr = expr.xreplace(self._inline)
        for symbol, full, g in self._shifts:
            expr = expr.subs(full, symbol)
            if g is not None:
                expr = _shift(expr, g, symbol - (full - g))
        return expr.xreplace(self._substitute)


def choose_symbols(model: "Network", keep: Sequence[str] | None = None, expand: bool = False,
                   sets: Mapping[str, int] | None = None, words: Wording = API_WORDS) -> Symbols:
    """The symbols of the formulas: `keep` (None: free dims + dims marked keep), the rest substituted
    by their values (spec defaults overridden by `sets`); derived dims as symbols unless `expand`.
    Errors name the settings in `words` (the API's arguments by default, the CLI's flags)."""
    opt = words.of_option
    dims = model.dims
    if isinstance(keep, str):
        keep = keep.split(",")
    if keep is not None and not all(isinstance(k, str) for k in keep):
        bad = next(k for k in keep if not isinstance(k, str))
        raise UsageError(f"{opt('keep')}: dim names are strings, got {type(bad).__name__} {bad!r}")
    given = set(sets or {})
    if keep is None:  # a dim given a value with --set is substituted, not kept
        kept = [d.name for d in dims.dims.values() if (d.definition is None or d.keep) and d.name not in given]
        kept = [n for n in kept if not (expand and dims.dims[n].definition is not None)]
    else:
        kept = list(dict.fromkeys(k.strip() for k in keep if k.strip()))
        for name in kept:
            if name not in dims.dims:
                known = ", ".join(dims.dims) or "none"
                raise UsageError(f"{opt('keep')} {name}: the spec has no dim '{name}' (dims: {known})")
            if expand and dims.dims[name].definition is not None:
                deps = ", ".join(sorted(str(s) for s in dims.expand(dims.dims[name].symbol).free_symbols))
                raise UsageError(f"{opt('keep')} {name} with {opt('expand')}: '{name}' is derived, and "
                                 f"{opt('expand')} writes it out; keep {deps} instead, or drop {opt('expand')}")
    both = [n for n in kept if n in given]
    if both:
        value = (sets or {})[both[0]]
        raise UsageError(f"{opt('keep')} {both[0]} and {words.of_dim(f'{both[0]}={value}')}: a dim is either kept "
                         "symbolic or given a value; drop one")
    values = model.bind(None, sets, words)
    kept_free = {dims.dims[n].symbol for n in kept if dims.dims[n].definition is None}
    symbolic: set[sympy.Symbol] = set()
    if not expand:
        for d in dims.derived():
            if d.name in kept or dims.expand(d.symbol).free_symbols & kept_free:
                symbolic.add(d.symbol)
    derived = dims.derived()
    inline = {d.symbol: d.definition for d in derived if d.symbol not in symbolic}
    shifts = []
    for d in reversed(derived):
        if d.symbol in symbolic:
            full = dims.expand(d.symbol)
            const, g = full.as_coeff_Add()
            shifts.append((d.symbol, full, g if const != 0 and g.free_symbols else None))
    substitute = {d.symbol: values[d.symbol] for d in dims.free() if d.symbol not in kept_free}
    infos = []
    for d in dims.dims.values():
        if d.definition is None:
            role = "kept" if d.symbol in kept_free else "substituted"
        else:
            role = "derived" if d.symbol in symbolic else ("expanded" if expand else "substituted")
        infos.append(DimInfo(d.name, d.symbol, latex_name(d.name), d.doc, role, int(values[d.symbol]), d.definition))
    order = [dims.dims[n].symbol for n in kept if dims.dims[n].symbol in kept_free | symbolic]
    order += [d.symbol for d in derived if d.symbol in symbolic and d.symbol not in order]
    partial = Symbols(tuple(order), (), values, tuple(infos), expand, inline, tuple(shifts), substitute)
    depth = set()
    for node, *_ in walk(model.root):
        if isinstance(node, RepeatNode):
            depth |= partial.apply(node.times).free_symbols
    return Symbols(tuple(order), tuple(s for s in order if s in depth), values, tuple(infos), expand, inline,
                   tuple(shifts), substitute)


def _shift(expr: sympy.Expr, g: sympy.Expr, replacement: sympy.Expr) -> sympy.Expr:
    """Rewrite whole powers of `g` (= replacement) in `expr`; never introduce fractional powers."""
    if g.is_Pow and g.exp.is_Integer and g.exp > 1:
        base, k = g.base, int(g.exp)

        def whole(e):
            q, r = divmod(int(e.exp), k)
            return replacement ** q * base ** r

        return expr.replace(lambda e: e.is_Pow and e.base == base and e.exp.is_Integer and e.exp >= k, whole)
    out = expr.subs(g, replacement)
    fractional = any(p.is_Pow and not p.exp.is_Integer for p in out.atoms(sympy.Pow))
    return expr if fractional else out


_GREEK = greek_letters_set | {"lamda", "Lamda"}


def latex_name(name: str) -> str:
    """LaTeX for a dim name: a letter as it is, a word as one italic symbol (\\mathit{img}, not
    i m g), Greek names as Greek, trailing digits and a part after '_' as a subscript (n_{1}, d_{model})."""
    if name in _GREEK:
        return sympy.latex(sympy.Symbol(name))
    if name.isalpha():
        return name if len(name) == 1 else rf"\mathit{{{name}}}"
    numbered = re.fullmatch(r"([A-Za-z]+)([0-9]+)", name)
    if numbered:
        return f"{latex_name(numbered[1])}_{{{numbered[2]}}}"
    head, _, tail = name.partition("_")
    if head.isalpha() and tail.isalnum():
        return f"{latex_name(head)}_{{{tail}}}"
    return r"\mathit{" + name.replace("_", r"\_") + "}"


# ----------------------------------------------------------------------------------------------
# 3. Canonical closed forms
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """coeff * prod(gen**exp)."""

    coeff: int
    powers: tuple[Power, ...]


@dataclass(frozen=True)
class Group:
    """coeff * prod(factor) * (sum of terms): a depth factor (L) or a common monomial, over a sum."""

    coeff: int
    factor: tuple[Power, ...]
    terms: tuple[Term, ...]


@dataclass(frozen=True)
class ClosedForm:
    """An exact expression in the kept symbols and its canonical written form."""

    expr: sympy.Expr
    parts: tuple[Term | Group, ...]  # summed in this order
    denominator: tuple[Term | Group, ...] = ()  # empty: 1

    @property
    def symbols(self) -> list[str]:
        return sorted(str(s) for s in self.expr.free_symbols)

    def text(self) -> str:
        """Python/sympy syntax: L*(24*B*S*C**2 + 4*B*S**2*C) + 1536*B*C*(S - 1)."""
        return _render(self, _TEXT)

    def latex(self, names: Mapping[sympy.Symbol, str]) -> str:
        """LaTeX math: L \\cdot \\left(24 B S C^{2} + 4 B S^{2} C\\right) + 1536 B C \\cdot \\left(S - 1\\right)."""
        return _render(self, _LatexStyle(names))


def closed_form(expr, symbols: Symbols) -> ClosedForm:
    """The canonical form of an engine expression in `symbols` (see the module docstring)."""
    expr = symbols.apply(expr)
    check_formula_terms(expr, lambda: "one closed form")
    num, den = sympy.fraction(sympy.cancel(sympy.together(expr)))
    raw_num, num_den = _terms(num, symbols)
    raw_den, den_den = _terms(den, symbols)
    # num/den = (num_terms / num_den) / (den_terms / den_den)
    num_terms = [Term(c * den_den, p) for c, p in raw_num]
    den_terms = [Term(c * num_den, p) for c, p in raw_den]
    if den_terms and den_terms[0].coeff < 0:
        num_terms = [Term(-t.coeff, t.powers) for t in num_terms]
        den_terms = [Term(-t.coeff, t.powers) for t in den_terms]
    parts = _arrange(num_terms, symbols)
    if len(den_terms) == 1 and not den_terms[0].powers and den_terms[0].coeff == 1:
        return ClosedForm(expr, parts)
    return ClosedForm(expr, parts, _arrange(den_terms, symbols, depth=False))


def _terms(poly_expr: sympy.Expr, symbols: Symbols) -> tuple[list[tuple[int, tuple]], int]:
    """Integer-coefficient terms (coeff, powers) of a polynomial expression, and the denominator taken out."""
    poly_expr = sympy.expand(poly_expr)
    if poly_expr == 0:
        return [], 1
    if poly_expr.is_number:
        q = sympy.Rational(poly_expr)
        return [(int(q.p), ())], int(q.q)
    gens = sorted(sympy.Poly(poly_expr).gens, key=lambda g: _gen_key(g, symbols))
    poly = sympy.Poly(poly_expr, *gens)
    coeffs = [sympy.Rational(c) for _, c in poly.terms()]
    lcm = math.lcm(*(int(c.q) for c in coeffs))
    out = [(int(c * lcm), tuple((g, e) for g, e in zip(gens, monom) if e))
           for (monom, _), c in zip(poly.terms(), coeffs)]
    return out, lcm


def _gen_key(gen: sympy.Expr, symbols: Symbols):
    order = symbols.order
    return (order.index(gen), "") if gen in order else (len(order), sympy.sstr(gen))


def _arrange(terms: Iterable[Term | tuple], symbols: Symbols, depth: bool = True) -> tuple[Term | Group, ...]:
    """Group terms by their power of the depth symbols, order them, and pull out common factors."""
    given = [t if isinstance(t, Term) else Term(*t) for t in terms]
    depth_syms = set(symbols.depth) if depth else set()
    groups: dict[tuple, list[Term]] = {}
    for t in given:
        key = tuple((g, e) for g, e in t.powers if g in depth_syms)
        rest = tuple((g, e) for g, e in t.powers if g not in depth_syms)
        groups.setdefault(key, []).append(Term(t.coeff, rest))
    for key in groups:
        groups[key].sort(key=lambda t: (-_degree(t.powers), -_value(t, symbols), _exponents(t, symbols)))
    keys = sorted(groups, key=lambda k: (not k, -_degree(k), -_value(Term(1, k), symbols), str(k)))
    out: list[Term | Group] = []
    for key in keys:
        members = groups[key]
        if key and len(members) > 1:
            out.append(Group(1, key, tuple(members)))
        elif key:
            out.extend(Term(t.coeff, _merge(key, t.powers, symbols)) for t in members)
        else:
            out.extend(_common_factor(members, symbols))
    return tuple(out)


def _common_factor(terms: list[Term], symbols: Symbols) -> list[Term | Group]:
    """k*m*(S - c) for two terms k*m*S - k*c*m, S a kept derived dim: the count that the S - c
    rewrite introduced (the patches of S = patches + 1 tokens); any other sum stays expanded."""
    if len(terms) != 2:
        return list(terms)
    derived = {d.symbol for d in symbols.dims if d.role == "derived"}
    shared = set.intersection(*({g for g, _ in t.powers} for t in terms))
    common = tuple((g, min(dict(t.powers)[g] for t in terms))
                   for g in sorted(shared, key=lambda g: _gen_key(g, symbols)))
    content = math.gcd(*(t.coeff for t in terms))
    inner = sorted((Term(t.coeff // content, _divide(t.powers, common)) for t in terms), key=lambda t: not t.powers)
    shift, const = inner
    if shift.coeff == 1 and len(shift.powers) == 1 and shift.powers[0][0] in derived and shift.powers[0][1] == 1 \
            and not const.powers and const.coeff < 0:
        return [Group(content, common, (shift, const))]
    return list(terms)


def _divide(powers: tuple, by: tuple) -> tuple:
    div = dict(by)
    return tuple((g, e - div.get(g, 0)) for g, e in powers if e - div.get(g, 0))


def _merge(a: tuple, b: tuple, symbols: Symbols) -> tuple:
    merged = dict(a)
    for g, e in b:
        merged[g] = merged.get(g, 0) + e
    return tuple(sorted(merged.items(), key=lambda ge: _gen_key(ge[0], symbols)))


def _degree(powers: tuple) -> int:
    return sum(e for _, e in powers)


def _exponents(t: Term, symbols: Symbols) -> tuple:
    """Last tie-break: higher powers of earlier kept symbols first, then leftover atoms by name."""
    powers = dict(t.powers)
    rest = sorted((sympy.sstr(g), -e) for g, e in t.powers if g not in symbols.order)
    return tuple(-powers.get(g, 0) for g in symbols.order), tuple(rest)


def _value(t: Term, symbols: Symbols) -> Fraction:
    """The term's size at the spec's dim values (orders equal-degree terms, largest first)."""
    value = sympy.Integer(t.coeff)
    for g, e in t.powers:
        value *= sympy.sympify(g).xreplace(dict(symbols.values)) ** e
    try:
        return Fraction(int(value.p), int(value.q)) if value.is_Rational else Fraction(float(value))
    except (TypeError, ValueError, AttributeError):  # not a number at the spec's values: no preference
        return Fraction(0)


# -- rendering ---------------------------------------------------------------------------------
class _TextStyle:
    times, factor_join, fraction = "*", "*", "({}) / ({})"

    def power(self, gen, exp: int) -> str:
        if isinstance(gen, sympy.Symbol):
            return gen.name if exp == 1 else f"{gen.name}**{exp}"
        base = sympy.sstr(gen)
        return base if exp == 1 else f"{base}**{exp}"

    def paren(self, inner: str) -> str:
        return f"({inner})"

    def frac(self, num: str, den: str, den_simple: bool) -> str:
        return f"({num})/{den}" if den_simple else f"({num})/({den})"


class _LatexStyle(_TextStyle):
    times, factor_join = " ", r" \cdot "

    def __init__(self, names: Mapping[sympy.Symbol, str]):
        self.names = dict(names)

    def power(self, gen, exp: int) -> str:
        if isinstance(gen, sympy.Symbol):
            name = self.names.get(gen, sympy.latex(gen))
            return name if exp == 1 else f"{name}^{{{exp}}}"
        return sympy.latex(gen ** exp, symbol_names=self.names, fold_short_frac=True)

    def paren(self, inner: str) -> str:
        return rf"\left({inner}\right)"

    def frac(self, num: str, den: str, den_simple: bool) -> str:
        return rf"\frac{{{num}}}{{{den}}}"


_TEXT = _TextStyle()


def _monomial(coeff: int, powers: tuple, style: _TextStyle) -> str:
    """|coeff| * powers (the sign is written by the caller)."""
    body = [style.power(g, e) for g, e in powers]
    c = abs(coeff)
    if c != 1 or not body:
        body.insert(0, str(c))
    return style.times.join(body)


def _part(part: Term | Group, style: _TextStyle) -> tuple[bool, str]:
    """(negative, text without its sign)."""
    if isinstance(part, Term):
        return part.coeff < 0, _monomial(part.coeff, part.powers, style)
    inner = _sum(part.terms, style)
    if part.coeff == 1 and not part.factor:
        return False, style.paren(inner)
    return part.coeff < 0, _monomial(part.coeff, part.factor, style) + style.factor_join + style.paren(inner)


def _sum(parts: Iterable[Term | Group], style: _TextStyle) -> str:
    out = ""
    for i, part in enumerate(parts):
        negative, text = _part(part, style)
        out += ("-" if negative else "") + text if i == 0 else (" - " if negative else " + ") + text
    return out or "0"


def _render(form: ClosedForm, style: _TextStyle) -> str:
    num = _sum(form.parts, style)
    if not form.denominator:
        return num
    den = form.denominator
    simple = len(den) == 1 and isinstance(den[0], Term) and (not den[0].powers or
                                                          (den[0].coeff == 1 and len(den[0].powers) == 1))
    return style.frac(num, _sum(den, style), simple)


def latex_summands(form: ClosedForm, names: Mapping[sympy.Symbol, str]) -> list[tuple[str, str]]:
    """(sign, LaTeX) of each top-level summand of a form without a denominator (for line breaking)."""
    style = _LatexStyle(names)
    return [("-" if negative else "+", text) for negative, text in (_part(p, style) for p in form.parts)]


# ----------------------------------------------------------------------------------------------
# Formulas of a model
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FormulaRow:
    """One layer row: the total contribution of all its instances, as closed forms."""

    name: str
    label: str
    depth: int
    kind: str
    tc: ClosedForm
    cuda: ClosedForm
    params: ClosedForm


@dataclass(frozen=True)
class Formulas:
    """Closed forms of a model for one pass: rows, subtotals (TC, CUDA), total and parameters."""

    spec_name: str
    doc: str
    pass_: Pass
    precision: str
    symbols: Symbols
    rows: tuple[FormulaRow, ...]
    tc: ClosedForm
    cuda: ClosedForm
    total: ClosedForm
    params: ClosedForm
    tc_dense: ClosedForm | None = None  # 2:4 sparse models: TC FLOPs with the sparse GEMMs counted dense

    def totals(self) -> dict[str, ClosedForm]:
        dense = {"tc_dense_equivalent": self.tc_dense} if self.tc_dense is not None else {}
        return {"tc": self.tc, **dense, "cuda": self.cuda, "total": self.total, "params": self.params}


def formulas(model: "Network", pass_: Pass | str = Pass.FORWARD, keep: Sequence[str] | None = None,
             expand: bool = False, sets: Mapping[str, int] | None = None, depth: int | None = None,
             words: Wording = API_WORDS) -> Formulas:
    """Closed forms for `pass_`; rows for layers at tree depth < `depth` (None: all, 0: none). Errors name the
    settings in `words` (the API's arguments by default, the CLI's flags)."""
    pass_ = Pass.parse(pass_, words.of_option("pass"))
    symbols = choose_symbols(model, keep, expand, sets, words)
    check_formula_rows(sum(1 for _, level, *_ in model.walk() if depth is None or level < depth))
    rows = []
    for node, level, mult, in_rg in walk(model.root):
        if depth is not None and level >= depth:
            continue
        cost = node_cost(node, pass_, mult, in_rg)
        params = node_cost(node, Pass.FORWARD, mult, in_rg).params
        rows.append(FormulaRow(node.name, node.label, level, node.kind, closed_form(cost.tc, symbols),
                               closed_form(cost.cuda, symbols), closed_form(params, symbols)))
    total = model.cost(pass_)
    return Formulas(model.name, model.doc_line, pass_, model.precision.label, symbols, tuple(rows),
                    closed_form(total.tc, symbols), closed_form(total.cuda, symbols),
                    closed_form(total.tc + total.cuda, symbols), closed_form(model.cost("forward").params, symbols),
                    closed_form(total.tc_dense, symbols) if total.sparse_tc != 0 else None)
