"""Exact vectorised evaluation of size and cost expressions over many points (the engine of `sweep`).

An expression is rewritten once into integer form: `floor`, `ceil` and `%` become integer floor
divisions of polynomials, comparisons compare the sign of an integer numerator, and the whole is one
numerator over one denominator. Each chunk of points is then evaluated twice:

1. in float64, only to find the points where some intermediate value reaches 2**62 (or is not
   finite): those points are evaluated with Python integers (numpy object arrays), exactly;
2. in int64 for the other points, where no intermediate value can wrap.

A zero divisor anywhere on the path actually taken (a size such as `C % (K - C)` at K = C) marks
the point invalid; callers report invalid points by name instead of printing a number for them.
Expressions outside this integer form (a fraction inside min/max/if) are evaluated point by point
with sympy, for at most MAX_SLOW_POINTS points.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
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


class _Eval:
    """Evaluates integer-form expressions on arrays of one dtype (float64, int64 or object)."""

    def __init__(self, env: dict[sympy.Symbol, np.ndarray], n: int, dtype: Any):
        self.env, self.n, self.dtype = env, n, dtype
        self.invalid = np.zeros(n, dtype=bool)
        self.big = np.zeros(n, dtype=bool)  # float pass: magnitudes that int64 could not hold

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
            self.big |= np.broadcast_to(off, (self.n,)) & active
        return value

    def run(self, expr: Any, active: np.ndarray) -> Any:
        if expr is sympy.true:
            return np.ones(self.n, dtype=bool)
        if expr is sympy.false:
            return np.zeros(self.n, dtype=bool)
        if expr.is_Integer:
            if abs(int(expr)) >= BIG:
                self.big |= active
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
            base, out = self.run(args[0], active), self.const(1)
            for _ in range(int(args[1])):
                out = self._watch(out * base, active)
            return out
        if isinstance(expr, (_FloorDiv, _Sign)):
            p, q = self.run(args[0], active), self.run(args[1], active)
            zero = np.broadcast_to(np.asarray(q == 0), (self.n,))
            self.invalid |= zero & active
            safe = np.where(zero, 1, q) if zero.any() else q
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
            chosen: Any = np.zeros(self.n, dtype=self.dtype)
            left = active.copy()
            for value, cond in args:
                hit = np.broadcast_to(self.run(cond, left), (self.n,)) & left
                chosen = np.where(hit, self.run(value, hit), chosen)
                left = left & ~hit
            return chosen
        if isinstance(expr, sympy.core.relational.Relational):
            ops = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
                   ">=": np.greater_equal}
            return ops[expr.rel_op](self.run(args[0], active), self.run(args[1], active))
        if isinstance(expr, sympy.And):
            return np.logical_and.reduce([np.broadcast_to(self.run(a, active), (self.n,)) for a in args])
        if isinstance(expr, sympy.Or):
            return np.logical_or.reduce([np.broadcast_to(self.run(a, active), (self.n,)) for a in args])
        if isinstance(expr, sympy.Not):
            return ~np.asarray(self.run(args[0], active), dtype=bool)
        raise NotImplementedError(type(expr).__name__)


@dataclass
class Values:
    """An expression over a chunk: exact integers where `ok`; `invalid` where a divisor was zero,
    `fraction` where the value is not an integer (a size that does not divide evenly)."""

    values: np.ndarray  # int64, or object (Python ints) when some point needed more than 62 bits
    invalid: np.ndarray
    fraction: np.ndarray


def evaluate(c: Compiled, symbols: Sequence[sympy.Symbol], args: Sequence[np.ndarray]) -> Values:
    """`c` at every point of `args` (one int64 array per symbol, all of one length)."""
    n = len(args[0]) if args else 1
    if not c.fast:
        return _slow(c, symbols, args, n)
    everywhere = np.ones(n, dtype=bool)
    probe = _Eval({s: a.astype(np.float64) for s, a in zip(symbols, args)}, n, np.float64)
    try:
        probe.run(c.num, everywhere)
        probe.run(c.den, everywhere)
    except NotImplementedError:
        return _slow(c, symbols, args, n)
    big = probe.big
    values = np.zeros(n, dtype=np.int64 if not big.any() else object)
    invalid = np.zeros(n, dtype=bool)
    fraction = np.zeros(n, dtype=bool)
    for mask, dtype in ((~big, np.int64), (big, object)):
        if not mask.any():
            continue
        idx = np.flatnonzero(mask)
        sub = _Eval({s: a[idx].astype(dtype) for s, a in zip(symbols, args)}, len(idx), dtype)
        on = np.ones(len(idx), dtype=bool)
        num = np.broadcast_to(np.asarray(sub.run(c.num, on), dtype=dtype), (len(idx),))
        den = np.broadcast_to(np.asarray(sub.run(c.den, on), dtype=dtype), (len(idx),))
        bad = sub.invalid | (den == 0)
        safe = np.where(bad, 1, den)
        quotient, rem = np.floor_divide(num, safe), np.remainder(num, safe)
        values[idx] = np.where(bad, 0, quotient)
        invalid[idx] = bad
        fraction[idx] = (rem != 0) & ~bad
    return Values(values, invalid, fraction)


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
