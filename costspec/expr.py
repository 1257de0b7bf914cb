"""Safe spec expressions: Python's `ast` parses the text, a whitelist walker builds sympy.

Nothing here calls `eval`, `exec` or `sympify` on spec text. The accepted subset is:
integers and decimal literals, names bound in the environment (dims, block parameters),
`+ - * / // % **`, unary `-`/`+`, `min`, `max`, `ceil`, `floor`, `a if cond else b`,
comparisons (chained too), `and`/`or`/`not`, and `x in [1, 2, 3]` on literal lists.
"""
from __future__ import annotations

import ast
from typing import Mapping

import sympy

from .errors import ExpressionError, Location

MAX_EXPONENT = 1024  # `**` needs a constant integer exponent in [0, MAX_EXPONENT]
MAX_TEXT = 2000  # characters; longer "expressions" are rejected before parsing
MAX_DEPTH = 60  # nesting depth of the syntax tree
MAX_INT_DIGITS = 400  # digits in one literal (10**100-sized numbers are fine)

_FUNCTIONS = {
    "min": (sympy.Min, 2, None),
    "max": (sympy.Max, 2, None),
    "ceil": (sympy.ceiling, 1, 1),
    "floor": (sympy.floor, 1, 1),
}
_COMPARE = {
    ast.Lt: sympy.Lt,
    ast.LtE: sympy.Le,
    ast.Gt: sympy.Gt,
    ast.GtE: sympy.Ge,
    ast.Eq: sympy.Eq,
    ast.NotEq: sympy.Ne,
}


def dim_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of a dimension: sizes are positive integers."""
    return sympy.Symbol(name, integer=True, positive=True)


def parse_expr(text: object, env: Mapping[str, sympy.Expr], where: Location | None = None) -> sympy.Expr:
    """Parse one spec value (int, decimal or expression string) into a sympy expression.

    `env` maps every name the expression may use to its sympy value.
    """
    if isinstance(text, bool):
        return sympy.true if text else sympy.false
    if isinstance(text, int):
        return sympy.Integer(text)
    if isinstance(text, float):
        return sympy.Rational(repr(text))
    if not isinstance(text, str):
        raise ExpressionError(f"expected a number or an expression string, got {type(text).__name__}", where)
    if len(text) > MAX_TEXT:
        raise ExpressionError(f"expression is {len(text)} characters long; the limit is {MAX_TEXT}", where)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"cannot parse expression {text!r}: {exc.msg}", where,
                              "arithmetic on numbers and dim names") from None
    return _Builder(env, where, text).build(tree.body, 0)


class _Builder:
    def __init__(self, env: Mapping[str, sympy.Expr], where: Location | None, text: str):
        self.env = env
        self.where = where
        self.text = text

    def fail(self, message: str, expected: str | None = None) -> ExpressionError:
        return ExpressionError(f"in expression {self.text!r}: {message}", self.where, expected)

    def build(self, node: ast.AST, depth: int) -> sympy.Expr:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.fail(f"{_describe(node)} is not allowed",
                            "numbers, dim names, + - * / // % **, min, max, ceil, floor, "
                            "'a if cond else b', comparisons, 'x in [..]'")
        return method(node, depth + 1)

    def _Constant(self, node: ast.Constant, depth: int) -> sympy.Expr:
        value = node.value
        if isinstance(value, bool):
            return sympy.true if value else sympy.false
        if isinstance(value, int):
            if len(str(abs(value))) > MAX_INT_DIGITS:
                raise self.fail(f"integer literal has more than {MAX_INT_DIGITS} digits")
            return sympy.Integer(value)
        if isinstance(value, float):
            return sympy.Rational(repr(value))
        raise self.fail(f"constant {value!r} is not a number")

    def _Name(self, node: ast.Name, depth: int) -> sympy.Expr:
        if node.id in self.env:
            return self.env[node.id]
        known = ", ".join(sorted(self.env)) or "none"
        raise self.fail(f"unknown name '{node.id}'", f"one of the dims or block parameters: {known}")

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> sympy.Expr:
        operand = self.build(node.operand, depth)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(node.op, ast.Not):
            return sympy.Not(_as_bool(operand, self))
        raise self.fail(f"unary operator {type(node.op).__name__} is not allowed")

    def _BinOp(self, node: ast.BinOp, depth: int) -> sympy.Expr:
        left = self.build(node.left, depth)
        right = self.build(node.right, depth)
        op = node.op
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.Div):
            self._nonzero(right)
            return left / right
        if isinstance(op, ast.FloorDiv):
            self._nonzero(right)
            return sympy.floor(left / right)
        if isinstance(op, ast.Mod):
            self._nonzero(right)
            return sympy.Mod(left, right)
        if isinstance(op, ast.Pow):
            return self._power(left, right)
        raise self.fail(f"operator {type(op).__name__} is not allowed")

    def _nonzero(self, value: sympy.Expr) -> None:
        if value.is_zero:
            raise self.fail("division by zero")

    def _power(self, base: sympy.Expr, exponent: sympy.Expr) -> sympy.Expr:
        # A constant, bounded exponent keeps `2**10**10` from building a 10-billion-bit integer.
        if not (exponent.is_Integer and 0 <= int(exponent) <= MAX_EXPONENT):
            raise self.fail(f"exponent {exponent} is not allowed",
                            f"a constant integer exponent between 0 and {MAX_EXPONENT}")
        if base.is_Integer and abs(int(base)) > 1:
            bits = int(abs(int(base))).bit_length() * int(exponent)
            if bits > 4 * MAX_INT_DIGITS * 4:
                raise self.fail(f"{base}**{exponent} has about {bits} bits; too large to be a size")
        return base ** exponent

    def _Call(self, node: ast.Call, depth: int) -> sympy.Expr:
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            name = node.func.id if isinstance(node.func, ast.Name) else _describe(node.func)
            raise self.fail(f"call of '{name}' is not allowed", "min, max, ceil or floor")
        if node.keywords:
            raise self.fail("keyword arguments are not allowed")
        func, least, most = _FUNCTIONS[node.func.id]
        if len(node.args) < least or (most is not None and len(node.args) > most):
            count = f"{least}" if least == most else f"at least {least}"
            raise self.fail(f"{node.func.id}() takes {count} argument(s), got {len(node.args)}")
        return func(*[self.build(arg, depth) for arg in node.args])

    def _IfExp(self, node: ast.IfExp, depth: int) -> sympy.Expr:
        cond = _as_bool(self.build(node.test, depth), self)
        then = self.build(node.body, depth)
        other = self.build(node.orelse, depth)
        if cond is sympy.true:
            return then
        if cond is sympy.false:
            return other
        return sympy.Piecewise((then, cond), (other, True))

    def _Compare(self, node: ast.Compare, depth: int) -> sympy.Expr:
        terms = []
        left = self.build(node.left, depth)
        for op, comparator in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                terms.append(self._membership(left, op, comparator, depth))
                left = None
                continue
            if left is None:
                raise self.fail("'in' cannot be chained with other comparisons")
            right = self.build(comparator, depth)
            if type(op) not in _COMPARE:
                raise self.fail(f"comparison {type(op).__name__} is not allowed")
            terms.append(_COMPARE[type(op)](left, right))
            left = right
        return sympy.And(*terms)

    def _membership(self, left, op, comparator, depth):
        if left is None or not isinstance(comparator, (ast.List, ast.Tuple)):
            raise self.fail("'in' needs a literal list on its right", "x in [1, 2, 3]")
        items = [self.build(item, depth) for item in comparator.elts]
        test = sympy.Or(*[sympy.Eq(left, item) for item in items]) if items else sympy.false
        return sympy.Not(test) if isinstance(op, ast.NotIn) else test

    def _BoolOp(self, node: ast.BoolOp, depth: int) -> sympy.Expr:
        values = [_as_bool(self.build(v, depth), self) for v in node.values]
        return sympy.And(*values) if isinstance(node.op, ast.And) else sympy.Or(*values)


def _as_bool(value: sympy.Expr, builder: _Builder):
    if isinstance(value, sympy.logic.boolalg.Boolean):
        return value
    raise builder.fail(f"{value} is a number where a condition was expected", "a comparison such as 'i in [2, 5]'")


def _describe(node: ast.AST) -> str:
    kinds = {
        ast.Attribute: "attribute access", ast.Subscript: "indexing", ast.Lambda: "lambda",
        ast.ListComp: "a comprehension", ast.GeneratorExp: "a generator", ast.Dict: "a dict",
        ast.Set: "a set", ast.List: "a list", ast.Tuple: "a tuple", ast.JoinedStr: "an f-string",
        ast.NamedExpr: "assignment", ast.Starred: "unpacking",
    }
    return kinds.get(type(node), type(node).__name__)


def evaluate(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Substitute dim values into an expression (structural replace: fast, evaluates)."""
    return expr.xreplace(values) if values else expr


def as_exact_int(value: sympy.Expr, what: str, where: Location | None = None) -> int:
    """A number that must be an exact integer (FLOPs, sizes); anything else is an error."""
    if isinstance(value, sympy.logic.boolalg.BooleanAtom):
        raise ExpressionError(f"{what} is a condition ({value}), not a number", where)
    if value.is_Integer:
        return int(value)
    if value.is_Rational:
        raise ExpressionError(f"{what} evaluates to the fraction {value}, not an integer", where,
                              "sizes that divide evenly")
    free = sorted(str(s) for s in getattr(value, "free_symbols", ()))
    if free:
        raise ExpressionError(f"{what} still depends on {', '.join(free)} after binding the dims", where)
    raise ExpressionError(f"{what} evaluates to {value}, not an integer", where)
