"""Sweeps: evaluate symbolic costs over a grid of dim values, vectorised (sympy lambdify -> numpy).

Expressions are derived once; each grid point is a numpy lane. Values are computed exactly in
int64 (the expression is written as numerator / denominator of integer polynomials, with
`//` kept as integer floor division); a float64 evaluation of the same expression guards
against int64 overflow, so a number too large for int64 is an error, never a wrong value.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import sympy

from .errors import UsageError

if TYPE_CHECKING:
    from .model import Model

MAX_POINTS = 20_000_000


class _FloorDiv(sympy.Function):
    """floor(a / b) for integer a, b: printed to numpy as floor_divide (exact on int64)."""


@dataclass
class Grid:
    names: list[str]
    columns: dict[str, "object"]  # name -> numpy array (flattened cartesian product)

    @property
    def size(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 1


def parse_vary(text: str) -> tuple[str, list[int]]:
    """'B=1..1024:x2' (geometric), 'B=1..8' or 'B=1..9:+2' (arithmetic), 'img=224,384' (list)."""
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise UsageError(f"--vary {text!r}: expected NAME=VALUES, e.g. B=1..1024:x2 or img=224,384")
    spec = spec.strip()
    match = re.fullmatch(r"(\d+)\.\.(\d+)(?::([x+*])(\d+))?", spec)
    try:
        if match:
            start, stop, op, step = int(match[1]), int(match[2]), match[3] or "+", int(match[4] or 1)
            if start < 1 or stop < start or step < 1 or (op in "x*" and step < 2):
                raise ValueError
            if op == "+" and (stop - start) // step + 1 > MAX_POINTS:
                raise UsageError(f"--vary {text!r} has {(stop - start) // step + 1:,} values; the grid limit is "
                                 f"{MAX_POINTS:,} points")
            values, v = [], start
            while v <= stop:
                values.append(v)
                v = v * step if op in "x*" else v + step
        else:
            values = [int(item) for item in spec.split(",") if item.strip()]
            if not values or min(values) < 1:
                raise ValueError
    except ValueError:
        raise UsageError(f"--vary {text!r}: expected positive integers as a..b, a..b:xK, a..b:+K or a,b,c") from None
    if max(values) >= 2**62:
        raise UsageError(f"--vary {text!r}: values must be below 2**62 for vectorised sweeps; use `costspec eval` "
                         "for exact numbers at larger sizes")
    return name, values


def make_grid(model: Model, varies: Sequence[tuple[str, list[int]]], fixed: Mapping[str, int] | None = None) -> Grid:
    import numpy as np

    seen = set()
    for name, _ in varies:
        if fixed and name in fixed:
            raise UsageError(f"{name} is both varied (--vary) and set (--set); give it once")
        if name in seen:
            raise UsageError(f"--vary {name} given twice")
        seen.add(name)
        model.dims.values({name: 1}, where="--vary")  # unknown / derived names -> clear errors
    size = 1
    for _, values in varies:
        size *= len(values)
    if size > MAX_POINTS:
        raise UsageError(f"the grid has {size} points; the limit is {MAX_POINTS}")
    columns = {}
    if varies:
        mesh = np.meshgrid(*[np.asarray(v, dtype=np.int64) for _, v in varies], indexing="ij")
        columns = {name: m.ravel() for (name, _), m in zip(varies, mesh)}
    return Grid([n for n, _ in varies], columns)


def _integer_form(expr: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    expr = expr.replace(lambda e: isinstance(e, sympy.floor),
                        lambda e: _FloorDiv(*sympy.fraction(sympy.together(e.args[0]))))
    return sympy.fraction(sympy.together(expr))


def _lambdify(symbols, expr):
    import numpy as np

    return sympy.lambdify(symbols, expr, modules=[{"_FloorDiv": np.floor_divide, "floor": np.floor}, "numpy"])


def evaluate_grid(model: Model, grid: Grid, exprs: Mapping[str, sympy.Expr],
                  fixed: Mapping[str, int] | None = None) -> dict[str, "object"]:
    """name -> int64 array of each expression over the grid; other dims at `fixed` or defaults."""
    import numpy as np

    fixed = dict(fixed or {})
    base = model.dims.values(fixed)
    free = [d for d in model.dims.free() if d.name in grid.columns]
    consts = {d.symbol: base[d.symbol] for d in model.dims.free() if d.name not in grid.columns}
    symbols = [d.symbol for d in free]
    args = [grid.columns[d.name] for d in free]
    out = {}
    for name, expr in exprs.items():
        full = model.dims.expand(sympy.sympify(expr)).xreplace(consts)
        num, den = _integer_form(full)
        with np.errstate(over="ignore"):
            n = np.broadcast_to(np.asarray(_lambdify(symbols, num)(*args), dtype=np.int64), (grid.size,))
            d = np.broadcast_to(np.asarray(_lambdify(symbols, den)(*args), dtype=np.int64), (grid.size,))
            approx = np.broadcast_to(np.asarray(_lambdify(symbols, full)(*[a.astype(np.float64) for a in args]),
                                                dtype=np.float64), (grid.size,))
        value, rem = np.divmod(n, d)
        if np.any(rem != 0):
            raise UsageError(f"{name} is not an integer at some grid points (sizes that do not divide evenly)")
        off = np.abs(value.astype(np.float64) - approx) > 1e-9 * np.maximum(np.abs(approx), 1.0)
        if np.any(off):
            raise UsageError(f"{name} overflows 64-bit integers on this grid (largest ~{approx.max():.3e}); "
                             "narrow the grid or evaluate points with `costspec eval`")
        out[name] = value
    return out


def sweep(model: Model, varies: Sequence[tuple[str, list[int]]], pass_: str = "forward",
          fixed: Mapping[str, int] | None = None) -> tuple[Grid, dict[str, "object"]]:
    """Grid columns plus tc_flops, cuda_flops, total_flops, params and every derived dim."""
    grid = make_grid(model, varies, fixed)
    check_constraints(model, grid, fixed)
    cost = model.cost(pass_)
    exprs = {d.name: d.symbol for d in model.dims.derived()}
    exprs.update({"tc_flops": cost.tc, "cuda_flops": cost.cuda, "total_flops": cost.tc + cost.cuda,
                  "params": cost.params})
    return grid, evaluate_grid(model, grid, exprs, fixed)


def check_constraints(model: Model, grid: Grid, fixed: Mapping[str, int] | None = None) -> None:
    """Every constraint of the spec (divisibility, variant indices) at every grid point."""
    import numpy as np

    base = model.dims.values(dict(fixed or {}))
    free = [d for d in model.dims.free() if d.name in grid.columns]
    consts = {d.symbol: base[d.symbol] for d in model.dims.free() if d.name not in grid.columns}
    symbols, args = [d.symbol for d in free], [grid.columns[d.name] for d in free]
    for c in model.constraints:
        cond = model.dims.expand(c.condition).xreplace(consts)
        if cond is sympy.true:
            continue
        ok = np.broadcast_to(np.asarray(_lambdify(symbols, cond)(*args), dtype=bool), (grid.size,))
        if not ok.all():
            i = int(np.argmin(ok))
            point = {n: int(grid.columns[n][i]) for n in grid.names}
            values = {**base, **{model.dims.dims[n].symbol: sympy.Integer(v) for n, v in point.items()}}
            values = model.dims.values({d.name: int(values[d.symbol]) for d in model.dims.free()})
            shown = {k: sympy.sympify(v).xreplace(values) for k, v in c.values.items()}
            where = " ".join(f"{k}={v}" for k, v in point.items())
            raise UsageError(f"at grid point {where}: {c.message.format(**shown)} ({c.where})")


def to_csv(grid: Grid, values: Mapping[str, "object"]) -> str:
    import numpy as np

    names = grid.names + [n for n in values if n not in grid.names]
    cols = [grid.columns[n] if n in grid.columns else values[n] for n in names]
    lines = [",".join(names)]
    if cols:
        table = np.column_stack([np.asarray(c) for c in cols])
        lines.extend(",".join(map(str, row)) for row in table.tolist())
    return "\n".join(lines)


def points(grid: Grid) -> list[dict[str, int]]:
    """The grid as a list of dim bindings (for one-by-one comparisons in benchmarks)."""
    return [dict(zip(grid.names, vals)) for vals in zip(*(grid.columns[n].tolist() for n in grid.names))] \
        if grid.names else [{}]


__all__ = ["parse_vary", "make_grid", "evaluate_grid", "sweep", "to_csv", "points", "itertools"]
