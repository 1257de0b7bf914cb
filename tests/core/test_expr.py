"""The safe expression parser: what it accepts, what it builds, what it refuses."""
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from costspec.core.errors import ExpressionError
from costspec.core.expr import dim_symbol, parse_expr

ENV = {n: dim_symbol(n) for n in ("img", "patch", "C", "heads", "i")}
img, patch, C, heads, i = (ENV[n] for n in ("img", "patch", "C", "heads", "i"))


@pytest.mark.parametrize("text, expected", [
    ("(img // patch)**2 + 1", sympy.floor(img / patch) ** 2 + 1),
    ("4*C", 4 * C),
    ("C / heads", C / heads),
    ("C % heads", sympy.Mod(C, heads)),
    ("-C + 2*C", C),
    ("min(C, 512)", sympy.Min(C, 512)),
    ("max(img, patch)", sympy.Max(img, patch)),
    ("ceil(img / patch)", sympy.ceiling(img / patch)),
    ("floor(img / 3)", sympy.floor(img / 3)),
    ("2.5 * C", sympy.Rational(5, 2) * C),
    ("0 if i in [2, 5, 8, 11] else 14",
     sympy.Piecewise((0, sympy.Or(*[sympy.Eq(i, k) for k in (2, 5, 8, 11)])), (14, True))),
    ("1 if C > 512 and heads >= 8 else 2", sympy.Piecewise((1, (C > 512) & (heads >= 8)), (2, True))),
    ("3 if 2 in [1, 2] else 4", sympy.Integer(3)),
    (768, sympy.Integer(768)),
])
def test_accepts_the_arithmetic_subset(text, expected):
    assert parse_expr(text, ENV) == expected


@pytest.mark.parametrize("text, fragment", [
    ("__import__('os').system('touch /tmp/costspec_pwned')", "not allowed"),
    ("().__class__.__bases__[0].__subclasses__()", "not allowed"),
    ("open('/etc/passwd').read()", "not allowed"),
    ("eval('1')", "call of 'eval' is not allowed"),
    ("lambda: 1", "lambda is not allowed"),
    ("[x for x in range(10)]", "a comprehension is not allowed"),
    ("f'{C}'", "an f-string is not allowed"),
    ("C.real", "attribute access is not allowed"),
    ("unknown * 2", "unknown name 'unknown'"),
    ("2**10**10", "exponent 10000000000 is not allowed"),
    ("C ** C", "is not allowed"),
    ("C / 0", "division by zero"),
    ("C +", "cannot parse expression"),
    ("'text'", "is not a number"),
    ("C in D", "needs a literal list"),
    ("C in (C)", "needs a literal list"),
])
def test_refuses_everything_else_with_a_clear_error(text, fragment):
    with pytest.raises(ExpressionError) as info:
        parse_expr(text, ENV)
    assert fragment in str(info.value)


def test_code_in_an_expression_never_runs(tmp_path):
    target = tmp_path / "pwned"
    with pytest.raises(ExpressionError):
        parse_expr(f"__import__('os').system('touch {target}')", ENV)
    assert not target.exists()


@given(st.integers(1, 10**6), st.integers(1, 10**6), st.integers(1, 64))
def test_floor_division_and_powers_match_python(a, b, e):
    env = {"a": dim_symbol("a"), "b": dim_symbol("b")}
    expr = parse_expr(f"(a // b) ** {e % 5} + a % b", env)
    assert expr.xreplace({env["a"]: a, env["b"]: b}) == (a // b) ** (e % 5) + a % b


# -- look-alike identifiers ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ℂ", "Ｃ", "𝐂"])
def test_unicode_look_alikes_of_a_dim_are_refused(name):
    with pytest.raises(ExpressionError, match=f"non-ASCII character '{name}'.*a look-alike of 'C'"):
        parse_expr(f"2*{name}", {"C": dim_symbol("C")})
