"""The compiled model answers exactly what the symbolic path answers: every zoo spec, every pass, several
dims (rows, totals, notes, columns, dims, alignment flags), through the API (`Model.evaluate`,
`Model.report`) and through the JSON form the cache stores; where it cannot answer, the symbolic path
does, with the same error."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy

import costspec
from costspec.analysis import evaluation
from costspec.analysis.alignment import check, flags
from costspec.analysis.compiled import PASSES, CompiledFormatError, CompiledModel
from costspec.analysis.compiler import compile_model
from costspec.core.errors import CostspecError

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").glob("*.yaml"))


def _rows(report) -> list:
    return [(r.name, r.label, r.depth, r.values) for r in report.table.all_rows()]


def _same(a, b) -> None:
    assert _rows(a) == _rows(b)
    assert [c.key for c in a.table.columns] == [c.key for c in b.table.columns]
    assert (a.spec_name, a.pass_, a.precision, a.dims, a.notes) == (b.spec_name, b.pass_, b.precision, b.dims, b.notes)


def _bindings(model) -> list[dict[str, int]]:
    """Defaults, a new batch, and a free dim other than B doubled (which may break a constraint)."""
    free = [d.name for d in model.dims.free()]
    out: list[dict[str, int]] = [{}]
    if "B" in free:
        out.append({"B": 3})
    other = next((n for n in free if n != "B"), None)
    if other is not None:
        out.append({other: 2 * int(model.dims.dims[other].default)})
    return out


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_compiled_equals_symbolic_for_every_zoo_spec(path):
    model = costspec.load(path)
    stored = {p: CompiledModel(json.loads(json.dumps(model.compiled(p).to_json()))) for p in PASSES}
    for sets in _bindings(model):
        try:
            values = model.bind(sets=sets)
        except CostspecError as exc:  # the symbolic path refuses: so do the compiled ones, with its error
            assert all(c.bind(sets=sets) is None for c in stored.values())
            with pytest.raises(type(exc)) as compiled_path:
                model.evaluate("forward", **sets)
            assert str(compiled_path.value) == str(exc)
            continue
        by_name = {str(k): int(v) for k, v in values.items()}
        sizes = stored["forward"].gemm_sizes(by_name)
        assert flags((g.layer, g.kind, g.dim, s, g.dtype, g.need, g.best) for g, s in sizes) == check(model, values)
        for pass_ in PASSES:
            reference = evaluation.build_report(model, pass_, values)
            compiled = stored[pass_]
            assert compiled.bind(sets=sets) == by_name
            _same(compiled.report(pass_, by_name), reference)  # through JSON, as the cache holds it
            _same(model.evaluate(pass_, **sets), reference)  # the API
            _same(model.report(pass_, values), reference)


def test_evaluate_does_not_run_the_symbolic_path(monkeypatch):
    model = costspec.load(ROOT / "specs" / "llama_1b.yaml")
    reference = model.evaluate("train", B=5)
    monkeypatch.setattr("costspec.model.build_report", lambda *a, **k: pytest.fail("symbolic path used"))
    for batch in (1, 7, 64):
        assert model.evaluate("train", B=batch).total > 0
    _same(model.evaluate("train", B=5), reference)


def test_bad_dims_give_the_symbolic_paths_errors():
    model = costspec.load(ROOT / "specs" / "vit_b.yaml")
    cases = [dict(B=0), dict(nope=3), dict(S=5), dict(C=770), dict(B=True), dict(B=2.0)]
    for sets in cases:
        with pytest.raises(CostspecError) as symbolic:
            model.bind(sets=sets)
        with pytest.raises(type(symbolic.value)) as compiled:
            model.evaluate("forward", **sets)
        assert str(compiled.value) == str(symbolic.value)
    with pytest.raises(CostspecError, match="pass must be one of"):
        model.evaluate("sideways", B=2)


def test_a_model_the_compiler_cannot_cover_is_evaluated_symbolically(monkeypatch):
    from costspec.analysis import compiler

    def refuse(*args, **kwargs):
        raise compiler.Uncompilable("test")

    monkeypatch.setattr(compiler, "compile_model", refuse)
    model = costspec.load(ROOT / "specs" / "toy_mlp.yaml")
    assert model.compiled("forward") is None
    _same(model.evaluate("forward", M=4), evaluation.build_report(model, "forward", model.bind(sets={"M": 4})))


def test_report_with_values_it_does_not_cover_falls_back():
    model = costspec.load(ROOT / "specs" / "toy_mlp.yaml")
    values = model.bind(sets={"M": 4})
    partial = dict(list(values.items())[1:])
    with pytest.raises(CostspecError):
        model.report("forward", partial)  # a dim left unbound: the symbolic path's error
    foreign = {sympy.Symbol(str(k)): v for k, v in values.items()}  # same names, other assumptions
    with pytest.raises(CostspecError):
        model.report("forward", foreign)


@pytest.mark.parametrize("change", [
    lambda d: d.update(format=2),
    lambda d: d["rows"][0].__setitem__(2, -1),
    lambda d: d["passes"]["forward"]["rows"].pop(),
    lambda d: d["passes"]["forward"]["rows"][0].__setitem__(0, 10**6),
    lambda d: d["passes"]["forward"]["code"].append(["add", 10**6, 0]),
    lambda d: d["bind"]["conditions"].append(0),  # an input (a number) where a truth value is needed
    lambda d: d.update(dims=[["B", 0]]),
    lambda d: d.update(passes={}),
    lambda d: d.pop("align"),
])
def test_a_malformed_compiled_model_is_refused(change):
    data = json.loads(json.dumps(compile_model(costspec.load(ROOT / "specs" / "toy_mlp.yaml"), ("forward",))
                                 .to_json()))
    change(data)
    with pytest.raises(CompiledFormatError):
        CompiledModel(data)
