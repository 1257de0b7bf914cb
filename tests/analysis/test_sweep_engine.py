"""The sweep engine's fast paths give the numbers of its exact slow ones: grid boxes cover the grid in
order; int64 evaluation without the overflow probe (where `magnitude` proves no value can wrap) equals
evaluation with Python integers; past int64, values are Python integers, exact."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import costspec
from costspec.analysis import sweep_eval
from costspec.analysis.sweep import Grid, sweep
from costspec.analysis.sweep_eval import compile_expr, evaluate, full, magnitude, safe
from costspec.core.errors import CostspecError
from costspec.core.expr import dim_symbol, parse_expr

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("shape", [(3,), (5, 7), (100, 100, 7), (2, 3, 7000), (7000, 3), (1, 1, 1), (17, 300, 3)])
@pytest.mark.parametrize("size", [7, 1000, None])
def test_boxes_cover_the_grid_in_order(shape, size):
    axes = [np.arange(1, n + 1, dtype=np.int64) * (k + 2) for k, n in enumerate(shape)]
    grid = Grid([f"d{k}" for k in range(len(shape))], axes)
    seen, total = {n: [] for n in grid.names}, 0
    for box in grid.boxes(size):
        assert box.start == total
        flat = box.flat()
        total += len(flat[grid.names[0]])
        for name in grid.names:
            seen[name].append(flat[name])
    assert total == grid.size
    reference = grid.chunk(0, grid.size)
    for name in grid.names:
        assert np.array_equal(np.concatenate(seen[name]), reference[name])


@pytest.mark.parametrize("spec, varies", [
    ("vit_h", [("B", list(range(1, 31))), ("img", [14 * k for k in range(8, 40)]), ("L", list(range(1, 41)))]),
    ("llama_1b", [("S", [128, 1000, 2048]), ("B", [1, 3, 8]), ("L", list(range(1, 20)))]),
    ("mixtral_8x7b", [("K", [1, 2]), ("B", list(range(1, 50)))]),
])
def test_int64_without_the_probe_equals_the_probed_evaluation(spec, varies, monkeypatch):
    model = costspec.load(ROOT / "specs" / f"{spec}.yaml")
    real_safe = sweep_eval.safe
    for pass_ in ("forward", "train"):
        proofs: list[bool] = []
        with monkeypatch.context() as m:
            m.setattr("costspec.analysis.sweep.safe", lambda *a: proofs.append(real_safe(*a)) or proofs[-1])
            _, fast = sweep(model, varies, pass_)
        assert proofs and all(proofs)  # at these sizes every check and output runs in int64 without the probe
        with monkeypatch.context() as m:
            m.setattr("costspec.analysis.sweep.safe", lambda *a: False)  # every expression through the probe
            grid, probed = sweep(model, varies, pass_)
        assert fast.keys() == probed.keys()
        for name in fast:
            assert fast[name].dtype == np.int64 and np.array_equal(fast[name], probed[name]), name
        for i in (0, grid.size // 3, grid.size - 1):
            point = {n: int(grid.columns[n][i]) for n in grid.names}
            report = model.evaluate(pass_, **point)
            assert (int(fast["tc_flops"][i]), int(fast["cuda_flops"][i]), int(fast["params"][i])) == (
                report.tc, report.cuda, report.params)


def test_values_past_int64_are_exact_python_integers():
    model = costspec.load(ROOT / "specs" / "vit_h.yaml")
    grid, values = sweep(model, [("B", [1, 10**9, 10**12]), ("L", [1, 10**4])])
    assert values["tc_flops"].dtype == object
    for i in range(grid.size):
        point = {n: int(grid.columns[n][i]) for n in grid.names}
        report = model.evaluate("forward", **point)
        assert (values["tc_flops"][i], values["total_flops"][i]) == (report.tc, report.total)
    assert max(values["tc_flops"]) > 2**63


NAMES = ("a", "b")
SYMBOLS = {n: dim_symbol(n) for n in NAMES}


def _expression(depth: int) -> st.SearchStrategy[str]:
    leaf = st.one_of(st.sampled_from(NAMES), st.integers(-9, 99).map(lambda v: f"({v})"))
    if depth == 0:
        return leaf
    sub = _expression(depth - 1)
    return st.one_of(leaf,
                     st.tuples(sub, st.sampled_from(["+", "-", "*", "//", "%"]), sub).map(" ".join).map("({})".format),
                     st.tuples(sub, st.integers(1, 4)).map(lambda t: f"({t[0]}) ** {t[1]}"),
                     st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
                     st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} if {t[1]} < {t[2]} else {t[2]})"))


@given(text=_expression(3), a_max=st.integers(1, 10**6), b_max=st.integers(1, 10**6), seed=st.integers(0, 2**16))
def test_a_proven_expression_never_wraps(text, a_max, b_max, seed):
    """Where `safe` holds for the bounds, int64 evaluation at points within them equals Python integers."""
    try:
        expr = parse_expr(text, SYMBOLS)
    except CostspecError:  # a literal division by zero: refused by the spec language
        return
    compiled = compile_expr(expr)
    bounds = {SYMBOLS["a"]: a_max, SYMBOLS["b"]: b_max}
    if not compiled.fast or not safe(compiled, bounds):
        return
    assert magnitude(compiled.num, bounds) is not None
    rng = np.random.default_rng(seed)
    a = np.concatenate([rng.integers(1, a_max + 1, 200), [1, a_max]]).astype(np.int64)
    b = np.concatenate([rng.integers(1, b_max + 1, 200), [b_max, 1]]).astype(np.int64)
    symbols = [SYMBOLS["a"], SYMBOLS["b"]]
    fast = evaluate(compiled, symbols, [a, b], proven=True)
    exact = sweep_eval.probed(compiled, symbols, [a.astype(object), b.astype(object)], len(a))
    n = (len(a),)
    ok = ~full(exact.invalid, n) & ~full(exact.fraction, n)
    assert np.array_equal(full(fast.invalid, n), full(exact.invalid, n))
    assert all(int(x) == int(y) for x, y in zip(full(fast.values, n)[ok], full(exact.values, n)[ok])), text
