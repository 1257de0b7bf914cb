"""The pieces of `costspec import torch` that need no model: fitting sizes to the dims, runs that must
agree in structure, and runs of identical instances folded into repeats."""
from __future__ import annotations

import pytest
import sympy

from costspec.trace.fit import FitError, Sample, align, fit, same_structure
from costspec.trace.ir import Op, Repeat, Seq
from costspec.trace.repeats import fold
from costspec.trace.run import symbols_of

DIMS = {"C": 64, "heads": 4, "L": 2}
SYMBOLS = symbols_of(DIMS)
C, heads, L = (SYMBOLS[d] for d in ("C", "heads", "L"))
# the base, each dim doubled alone, all at three times the base, all off the multiples
RUNS = [DIMS, {**DIMS, "C": 128}, {**DIMS, "heads": 8}, {**DIMS, "L": 4}, {"C": 192, "heads": 12, "L": 6},
        {"C": 66, "heads": 5, "L": 3}]
SAMPLES = [Sample(d) for d in RUNS]


def values(f) -> list[int]:
    return [f(**d) for d in RUNS]


@pytest.mark.parametrize("size, expected", [
    (lambda C, heads, L: 3, sympy.Integer(3)),
    (lambda C, heads, L: 4 * C, 4 * C),
    (lambda C, heads, L: C * heads, C * heads),
    (lambda C, heads, L: L - 1, L - 1),
    (lambda C, heads, L: C + 2 * L + 1, C + 2 * L + 1),
    (lambda C, heads, L: C // 4, sympy.floor(C / 4)),
])
def test_a_size_is_fitted_to_the_expression_that_gives_every_run(size, expected):
    assert fit(values(size), SAMPLES, SYMBOLS, "x") == expected


def test_a_size_no_expression_gives_is_an_error_naming_it():
    with pytest.raises(FitError, match=r"layers\.0\.fc out: the size 4160 changes with the dims as no product"):
        fit(values(lambda C, heads, L: C * C + C), SAMPLES, SYMBOLS, "layers.0.fc out")


def test_a_division_the_off_multiple_run_does_not_divide_is_a_floor_not_a_fraction():
    assert fit(values(lambda C, heads, L: C // heads), SAMPLES, SYMBOLS, "x") == sympy.floor(C / heads)


def test_runs_must_agree_in_everything_but_sizes():
    a = [Op(op="linear", attrs={"out": 64, "bias": True})]
    same_structure(a, [Op(op="linear", attrs={"out": 128, "bias": True})])
    with pytest.raises(FitError, match="True in one run, False in another"):
        same_structure(a, [Op(op="linear", attrs={"out": 64, "bias": False})])
    with pytest.raises(FitError, match="structure"):
        same_structure(a, a + a)
    fitted = align([a, [Op(op="linear", attrs={"out": 128, "bias": True})]], SAMPLES[:2], SYMBOLS)
    assert fitted[0].attrs == {"out": C, "bias": True}


def block(i: int, width: int = 8) -> Seq:
    return Seq(name=f"layers_{i}", source=f"layers.{i}", cls="Block", path=f"layers.{i}",
               layers=[Op(op="linear", attrs={"out": width}, name="fc", source="fc")])


def test_identical_consecutive_instances_fold_into_a_repeat_of_their_container():
    folded = fold([block(0, 16), block(1), block(2), block(3)])
    assert [type(x).__name__ for x in folded] == ["Seq", "Repeat"]
    repeat = folded[1]
    assert isinstance(repeat, Repeat) and (repeat.count, repeat.name, repeat.source) == (3, "layers", "layers")
    assert folded[0].name == "layers_0"


def test_two_repeats_of_one_container_are_named_by_their_first_instance():
    folded = fold([block(0), block(1), block(2, 16), block(3, 16)])
    assert [(x.name, x.count) for x in folded if isinstance(x, Repeat)] == [("layers_0", 2), ("layers_2", 2)]
