"""Property-based fuzzing of the loader and the cost engine (bounded for CI; the long run is
fuzz/run_fuzz.py). Strategies: fuzz/specgen.py; properties: fuzz/properties.py.

* valid specs: random compositions of the registered ops with valid attributes, repeats (with
  and without `at:` variants), residuals, sequences, blocks with parameters, free and derived
  dims -> accepted, evaluate == the symbolic total substituted, train == forward + backward,
  rows consistent, and (sampled) matmul FLOPs == FlopCounterMode on meta with 0 relative error;
* mutated specs (keys deleted / replaced / added, wrong types, hostile expressions, duplicate
  names, byte edits) -> accepted (and then the same properties) or a CostspecError, never
  another exception;
* repeat-k == k x the body, with and without variants.

Bugs the fuzzer found are pinned below as strict-xfail reproducers (`test_known_bug_*`); the
property tests count a spec that hits one of them instead of failing (fuzz/properties.py:
KNOWN_BUGS), so the bounded run stays green while the bug is open and turns red if a new one
appears.
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import costspec  # noqa: E402
from costspec.errors import CostspecError  # noqa: E402
from costspec.ops import spec_ops  # noqa: E402
from fuzz import properties  # noqa: E402
from fuzz.properties import check_repeat, check_spec  # noqa: E402
from fuzz.specgen import dump, generators, mutated_specs, repeat_cases, valid_specs  # noqa: E402

torch = pytest.importorskip("torch")

# A few seconds in all on 2 shared cores, reproducible (the long, random run is fuzz/run_fuzz.py).
FAST = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@settings(max_examples=15, **FAST)
@given(valid_specs(), st.integers(0, 2))
def test_valid_specs_are_accepted_and_consistent(spec, sample):
    outcome = check_spec(dump(spec), meta=sample == 0)  # a third validated on meta
    assert outcome.accepted or outcome.known, f"a valid spec was rejected: {outcome.error}\n{dump(spec)}"


@settings(max_examples=40, **FAST)
@given(mutated_specs(), st.integers(0, 3))
def test_mutated_specs_are_accepted_or_refused_cleanly(text, sample):
    check_spec(text, meta=sample == 0)  # raises on anything but a CostspecError or a held property


@settings(max_examples=8, **FAST)
@given(repeat_cases(), st.booleans())
def test_repeat_k_is_k_times_the_body(case, meta):
    outcome = check_repeat(case, meta)
    assert outcome.accepted or outcome.known, outcome.error


def test_every_spec_op_can_be_drawn():
    """New ops are drawn too (a dedicated generator, or the generic one that reads their Attrs)."""
    assert set(generators()) == set(spec_ops())


def test_every_known_bug_has_its_reproducer():
    names = {name for name, _ in globals().items() if name.startswith("test_known_bug_")}
    for table in (properties.KNOWN_BUGS, properties.KNOWN_LOADER_CRASHES, properties.KNOWN_REJECTIONS):  # noqa
        for bug, (_, test) in table.items():
            assert test in names, f"known bug {bug} names {test}, which is not in this file"


# ----------------------------------------------------------------------------------------------
# Reproducers of bugs the fuzzer found (strict xfail: they fail while the bug is open)
# ----------------------------------------------------------------------------------------------
def _spec(layers: str, dims: str = "{B: 2, C: 8}", input_: str = "[B, 4, C]", extra: str = "") -> str:
    return textwrap.dedent(f"""\
        costspec: 1
        name: repro
        dims: {dims}
        input: {input_}
        """) + extra + "layers:\n" + textwrap.indent(textwrap.dedent(layers), "  ")


def _validate(model, pass_="train"):
    from costspec.validate import render_table, validate

    result = validate(model, model.bind(), pass_, "meta", 0.0)
    assert result.ok, render_table(result)


@pytest.mark.xfail(strict=True, reason="softmax's axis is not checked against the input rank (flatten and "
                                       "transpose check theirs): axis 5 of a rank-3 input is accepted")
def test_known_bug_softmax_axis_out_of_range_accepted():
    with pytest.raises(CostspecError):
        costspec.loads(_spec("- softmax: {axis: 5}\n- linear: {out: 2}\n"))


@pytest.mark.xfail(strict=True, raises=RuntimeError,
                   reason="validate --pass train on a model without parameters: loss.backward() raises "
                          "'element 0 of tensors does not require grad' (costspec validate: internal error, exit 3)")
def test_known_bug_validate_train_without_parameters():
    _validate(costspec.loads(_spec("- activation: {fn: relu}\n")))


@pytest.mark.xfail(strict=True, reason="residual: [dropout] returns x itself; autograd's gradient sum for x + x "
                                       "runs outside the add module and validate attributes it to (model)")
def test_known_bug_identity_residual_validate():
    _validate(costspec.loads(_spec("- layernorm: {}\n- residual: [{dropout: {}}]\n")))


@pytest.mark.xfail(strict=True, reason="model.node_cost charges instances 2..k of a parameter-free repeat body "
                                       "whose input needs no gradient with input gradients: its rows show "
                                       "backward FLOPs that its repeat row, the total and torch do not have")
def test_known_bug_rows_of_gradless_repeat():
    model = costspec.loads(_spec("""\
        - repeat: 3
          name: pre
          body: [{activation: {fn: relu}}]
        - linear: {out: 8}
        """, input_="[4, 8]"))
    rows = {r.name: r for r in model.evaluate("backward").rows}
    assert rows["pre"].cuda == 0  # holds
    assert rows["pre.act"].cuda == 0  # 64: 2 instances x 32 relu_backward elements


@pytest.mark.xfail(strict=True, reason="a block parameter cannot stand for a bool or choice attribute "
                                       "(`bias: b`, `fn: f`): tree.py passes it through, but the schema refuses "
                                       "the string first ('got a string ... expected true or false')")
def test_known_bug_block_param_for_bool_attribute():
    model = costspec.loads(_spec("- block: lin\n  args: {b: false}\n", extra=textwrap.dedent("""\
        blocks:
          lin:
            params: {b: true}
            layers: [{linear: {out: C, bias: b}}]
        """)))
    assert model.evaluate().params == 8 * 8  # no bias


@pytest.mark.xfail(strict=True, raises=IndexError,
                   reason="position_embedding's `length` default reads shape[1] before the rank check: "
                          "IndexError on a rank-1 input instead of a SpecError")
def test_known_bug_position_embedding_rank_1_crashes():
    with pytest.raises(CostspecError):
        costspec.loads(_spec("- position_embedding: {}\n", input_="[C]"))


@pytest.mark.xfail(strict=True, reason="Dims.canonical rewrites a free dim through a derived one: with T = B*B "
                                       "a linear on [B, 3] costs 24*sqrt(T), not 24*B")
def test_known_bug_derived_dim_rewrites_free_dim():
    model = costspec.loads(_spec("- linear: {out: 4}\n", dims="{B: 2, T: B*B}", input_="[B, 3]"))
    assert model.cost().tc == 24 * model.dims.dims["B"].symbol


@pytest.mark.xfail(strict=True, reason="with T = B*B, B is rewritten as sqrt(T); the same-padding conv's output "
                                       "floor(sqrt(T) + 2 - 2 - 1) + 1 no longer simplifies to sqrt(T), so a valid "
                                       "residual is refused ('residual body changes the shape')")
def test_known_bug_derived_dim_square_refuses_a_shape_keeping_body():
    costspec.loads(_spec("- residual: [{conv2d: {out: 2, kernel: 3, padding: 1}}]\n", dims="{B: 3, T: B*B}",
                         input_="[B, 2, B, B]"))


@pytest.mark.xfail(strict=True, reason="variants covering every index of a symbolic count (T = 4, indices 0-3) "
                                       "leave an `others` group with 0 instances; validate applies its first "
                                       "instance's reconciliation once anyway (scale -64 measured)")
def test_known_bug_validate_empty_variant_group():
    _validate(costspec.loads(_spec("""\
        - layernorm: {}
        - repeat: T
          name: blocks
          body: [{attention: {heads: 2}}]
          at: [{indices: [0, 1, 2, 3], name: all}]
        """, dims="{B: 2, T: 4}", input_="[B, 4, 8]")), "forward")


@pytest.mark.xfail(strict=True, raises=TypeError,
                   reason="validate of a model with a size beyond int64 (B = 10**22; eval gives exact numbers): torch "
                          "cannot make the tensor and its TypeError surfaces as an internal error, not a clear refusal")
def test_known_bug_validate_size_beyond_int64():
    model = costspec.loads(_spec("- linear: {out: 2}\n", dims="{B: 10000000000000000000000}", input_="[B, 4]"))
    try:
        _validate(model, "forward")
    except CostspecError:
        pass  # a clear refusal is a fix


@pytest.mark.xfail(strict=True, raises=ZeroDivisionError,
                   reason="a size that is 0 at the bound dims (heads: B // 5 with --set B=4) reaches the divisibility "
                          "constraint Mod(C, 0): sympy's ZeroDivisionError escapes (internal error) instead of a "
                          "SpecError saying heads = 0")
def test_known_bug_zero_size_at_bound_dims_crashes():
    with pytest.raises(CostspecError):  # at the defaults, when loading: heads = 11 // 12 = 0
        costspec.loads(_spec("- attention: {heads: D // 12}\n", dims="{D: 11, C: 8}", input_="[2, 4, C]"))
    model = costspec.loads(_spec("- attention: {heads: B // 5}\n", dims="{B: 5, C: 8}", input_="[2, 4, C]"))
    with pytest.raises(CostspecError):  # at bound dims: --set B=4
        model.bind(sets={"B": 4})


@pytest.mark.xfail(strict=True, reason="reshape infers a -1 as elements / known sizes, a true division (H/2) sympy "
                                       "does not know is an integer; a 1x1 conv's output floor(H/2 - 1) + 1 then does "
                                       "not simplify back and the residual is refused ('changes the shape')")
def test_known_bug_reshape_inferred_size_is_a_fraction():
    costspec.loads(_spec("- reshape: {shape: [B, C, 2, -1]}\n- residual: [{conv2d: {out: C, kernel: 1}}]\n",
                         dims="{B: 2, C: 4, H: 8}", input_="[B, C, H]"))


@pytest.mark.xfail(strict=True, raises=ValueError,
                   reason="a YAML escape beyond Unicode (\\U00110000) makes PyYAML's scanner raise ValueError "
                          "(chr() arg not in range), which the loader does not turn into a SpecError (internal error)")
def test_known_bug_yaml_escape_beyond_unicode_crashes():
    with pytest.raises(CostspecError):
        costspec.loads('costspec: 1\nname: "\\U00110000"\ninput: [2]\nlayers: [{activation: {}}]\n')


@pytest.mark.xfail(strict=True, reason="take_token checks its index only when the token count is a number: with "
                                       "S = B // 2 = 1, index 1 is accepted (check: ok) and validate then crashes "
                                       "with torch's IndexError")
def test_known_bug_take_token_index_unchecked_for_symbolic_tokens():
    with pytest.raises(CostspecError):
        costspec.loads(_spec("- take_token: {index: 1}\n", dims="{B: 2}", input_="[B, B // 2, 4]"))


# ----------------------------------------------------------------------------------------------
# Fixed since the fuzzer found them: regression tests
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer, input_", [
    ("- linear: {out: 3, in: D}\n", "[B, 4, C]"),  # in = D (5) on a last dim C (8)
    ("- attention: {heads: 1, dim: D}\n", "[B, 4, C]"),
    ("- reshape: {shape: [B, D, C]}\n", "[B, 4, C]"),  # 80 elements from 64
])
def test_undecided_size_equality_is_checked_at_the_bound_dims(layer, input_):
    """Once accepted without a check (sympy cannot decide C == D), then a torch shape error."""
    with pytest.raises(CostspecError):
        costspec.loads(_spec(layer, dims="{B: 2, C: 8, D: 5}", input_=input_))


def test_embedding_after_other_layers_is_refused():
    """Once accepted (its torch module then got float activations and validate crashed)."""
    with pytest.raises(CostspecError, match="first layer"):
        costspec.loads(_spec("- embedding: {vocab: 10, dim: C}\n- embedding: {vocab: 10, dim: C}\n", input_="[B, 4]"))
