"""Property-based fuzzing of the loader and the cost engine (bounded for CI; the long run is
fuzz/run_fuzz.py). Strategies: fuzz/specgen.py; properties: fuzz/properties.py.

* valid specs: random compositions of the registered ops with valid attributes, repeats (with
  and without `at:` variants), residuals, sequences, blocks with parameters, free and derived
  dims -> accepted, evaluate == the symbolic total substituted, train == forward + backward,
  rows consistent, and (sampled) matmul FLOPs == FlopCounterMode on meta with 0 relative error;
* mutated specs (keys deleted / replaced / added, wrong types, hostile expressions, duplicate
  names, byte edits; the dataflow keys broken: unknown value names, a save twice, `input:` on
  a first layer, joins of shapes that differ, kv to a rank-2 value, dead values) -> accepted (and
  then the same properties) or a CostspecError, never another exception;
* the dataflow: parallel branches with each join, residual shortcuts, saved values
  read by `with:` / `input:` / `kv:`, further `inputs:`, saves in repeat bodies -> drawn inside
  valid specs, and each construct on its own validated against autograd;
* repeat-k == k x the body, with and without variants.

Bugs the fuzzer found are pinned below as strict-xfail reproducers (`test_known_bug_*`); the
property tests count a spec that hits one of them instead of failing (fuzz/properties.py:
KNOWN_BUGS), so the bounded run stays green while the bug is open and turns red if a new one
appears.
"""
from __future__ import annotations

import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import costspec  # noqa: E402
from costspec.core.errors import CostspecError  # noqa: E402
from costspec.ops import spec_ops  # noqa: E402
from fuzz import properties, specgen  # noqa: E402
from fuzz.properties import check_repeat, check_spec  # noqa: E402
from fuzz.specgen import FLOWS, dump, flow_specs, generators, mutated_specs, repeat_cases, valid_specs  # noqa: E402

torch = pytest.importorskip("torch")

# A few seconds in all on 2 shared cores, reproducible (the long, random run is fuzz/run_fuzz.py).
FAST = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@settings(max_examples=15, **FAST)
@given(valid_specs(), st.integers(0, 2))
def test_valid_specs_are_accepted_and_consistent(spec, sample):
    outcome = check_spec(dump(spec), meta=sample == 0)  # a third validated on meta
    assert outcome.accepted or outcome.known, f"a valid spec was rejected: {outcome.error}\n{dump(spec)}"


@pytest.mark.parametrize("kind", sorted(FLOWS))
def test_every_dataflow_construct_is_accepted_and_validated(kind):
    """Each dataflow generator (a saved value joined back, a gate by names, a read of an earlier value, a
    further input, cross-attention, parallel branches, a shortcut): accepted, consistent, and every row
    checked against autograd on meta (train)."""

    @settings(max_examples=2, **FAST)
    @given(flow_specs(kind))
    def check(spec):
        outcome = check_spec(dump(spec), meta=True)
        assert outcome.accepted or outcome.known, f"a valid spec was rejected: {outcome.error}\n{dump(spec)}"

    check()


@pytest.mark.slow
@settings(max_examples=40, **FAST)
@given(mutated_specs(), st.integers(0, 3))
def test_mutated_specs_are_accepted_or_refused_cleanly(text, sample):
    check_spec(text, meta=sample == 0)  # raises on anything but a CostspecError or a held property


@pytest.mark.slow
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
    for table in (properties.KNOWN_BUGS, specgen.KNOWN_LOADER_CRASHES, properties.KNOWN_REJECTIONS):
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
    from costspec.runtime.validate import render_table, validate

    result = validate(model, model.bind(), pass_, "meta", 0.0)
    assert result.ok, render_table(result)


def test_fixed_softmax_axis_out_of_range_accepted():
    with pytest.raises(CostspecError):
        costspec.loads(_spec("- softmax: {axis: 5}\n- linear: {out: 2}\n"))


def test_fixed_validate_train_without_parameters():
    _validate(costspec.loads(_spec("- activation: {fn: relu}\n")))


@pytest.mark.xfail(strict=True, reason="residual: [dropout] returns x itself; autograd's gradient sum for x + x "
                                       "runs outside the add module and validate attributes it to (model)")
def test_known_bug_identity_residual_validate():
    _validate(costspec.loads(_spec("- layernorm: {}\n- residual: [{dropout: {}}]\n")))


@pytest.mark.xfail(strict=True, reason="a value saved in a repeat body before its parameters, with no gradient "
                                       "before the repeat: instance 0's value needs none, the others' do; refused "
                                       "('cannot yet tell which instances of it need one')")
def test_known_bug_save_in_first_gradless_repeat_instance():
    costspec.loads(_spec("""\
        - repeat: 2
          body:
            - activation: {fn: relu}
              save: a
            - linear: {out: 8}
            - add: {with: a}
        """))


def test_fixed_symbolic_broadcast_gradient():
    # found by the fuzzer: add of [B, 1] and [B, E // 5] at E = 5 charged a broadcast gradient sum torch
    # never runs (the stretch is 1 at these dims); the sum is now weighted by min(1, stretch - 1)
    _validate(costspec.loads(_spec("""\
        - linear: {out: E // 5}
          save: a
        - mean: {axes: [-1], keepdim: true}
        - add: {with: a}
        """, dims="{B: 2, E: 5}", input_="[B, 4]")))


def test_fixed_batchnorm_zero_eps_is_refused():
    # found by the fuzzer: eps 0 in train mode loaded, then torch raised in validate
    with pytest.raises(CostspecError, match="eps must be positive"):
        costspec.loads(_spec("- batchnorm: {mode: train, eps: 0.0}\n", input_="[B, 3]"))


def test_fixed_rows_of_gradless_repeat():
    model = costspec.loads(_spec("""\
        - repeat: 3
          name: pre
          body: [{activation: {fn: relu}}]
        - linear: {out: 8}
        """, input_="[4, 8]"))
    rows = {r.name: r for r in model.evaluate("backward").rows}
    assert rows["pre"].cuda_flops == 0  # holds
    assert rows["pre.act"].cuda_flops == 0  # 64: 2 instances x 32 relu_backward elements


def test_fixed_block_param_for_bool_attribute():
    model = costspec.loads(_spec("- block: lin\n  args: {b: false}\n", extra=textwrap.dedent("""\
        blocks:
          lin:
            params: {b: true}
            layers: [{linear: {out: C, bias: b}}]
        """)))
    assert model.evaluate().params == 8 * 8  # no bias


def test_fixed_position_embedding_rank_1_crashes():
    with pytest.raises(CostspecError):
        costspec.loads(_spec("- position_embedding: {}\n", input_="[C]"))


def test_fixed_derived_dim_rewrites_free_dim():
    model = costspec.loads(_spec("- linear: {out: 4}\n", dims="{B: 2, T: B*B}", input_="[B, 3]"))
    assert model.cost().tc == 24 * model.dims.dims["B"].symbol


def test_fixed_derived_dim_square_refuses_a_shape_keeping_body():
    costspec.loads(_spec("- residual: [{conv2d: {out: 2, kernel: 3, padding: 1}}]\n", dims="{B: 3, T: B*B}",
                         input_="[B, 2, B, B]"))


def test_fixed_validate_empty_variant_group():
    _validate(costspec.loads(_spec("""\
        - layernorm: {}
        - repeat: T
          name: blocks
          body: [{attention: {heads: 2}}]
          at: [{indices: [0, 1, 2, 3], name: all}]
        """, dims="{B: 2, T: 4}", input_="[B, 4, 8]")), "forward")


def test_fixed_validate_size_beyond_int64():
    model = costspec.loads(_spec("- linear: {out: 2}\n", dims="{B: 10000000000000000000000}", input_="[B, 4]"))
    try:
        _validate(model, "forward")
    except CostspecError:
        pass  # a clear refusal is a fix


def test_fixed_zero_size_at_bound_dims_crashes():
    with pytest.raises(CostspecError):  # at the defaults, when loading: heads = 11 // 12 = 0
        costspec.loads(_spec("- attention: {heads: D // 12}\n", dims="{D: 11, C: 8}", input_="[2, 4, C]"))
    model = costspec.loads(_spec("- attention: {heads: B // 5}\n", dims="{B: 5, C: 8}", input_="[2, 4, C]"))
    with pytest.raises(CostspecError):  # at bound dims: --set B=4
        model.bind(sets={"B": 4})


def test_fixed_reshape_inferred_size_is_a_fraction():
    costspec.loads(_spec("- reshape: {shape: [B, C, 2, -1]}\n- residual: [{conv2d: {out: C, kernel: 1}}]\n",
                         dims="{B: 2, C: 4, H: 8}", input_="[B, C, H]"))


def test_fixed_yaml_escape_beyond_unicode_crashes():
    with pytest.raises(CostspecError):
        costspec.loads('costspec: 1\nname: "\\U00110000"\ninput: [2]\nlayers: [{activation: {}}]\n')


def test_fixed_take_token_index_unchecked_for_symbolic_tokens():
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
