"""What a layer writes, read as sympy in the scope of its place in the spec (`Env`): sizes, counts
and op attributes.

A size that is not a number yet (it depends on dims) adds a `Constraint`, checked once the dims are
bound (and at their defaults, by `costspec check`). Every value is written in derived dims (`dims.canonical`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy

from costspec.core.conventions import Precision
from costspec.core.dims import Dims
from costspec.core.errors import Location, SpecError
from costspec.core.expr import parse_expr
from costspec.ops.attrs import REQUIRED, Attr, Attrs
from costspec.ops.opdef import Constraint, OpDef


@dataclass
class Env:
    """What expressions in one place of the spec can see."""

    names: dict[str, object]  # dims and block parameters, as sympy values (an argument's error, kept for its use)
    params: dict[str, object]  # block parameters as bound: a bool, a choice string, a number or a sympy value
    precision: Precision
    blocks_stack: tuple[str, ...] = ()
    depth: int = 0

    def deeper(self) -> Env:
        """The same scope, one level of nesting further down."""
        return Env(self.names, self.params, self.precision, self.blocks_stack, self.depth + 1)

    def with_precision(self, precision: Precision) -> Env:
        return Env(self.names, self.params, precision, self.blocks_stack, self.depth)

    def value_name(self, raw):
        """The name of a value a layer saves or reads: a block parameter's name stands for its argument
        (`save: p` with `args: {p: skip1}` saves `skip1`), so each use of a block can name its own."""
        if isinstance(raw, str) and isinstance(self.params.get(raw), str):
            return self.params[raw]
        if isinstance(raw, list):
            return [self.value_name(r) for r in raw]
        return raw


class AttributeReader:
    """Reads sizes, counts and op attributes; the constraints that sizes need go to `constraints`."""

    def __init__(self, locate: Callable[[tuple], Location], dims: Dims, constraints: list[Constraint],
                 declared: frozenset[str] | set[str] = frozenset()):
        self.locate, self.dims, self.constraints = locate, dims, constraints
        self.declared = set(declared)  # activations the spec's costs: declares
        self.declared_used: set[str] = set()

    def size(self, raw, env: Env, path: tuple, what: str = "size") -> sympy.Expr:
        where = self.locate(path)
        value = parse_expr(raw, env.names, where)
        if not isinstance(value, sympy.Expr):
            raise SpecError(f"{raw!r} is a condition, not a size", where, "a size")
        if value.is_number and (value < 1 or not value.is_integer):
            raise SpecError(f"{what} {raw!r} = {value} is not a positive integer", where, "a positive integer")
        if not value.is_number:  # checked once the dims are bound (and at their defaults, by check)
            shown = str(raw).replace("{", "{{").replace("}", "}}")
            self.constraints.append(Constraint(sympy.And(sympy.Eq(sympy.floor(value), value), value >= 1),
                                               f"{what} {shown!r} = {{value}} is not a positive integer", where,
                                               {"value": value}, "a positive integer"))
        return self.dims.canonical(value)

    def count(self, raw, env: Env, path: tuple) -> sympy.Expr:
        where = self.locate(path)
        value = parse_expr(raw, env.names, where)
        if not isinstance(value, sympy.Expr) or (value.is_number and (value < 0 or not value.is_integer)):
            raise SpecError(f"{raw!r} is not a non-negative integer", where, "a non-negative integer")
        return self.dims.canonical(value)

    def attrs(self, op: OpDef, given: dict, env: Env, path: tuple, in_shape: tuple) -> Attrs:
        """The op's attributes: those given, read by kind; the others at their defaults."""
        values: dict[str, object] = {}
        for attr in op.attrs:
            apath = path + (attr.name,)
            if attr.name in given:
                values[attr.name] = self.attr_value(attr, given[attr.name], env, apath)
            elif attr.default is REQUIRED:
                raise SpecError(f"{op.name} needs '{attr.name}'", self.locate(path), attr.doc)
            elif callable(attr.default):
                values[attr.name] = self.dims.canonical(sympy.sympify(attr.default(in_shape, values)))
            else:
                values[attr.name] = sympy.Integer(attr.default) if attr.kind in ("size", "count", "pair", "triple") \
                    else attr.default
        return Attrs(values, self.locate(path))

    def attr_value(self, attr: Attr, raw, env: Env, path: tuple):
        where = self.locate(path)
        if attr.kind in ("bool", "choice", "number", "axis") and isinstance(raw, str) and raw in env.params:
            raw = _plain(env.params[raw])  # a block parameter passed through
        if attr.kind == "bool":
            if not isinstance(raw, bool):
                raise SpecError(f"bad value {raw!r}", where, "true or false, or the name of a block parameter "
                                "that is true or false")
            return raw
        if attr.kind == "choice":
            if attr.extensible and raw not in attr.choices and raw in self.declared:
                self.declared_used.add(raw)  # an activation the spec's costs: declares
                return raw
            if raw not in attr.choices:
                raise SpecError(f"bad value {raw!r}", where, "one of " + ", ".join(attr.choices)
                                + (", or an activation the spec's costs: declares (fn: name with costs: "
                                   "{name: F, name_backward: G})" if attr.extensible else ""))
            return raw
        if attr.kind == "number":
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise SpecError(f"{attr.name} must be a number, got {raw!r}", where, "a number")
            return raw
        if attr.kind == "axis":
            if isinstance(raw, bool) or not isinstance(raw, int):
                raise SpecError(f"{attr.name} must be an integer axis, got {raw!r}", where, "an integer")
            return raw
        if attr.kind == "shape":
            return tuple(-1 if item == -1 else self.size(item, env, path + (i,)) for i, item in enumerate(raw))
        if attr.kind == "axes":
            if not isinstance(raw, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in raw):
                raise SpecError(f"{attr.name} must be a list of integer axes, got {raw!r}", where, "a list of integers")
            return tuple(raw)
        if attr.kind in ("values", "value"):  # names of values, resolved by the dataflow (Dataflow.read_values)
            return env.value_name(raw)
        if attr.kind == "text":  # a description, read as it is
            return raw
        if attr.kind == "expr":  # any value of the dims (a constant factor such as sqrt(C)), not only integers
            value = parse_expr(raw, env.names, where)
            if not isinstance(value, sympy.Expr) or value.has(sympy.zoo, sympy.nan):
                raise SpecError(f"{raw!r} is not a number or an expression of the dims", where, "an expression")
            return self.dims.canonical(value)
        if attr.kind == "counts":
            return tuple(self.count(item, env, path + (i,)) for i, item in enumerate(raw))
        if attr.kind in ("pair", "triple") and isinstance(raw, list):
            return tuple(self.count(item, env, path + (i,)) for i, item in enumerate(raw))
        if attr.kind in ("pair", "triple", "count"):
            return self.count(raw, env, path)
        return self.size(raw, env, path)


def bind_param(name: str, raw, scope: Env, where: Location, names: dict, params: dict) -> None:
    """Bind block parameter `name` to `raw`, written in `scope` (the use's scope for an argument, the dims'
    for a default): into `names` its sympy value, into `params` its value for bool / choice attributes.

    A parameter of `scope` passed by name keeps the value it has there; an expression is read in `scope`
    (never re-read in another block's scope); a string that is no expression there is a choice (e.g. an
    activation name), and its parse error is kept for a use as a number."""
    if isinstance(raw, str) and raw in scope.params:
        params[name] = scope.params[raw]
        if raw in scope.names:
            names[name] = scope.names[raw]
        return
    if isinstance(raw, str) and not looks_numeric(raw, scope.names):
        params[name] = raw
        try:
            parse_expr(raw, scope.names, where)
        except SpecError as exc:
            names[name] = exc
        return
    value = parse_expr(raw, scope.names, where)
    names[name] = value
    params[name] = raw if isinstance(raw, (bool, int, float)) else value


def _plain(value):
    """A block parameter's value for a bool / choice / number / axis attribute: a number read from an
    expression as a Python int or float."""
    if isinstance(value, sympy.Basic) and value.is_number and not isinstance(value, sympy.logic.boolalg.Boolean):
        return int(value) if value.is_integer else float(value)
    return value


def looks_numeric(raw: str, scope) -> bool:
    """Whether `raw` reads as an expression in `scope` (else a string block parameter, e.g. an activation)."""
    try:
        parse_expr(raw, scope)
        return True
    except SpecError:
        return False
