"""Sizes as expressions of the dims, fitted from runs at other sizes.

The model is run at the base sizes, once more per dim with only that dim changed, and once with
every dim changed. The layers of the runs must be the same but for their sizes and repeat counts
(`align` walks them together); each size seen is then fitted as

  a constant,
  c * d1**e1 * d2**e2 * ... (a product of powers of dims, each exponent read from the run that
  changed that dim alone: `4*C`, `C/heads`, `B*S`), or
  a1*d1 + a2*d2 + ... + b (linear: `L - 1`, `C + 64`),
  either rounded down or up (`floor(C/4)`, as `C // 4` computes it),

and kept only if it gives the size of every run, the runs that changed all dims included (once to
multiples of the base sizes, once off them, where the model runs there: a floor division shows). A size that
follows none of these is an error naming the layer, never a guess.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import sympy

from costspec.core.errors import CostspecError
from costspec.trace.ir import Gap, Layer, Repeat, Seq


class FitError(CostspecError):
    """The runs disagree in structure, or a size follows no expression of the dims."""


@dataclass(frozen=True)
class Sample:
    """One run: the value of every dim."""

    dims: dict[str, int]


def _changed(base: Sample, other: Sample) -> list[str]:
    return [d for d, v in base.dims.items() if other.dims[d] != v]


def fit(values: Sequence[int], samples: Sequence[Sample], symbols: dict[str, sympy.Symbol], where: str) -> sympy.Expr:
    """The expression of the dims giving `values[i]` at `samples[i]` (samples[0] is the base run)."""
    base, q0 = samples[0], values[0]
    if all(v == q0 for v in values):
        return sympy.Integer(q0)
    singles = {}
    for sample, q in zip(samples[1:], values[1:]):
        changed = _changed(base, sample)
        if len(changed) == 1:
            singles[changed[0]] = (sample.dims[changed[0]], q)
    for candidate in (_monomial(q0, base, singles, symbols), _linear(q0, base, singles, symbols)):
        if candidate is None:
            continue
        for expr in (candidate, sympy.floor(candidate), sympy.ceiling(candidate)):
            if all(_value(expr, s) == q for s, q in zip(samples, values)):
                return expr
    shown = ", ".join(f"{q} at {_dims_text(s)}" for s, q in zip(samples, values))
    raise FitError(f"{where}: the size {q0} changes with the dims as no product of powers or linear expression "
                   f"of them does ({shown})")


def _dims_text(sample: Sample) -> str:
    return " ".join(f"{k}={v}" for k, v in sample.dims.items())


def _value(expr: sympy.Expr, sample: Sample) -> Any:
    out = expr.subs({sympy.Symbol(k, integer=True, positive=True): v for k, v in sample.dims.items()})
    return int(out) if out.is_Integer else None


def _monomial(q0: int, base: Sample, singles: dict, symbols: dict) -> sympy.Expr | None:
    if q0 == 0:
        return None
    coeff = Fraction(q0)
    expr: sympy.Expr = sympy.Integer(1)
    for dim, (v, q) in singles.items():
        if q == q0:
            continue
        if q == 0 or (q > 0) != (q0 > 0):
            return None
        ratio, step = Fraction(q, q0), Fraction(v, base.dims[dim])
        exponent = round(math.log(ratio) / math.log(step))
        if exponent == 0 or abs(exponent) > 3 or step ** exponent != ratio:
            return None
        coeff /= Fraction(base.dims[dim]) ** exponent
        expr *= symbols[dim] ** exponent
    return sympy.Rational(coeff.numerator, coeff.denominator) * expr


def _linear(q0: int, base: Sample, singles: dict, symbols: dict) -> sympy.Expr | None:
    const = Fraction(q0)
    expr: sympy.Expr = sympy.Integer(0)
    for dim, (v, q) in singles.items():
        if q == q0:
            continue
        slope = Fraction(q - q0, v - base.dims[dim])
        const -= slope * base.dims[dim]
        expr += sympy.Rational(slope.numerator, slope.denominator) * symbols[dim]
    return expr + sympy.Rational(const.numerator, const.denominator)


# ----------------------------------------------------------------------------------------------
# walking the runs' layers together
# ----------------------------------------------------------------------------------------------
def same_structure(a: Any, b: Any) -> None:
    """FitError unless two runs' layers differ in ints only (sizes, repeat counts)."""
    align([a, b], [], {}, "", fitting=False)


def align(runs: Sequence[Any], samples: Sequence[Sample], symbols: dict[str, sympy.Symbol], where: str = "",
          fitting: bool = True) -> Any:
    """The base run's layers with every int replaced by its fitted expression; FitError when the runs
    differ in anything but ints (`fitting=False`: only that check)."""
    first = runs[0]
    if isinstance(first, bool) or first is None or isinstance(first, (str, float)):
        if any(r != first for r in runs):
            raise FitError(f"{where}: {first!r} in one run, {next(r for r in runs if r != first)!r} in another: "
                           "a dim changes more than sizes here")
        return first
    if isinstance(first, int):
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in runs):
            raise FitError(f"{where}: a size in one run, something else in another")
        return fit(runs, samples, symbols, where) if fitting else first
    if isinstance(first, (list, tuple)):
        if any(not isinstance(r, (list, tuple)) or len(r) != len(first) for r in runs):
            raise FitError(f"{where}: {_describe(first)} in one run, {_describe(_odd(runs, first))} in another "
                           "(a dim changes the model's structure)")
        return type(first)(align([r[i] for r in runs], samples, symbols, f"{where}[{i}]", fitting)
                           for i in range(len(first)))
    if isinstance(first, dict):
        if any(not isinstance(r, dict) or list(r) != list(first) for r in runs):
            raise FitError(f"{where}: attributes {list(first)} in one run, {list(_odd(runs, first))} in another")
        return {k: align([r[k] for r in runs], samples, symbols, f"{where}.{k}", fitting) for k in first}
    if isinstance(first, Gap) and fitting:
        return _gap(runs, samples, symbols, where)
    if dataclasses.is_dataclass(first):
        if any(isinstance(r, Repeat) for r in runs) and any(isinstance(r, Seq) for r in runs):
            runs = [_single(r) for r in runs]  # one instance in one run, a repeat of them in another
            first = runs[0]
        if any(type(r) is not type(first) for r in runs):
            raise FitError(f"{where}: {_describe(first)} in one run, {_describe(_odd(runs, first))} in another "
                           "(a dim changes the model's structure)")
        here = _where(first, where)
        changes = {f.name: align([getattr(r, f.name) for r in runs], samples, symbols, here, fitting)
                   for f in dataclasses.fields(first)}
        return dataclasses.replace(first, **changes)
    raise FitError(f"{where}: cannot compare {type(first).__name__} across runs")


def _gap(runs: Sequence[Any], samples: Sequence[Sample], symbols: dict, where: str) -> Gap:
    """A gap's sizes fitted where they follow the dims; else the base run's, said in its comment (the gap is
    reported as not counted anyway)."""
    first = runs[0]
    if any(not isinstance(r, Gap) for r in runs):
        raise FitError(f"{where}: a gap in one run, a layer in another")
    try:
        shape = align([r.shape for r in runs], samples, symbols, f"{where} shape")
    except FitError:
        shape, first.comment = [sympy.Integer(n) for n in first.shape], "its shape at these sizes only"
    try:
        params = align([r.params for r in runs], samples, symbols, f"{where} params")
    except FitError:
        params = sympy.Integer(first.params)
        first.comment = "; ".join(filter(None, [first.comment, f"{first.params:,} parameters at these sizes only"]))
    return dataclasses.replace(first, shape=shape, params=params)


def _single(layer: Any) -> Any:
    """A module scope recorded as `container.i` as a repeat of one instance (as fold() writes two or more)."""
    from costspec.trace.graph import layer_name

    if not isinstance(layer, Seq) or not layer.source or "." not in layer.source:
        return layer
    container, _, index = layer.source.rpartition(".")
    if not index.isdigit():
        return layer
    return Repeat(name=layer_name(container), source=container, count=1,
                  body=dataclasses.replace(layer, name=None, source=None))


def _odd(runs: Sequence[Any], first: Any) -> Any:
    return next((r for r in runs if r != first), runs[-1])


def _describe(value: Any) -> str:
    if isinstance(value, Layer):
        return f"a {type(value).__name__.lower()} layer" + (f" ({getattr(value, 'op', '')})" if
                                                             getattr(value, "op", "") else "")
    if isinstance(value, (list, tuple)):
        return f"{len(value)} items"
    return repr(value)


def _where(layer: Any, where: str) -> str:
    path = getattr(layer, "path", "") or ""
    if path:
        return path
    op = getattr(layer, "op", "")
    return f"{where} {op}".strip() if op else where
