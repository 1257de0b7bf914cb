"""Dims: named sizes. Free dims have defaults; derived dims are expressions of other dims.

Every dim is a sympy symbol (positive integer), and formulas stay in those symbols: a derived
dim such as S = (img // patch)**2 + 1 appears as `S`, its definition used only to evaluate
(or to expand, on request).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import sympy

from costspec.core.budget import check_derived_dims, check_dim_count, check_dim_degree
from costspec.core.errors import Location, SpecError, UsageError
from costspec.core.expr import MAX_INT_DIGITS, as_exact_int, digits, dim_symbol, parse_expr


@dataclass(frozen=True)
class Wording:
    """How an error names what its caller was given, as that caller's user wrote it: `dim` formats one
    dim (`NAME=VALUE`, or `NAME`), `batch` the batch size (its value), `option` any other setting (its
    name: keep, expand, pass). The CLI's messages name its flags (`CLI_WORDS`), the Python API's its
    arguments (`API_WORDS`: `evaluate(B=8)`, `bind(batch=8)`, `latex(keep=[...])`)."""

    dim: str
    batch: str
    option: str = "{}"

    def of_dim(self, text: str) -> str:
        return self.dim.format(text)

    def of_batch(self, text: str) -> str:
        return self.batch.format(text)

    def of_option(self, name: str) -> str:
        return self.option.format(name)


CLI_WORDS = Wording("--set {}", "--batch {}", "--{}")
API_WORDS = Wording("dim {}", "batch={}", "{}")


@dataclass
class Dim:
    name: str
    symbol: sympy.Symbol
    default: sympy.Expr | None  # free dims
    definition: sympy.Expr | None  # derived dims, in other dims' symbols
    doc: str
    keep: bool  # marked symbolic by the spec (kept in formulas by default)
    loc: Location


@dataclass
class Dims:
    """The dims of one spec, in dependency order."""

    dims: dict[str, Dim] = field(default_factory=dict)

    @property
    def symbols(self) -> dict[str, sympy.Symbol]:
        return {name: d.symbol for name, d in self.dims.items()}

    def free(self) -> list[Dim]:
        return [d for d in self.dims.values() if d.definition is None]

    def derived(self) -> list[Dim]:
        return [d for d in self.dims.values() if d.definition is not None]

    _expanded: dict[sympy.Symbol, sympy.Expr] = field(default_factory=dict, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)  # canonical forms, valid for len(dims) dims

    def expand(self, expr: sympy.Expr) -> sympy.Expr:
        """Replace derived symbols by their definitions, all the way down to free dims."""
        table = self._written_out()
        return expr.xreplace(table) if expr.free_symbols & set(table) else expr

    def _written_out(self) -> dict[sympy.Symbol, sympy.Expr]:
        """Every derived dim in free dims, computed once in dependency order (dims are in that order)."""
        derived = self.derived()
        if len(self._expanded) != len(derived):
            self._expanded = {}
            for d in derived:
                assert d.definition is not None
                self._expanded[d.symbol] = d.definition.xreplace(self._expanded)
        return self._expanded

    def _rewrites(self) -> list[tuple[sympy.Symbol, sympy.Expr, frozenset]]:
        """(derived symbol, a form of its definition, that form's free symbols), last dims first."""
        if self._cache.get("size") != len(self.dims):
            self._cache = {"size": len(self.dims), "memo": {}, "rewrites": [
                (d.symbol, form, frozenset(form.free_symbols)) for d in reversed(self.derived())
                for form in (self.expand(d.symbol), d.definition) if form is not None and not form.is_Symbol]}
        return self._cache["rewrites"]

    def canonical(self, expr: sympy.Expr) -> sympy.Expr:
        """Write `expr` in derived symbols where it contains their definitions (S for (img//patch)**2+1)."""
        if not isinstance(expr, sympy.Expr) or expr.is_number:
            return expr
        rewrites = self._rewrites()  # each derived dim in free dims, or as written
        memo = self._cache["memo"]
        if expr in memo:
            return memo[expr]
        start, free = expr, expr.free_symbols
        for symbol, form, needs in rewrites:
            if needs <= free:
                candidate = expr.subs(form, symbol)
                # sympy may "solve" for a free dim (T = B*B turns B into sqrt(T)): keep only
                # rewrites that replace whole occurrences, never fractional powers of the symbol
                whole = not any(p.base.has(symbol) and not p.exp.is_Integer for p in candidate.atoms(sympy.Pow))
                if whole and candidate != expr:
                    expr, free = candidate, candidate.free_symbols
        memo[start] = expr
        return expr

    def values(self, bindings: Mapping[str, int] | None = None,
               words: Wording = API_WORDS) -> dict[sympy.Symbol, sympy.Integer]:
        """Symbol -> value for every dim: defaults, overridden by `bindings`, derived ones computed; errors
        name the bindings in `words` (the caller's: the CLI's flags or the API's arguments)."""
        bindings = {dim_name(name, words): as_dim_value(raw, words.of_dim(f"{name}={raw!r}"))
                    for name, raw in dict(bindings or {}).items()}
        for name in bindings:
            if name not in self.dims:
                known = ", ".join(self.dims) or "none"
                raise UsageError(f"{words.of_dim(name)}: the spec has no dim '{name}' (dims: {known})")
            definition = self.dims[name].definition
            if definition is not None:
                deps = ", ".join(sorted(str(s) for s in definition.free_symbols))
                raise UsageError(f"{words.of_dim(name)}: '{name}' is derived from {deps}; set those instead")
        out: dict[sympy.Symbol, sympy.Integer] = {}
        for d in self.dims.values():
            if d.definition is None:
                raw = bindings.get(d.name, d.default)
                value = sympy.Integer(raw) if isinstance(raw, int) else raw
            else:
                try:
                    value = d.definition.xreplace(out)
                except (ZeroDivisionError, TypeError):
                    value = sympy.nan
                if value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
                    raise SpecError(f"dim {d.name} = {d.definition} divides by zero (a division or modulo by 0) at "
                                    "these dims", d.loc, "positive sizes")
            number = as_exact_int(value, f"dim {d.name}", d.loc)
            if digits(number) > MAX_INT_DIGITS:  # a derived dim such as C**8 of a huge C
                raise SpecError(f"dim {d.name} = {d.definition} has {digits(number):,} digits", d.loc,
                                f"a size of at most {MAX_INT_DIGITS} digits")
            if number < 1 and d.name in bindings:
                raise UsageError(f"{words.of_dim(f'{d.name}={number}')}: sizes must be positive")
            if number < 1:
                raise SpecError(f"dim {d.name} = {number} is not a positive size", d.loc, "a positive integer")
            out[d.symbol] = sympy.Integer(number)
        return out


def dim_name(name: object, words: Wording = API_WORDS) -> str:
    """A dim name given by a user: a string."""
    if not isinstance(name, str):
        raise UsageError(f"{words.of_dim(repr(name))}: dim names are strings, got {type(name).__name__}")
    return name


def as_dim_value(raw: Any, shown: str) -> int:
    """A dim value given by a user (CLI or Python API): an int or a numpy integer; bools, floats and
    strings are refused (8.0 or "8" is not silently a size). `shown`: how the error names it, in the
    caller's words (`--set B=8.0`, `dim B=8.0`, `batch=8.0`)."""
    import operator

    if isinstance(raw, bool) or type(raw).__name__ == "bool_":
        raise UsageError(f"{shown}: a dim value is an integer, not a bool")
    try:
        return operator.index(raw)  # int, numpy integers; not float, str, Decimal
    except TypeError:
        raise UsageError(f"{shown}: a dim value is an integer (int or numpy integer), got "
                         f"{type(raw).__name__}") from None


def parse_dims(raw: Mapping[str, object] | None, locate) -> Dims:
    """Build Dims from the spec's `dims:` mapping; `locate(path)` gives a Location."""
    raw = dict(raw or {})
    check_dim_count(len(raw), locate(("dims",)))
    symbols = {name: dim_symbol(name) for name in raw}
    entries = {}
    for name, value in raw.items():
        loc = locate(("dims", name))
        doc, keep = "", False
        if isinstance(value, dict):
            doc, keep, value = value.get("doc", ""), bool(value.get("keep", False)), value["value"]
            loc = locate(("dims", name, "value"))
        expr = parse_expr(value, symbols, loc)
        if not isinstance(expr, sympy.Expr):
            raise SpecError(f"dim {name} is a condition, not a size", loc, "a positive integer or an expression")
        entries[name] = (expr, doc, keep, loc)
    check_derived_dims(sum(1 for expr, *_ in entries.values() if expr.free_symbols), locate(("dims",)))
    order = _topological(entries, locate)
    dims = Dims()
    for name in order:
        expr, doc, keep, loc = entries[name]
        if expr.free_symbols:
            dims.dims[name] = Dim(name, symbols[name], None, expr, doc, keep, loc)
            check_dim_degree(name, dims.expand(symbols[name]), loc)
        else:
            number = as_exact_int(expr, f"dim {name}", loc)
            if number < 1:
                raise SpecError(f"dim {name} = {number} is not a positive size", loc, "a positive integer")
            if digits(number) > MAX_INT_DIGITS:
                raise SpecError(f"dim {name} has {digits(number):,} digits", loc,
                                f"a size of at most {MAX_INT_DIGITS} digits")
            dims.dims[name] = Dim(name, symbols[name], sympy.Integer(number), None, doc, keep, loc)
    return dims


def _topological(entries, locate) -> list[str]:
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join(chain[chain.index(name):] + [name])
            raise SpecError(f"dims depend on each other in a cycle: {cycle}", locate(("dims", name)),
                            "derived dims that bottom out in free dims")
        state[name] = 1
        for sym in sorted(entries[name][0].free_symbols, key=str):
            visit(str(sym), chain + [name])
        state[name] = 2
        order.append(name)

    for name in entries:
        visit(name, [])
    return order
