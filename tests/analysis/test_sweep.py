"""Vectorised sweeps equal point-by-point evaluation, exactly; bad grids are refused."""
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import costspec
from costspec.analysis.sweep import parse_vary, points, sweep, to_csv
from costspec.core.errors import UsageError
from tests.common import ROOT, SPECS, invoke


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
    _, values = sweep(model, [("B", [10**9, 2])])
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


# -- exactness, invalid points, streaming ----------------------------------------------------
CEIL = "costspec: 1\nname: ceil\ndims:\n  B: 2\n  C: 8\ninput: [B, C, C]\nlayers:\n  - linear: {out: \"ceil(8*C/3)\"}\n"


def test_ceil_of_a_swept_dim_is_exact_beyond_float64(write_spec):
    # 2*B*C*C*ceil(8C/3) at B = 1,234,567, C = 4097: 452,832,703,342,996,356 > 2**53, where float64
    # arithmetic gave ...352 before
    model = costspec.load(write_spec(CEIL))
    _, values = sweep(model, [("C", [4096, 4097, 4098])], fixed={"B": 1234567})
    assert values["tc_flops"].tolist() == [model.evaluate(C=c, B=1234567).tc for c in (4096, 4097, 4098)]
    assert values["tc_flops"][1] == 2 * 1234567 * 4097 * 4097 * -(-8 * 4097 // 3) == 452832703342996356


MOD = ("costspec: 1\nname: mod\ndims:\n  B: 2\n  C: 64\n  K: 128\ninput: [B, C]\nlayers:\n"
       "  - linear: {out: \"C + C % (K - C)\"}\n")


def test_a_point_where_a_size_divides_by_zero_is_an_error_naming_it(write_spec):
    spec = write_spec(MOD)
    with pytest.raises(UsageError, match=r"at grid point K=64: .*division or modulo by zero"):
        sweep(costspec.load(spec), [("K", [63, 64, 65])])
    r = invoke("sweep", spec, "--vary", "K=63,64,65")
    assert (r.returncode, r.stdout) == (2, "")  # nothing printed for any point
    assert "at grid point K=64" in r.stderr


def test_constants_beyond_int64_are_exact():
    model = costspec.load(ROOT / "tests/bad_specs/huge_dim.yaml")  # C = 10**100
    _, values = sweep(model, [("B", [1, 2])])
    assert values["tc_flops"].tolist() == [2 * 10**200, 4 * 10**200] == [model.evaluate(B=b).tc for b in (1, 2)]
    r = invoke("sweep", ROOT / "tests/bad_specs/huge_dim.yaml", "--vary", "B=1,2")
    assert r.returncode == 0 and r.stdout.splitlines()[2].startswith("2,4" + "0" * 200 + ",")


@pytest.mark.parametrize("spec", ["sam_vit_b.yaml", "deepencoder.yaml"])
def test_sweeping_a_dim_that_others_derive_from_works_at_its_default(spec):
    model = costspec.load(ROOT / "specs" / spec)  # G = img // patch was checked at img = 1 before
    _, values = sweep(model, [parse_vary("img=1024")])
    assert values["total_flops"].tolist() == [model.evaluate().total]


def test_varies_are_not_materialised_before_the_grid_is_bounded():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    varies = [parse_vary(f"{n}=1..20000000") for n in ("B", "img", "L")]
    assert all(isinstance(v, range) for _, v in varies)
    with pytest.raises(UsageError, match="more than 20,000,000 points"):
        sweep(model, varies)


def test_the_grid_is_streamed_in_chunks(monkeypatch):
    from costspec.analysis import sweep as sweep_module

    monkeypatch.setattr(sweep_module, "CHUNK", 7)
    model = costspec.load(ROOT / "specs/toy_mlp.yaml")
    grid = sweep_module.make_grid(model, [("M", range(1, 31))])
    sizes = [len(chunk["M"]) for chunk in sweep_module.iter_values(model, grid, {"p": model.cost().params})]
    assert sizes == [7, 7, 7, 7, 2]
    out = io.StringIO()
    assert sweep_module.write_csv(model, [("M", range(1, 31))], out) == 30
    lines = out.getvalue().splitlines()
    assert len(lines) == 31 and lines[30].split(",")[:3] == ["30", "0", str(model.evaluate(M=30).cuda)]
