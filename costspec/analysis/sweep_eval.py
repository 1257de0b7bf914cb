"""Exact vectorised evaluation of size and cost expressions over many points (the engine of `sweep`).

An expression is rewritten once into integer form: `floor`, `ceil` and `%` become integer floor
divisions of polynomials, comparisons compare the sign of an integer numerator, and the whole is one
numerator over one denominator. Each chunk of points is then evaluated twice:

1. in float64, only to find the points where some intermediate value reaches 2**62 (or is not
   finite): those points are evaluated with Python integers (numpy object arrays), exactly;
2. in int64 for the other points, where no intermediate value can wrap.

When the largest value every varied dim takes is known (a grid's axes), `magnitude` bounds every
intermediate value of an expression from the bounds of its dims (sums of bounds, products of
bounds, ...). Where that bound stays below 2**62 no point can wrap, and step 1 is skipped: the
whole grid is evaluated in int64 directly (`evaluate(..., safe=True)`); the result is the same.

A zero divisor anywhere on the path actually taken (a size such as `C % (K - C)` at K = C) marks
the point invalid; callers report invalid points by name instead of printing a number for them.
Expressions outside this integer form (a fraction inside min/max/if) are evaluated point by point
with sympy, for at most MAX_SLOW_POINTS points.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from costspec.core.errors import UsageError

BIG = float(2**62)  # intermediate magnitudes at or above this are evaluated with Python integers
MAX_SLOW_POINTS = 100_000  # points evaluated one by one with sympy (expressions outside the integer form)


class _FloorDiv(sympy.Function):
    """floor(a / b) for integer a, b (b = 0 marks the point invalid)."""


class _Sign(sympy.Function):
    """p * sign(q) for integer p, q: has the sign of p / q (q = 0 marks the point invalid)."""


def _frac(expr: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    return sympy.fraction(sympy.together(expr))


def _intify(expr: Any) -> Any:
    """`expr` with floor/ceil/Mod as floor divisions of polynomials and comparisons on signs."""
    if not isinstance(expr, sympy.Basic) or not expr.args:
        return expr
    args = [_intify(a) for a in expr.args]
    if isinstance(expr, sympy.floor):
        p, q = _frac(args[0])
        return _FloorDiv(p, q)
    if isinstance(expr, sympy.ceiling):
        p, q = _frac(args[0])
        return -_FloorDiv(-p, q)
    if isinstance(expr, sympy.Mod):
        a, b = args
        pa, qa = _frac(a)
        pb, qb = _frac(b)
        return a - b * _FloorDiv(pa * qb, qa * pb)
    if isinstance(expr, sympy.core.relational.Relational):
        p, q = _frac(args[0] - args[1])
        return expr.func(_Sign(p, q), sympy.Integer(0), evaluate=False)
    if isinstance(expr, (_FloorDiv, _Sign)):
        return expr.func(*args)
    return expr.func(*args)


def _integral(expr: Any) -> bool:
    """True when `expr` has no fraction left outside the top-level numerator / denominator."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Rational) and not node.is_Integer:
            return False
        if isinstance(node, sympy.Pow) and not (node.exp.is_Integer and int(node.exp) >= 0):
            return False
        if isinstance(node, sympy.Float):
            return False
    return True


@dataclass
class Compiled:
    """One expression ready for chunked evaluation."""

    expr: sympy.Expr  # the original (for the slow path)
    num: Any = None
    den: Any = None

    @property
    def fast(self) -> bool:
        return self.num is not None


def compile_expr(expr: Any) -> Compiled:
    """Integer form of a size / cost expression, or a boolean condition (true = 1, false = 0)."""
    if isinstance(expr, sympy.logic.boolalg.Boolean) and not isinstance(expr, sympy.Expr):
        expr = sympy.Piecewise((sympy.Integer(1), expr), (sympy.Integer(0), True))
    expr = sympy.sympify(expr)
    num, den = _frac(_intify(expr))
    if _integral(num) and _integral(den):
        return Compiled(expr, num, den)
    return Compiled(expr)


def magnitude(expr: Any, bounds: Mapping[sympy.Symbol, int]) -> int | None:
    """A bound on the magnitude of every intermediate value `_Eval.run` computes for `expr` (integer form)
    when each symbol's magnitude is at most `bounds[symbol]`; None for an expression it cannot bound."""
    worst = 0

    def bound(e: Any) -> int | None:
        nonlocal worst
        out: int | None
        if e is sympy.true or e is sympy.false:
            return 1
        if e.is_Integer:
            out = abs(int(e))
        elif e.is_Symbol:
            out = bounds.get(e)
        elif e.is_Add or e.is_Mul or e.is_Pow or isinstance(e, (_FloorDiv, _Sign, sympy.Min, sympy.Max,
                                                                sympy.Piecewise)):
            args = [x for pair in e.args for x in pair] if isinstance(e, sympy.Piecewise) else e.args
            parts = [bound(a) for a in args]
            if any(p is None for p in parts):
                return None
            known = [int(p) for p in parts if p is not None]
            if e.is_Add:
                out = sum(known)
            elif e.is_Mul:  # every partial product too: factors counted at least 1
                out = math.prod(max(p, 1) for p in known)
            elif e.is_Pow:
                out = max(known[0], 1) ** int(e.args[1])
            elif isinstance(e, sympy.Piecewise):
                out = max(known[0::2])  # the values; the conditions are truth values
            elif isinstance(e, _FloorDiv) and e.args[1].is_Integer and e.args[1] != 0:
                out = known[0] // abs(int(e.args[1])) + 1  # floor(p / q) for a constant q
            else:  # floor(p / q) and p * sign(q) for integers, q != 0 (0 is replaced by 1): at most |p|
                out = max(known[0], 1) if isinstance(e, (_FloorDiv, _Sign)) else max(known)
        elif isinstance(e, (sympy.core.relational.Relational, sympy.And, sympy.Or, sympy.Not)):
            if any(bound(a) is None for a in e.args):
                return None
            out = 1
        else:
            return None
        if out is not None:
            worst = max(worst, out)
        return out

    try:
        if bound(expr) is None:
            return None
    except RecursionError:
        return None
    return worst


def safe(c: Compiled, bounds: Mapping[sympy.Symbol, int]) -> bool:
    """True when no intermediate value of `c` can reach 2**62 while each symbol stays within `bounds`."""
    if not c.fast:
        return False
    top, bottom = magnitude(c.num, bounds), magnitude(c.den, bounds)
    return top is not None and bottom is not None and max(top, bottom) < BIG


class _Eval:
    """Evaluates integer-form expressions on arrays of one dtype (float64, int64 or object).

    Arrays broadcast: a dim's array may have the full shape of the points or a shape that broadcasts
    to it (a grid box: each varied dim along its own axis), so a subexpression of some dims is computed
    once per combination of their values. Masks and results broadcast the same way."""

    def __init__(self, env: dict[sympy.Symbol, np.ndarray], dtype: Any):
        self.env, self.dtype = env, dtype
        self.invalid: Any = np.zeros((), dtype=bool)
        self.big: Any = np.zeros((), dtype=bool)  # float pass: magnitudes that int64 could not hold
        self.everywhere = np.ones((), dtype=bool)  # the mask of a top-level run (its results are memoised)
        self.memo: dict[Any, Any] = {}

    def const(self, value: int) -> Any:
        if self.dtype is np.float64:
            try:
                return float(value)
            except OverflowError:
                return math.inf
        return value

    def _watch(self, value: Any, active: np.ndarray) -> Any:
        if self.dtype is np.float64:
            with np.errstate(invalid="ignore"):
                off = ~(np.abs(value) < BIG)
            self.big = self.big | (off & active)
        return value

    def run(self, expr: Any, active: np.ndarray) -> Any:
        """`expr`'s values where `active`; a subexpression met again on every point is computed once."""
        everywhere = active is self.everywhere
        if everywhere and expr.args:
            found = self.memo.get(expr)
            if found is not None:
                return found
        value = self._run(expr, active)
        if everywhere and expr.args:
            self.memo[expr] = value
        return value

    def _run(self, expr: Any, active: np.ndarray) -> Any:  # noqa: C901 - one branch per kind of node
        if expr is sympy.true:
            return np.ones((), dtype=bool)
        if expr is sympy.false:
            return np.zeros((), dtype=bool)
        if expr.is_Integer:
            if abs(int(expr)) >= BIG:
                self.big = self.big | active
            return self.const(int(expr))
        if expr.is_Symbol:
            return self.env[expr]
        args = expr.args
        if expr.is_Add:
            out = self.run(args[0], active)
            for a in args[1:]:
                out = self._watch(out + self.run(a, active), active)
            return out
        if expr.is_Mul:
            out = self.run(args[0], active)
            for a in args[1:]:
                out = self._watch(out * self.run(a, active), active)
            return out
        if expr.is_Pow:
            base, exponent = self.run(args[0], active), int(args[1])
            if exponent == 0:
                return self.const(1)
            out = base
            for _ in range(exponent - 1):
                out = self._watch(out * base, active)
            return out
        if isinstance(expr, (_FloorDiv, _Sign)):
            p, q = self.run(args[0], active), self.run(args[1], active)
            if np.ndim(q) == 0:  # a constant divisor (the usual case: floor(img / patch))
                zero_scalar = bool(q == 0)
                if zero_scalar:
                    self.invalid = self.invalid | active
                safe = 1 if zero_scalar else q
            else:
                zero = np.asarray(q == 0)
                if zero.any():
                    self.invalid = self.invalid | (zero & active)
                    safe = np.where(zero, 1, q)
                else:
                    safe = q
            if isinstance(expr, _Sign):
                return p * np.sign(safe)
            with np.errstate(all="ignore"):
                return self._watch(np.floor_divide(p, safe), active)
        if isinstance(expr, (sympy.Min, sympy.Max)):
            pick = np.minimum if isinstance(expr, sympy.Min) else np.maximum
            out = self.run(args[0], active)
            for a in args[1:]:
                out = pick(out, self.run(a, active))
            return out
        if isinstance(expr, sympy.Piecewise):
            chosen: Any = np.zeros((), dtype=self.dtype)
            left = active
            for value, cond in args:
                hit = np.asarray(self.run(cond, left)) & left
                chosen = np.where(hit, self.run(value, hit), chosen)
                left = left & ~hit
            return chosen
        if isinstance(expr, sympy.core.relational.Relational):
            ops = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
                   ">=": np.greater_equal}
            return ops[expr.rel_op](self.run(args[0], active), self.run(args[1], active))
        if isinstance(expr, (sympy.And, sympy.Or)):
            join = np.logical_and if isinstance(expr, sympy.And) else np.logical_or
            out = self.run(args[0], active)
            for a in args[1:]:
                out = join(out, self.run(a, active))
            return out
        if isinstance(expr, sympy.Not):
            return ~np.asarray(self.run(args[0], active), dtype=bool)
        raise NotImplementedError(type(expr).__name__)


@dataclass
class Values:
    """An expression over points: exact integers where `ok`; `invalid` where a divisor was zero,
    `fraction` where the value is not an integer (a size that does not divide evenly). Each array has
    the points' shape, or a shape that broadcasts to it (`full` gives the flat array)."""

    values: np.ndarray  # int64, or object (Python ints) when some point needed more than 62 bits
    invalid: np.ndarray
    fraction: np.ndarray


def full(array: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`array` broadcast to `shape` and flattened in row-major order (the points' order)."""
    return np.broadcast_to(np.asarray(array), shape).reshape(-1)


def evaluate(c: Compiled, symbols: Sequence[sympy.Symbol], args: Sequence[np.ndarray], proven: bool = False,
             shape: tuple[int, ...] | None = None) -> Values:
    """`c` at every point: `args` holds one int64 array per symbol, each of `shape` (default: one flat length)
    or broadcasting to it. `proven`: `safe(c, bounds)` holds for bounds these points stay within (no probe:
    int64 directly, on the broadcast shapes). Otherwise the points are flattened and probed."""
    shape = shape if shape is not None else ((len(args[0]),) if args else (1,))
    if proven and c.fast:
        return _int64(c, symbols, args)
    flat = [full(a, shape) for a in args]
    got = probed(c, symbols, flat, math.prod(shape))
    return Values(*(np.reshape(a, shape) for a in (got.values, got.invalid, got.fraction)))


def probed(c: Compiled, symbols: Sequence[sympy.Symbol], args: Sequence[np.ndarray], n: int) -> Values:
    """`c` at `n` points (flat arrays): a float64 probe finds the points that need Python integers."""
    if not c.fast:
        return _slow(c, symbols, args, n)
    probe = _Eval({s: a.astype(np.float64) for s, a in zip(symbols, args)}, np.float64)
    try:
        probe.run(c.num, probe.everywhere)
        probe.run(c.den, probe.everywhere)
    except NotImplementedError:
        return _slow(c, symbols, args, n)
    big = full(probe.big, (n,))
    values = np.zeros(n, dtype=np.int64 if not big.any() else object)
    invalid = np.zeros(n, dtype=bool)
    fraction = np.zeros(n, dtype=bool)
    for mask, dtype in ((~big, np.int64), (big, object)):
        if not mask.any():
            continue
        idx = np.flatnonzero(mask)
        sub = _Eval({s: a[idx].astype(dtype) for s, a in zip(symbols, args)}, dtype)
        num = full(np.asarray(sub.run(c.num, sub.everywhere), dtype=dtype), (len(idx),))
        den = full(np.asarray(sub.run(c.den, sub.everywhere), dtype=dtype), (len(idx),))
        bad = full(sub.invalid, (len(idx),)) | (den == 0)
        safe = np.where(bad, 1, den)
        quotient, rem = np.floor_divide(num, safe), np.remainder(num, safe)
        values[idx] = np.where(bad, 0, quotient)
        invalid[idx] = bad
        fraction[idx] = (rem != 0) & ~bad
    return Values(values, invalid, fraction)


def _int64(c: Compiled, symbols: Sequence[sympy.Symbol], args: Sequence[np.ndarray]) -> Values:
    """`c` in int64 where no intermediate value can wrap (`safe`), on the arrays' broadcast shapes."""
    sub = _Eval({s: np.asarray(a, dtype=np.int64) for s, a in zip(symbols, args)}, np.int64)
    num = np.asarray(sub.run(c.num, sub.everywhere), dtype=np.int64)
    if c.den == 1:
        invalid = np.asarray(sub.invalid)
        return Values(np.where(invalid, 0, num) if invalid.any() else num, invalid, np.zeros((), dtype=bool))
    den = np.asarray(sub.run(c.den, sub.everywhere), dtype=np.int64)
    bad = sub.invalid | (den == 0)
    quotient, rem = np.divmod(num, np.where(bad, 1, den))
    return Values(np.where(bad, 0, quotient), bad, (rem != 0) & ~bad)


def _slow(c: Compiled, symbols: Sequence[sympy.Symbol], args: Sequence[np.ndarray], n: int) -> Values:
    if n > MAX_SLOW_POINTS:
        raise UsageError(f"this spec has an expression ({str(c.expr)[:60]}) that sweep evaluates point by point; "
                         f"the grid has {n:,} points, the limit for such expressions is {MAX_SLOW_POINTS:,}")
    values = np.zeros(n, dtype=object)
    invalid = np.zeros(n, dtype=bool)
    fraction = np.zeros(n, dtype=bool)
    for i in range(n):
        try:
            v = c.expr.xreplace({s: sympy.Integer(int(a[i])) for s, a in zip(symbols, args)})
        except ZeroDivisionError:
            invalid[i] = True
            continue
        if v is sympy.true or v is sympy.false:
            values[i] = int(bool(v))
        elif v.is_Integer:
            values[i] = int(v)
        elif v.is_Rational:
            fraction[i] = True
        else:  # zoo, nan: a division by zero sympy did not raise for
            invalid[i] = True
    return Values(values, invalid, fraction)
