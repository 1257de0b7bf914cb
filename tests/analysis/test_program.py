"""The compiled programs compute what sympy computes: spec expressions drawn at random, compiled, and
evaluated at random dims give sympy's exact value, or refuse (Inexact) where sympy's value is not a
finite number; a program read from outside is checked before it runs."""
from __future__ import annotations

from fractions import Fraction

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from costspec.analysis.compiler import Emitter, Uncompilable
from costspec.analysis.program import Inexact, Program, ProgramError, exact
from costspec.core.errors import CostspecError
from costspec.core.expr import dim_symbol, parse_expr

NAMES = ("a", "b", "c")
SYMBOLS = {n: dim_symbol(n) for n in NAMES}


def _number(depth: int) -> st.SearchStrategy[str]:
    leaf = st.one_of(st.sampled_from(NAMES), st.integers(0, 12).map(str), st.sampled_from(["0.5", "1.25", "3"]))
    if depth == 0:
        return leaf
    sub = _number(depth - 1)
    binary = st.tuples(sub, st.sampled_from(["+", "-", "*", "/", "//", "%"]), sub).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})")
    power = st.tuples(sub, st.integers(0, 3)).map(lambda t: f"({t[0]}) ** {t[1]}")
    call = st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")
    rounding = st.tuples(st.sampled_from(["ceil", "floor", "sqrt"]), sub).map(lambda t: f"{t[0]}({t[1]})")
    cond = st.tuples(sub, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), sub).map(lambda t: " ".join(t))
    choice = st.tuples(sub, cond, sub, st.booleans()).map(
        lambda t: f"({t[0]} if {t[1]} {'and' if t[3] else 'or'} not a in [2, 5] else {t[2]})")
    return st.one_of(leaf, binary, power, call, rounding, choice)


def _sympy_value(expr, values):
    try:
        got = expr.xreplace(values)
    except (ZeroDivisionError, TypeError):
        return None
    if got is sympy.true or got is sympy.false:
        return bool(got)
    return Fraction(int(got.p), int(got.q)) if got.is_Rational else None


@given(text=_number(3), a=st.integers(1, 40), b=st.integers(1, 40), c=st.integers(1, 40))
def test_a_program_gives_sympys_exact_value_or_refuses(text, a, b, c):
    try:
        expr = parse_expr(text, SYMBOLS)
    except CostspecError:  # division by a literal zero and the like: refused by the spec language itself
        return
    emitter = Emitter({SYMBOLS[n]: i for i, n in enumerate(NAMES)})
    try:
        slot = emitter.slot(expr)
    except Uncompilable:  # sqrt of a negative constant: sympy's I (such a model stays symbolic)
        assert expr.has(sympy.I), text
        return
    program = Program.load(len(NAMES), emitter.code)  # what the compiler writes passes the outside checks
    expected = _sympy_value(expr, {SYMBOLS[n]: sympy.Integer(v) for n, v in zip(NAMES, (a, b, c))})
    try:
        got = program.run([a, b, c])[slot]
    except (Inexact, ArithmeticError, ValueError):
        return  # refused: the caller takes the symbolic path, which gives sympy's answer itself
    assert expected is not None, f"{text}: sympy has no finite value, the program gave {got}"
    assert got == expected and isinstance(got, bool) == isinstance(expected, bool), text


def test_a_program_never_refuses_plain_arithmetic():
    expr = parse_expr("(a * b + 3) // 2 + max(a, c) * ceil(b / 3) + (a % 4)", SYMBOLS)
    emitter = Emitter({SYMBOLS[n]: i for i, n in enumerate(NAMES)})
    slot = emitter.slot(expr)
    program = Program.load(3, emitter.code)
    for a, b, c in [(1, 1, 1), (7, 9, 2), (1024, 3, 4096)]:
        assert program.run([a, b, c])[slot] == (a * b + 3) // 2 + max(a, c) * -(-b // 3) + a % 4


def test_an_exact_quotient_stays_an_int():
    expr = parse_expr("a * b / 4", SYMBOLS)
    emitter = Emitter({SYMBOLS[n]: i for i, n in enumerate(NAMES)})
    slot = emitter.slot(expr)
    run = Program.load(3, emitter.code).run
    assert type(run([2, 6, 1])[slot]) is int and run([2, 6, 1])[slot] == 3
    assert run([1, 6, 1])[slot] == Fraction(3, 2)
    with pytest.raises(Inexact):
        exact(run([1, 6, 1])[slot], 10**9)


def test_shared_subexpressions_are_computed_once():
    x = parse_expr("(a + b) * c", SYMBOLS)
    emitter = Emitter({SYMBOLS[n]: i for i, n in enumerate(NAMES)})
    first = emitter.slot(x)
    size = len(emitter.code)
    assert emitter.slot(parse_expr("(a + b) * c", SYMBOLS)) == first and len(emitter.code) == size


def test_outside_the_instruction_set_is_uncompilable():
    emitter = Emitter({SYMBOLS["a"]: 0})
    with pytest.raises(Uncompilable):
        emitter.slot(sympy.sin(SYMBOLS["a"]))
    with pytest.raises(Uncompilable):
        emitter.slot(SYMBOLS["b"])  # not an input


@pytest.mark.parametrize("code, why", [
    ([["nope", 0]], "unknown instruction"),
    ([["add", 0, 1]], "an earlier one"),  # slot 1 is this instruction itself
    ([["int", True]], "not an integer"),
    ([["int", 1.5]], "not an integer"),
    ([["int", 10**5000]], "too large"),
    ([["rat", 2, 4]], "reduced"),
    ([["bool", 1], ["add", 0, 1]], "wrong type"),
    ([["lt", 0, 0], ["mul", 1, 0]], "wrong type"),
    ([["pw", 0, 0]], "one type"),
    ([["pow", 0, 5000]], "bounded"),
    ([["mod", 0]], "two arguments"),
    ([["add"]], "arguments"),
    ([[]], "instruction is a list"),
    ("add", "bounded list"),
])
def test_a_malformed_program_is_refused(code, why):
    with pytest.raises(ProgramError, match=why):
        Program.load(1, code)


def test_a_program_survives_pickling():
    import pickle

    program = Program.load(2, [["add", 0, 1], ["mul", 2, 2]])
    assert pickle.loads(pickle.dumps(program)).run([3, 4]) == program.run([3, 4]) == [3, 4, 7, 49]
