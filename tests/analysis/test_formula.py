"""Closed forms (costspec.analysis.formula): symbol choice, canonical text, exactness against `eval`."""
import json

import pytest
import sympy

import costspec
from costspec.analysis.formula import choose_symbols, closed_form, formulas, latex_name
from costspec.core.errors import UsageError
from tests.common import formulas_once, load_once, zoo_params

PASSES = ("forward", "backward", "train")


@pytest.fixture(scope="module")
def vit_b():
    return costspec.load("specs/vit_b.yaml")


def sym(model, *names):
    return [model.dims.dims[n].symbol for n in names]


# -- the textbook form ----------------------------------------------------------------------------
def test_vit_b_tensor_core_forward_is_the_textbook_form(vit_b):
    B, S, C, L = sym(vit_b, "B", "S", "C", "L")
    result = formulas(vit_b, "forward", keep=["B", "S", "C", "L"])
    # Per block: QKV 6BSC^2 + proj 2BSC^2 + MLP 16BSC^2 = 24BSC^2; QK^T and AV 2 * 2BS^2C = 4BS^2C.
    # Patch embedding: a conv = GEMM over (S - 1) patches, 2 * (3 * 16 * 16) * C FLOPs each = 1536 BC(S - 1).
    expected = L * (24 * B * S * C**2 + 4 * B * S**2 * C) + 1536 * B * C * (S - 1)
    assert sympy.expand(result.tc.expr - expected) == 0
    assert result.tc.text() == "L*(24*B*S*C**2 + 4*B*S**2*C) + 1536*B*C*(S - 1)"
    assert result.symbols.substituted == {"img": 224, "patch": 16, "heads": 12}
    assert result.symbols.depth == (L,)


def test_vit_b_closed_forms_read_as_printed(vit_b):
    forms = {p: formulas(vit_b, p, keep=["B", "S", "C", "L"]) for p in ("forward", "train")}
    assert forms["forward"].cuda.text() == "L*(45*B*S*C + 72*B*S**2) + 9*B*S*C - B*C"
    assert forms["train"].tc.text() == "L*(72*B*S*C**2 + 14*B*S**2*C) + 3072*B*C*(S - 1)"
    assert forms["train"].params.text() == "L*(12*C**2 + 13*C) + S*C + 772*C"


def test_cli_prints_the_textbook_form(cli):
    result = cli("formula", "specs/vit_b.yaml", "--keep", "B,S,C,L")
    assert result.returncode == 0, result.stderr
    assert "TC FLOPs    = L*(24*B*S*C**2 + 4*B*S**2*C) + 1536*B*C*(S - 1)\n" in result.stdout


def test_the_S_minus_1_patch_term_holds_for_every_image_size(vit_b):
    """With S kept, the formula is exact for any img that S stands for (not frozen at img=224)."""
    result = formulas(vit_b, "train", keep=["B", "S", "C", "L"])
    B, S, C, L = sym(vit_b, "B", "S", "C", "L")
    for img in (224, 384, 160):
        report = vit_b.evaluate("train", B=3, img=img)
        at = {B: 3, S: report.dims["S"], C: 768, L: 12}
        assert result.tc.expr.xreplace(at) == report.tc
        assert result.cuda.expr.xreplace(at) == report.cuda


# -- symbol choice --------------------------------------------------------------------------------
def test_default_keeps_free_dims_and_derived_S(vit_b):
    s = choose_symbols(vit_b)
    assert [str(x) for x in s.order] == ["B", "img", "patch", "C", "heads", "L", "S"]
    assert s.substituted == {}
    assert "S" in closed_form(vit_b.cost().tc, s).symbols


def test_marked_keep_dims_join_the_default(write_spec):
    model = costspec.load(write_spec(
        "costspec: 1\nname: t\ndims:\n  M: 4\n  D: 8\n  H: {value: 2*D, doc: hidden, keep: true}\n"
        "input: [M, D]\nlayers:\n  - linear: {out: H}\n"))
    assert "H" in [str(x) for x in choose_symbols(model, keep=None).order]


def test_derived_dim_without_kept_inputs_becomes_a_number(vit_b):
    result = formulas(vit_b, "forward", keep=["B", "C", "L"])
    assert result.tc.text() == "L*(4728*B*C**2 + 155236*B*C) + 301056*B*C"  # 24*197, 4*197^2, 1536*196
    assert result.symbols.substituted["S"] == 197


def test_expand_writes_derived_dims_out(vit_b):
    result = formulas(vit_b, "forward", expand=True)
    assert "S" not in result.tc.symbols and "floor(img/patch)" in result.tc.text()
    engine = vit_b.dims.expand(vit_b.cost("forward").tc)
    assert sympy.expand(result.tc.expr - engine) == 0


def test_set_changes_substituted_values(vit_b):
    result = formulas(vit_b, "forward", keep=["B", "S", "C", "L"], sets={"patch": 14})
    assert result.tc.text().endswith("+ 1176*B*C*(S - 1)")  # 2 * 3 * 14^2


@pytest.mark.parametrize("keep, expand, message", [
    (["B", "X"], False, "keep X: the spec has no dim 'X'"),
    (["B", "S"], True, "keep S with expand: 'S' is derived"),
])
def test_bad_keep_is_a_usage_error(vit_b, keep, expand, message):
    """In the API's words by default; in the CLI's (its flags) when the command passes them."""
    from costspec.core.dims import CLI_WORDS

    with pytest.raises(UsageError, match=f"^{message}"):
        formulas(vit_b, keep=keep, expand=expand)
    with pytest.raises(UsageError, match="^--" + message.replace("with ", "with --")):
        formulas(vit_b, keep=keep, expand=expand, words=CLI_WORDS)


def test_bad_keep_exits_2(cli):
    result = cli("formula", "specs/vit_b.yaml", "--keep", "B,nope")
    assert result.returncode == 2
    assert "--keep nope: the spec has no dim 'nope'" in result.stderr and "Traceback" not in result.stderr


def test_latex_names():
    assert [latex_name(n) for n in ("B", "img", "n1", "d_model", "alpha", "a_b_c")] == \
        ["B", r"\mathit{img}", "n_{1}", "d_{model}", r"\alpha", r"\mathit{a\_b\_c}"]


def test_rational_coefficients_go_over_one_denominator(write_spec):
    model = costspec.load(write_spec(
        "costspec: 1\nname: half\ndims:\n  B: 2\n  C: 64\n  L: 4\ninput: [B, C]\nlayers:\n"
        "  - repeat: L\n    body:\n      - linear: {out: C/2}\n      - linear: {out: C}\n"))
    result = formulas(model, "forward")
    assert result.cuda.text() == "(3*B*C*L)/2"
    assert result.params.text() == "(L*(2*C**2 + 3*C))/2"
    assert result.params.expr.xreplace(model.bind()) == model.evaluate().params


# -- exactness for every spec ---------------------------------------------------------------------
def _variants(model):
    free = [d.name for d in model.dims.free()]
    return [dict(keep=None), dict(keep=free[::2]), dict(keep=None, expand=True)]


@pytest.mark.parametrize("spec", zoo_params())
@pytest.mark.parametrize("pass_", PASSES)
def test_text_forms_are_exact_and_evaluate_to_eval_numbers(spec, pass_):
    model = load_once(spec)
    values = model.bind()
    report = model.report(pass_, values)
    forward = model.report("forward", values)
    rows = {r.name: r for r in report.rows}
    for variant in _variants(model):
        result = formulas_once(spec, pass_, **variant)
        names = {str(s): s for s in result.symbols.order}
        for form, number in [(result.tc, report.tc), (result.cuda, report.cuda), (result.total, report.total),
                             (result.params, forward.params)]:
            back = sympy.parse_expr(form.text(), local_dict=names)
            assert sympy.expand(back - form.expr) == 0, form.text()
            assert form.expr.xreplace(values) == number
            assert set(form.symbols) <= set(names)
        for row in result.rows:
            assert row.tc.expr.xreplace(values) == rows[row.name].tc_flops, row.name
            assert row.cuda.expr.xreplace(values) == rows[row.name].cuda_flops, row.name


def test_json_gives_expression_latex_and_symbols(cli):
    result = cli("formula", "specs/vit_b.yaml", "--keep", "B,S,C,L", "--per-layer", "--format", "json",
                 "--pass", "train")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    tc = data["totals"]["tc"]
    assert tc["expr"] == "L*(72*B*S*C**2 + 14*B*S**2*C) + 3072*B*C*(S - 1)"
    assert tc["latex"].startswith(r"L \cdot \left(72 B S C^{2}") and tc["symbols"] == ["B", "C", "L", "S"]
    assert data["keep"] == ["B", "S", "C", "L"] and data["substituted"] == {"img": 224, "patch": 16, "heads": 12}
    assert [r["name"] for r in data["rows"]][:2] == ["patch_embed", "patch_embed.proj"]
