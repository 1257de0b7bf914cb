"""Vectorised sweeps equal point-by-point evaluation, exactly; bad grids are refused."""
import pytest
from hypothesis import given, settings, strategies as st

import costspec
from conftest import ROOT, SPECS
from costspec.errors import UsageError
from costspec.sweep import parse_vary, points, sweep, to_csv


@pytest.mark.parametrize("text, values", [
    ("B=1..16:x2", [1, 2, 4, 8, 16]),
    ("B=1..4", [1, 2, 3, 4]),
    ("B=1..9:+4", [1, 5, 9]),
    ("img=224,384", [224, 384]),
])
def test_parse_vary(text, values):
    assert list(parse_vary(text)[1]) == values


@pytest.mark.parametrize("text", ["B", "B=0..4", "B=4..1", "B=1..8:x1", "B=a,b", "1B=2"])
def test_parse_vary_refuses_bad_ranges(text):
    with pytest.raises(UsageError):
        parse_vary(text)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_sweep_equals_evaluate_at_every_point(spec, pass_):
    model = costspec.load(spec)
    free = [d.name for d in model.dims.free()]
    varies = [(free[0], [1, 2, 3]), (free[-1], [int(model.dims.dims[free[-1]].default)])]
    grid, values = sweep(model, varies, pass_)
    for i, point in enumerate(points(grid)):
        report = model.evaluate(pass_, **point)
        assert (values["tc_flops"][i], values["cuda_flops"][i], values["params"][i]) == \
               (report.tc, report.cuda, report.params)


@settings(max_examples=15)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=4, unique=True),
       st.lists(st.sampled_from([112, 224, 384, 448, 1024]), min_size=1, max_size=3, unique=True))
def test_vit_sweep_matches_api_on_random_grids(batches, images):
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    grid, values = sweep(model, [("B", batches), ("img", images)], "train")
    for i, point in enumerate(points(grid)):
        assert values["total_flops"][i] == model.evaluate("train", **point).total


def test_sweep_checks_constraints_at_every_point():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError, match=r"img=230: .*image 230x230 is not divisible by patch 16"):
        sweep(model, [("img", [224, 230])])


def test_sweep_beyond_int64_is_exact_not_refused():
    # 10**9 images through ViT-H: 3.3e20 FLOPs, past int64; those points are evaluated with Python ints
    model = costspec.load(ROOT / "specs/vit_h.yaml")
    grid, values = sweep(model, [("B", [10**9, 2])])
    assert values["tc_flops"].tolist() == [model.evaluate(B=10**9).tc, model.evaluate(B=2).tc]


def test_sweep_refuses_derived_and_unknown_dims():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError, match="derived"):
        sweep(model, [("S", [1, 2])])
    with pytest.raises(UsageError, match="no dim 'Q'"):
        sweep(model, [("Q", [1, 2])])


def test_csv_has_the_grid_and_the_costs():
    model = costspec.load(ROOT / "specs/toy_mlp.yaml")
    grid, values = sweep(model, [parse_vary("M=128,256")])
    lines = to_csv(grid, values).splitlines()
    assert lines[0] == "M,tc_flops,cuda_flops,total_flops,params"
    assert lines[1].startswith("128,0,2686976000,")
