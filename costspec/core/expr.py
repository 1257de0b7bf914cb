"""Safe spec expressions: Python's `ast` parses the text, a whitelist walker builds sympy.

Nothing here calls `eval`, `exec` or `sympify` on spec text. The accepted subset is:
integers and decimal literals, names bound in the environment (dims, block parameters),
`+ - * / // % **`, unary `-`/`+`, `min`, `max`, `ceil`, `floor`, `a if cond else b`,
comparisons (chained too), `and`/`or`/`not`, and `x in [1, 2, 3]` on literal lists.
"""
from __future__ import annotations

import ast
import math
from fractions import Fraction
from typing import Callable, Mapping

import sympy

from costspec.core.errors import ExpressionError, Location, SpecError

MAX_EXPONENT = 1024  # `**` needs a constant integer exponent in [0, MAX_EXPONENT]
MAX_TEXT = 2000  # characters; longer "expressions" are rejected before parsing
MAX_DEPTH = 60  # nesting depth of the syntax tree
MAX_INT_DIGITS = 400  # digits in one literal (10**100-sized numbers are fine)
MAX_DEGREE = 8  # polynomial degree in the dims; keeps later symbolic work (shape checks) fast
MAX_RESULT_DIGITS = 4000  # results are printed as exact integers (Python prints at most 4300 digits)
_INT_LIMIT = 10**MAX_INT_DIGITS
ALLOWED = ("numbers, dim names, + - * / // % **, min, max, ceil, floor, "
           "'a if cond else b', comparisons, 'x in [..]'")

_FUNCTIONS = {
    "min": (sympy.Min, 2, None),
    "max": (sympy.Max, 2, None),
    "ceil": (sympy.ceiling, 1, 1),
    "floor": (sympy.floor, 1, 1),
    "sqrt": (sympy.sqrt, 1, 1),
}
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_OPERATORS = {ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|",
              ast.BitXor: "^", ast.Invert: "~", ast.Is: "is", ast.IsNot: "is not"}
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
        if abs(text) >= _INT_LIMIT:
            raise ExpressionError(f"integer with {digits(text):,} digits", where,
                                  f"a number of at most {MAX_INT_DIGITS} digits")
        return sympy.Integer(text)
    if isinstance(text, float):
        return _decimal(text, where)
    if not isinstance(text, str):
        raise ExpressionError(f"expected a number or an expression string, got {type(text).__name__}", where)
    if len(text) > MAX_TEXT:
        raise ExpressionError(f"expression is {len(text):,} characters long", where,
                              f"at most {MAX_TEXT:,} characters")
    if not text.isascii():  # Python folds identifiers NFKC: ℂ, Ｃ and 𝐂 would silently be the dim C
        raise ExpressionError(_non_ascii(text), where, "ASCII names and operators (names are ASCII identifiers)")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        problem = exc.msg if isinstance(exc, SyntaxError) else "too complex or invalid"
        expected = "arithmetic on numbers and dim names"
        if text.count("(") != text.count(")"):  # `[B, min(S, 4)]`: YAML's flow list split it at the comma
            expected += "; an unquoted comma in a YAML [...] or {...} splits a value there: quote the whole value"
        raise ExpressionError(f"cannot parse expression {_quote(text)}: {problem}", where, expected) from None
    builder = _Builder(env, where, text)
    value = builder.build(tree.body, 0)
    for number in value.atoms(sympy.Rational):
        longest = max(digits(int(number.p)), digits(int(number.q)))
        if longest > MAX_INT_DIGITS:
            raise builder.fail(f"it computes a number with {longest:,} digits",
                               f"numbers of at most {MAX_INT_DIGITS} digits")
    found = degree(value)
    if found > MAX_DEGREE:
        raise builder.fail(f"a polynomial of degree {found} in the dims is not a plausible size",
                           f"degree at most {MAX_DEGREE}")
    return value


def _non_ascii(text: str) -> str:
    import unicodedata

    from costspec.core.text import for_terminal, lookalike

    char = next(ch for ch in text if not ch.isascii())
    folded = lookalike(char)
    hint = f", a look-alike of '{folded}'" if folded else ""
    return (f"in expression {for_terminal(_quote(text))}: non-ASCII character '{for_terminal(char)}' "
            f"(U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}{hint})")


def digits(n: int) -> int:
    """Decimal digits of |n|, without converting it to text (Python converts at most 4300 digits)."""
    n = abs(int(n))
    if n == 0:
        return 1
    d = int((n.bit_length() - 1) * 0.30102999566398119) + 1  # digits of 2**(bit_length - 1)
    return d + 1 if n >= 10**d else d


def _decimal(value: float, where: Location | None) -> sympy.Expr:
    if not math.isfinite(value):
        raise ExpressionError(f"{value} is not a finite number", where, "a finite number")
    return sympy.Rational(repr(value))


def _quote(text: str) -> str:
    """The expression as shown in messages: quoted, cut to a readable length."""
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:56] + "...'"


def degree(expr) -> int:
    """Polynomial degree of `expr` in its symbols, counted the simple way (floor, min, max and
    conditions take the largest of their arguments; a quotient adds both sides)."""
    if not isinstance(expr, sympy.Basic) or not expr.free_symbols:
        return 0
    if expr.is_Symbol:
        return 1
    if expr.is_Mul:
        return sum(degree(a) for a in expr.args)
    if expr.is_Pow:
        exponent = expr.exp
        if exponent.is_Rational and exponent.q == 2:  # sqrt(x) and its powers: counted as their ceiling
            return degree(expr.base) * ((abs(int(exponent.p)) + 1) // 2)
        return degree(expr.base) * (abs(int(exponent)) if exponent.is_Integer else MAX_DEGREE + 1)
    return max((degree(a) for a in expr.args), default=0)


class _Builder:
    def __init__(self, env: Mapping[str, sympy.Expr], where: Location | None, text: str):
        self.env = env
        self.where = where
        self.text = text

    def fail(self, message: str, expected: str | None = None) -> ExpressionError:
        return ExpressionError(f"in expression {_quote(self.text)}: {message}", self.where, expected)

    def build(self, node: ast.AST, depth: int) -> sympy.Expr:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.fail(f"{_describe(node)} is not allowed", ALLOWED)
        return method(node, depth + 1)

    def _Constant(self, node: ast.Constant, depth: int) -> sympy.Expr:
        value = node.value
        if isinstance(value, bool):
            return sympy.true if value else sympy.false
        if isinstance(value, int):
            if abs(value) >= _INT_LIMIT:
                raise self.fail(f"integer literal with {digits(value):,} digits",
                                f"a number of at most {MAX_INT_DIGITS} digits")
            return sympy.Integer(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.fail(f"{value} is not a finite number", "a finite number")
            # the literal as written, exactly: "12345678901234567.0" is that integer, not the float near it
            written = ast.get_source_segment(self.text.strip(), node)
            try:
                exact = Fraction(written.replace("_", "")) if written else Fraction(repr(value))
            except ValueError:
                exact = Fraction(repr(value))
            return sympy.Rational(exact.numerator, exact.denominator)
        raise self.fail(f"{_describe_constant(value)} is not a number", ALLOWED)

    def _Name(self, node: ast.Name, depth: int) -> sympy.Expr:
        if node.id in self.env:
            value = self.env[node.id]
            if isinstance(value, Exception):  # e.g. a block argument that did not parse
                raise value
            return value
        known = ", ".join(sorted(self.env)) or "none"
        raise self.fail(f"unknown name '{node.id}'", f"one of the dims or block parameters: {known}")

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> sympy.Expr:
        operand = self.build(node.operand, depth)
        if isinstance(node.op, ast.USub):
            return -_as_number(operand, self)
        if isinstance(node.op, ast.UAdd):
            return _as_number(operand, self)
        if isinstance(node.op, ast.Not):
            return sympy.Not(_as_bool(operand, self))
        raise self.fail(f"operator {_OPERATORS.get(type(node.op), type(node.op).__name__)} is not allowed", ALLOWED)

    def _BinOp(self, node: ast.BinOp, depth: int) -> sympy.Expr:
        op = node.op
        if type(op) not in _ARITHMETIC:
            raise self.fail(f"operator {_OPERATORS.get(type(op), type(op).__name__)} is not allowed", ALLOWED)
        left = _as_number(self.build(node.left, depth), self)
        right = _as_number(self.build(node.right, depth), self)
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
        return self._power(left, right)

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
        if not isinstance(node.func, ast.Name):
            # `__import__('os').system(...)`, `(lambda: 1)()`: the callee itself is not allowed
            raise self.fail(f"{_describe(node.func)} is not allowed", "a call of min, max, ceil, floor or sqrt")
        if node.func.id not in _FUNCTIONS:
            raise self.fail(f"call of '{node.func.id}' is not allowed", "a call of min, max, ceil, floor or sqrt")
        if node.keywords:
            raise self.fail(f"keyword arguments to {node.func.id}() are not allowed", "positional arguments")
        args = [self.build(arg, depth) for arg in node.args]  # a bad argument is reported as itself
        func, least, most = _FUNCTIONS[node.func.id]
        if len(args) < least or (most is not None and len(args) > most):
            count = f"{least}" if least == most else f"at least {least}"
            raise self.fail(f"{node.func.id}() takes {count} argument(s), got {len(args)}")
        return func(*args)

    def _IfExp(self, node: ast.IfExp, depth: int) -> sympy.Expr:
        cond = _as_bool(self.build(node.test, depth), self)
        then = self.build(node.body, depth)
        other = self.build(node.orelse, depth)
        if isinstance(then, sympy.Expr) != isinstance(other, sympy.Expr):
            raise self.fail("one branch of the conditional is a number and the other a condition",
                            "two numbers, or two conditions")
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
                raise self.fail(f"comparison '{_OPERATORS.get(type(op), type(op).__name__)}' is not allowed",
                                "<, <=, >, >=, ==, !=, in, not in")
            terms.append(_COMPARE[type(op)](_as_number(left, self), _as_number(right, self)))
            left = right
        return sympy.And(*terms)

    def _membership(self, left, op, comparator, depth):
        if left is None or not isinstance(comparator, (ast.List, ast.Tuple)):
            raise self.fail("'in' needs a literal list on its right", "x in [1, 2, 3]")
        items = [_as_number(self.build(item, depth), self) for item in comparator.elts]
        test = sympy.Or(*[sympy.Eq(left, item) for item in items]) if items else sympy.false
        return sympy.Not(test) if isinstance(op, ast.NotIn) else test

    def _BoolOp(self, node: ast.BoolOp, depth: int) -> sympy.Expr:
        values = [_as_bool(self.build(v, depth), self) for v in node.values]
        return sympy.And(*values) if isinstance(node.op, ast.And) else sympy.Or(*values)


def _as_bool(value: sympy.Expr, builder: _Builder):
    # A sympy Symbol is both an Expr and a Boolean: a dim name is a number here, not a condition.
    if isinstance(value, sympy.logic.boolalg.Boolean) and not isinstance(value, sympy.Expr):
        return value
    raise builder.fail(f"{value} is a number where a condition was expected", "a comparison such as 'i in [2, 5]'")


def _as_number(value, builder: _Builder) -> sympy.Expr:
    if isinstance(value, sympy.Expr):
        return value
    raise builder.fail(f"the condition {value} is used as a number", "a number or a dim, not a comparison")


def _describe_constant(value) -> str:
    kinds = {str: "the string", bytes: "the bytes", complex: "the complex number"}
    return f"{kinds[type(value)]} {value!r}" if type(value) in kinds else repr(value)


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
        number = int(value)
        if digits(number) > MAX_RESULT_DIGITS:
            # a SpecError, not an ExpressionError: callers that reword "not an integer" let it through
            raise SpecError(f"{what} has {digits(number):,} digits, too many to print exactly", where,
                            f"a value of at most {MAX_RESULT_DIGITS:,} digits")
        return number
    if value.is_Rational:
        shown = value if max(digits(int(value.p)), digits(int(value.q))) <= MAX_INT_DIGITS else "a fraction"
        raise ExpressionError(f"{what} evaluates to {'the fraction ' if shown is value else ''}{shown}, "
                              "not an integer", where, "sizes that divide evenly")
    free = sorted(str(s) for s in getattr(value, "free_symbols", ()))
    if free:
        raise ExpressionError(f"{what} still depends on {', '.join(free)} after binding the dims", where)
    raise ExpressionError(f"{what} evaluates to {value}, not an integer", where)


def evaluator(values: Mapping[sympy.Symbol, sympy.Integer]) -> Callable[[sympy.Expr], int]:
    """expr -> exact int at bound dim `values` (what op builders receive as `ev`)."""

    def ev(expr) -> int:
        return as_exact_int(sympy.sympify(expr).xreplace(values), "a size")

    return ev
