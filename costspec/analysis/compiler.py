"""Compile a built model into a `CompiledModel`: its expressions as exact integer programs.

The expressions are the ones the symbolic path evaluates, taken from the same places: the walk's
rows and `node_cost` for each pass (`build_report`), the dims' definitions and the model's
constraints and output sizes (`Network.bind` / `Network.problems`), the GEMMs of the alignment
check and the expressions behind the notes. Each sympy expression becomes instructions of
`costspec.analysis.program`, one per distinct subexpression (a subexpression shared by rows is
computed once). An expression outside the instruction set raises `Uncompilable`; the model is then
evaluated symbolically, as before.
"""
from __future__ import annotations

from typing import Any

import sympy

from costspec.analysis.alignment import multiples
from costspec.analysis.backend_note import uses_flash
from costspec.analysis.compiled import FORMAT, NO_SLOT, PASSES, CompiledModel
from costspec.core.conventions import SPARSE_MATMUL_CLASSES
from costspec.core.expr import MAX_INT_DIGITS, MAX_RESULT_DIGITS
from costspec.ops.opdef import layer_notes
from costspec.tree.cost import runs_sparse
from costspec.tree.network import Network
from costspec.tree.nodes import OpNode, RepeatNode
from costspec.tree.walk import NO_GRAD, matmul_engine, node_cost, walk


class Uncompilable(Exception):
    """An expression the instruction set does not cover (the model stays on the symbolic path)."""


_COMPARE = {sympy.StrictLessThan: "lt", sympy.LessThan: "le", sympy.StrictGreaterThan: "gt",
            sympy.GreaterThan: "ge", sympy.Equality: "eq", sympy.Unequality: "ne"}
_NARY = {sympy.Add: "add", sympy.Min: "min", sympy.Max: "max", sympy.And: "and", sympy.Or: "or"}
_UNARY = {sympy.floor: "floor", sympy.ceiling: "ceil", sympy.Not: "not"}


class Emitter:
    """Builds one program: `slot(expr)` is the slot holding `expr`'s value, emitting what it needs."""

    def __init__(self, inputs: dict[sympy.Symbol, int], known: dict[sympy.Symbol, int] | None = None):
        self.n_inputs = len(inputs)
        self.memo: dict[Any, int] = dict(inputs)
        self.memo.update(known or {})
        self.code: list[list] = []

    def _emit(self, *instruction: Any) -> int:
        key = ("instruction", instruction)
        if key not in self.memo:
            self.code.append(list(instruction))
            self.memo[key] = self.n_inputs + len(self.code) - 1
        return self.memo[key]

    def slot(self, expr: Any) -> int:
        expr = sympy.sympify(expr)
        found = self.memo.get(expr)
        if found is not None:
            return found
        try:
            slot = self._convert(expr)
        except RecursionError:
            raise Uncompilable("expression nested too deeply") from None
        self.memo[expr] = slot
        return slot

    def _product(self, factors: tuple) -> int:
        """A product as one division of two products (numerator, denominator): sympy writes x/y as
        x * y**-1 and x/2 as 1/2 * x; this way an exact quotient never leaves the integers."""
        num: list[int] = []
        den: list[int] = []
        for f in factors:
            if isinstance(f, sympy.Rational) and not isinstance(f, sympy.Integer):
                if f.p != 1:
                    num.append(self.slot(sympy.Integer(f.p)))
                den.append(self.slot(sympy.Integer(f.q)))
            elif isinstance(f, sympy.Pow) and isinstance(f.exp, sympy.Integer) and f.exp < 0:
                den.append(self.slot(f.base ** -f.exp))
            else:
                num.append(self.slot(f))
        top = self._join("mul", num) if num else self.slot(sympy.Integer(1))
        return self._emit("div", top, self._join("mul", den)) if den else top

    def _join(self, name: str, args: list[int]) -> int:
        return args[0] if len(args) == 1 else self._emit(name, *args)

    def _convert(self, expr: Any) -> int:  # noqa: C901 - one branch per kind of expression
        if expr is sympy.true or expr is sympy.false:
            return self._emit("bool", int(expr is sympy.true))
        if isinstance(expr, sympy.Integer):
            return self._emit("int", int(expr))
        if isinstance(expr, sympy.Rational):
            return self._emit("rat", int(expr.p), int(expr.q))
        if isinstance(expr, sympy.Symbol):
            raise Uncompilable(f"symbol {expr} is not a dim")
        if type(expr) is sympy.Mul:
            return self._product(expr.args)
        for kind, name in _NARY.items():
            if type(expr) is kind:
                args = [self.slot(a) for a in expr.args]
                return args[0] if len(args) == 1 else self._emit(name, *args)
        for kind, name in _UNARY.items():
            if type(expr) is kind:
                return self._emit(name, self.slot(expr.args[0]))
        if type(expr) in _COMPARE:
            return self._emit(_COMPARE[type(expr)], self.slot(expr.lhs), self.slot(expr.rhs))
        if isinstance(expr, sympy.Mod):
            return self._emit("mod", self.slot(expr.args[0]), self.slot(expr.args[1]))
        if isinstance(expr, sympy.Pow):
            base, exponent = expr.args
            if isinstance(exponent, sympy.Integer):
                return self._emit("pow", self.slot(base), int(exponent))
            if isinstance(exponent, sympy.Rational) and exponent.q == 2:
                root = self._emit("sqrt", self.slot(base))
                return root if exponent.p == 1 else self._emit("pow", root, int(exponent.p))
        if isinstance(expr, sympy.Piecewise):
            args = []
            for value, cond in expr.args:
                args += [self.slot(value), self.slot(cond)]
            return self._emit("pw", *args)
        raise Uncompilable(f"{type(expr).__name__} is not in the instruction set")


def compile_model(model: Network, passes: tuple[str, ...] = PASSES) -> CompiledModel:
    """`model` compiled for `passes` (see the module docstring); Uncompilable when an expression is
    outside the instruction set."""
    dims = list(model.dims.dims.values())
    everything = {d.symbol: i for i, d in enumerate(dims)}
    steps = list(walk(model.root))
    sparse = any(op.precision.sparse for op in model.op_nodes())
    data: dict[str, Any] = {
        "format": FORMAT, "name": model.name, "precision": model.precision.label, "sparse": sparse,
        "flash": uses_flash(model), "limits": [MAX_INT_DIGITS, MAX_RESULT_DIGITS],
        "dims": [[d.name, None if d.default is None else int(d.default)] for d in dims],
        "bind": _bind(model),
        "rows": [[s.node.name, s.node.label, s.depth, s.node.kind, matmul_engine(s.node)] for s in steps],
        "passes": {p: _pass(model, steps, p, everything, sparse) for p in passes},
        "notes": _notes(model, steps, everything, sparse),
        "align": _align(model, everything),
    }
    return CompiledModel(data)


def _bind(model: Network) -> dict[str, Any]:
    """The derived dims from the free ones, and what `Network.problems` checks."""
    free = [d for d in model.dims.dims.values() if d.definition is None]
    emitter = Emitter({d.symbol: i for i, d in enumerate(free)})
    derived = []
    for d in model.dims.derived():
        slot = emitter.slot(d.definition)
        emitter.memo[d.symbol] = slot  # later definitions and every check read the derived dim's value
        derived.append(slot)
    conditions, values = [], []
    for c in model.constraints:
        values += [emitter.slot(v) for v in c.values.values()]
        conditions.append(emitter.slot(c.condition))
    sizes = list(dict.fromkeys(emitter.slot(size) for node in model.op_nodes() for size in node.out_shape
                               if not (isinstance(size, (int, sympy.Integer)) and size >= 1)))
    return {"code": emitter.code, "derived": derived, "conditions": conditions, "values": values, "sizes": sizes}


def _pass(model: Network, steps: list, pass_: str, inputs: dict, sparse: bool) -> dict[str, Any]:
    emitter = Emitter(inputs)

    def slots(cost, count, repeat) -> list[int]:
        return [emitter.slot(cost.tc), emitter.slot(cost.cuda), emitter.slot(cost.params), emitter.slot(count),
                NO_SLOT if repeat is None else emitter.slot(repeat),
                emitter.slot(cost.tc_dense) if sparse else NO_SLOT, emitter.slot(cost.sparse_tc) if sparse else NO_SLOT]

    rows = [slots(node_cost(s.node, pass_, s.instances, s.grad), s.instances,
                  s.node.times if isinstance(s.node, RepeatNode) else None) for s in steps]
    total = slots(node_cost(model.root, pass_, sympy.Integer(1), NO_GRAD), sympy.Integer(1), None)
    return {"code": emitter.code, "rows": rows, "total": total}


def _notes(model: Network, steps: list, inputs: dict, sparse: bool) -> dict[str, Any]:
    """The expressions behind the notes: parameters a token does not use, 2:4 GEMMs' reduction dims."""
    emitter = Emitter(inputs)
    active = []
    for step in steps:
        node = step.node
        if isinstance(node, OpNode) and (idle := node.unused_params) is not None:
            active.append([node.name, emitter.slot(step.instances * idle)])
    unpatterned = []
    for op in model.op_nodes() if sparse else ():
        if not op.precision.sparse:
            continue
        parts = {p.name for p in op.fwd_parts if runs_sparse(op.precision, p.name, p.params)}
        for g in op.op.gemms(op.call):
            if g.part in parts and g.kind in SPARSE_MATMUL_CLASSES:
                unpatterned.append([f"{op.name}{'.' + g.part if g.part else ''}", emitter.slot(g.k)])
    return {"code": emitter.code, "layer_notes": layer_notes(model.op_nodes()), "active": active,
            "unpatterned": unpatterned}


def _align(model: Network, inputs: dict) -> dict[str, Any]:
    """Every leading dim of every Tensor-Core GEMM, in the order `alignment.check` visits them."""
    emitter = Emitter(inputs)
    gemms = []
    for node in model.op_nodes():
        precision = node.precision
        if not precision.tensor_cores:
            continue
        need, best = multiples(precision)
        rows = {child.local: child.name for child in node.children}
        for gemm in node.op.gemms(node.call):
            for dim in gemm.leading:
                gemms.append([rows.get(gemm.part, node.name), gemm.kind, dim.upper(), precision.dtype, need, best,
                              emitter.slot(getattr(gemm, dim))])
    return {"code": emitter.code, "gemms": gemms}


__all__ = ["Uncompilable", "compile_model"]
