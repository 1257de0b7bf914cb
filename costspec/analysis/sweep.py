"""Sweeps: evaluate symbolic costs over a grid of dim values, vectorised and streamed in chunks.

Expressions are derived once and compiled to an exact integer form (costspec/analysis/sweep_eval.py); the
grid is never materialised: each chunk of CHUNK points is made from the varied axes, checked and
evaluated, so memory stays proportional to one chunk (plus what the caller keeps). Every number is
the exact integer `costspec eval` prints at that point (int64 where it fits, Python integers where
it does not). Before any value is given out, every point of the grid is checked the way `eval`
checks one binding (derived dims positive integers, constraints, every layer's output sizes): a
point where a size is invalid (not an integer, not positive, or a division by zero) is an error
naming the point; nothing is printed for it.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import sympy

from costspec.analysis.sweep_eval import Compiled, compile_expr, evaluate, full, safe
from costspec.core.dims import CLI_WORDS, Wording
from costspec.core.errors import CostspecError, UsageError

if TYPE_CHECKING:
    from costspec.tree.network import Network

MAX_POINTS = 20_000_000  # a plain CSV sweep: streamed in chunks, its memory does not grow with the grid
# Outputs that hold the whole grid in memory, measured on gpt2_small (200,000 points, peak RSS of the process):
# --gpu ~0.75 KB a point, table ~1.5 KB, JSON ~3 KB; each limit keeps the process under 1 GB.
MAX_POINTS_GPU = 1_000_000  # CSV with --gpu (roofline time per point)
MAX_POINTS_IN_MEMORY = 200_000  # --format json / table, --plot (with or without --gpu)
MAX_VALUE = 2**62  # --vary values (and grid values) stay below this
CHUNK = 1 << 16  # points evaluated at once
VARY_WORDS = Wording("--vary {}", "--batch {}")  # how a bad swept dim is named (the fixed ones: CLI_WORDS)


@dataclass
class Box:
    """Consecutive grid points from `start` on, laid out as an array of `shape` (row-major: grid order), each
    varied dim as an array that broadcasts to it (`Grid.boxes`)."""

    start: int
    shape: tuple[int, ...]
    columns: dict[str, Any]

    def flat(self) -> dict[str, Any]:
        """name -> the dim's value at each point of the box, flat (as `Grid.chunk` gives them)."""
        return {name: full(column, self.shape) for name, column in self.columns.items()}


@dataclass
class Grid:
    """The cartesian product of the varied axes, in row-major order (the last --vary varies fastest)."""

    names: list[str]
    axes: list[Any]  # name's values, one int64 array per varied dim
    _columns: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        size = 1
        for axis in self.axes:
            size *= len(axis)
        return size

    def chunk(self, start: int, stop: int) -> dict[str, Any]:
        """name -> int64 array of the points start..stop-1."""
        import numpy as np

        if not self.names:
            return {}
        index = np.unravel_index(np.arange(start, stop, dtype=np.int64), [len(a) for a in self.axes])
        return {name: axis[i] for name, axis, i in zip(self.names, self.axes, index)}

    def chunks(self, size: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        size = size or CHUNK
        for start in range(0, self.size, size):
            yield start, self.chunk(start, min(start + size, self.size))

    def boxes(self, size: int | None = None) -> Iterator[Box]:
        """The grid in consecutive boxes of at most `size` points, in grid order. A box holds whole rows of the
        innermost axes whose product fits in `size` and a run of the next axis, at one value of each outer
        axis: each varied dim is an array along its own axis of the box (they broadcast to its shape), so
        an expression of some dims is computed once per combination of their values, not once per point."""
        import numpy as np

        size = size or CHUNK
        lengths = [len(a) for a in self.axes]
        split, inner = len(lengths), 1
        while split > 0 and inner * lengths[split - 1] <= size:
            split -= 1
            inner *= lengths[split]
        if split == len(lengths) or not self.names:  # even the innermost axis is longer than a box
            for start, chunk in self.chunks(size):
                yield Box(start, (len(next(iter(chunk.values()))) if chunk else 1,), chunk)
            return
        lead = max(split - 1, 0)  # the axis a box takes a run of (the outer ones: one value each)
        rows = max(size // inner, 1) if split else lengths[0]
        tail = len(lengths) - lead
        start = 0
        for outer in np.ndindex(*lengths[:lead]):
            for first in range(0, lengths[lead], rows):
                stop = min(first + rows, lengths[lead])
                shape = (stop - first, *lengths[lead + 1:])
                columns = {name: np.asarray(axis[i]) for name, axis, i in zip(self.names, self.axes, outer)}
                for k in range(lead, len(lengths)):
                    axis = self.axes[k] if k > lead else self.axes[k][first:stop]
                    columns[self.names[k]] = axis.reshape([-1 if j == k - lead else 1 for j in range(tail)])
                yield Box(start, shape, {name: columns[name] for name in self.names})
                start += math.prod(shape)

    @property
    def columns(self) -> dict[str, Any]:
        """The whole grid, flattened (materialised on first use: for small grids and tests)."""
        if self._columns is None:
            self._columns = self.chunk(0, self.size)
        return self._columns


def parse_vary(text: str) -> tuple[str, Sequence[int]]:
    """'B=1..1024:x2' (geometric), 'B=1..8' or 'B=1..9:+2' (arithmetic), 'img=224,384' (list).

    Arithmetic ranges come back as a `range` (nothing is materialised before the grid's size is known).
    """
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise UsageError(f"--vary {text!r}: expected NAME=VALUES, e.g. B=1..1024:x2 or img=224,384")
    spec = spec.strip()
    match = re.fullmatch(r"(\d+)\.\.(\d+)(?::([x+*])(\d+))?", spec)
    values: Sequence[int]
    try:
        if match:
            start, stop, op, step = int(match[1]), int(match[2]), match[3] or "+", int(match[4] or 1)
            if start < 1 or stop < start or step < 1 or (op in "x*" and step < 2):
                raise ValueError
            if op == "+":
                values = range(start, stop + 1, step)
            else:
                geometric, v = [], start
                while v <= stop:
                    geometric.append(v)
                    v *= step
                values = geometric
        else:
            values = [int(item) for item in spec.split(",") if item.strip()]
            if not values or min(values) < 1:
                raise ValueError
    except ValueError:
        raise UsageError(f"--vary {text!r}: expected positive integers as a..b, a..b:xK, a..b:+K or a,b,c") from None
    if len(values) > MAX_POINTS:
        raise UsageError(f"--vary {text!r} has {len(values):,} values; the grid limit is {MAX_POINTS:,} points")
    if (values[-1] if isinstance(values, range) else max(values)) >= MAX_VALUE:  # max() would walk a range
        raise UsageError(f"--vary {text!r}: values must be below 2**62 for vectorised sweeps; use `costspec eval` "
                         "for exact numbers at larger sizes")
    return name, values


def grid_size(varies: Sequence[tuple[str, Sequence[int]]]) -> int:
    """The number of points of the grid of `varies` (nothing materialised)."""
    size = 1
    for _name, values in varies:
        size *= len(values)
    return size


def check_in_memory(varies: Sequence[tuple[str, Sequence[int]]], why: str, limit: int) -> None:
    """UsageError when the grid of `varies` has more than `limit` points: an output (`why`) that holds every
    point in memory (only the plain CSV sweep streams, up to MAX_POINTS)."""
    size = grid_size(varies)
    if size > limit:
        raise UsageError(f"the grid has {size:,} points; {why} holds every point in memory, and its limit is "
                         f"{limit:,} points (a plain CSV sweep streams up to {MAX_POINTS:,}): narrow the --vary "
                         "ranges or split the sweep")


def make_grid(model: Network, varies: Sequence[tuple[str, Sequence[int]]],
              fixed: Mapping[str, int] | None = None) -> Grid:
    """The grid of `varies` (checked: known free dims, each once, positive values, at most MAX_POINTS)."""
    import numpy as np

    seen = set()
    size = 1
    for name, values in varies:
        if fixed and name in fixed:
            raise UsageError(f"{name} is both varied (--vary) and set (--set); give it once")
        if name in seen:
            raise UsageError(f"--vary {name} given twice")
        seen.add(name)
        dim = model.dims.dims.get(name)
        if dim is None or dim.definition is not None:
            model.dims.values({name: 1}, VARY_WORDS)  # raises the unknown / derived-dim error
        size *= len(values)
        if size > MAX_POINTS:
            raise UsageError(f"the grid has more than {MAX_POINTS:,} points (the limit); narrow the --vary ranges")
    axes = []
    for name, values in varies:
        try:
            axis = np.arange(values.start, values.stop, values.step, dtype=np.int64) if isinstance(values, range) \
                else np.asarray(values)
        except OverflowError:
            axis = np.asarray([MAX_VALUE])
        if axis.ndim == 1 and axis.dtype == object and all(isinstance(v, int) and not isinstance(v, bool)
                                                           for v in axis):
            axis = np.asarray([MAX_VALUE])  # Python integers beyond int64: refused below, by their size
        if axis.ndim != 1 or axis.dtype.kind not in "iu":
            raise UsageError(f"--vary {name}: values must be integers (Python or numpy ints), got {axis.dtype}")
        if len(axis) == 0 or axis.min() < 1 or axis.max() >= MAX_VALUE:
            raise UsageError(f"--vary {name}: values must be positive integers below 2**62")
        axes.append(axis.astype(np.int64))
    return Grid([n for n, _ in varies], axes)


@dataclass
class _Plan:
    """What to evaluate at every point: the checks (as in `Network.problems`) and the output columns."""

    symbols: list[sympy.Symbol]
    names: list[str]  # the varied dims, in symbol order
    checks: list[tuple[str, Compiled, str]]  # (what, compiled, kind: size | dim | condition)
    outputs: dict[str, Compiled]
    sums: dict[str, tuple[str, str]] = field(default_factory=dict)  # outputs that are the sum of two others
    proven: set[int] = field(default_factory=set)  # id() of the compiled expressions int64 holds on the whole grid

    def prove(self, grid: Grid) -> None:
        """Mark the expressions whose every intermediate value stays below 2**62 on the whole grid
        (`sweep_eval.safe`, from the largest value of each varied dim): they skip the overflow probe."""
        bounds = {s: int(axis.max()) for s, axis in zip(self.symbols, (grid.axes[grid.names.index(n)]
                                                                        for n in self.names))}
        for compiled in [c for _, c, _ in self.checks] + list(self.outputs.values()):
            if safe(compiled, bounds):
                self.proven.add(id(compiled))


def _plan(model: Network, grid: Grid, exprs: Mapping[str, Any], fixed: Mapping[str, int] | None) -> _Plan:
    base = model.dims.values(dict(fixed or {}), CLI_WORDS)
    free = [d for d in model.dims.free() if d.name in grid.names]
    consts = {d.symbol: base[d.symbol] for d in model.dims.free() if d.name not in grid.names}

    def bound(expr: Any) -> Any:
        return model.dims.expand(sympy.sympify(expr)).xreplace(consts)

    checks: list[tuple[str, Compiled, str]] = []
    for d in model.dims.derived():
        checks.append((f"dim {d.name} = {d.definition}", compile_expr(bound(d.symbol)), "dim"))
    for c in model.constraints:
        cond = bound(c.condition)
        if cond is not sympy.true:
            checks.append((_constraint_text(c), compile_expr(cond), "condition"))
    seen: set[Any] = set()
    for node in model.op_nodes():
        for i, size in enumerate(node.out_shape):
            expr = bound(size)
            if expr in seen or (isinstance(expr, sympy.Integer) and expr >= 1):
                continue
            seen.add(expr)
            checks.append((f"{node.op.name} '{node.name}' output dim {i} = {size} ({node.loc})",
                           compile_expr(expr), "size"))
    sums = _sums(exprs)
    outputs = {name: compile_expr(bound(expr)) for name, expr in exprs.items() if name not in sums}
    plan = _Plan([d.symbol for d in free], [d.name for d in free], checks, outputs, sums)
    plan.prove(grid)
    return plan


def _sums(exprs: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Outputs written as the sum of two earlier ones (total_flops = tc_flops + cuda_flops): added, not
    evaluated again. Exact either way: two int64 values below 2**62 add up below 2**63."""
    out: dict[str, tuple[str, str]] = {}
    names = list(exprs)
    for i, name in enumerate(names):
        expr = exprs[name]
        if not isinstance(expr, sympy.Add):
            continue
        for a in names[:i]:
            for b in names[:i]:
                if a < b and a not in out and b not in out and expr == exprs[a] + exprs[b]:
                    out[name] = (a, b)
    return out


def _constraint_text(c: Any) -> str:
    try:
        message = c.message.format(**{k: str(v) for k, v in c.values.items()})
    except (KeyError, IndexError, ValueError):
        message = c.message
    return f"{message} ({c.where})"


def _point(grid: Grid, chunk: Mapping[str, Any], i: int) -> str:
    return " ".join(f"{n}={int(chunk[n][i])}" for n in grid.names)


def _args(plan: _Plan, box: Box) -> list[Any]:
    import numpy as np

    return [box.columns[name] for name in plan.names] or [np.zeros((), dtype=np.int64)]


def check_points(model: Network, plan: _Plan, grid: Grid, fixed: Mapping[str, int] | None = None) -> None:
    """Every check at every grid point; the first failing point is an error naming it."""
    import numpy as np

    symbols = plan.symbols or [sympy.Dummy("unused")]
    for box in grid.boxes():
        args = _args(plan, box)
        for what, compiled, kind in plan.checks:
            got = evaluate(compiled, symbols, args, id(compiled) in plan.proven, box.shape)
            if kind == "condition":
                bad = got.invalid | (got.values == 0)
            else:
                bad = got.invalid | got.fraction | (got.values < 1)
            if not np.any(bad):
                continue
            i = int(np.argmax(full(bad, box.shape)))
            zero = bool(full(got.invalid, box.shape)[i])
            raise UsageError(_problem_at(model, grid, box.flat(), i, fixed, what, zero))


def _problem_at(model: Network, grid: Grid, chunk: Mapping[str, Any], i: int, fixed: Mapping[str, int] | None,
                what: str, zero: bool) -> str:
    """The message `eval` gives at the failing point (the first problem it finds there)."""
    where = f"at grid point {_point(grid, chunk, i)}"
    try:
        values = model.dims.values({**dict(fixed or {}), **{n: int(chunk[n][i]) for n in grid.names}})
        problems = model.problems(values)
    except CostspecError as exc:
        return f"{where}: {exc}"
    if problems:
        return f"{where}: {problems[0]}"
    return f"{where}: {what} {'divides by zero' if zero else 'is not a positive integer'}"


def iter_values(model: Network, grid: Grid, exprs: Mapping[str, Any],
                fixed: Mapping[str, int] | None = None) -> Iterator[dict[str, Any]]:
    """Chunks of {name: exact values} over the grid (the grid's own columns first); checks every
    point before yielding anything."""
    for box, values in _values(model, grid, exprs, fixed):
        yield {**box.flat(), **{name: full(value, box.shape) for name, value in values.items()}}


def _values(model: Network, grid: Grid, exprs: Mapping[str, Any], fixed: Mapping[str, int] | None
            ) -> Iterator[tuple[Box, dict[str, Any]]]:
    """Each box of the grid with every expression's values on it (arrays that broadcast to the box's shape),
    after every point of the grid was checked."""
    import numpy as np

    plan = _plan(model, grid, exprs, fixed)
    check_points(model, plan, grid, fixed)
    symbols = plan.symbols or [sympy.Dummy("unused")]
    for box in grid.boxes():
        args = _args(plan, box)
        out: dict[str, Any] = {}
        for name in exprs:
            if name in plan.sums:
                a, b = plan.sums[name]
                out[name] = _add(out[a], out[b], all(id(plan.outputs.get(n)) in plan.proven for n in (a, b)))
                continue
            compiled = plan.outputs[name]
            got = evaluate(compiled, symbols, args, id(compiled) in plan.proven, box.shape)
            bad = got.invalid | got.fraction
            if np.any(bad):  # a cost that is not an integer where every size is (not expected; never printed)
                i = int(np.argmax(full(bad, box.shape)))
                raise UsageError(f"at grid point {_point(grid, box.flat(), i)}: {name} is not an exact integer")
            out[name] = got.values
        yield box, out


def _add(a: Any, b: Any, proven: bool) -> Any:
    """a + b exactly: in int64 when both are proven below 2**62 in magnitude (the sum stays below 2**63) or
    checked to be; with Python integers otherwise."""
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if proven or a.dtype == object or b.dtype == object:
        return a + b
    limit = 2**62
    if ((a >= limit) | (a <= -limit) | (b >= limit) | (b <= -limit)).any():
        return a.astype(object) + b.astype(object)
    return a + b


def evaluate_grid(model: Network, grid: Grid, exprs: Mapping[str, Any],
                  fixed: Mapping[str, int] | None = None) -> dict[str, Any]:
    """name -> array of each expression over the whole grid; other dims at `fixed` or defaults (int64,
    or object arrays of Python ints where some value needs more than 62 bits)."""
    import numpy as np

    out = {name: np.empty(grid.size, dtype=np.int64) for name in exprs}
    for box, values in _values(model, grid, exprs, fixed):
        stop = box.start + math.prod(box.shape)
        for name, value in values.items():
            value = np.asarray(value)
            if value.dtype == object and out[name].dtype != object:
                out[name] = out[name].astype(object)
            np.copyto(out[name][box.start:stop].reshape(box.shape), value)
    return out


def _exprs(model: Network, pass_: str) -> dict[str, Any]:
    cost = model.cost(pass_)
    exprs: dict[str, Any] = {d.name: d.symbol for d in model.dims.derived()}
    exprs.update({"tc_flops": cost.tc, "cuda_flops": cost.cuda, "total_flops": cost.tc + cost.cuda,
                  "params": cost.params})
    if cost.sparse_tc != 0:  # 2:4 layers: tc_flops is executed; the dense-equivalent counts them dense
        exprs["tc_flops_dense_equivalent"] = cost.tc_dense
    return exprs


def sweep(model: Network, varies: Sequence[tuple[str, Sequence[int]]], pass_: str = "forward",
          fixed: Mapping[str, int] | None = None) -> tuple[Grid, dict[str, Any]]:
    """Grid plus columns tc_flops, cuda_flops, total_flops, params and every derived dim (whole grid in
    memory: use `write_csv` / `iter_values` to stream large grids)."""
    grid = make_grid(model, varies, fixed)
    return grid, evaluate_grid(model, grid, _exprs(model, pass_), fixed)


def write_csv(model: Network, varies: Sequence[tuple[str, Sequence[int]]], out: IO[str], pass_: str = "forward",
              fixed: Mapping[str, int] | None = None) -> int:
    """Stream the sweep as CSV to `out`, chunk by chunk; returns the number of rows."""
    grid = make_grid(model, varies, fixed)
    exprs = _exprs(model, pass_)
    names = grid.names + [n for n in exprs if n not in grid.names]
    for i, chunk in enumerate(iter_values(model, grid, exprs, fixed)):
        if i == 0:  # after every point was checked: an invalid grid prints nothing
            out.write(",".join(names) + "\n")
        out.write(_rows([chunk[n] for n in names]))
    return grid.size


def _rows(cols: Sequence[Any]) -> str:
    if not cols:
        return ""
    lists = [c.tolist() for c in cols]
    return "".join(",".join(map(str, row)) + "\n" for row in zip(*lists))


def check_constraints(model: Network, grid: Grid, fixed: Mapping[str, int] | None = None) -> None:
    """Every constraint and size of the spec at every grid point (see `check_points`)."""
    check_points(model, _plan(model, grid, {}, fixed), grid, fixed)


def to_csv(grid: Grid, values: Mapping[str, Any]) -> str:
    names = grid.names + [n for n in values if n not in grid.names]
    cols = [grid.columns[n] if n in grid.names else values[n] for n in names]
    return ",".join(names) + ("\n" + _rows(cols).rstrip("\n") if grid.size and cols else "")


def points(grid: Grid) -> list[dict[str, int]]:
    """The grid as a list of dim bindings (for one-by-one comparisons in benchmarks)."""
    return [dict(zip(grid.names, vals)) for vals in zip(*(grid.columns[n].tolist() for n in grid.names))] \
        if grid.names else [{}]


__all__ = [
    "CHUNK",
    "MAX_POINTS",
    "MAX_POINTS_GPU",
    "MAX_POINTS_IN_MEMORY",
    "Grid",
    "check_constraints",
    "check_in_memory",
    "evaluate_grid",
    "grid_size",
    "iter_values",
    "make_grid",
    "parse_vary",
    "points",
    "sweep",
    "to_csv",
    "write_csv",
]
