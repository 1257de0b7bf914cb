"""Straight-line programs of exact integer arithmetic: the compiled form of a spec's expressions.

A `Program` is a list of instructions in single-assignment form. Slots 0..n_inputs-1 hold the
inputs (dim values, Python ints); instruction i writes slot n_inputs + i from earlier slots. The
instruction set is exactly what spec expressions contain after sympy has built them (numbers,
+, *, integer powers, exact square roots, floor, ceil, mod, min, max, piecewise, comparisons,
and / or / not), so a program computes the same exact value sympy's `xreplace` does, with Python
ints (`fractions.Fraction` only where a division is not exact) and never a float:

    ["int", 12]  ["rat", 1, 2]  ["bool", 1]  ["add", a, b, ...]  ["mul", a, b, ...]  ["div", a, b]
    ["pow", a, -2]  ["sqrt", a]  ["floor", a]  ["ceil", a]  ["mod", a, b]  ["min", a, ...]  ["max", a, ...]
    ["pw", value1, cond1, value2, cond2, ...]  ["lt"|"le"|"gt"|"ge"|"eq"|"ne", a, b]
    ["and", a, ...]  ["or", a, ...]  ["not", a]

Every instruction runs, whatever branch a piecewise takes (as sympy evaluates every argument), and
any division by zero, inexact root or piecewise without a true condition raises `Inexact`: a caller
then falls back to the symbolic path, which gives the located error (or the number) sympy gives.
So a program either returns the value sympy computes or raises; it never returns another number.

`Program.load` checks a program read from outside (the cache) completely before it runs: known
instructions, argument counts, slot indices that point backwards, a number or a truth value where
each instruction needs one, bounded constants and lengths. Loading builds one small closure per
instruction; running is one call of each. No `eval`, no `exec`, no pickle.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

MAX_INSTRUCTIONS = 200_000  # per program
MAX_ARGS = 10_000  # arguments of one n-ary instruction
MAX_CONST_DIGITS = 4_000  # digits of a constant (Python parses at most 4,300 from text)
MAX_EXPONENT = 1_024  # |exponent| of "pow" (spec expressions allow 0..1024; sympy writes 1/x as x**-1)

NUMBER, TRUTH = "n", "b"
_NARY_NUMBER = {"add", "mul", "min", "max"}
_COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}


class Inexact(ArithmeticError):
    """A value the program cannot give exactly (division by zero, an irrational root, no branch taken)."""


class ProgramError(ValueError):
    """A program that is not well formed (only programs read from outside can be)."""


def _sqrt(value: Any) -> Any:
    """The exact square root of a non-negative rational, or Inexact."""
    if isinstance(value, bool) or value < 0:
        raise Inexact("square root of a negative number")
    if isinstance(value, int):
        root = math.isqrt(value)
        if root * root != value:
            raise Inexact("irrational square root")
        return root
    num, den = math.isqrt(value.numerator), math.isqrt(value.denominator)
    if num * num != value.numerator or den * den != value.denominator:
        raise Inexact("irrational square root")
    return Fraction(num, den)


def _pow(base: Any, exponent: int) -> Any:
    if exponent >= 0:
        return base ** exponent
    if base == 0:
        raise Inexact("division by zero")
    return Fraction(1) / base ** -exponent


def _div(a: Any, b: Any) -> Any:
    if b == 0:
        raise Inexact("division by zero")
    if type(a) is int and type(b) is int:
        q, r = divmod(a, b)
        if not r:
            return q
    q = Fraction(a) / b
    return q.numerator if q.denominator == 1 else q


def _mod(a: Any, b: Any) -> Any:
    if b == 0:
        raise Inexact("modulo by zero")
    return a % b


def _piecewise(pairs: list[tuple[int, int]]) -> Callable[[list], Any]:
    def run(s: list) -> Any:
        for value, cond in pairs:
            if s[cond]:
                return s[value]
        raise Inexact("no condition of a piecewise holds")

    return run


def _closure(op: str, a: list) -> Callable[[list], Any]:  # noqa: C901 - one branch per instruction
    """The function computing one instruction's value from the slots `s`."""
    if op == "int" or op == "bool":
        value: Any = a[0] if op == "int" else bool(a[0])
        return lambda s: value
    if op == "rat":
        frac = Fraction(a[0], a[1])
        return lambda s: frac
    if op == "add":
        if len(a) == 2:
            i, j = a
            return lambda s: s[i] + s[j]
        return lambda s: sum([s[k] for k in a])
    if op == "mul":
        if len(a) == 2:
            i, j = a
            return lambda s: s[i] * s[j]
        first, rest = a[0], a[1:]

        def product(s: list) -> Any:
            out = s[first]
            for k in rest:
                out = out * s[k]
            return out

        return product
    if op == "pow":
        i, e = a
        if e == 2:
            return lambda s: s[i] * s[i]
        return lambda s: _pow(s[i], e)
    if op == "sqrt":
        i = a[0]
        return lambda s: _sqrt(s[i])
    if op == "floor":
        i = a[0]
        return lambda s: math.floor(s[i])
    if op == "ceil":
        i = a[0]
        return lambda s: math.ceil(s[i])
    if op == "div":
        i, j = a
        return lambda s: _div(s[i], s[j])
    if op == "mod":
        i, j = a
        return lambda s: _mod(s[i], s[j])
    if op == "min":
        return lambda s: min([s[k] for k in a])
    if op == "max":
        return lambda s: max([s[k] for k in a])
    if op == "pw":
        return _piecewise(list(zip(a[0::2], a[1::2])))
    if op in _COMPARE:
        i, j = a
        return {"lt": lambda s: s[i] < s[j], "le": lambda s: s[i] <= s[j], "gt": lambda s: s[i] > s[j],
                "ge": lambda s: s[i] >= s[j], "eq": lambda s: s[i] == s[j], "ne": lambda s: s[i] != s[j]}[op]
    if op == "and":
        return lambda s: all([s[k] for k in a])
    if op == "or":
        return lambda s: any([s[k] for k in a])
    if op == "not":
        i = a[0]
        return lambda s: not s[i]
    raise ProgramError(f"unknown instruction {op!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_const(value: object) -> None:
    if not _is_int(value):
        raise ProgramError("a constant is not an integer")
    assert isinstance(value, int)
    if value.bit_length() > 3.33 * MAX_CONST_DIGITS:
        raise ProgramError("a constant is too large")


def _types(op: str, args: list, types: list[str], n_inputs: int) -> str:
    """The type of an instruction's value (NUMBER or TRUTH); ProgramError when its arguments do not fit."""
    if op == "int":
        if len(args) != 1:
            raise ProgramError("int takes one constant")
        _check_const(args[0])
        return NUMBER
    if op == "rat":
        if len(args) != 2:
            raise ProgramError("rat takes two constants")
        _check_const(args[0])
        _check_const(args[1])
        if args[1] < 2 or math.gcd(args[0], args[1]) != 1:
            raise ProgramError("rat is not a reduced fraction")
        return NUMBER
    if op == "bool":
        if len(args) != 1 or args[0] not in (0, 1) or not _is_int(args[0]):
            raise ProgramError("bool takes 0 or 1")
        return TRUTH
    if op == "pow":
        if len(args) != 2 or not _is_int(args[1]) or abs(args[1]) > MAX_EXPONENT:
            raise ProgramError("pow takes a slot and a bounded integer exponent")
        slots, want = args[:1], NUMBER
    elif op == "pw":
        if not args or len(args) % 2:
            raise ProgramError("pw takes value, condition pairs")
        slots = args
    else:
        slots = args
    size = len(types) + n_inputs
    if not slots or len(slots) > MAX_ARGS:
        raise ProgramError(f"{op} has {len(slots)} arguments")
    for k in slots:
        if not _is_int(k) or not 0 <= k < size:
            raise ProgramError(f"{op} reads a slot that is not an earlier one")
    kinds = [NUMBER if k < n_inputs else types[k - n_inputs] for k in slots]
    if op == "pw":
        values, conds = kinds[0::2], kinds[1::2]
        if any(c != TRUTH for c in conds) or len(set(values)) != 1:
            raise ProgramError("pw needs conditions and values of one type")
        return values[0]
    if op in ("sqrt", "floor", "ceil", "not") and len(slots) != 1:
        raise ProgramError(f"{op} takes one argument")
    if (op in _COMPARE or op in ("mod", "div")) and len(slots) != 2:
        raise ProgramError(f"{op} takes two arguments")
    if op in ("and", "or", "not"):
        want = TRUTH
    elif op in _NARY_NUMBER or op in _COMPARE or op in ("sqrt", "floor", "ceil", "mod", "div", "pow"):
        want = NUMBER
    else:
        raise ProgramError(f"unknown instruction {op!r}")
    if any(k != want for k in kinds):
        raise ProgramError(f"{op} got an argument of the wrong type")
    return TRUTH if op in _COMPARE or op in ("and", "or", "not") else NUMBER


class Program:
    """A checked straight-line program over `n_inputs` input slots (see the module docstring)."""

    def __init__(self, n_inputs: int, code: list[list], types: list[str]):
        self.n_inputs = n_inputs
        self.code = code
        self.types = types  # the type of each instruction's value
        self._steps = [_closure(ins[0], ins[1:]) for ins in code]

    @classmethod
    def load(cls, n_inputs: object, code: object) -> Program:
        """A program from data read from outside, checked completely (ProgramError otherwise)."""
        if not _is_int(n_inputs) or not 0 <= n_inputs <= MAX_ARGS:  # type: ignore[operator]
            raise ProgramError("bad input count")
        if not isinstance(code, list) or len(code) > MAX_INSTRUCTIONS:
            raise ProgramError("a program is a bounded list of instructions")
        types: list[str] = []
        for ins in code:
            if not isinstance(ins, list) or not ins or not isinstance(ins[0], str):
                raise ProgramError("an instruction is a list [name, arguments...]")
            types.append(_types(ins[0], ins[1:], types, n_inputs))  # type: ignore[arg-type]
        return cls(n_inputs, code, types)  # type: ignore[arg-type]

    def __getstate__(self) -> dict:
        return {"n_inputs": self.n_inputs, "code": self.code, "types": self.types}  # the closures are rebuilt

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["n_inputs"], state["code"], state["types"])  # type: ignore[misc]

    def kind(self, slot: int) -> str:
        """NUMBER or TRUTH: what slot `slot` holds."""
        return NUMBER if slot < self.n_inputs else self.types[slot - self.n_inputs]

    def run(self, inputs: Sequence[int]) -> list:
        """Every slot's value (inputs first). Raises Inexact, or an ArithmeticError / ValueError of Python's
        own arithmetic (e.g. a power too large to compute), where sympy would not give an exact number."""
        if len(inputs) != self.n_inputs:
            raise ProgramError(f"the program takes {self.n_inputs} inputs, got {len(inputs)}")
        s = list(inputs)
        append = s.append
        for step in self._steps:
            append(step(s))
        return s


def exact(value: Any, bound: int) -> int:
    """`value` as an int of magnitude below `bound`; Inexact for a fraction, a truth value or a larger number."""
    if type(value) is not int:
        if isinstance(value, Fraction) and value.denominator == 1:
            value = value.numerator
        else:
            raise Inexact("not an integer")
    if not -bound < value < bound:
        raise Inexact("too many digits")
    return value


__all__ = ["NUMBER", "TRUTH", "Inexact", "Program", "ProgramError", "exact"]
