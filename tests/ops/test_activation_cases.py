"""Every activation against torch: the `activation` op, the `fn` of mlp and moe, drawn over every
activation of the table (with hardtanh's bounds and leaky_relu's slope), analytic matmul FLOPs ==
FlopCounterMode and pointwise kinds == the aten ops executed, forward and backward (meta tensors).
Then the counts of the python-level forms op by op, the aten ops the runtime counter prices by their
arguments (pow by its exponent, clamp by its bounds), and activations a spec prices with `costs:`."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.core.errors import SpecError  # noqa: E402
from costspec.core.vocab import Phase  # noqa: E402
from costspec.ops.activations import ACTIVATIONS, activation_work  # noqa: E402
from costspec.runtime.validate import render_table, validate  # noqa: E402

SETTINGS = settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
small = st.integers(1, 5)
FNS = sorted(ACTIVATIONS)


def spec_text(shape: list, layers: list, dtype: str = "fp32", costs: dict | None = None) -> str:
    data = {"costspec": 1, "name": "case", "precision": {"dtype": dtype}, "input": shape, "layers": layers}
    if costs:
        data["costs"] = costs
    return yaml.safe_dump(data, sort_keys=False)


def check_exact(text: str) -> None:
    model = costspec.loads(text)
    result = validate(model, model.bind(), "train", "meta")
    assert result.ok, text + "\n" + render_table(result)
    for phase in ("forward", "backward"):
        total = result.total(phase)
        assert total.matmul_reconciled == total.matmul_analytic


@st.composite
def activation_layer(draw):
    fn = draw(st.sampled_from(FNS))
    attrs: dict = {"fn": fn}
    if fn == "hardtanh" and draw(st.booleans()):
        low = draw(st.integers(-3, 2))
        attrs.update(min_val=float(low), max_val=float(low + draw(st.integers(1, 4))))
    if fn == "leaky_relu" and draw(st.booleans()):
        attrs["negative_slope"] = draw(st.sampled_from([0.01, 0.2]))
    return attrs


@SETTINGS
@given(st.data(), st.sampled_from(["fp32", "bf16"]))
def test_activation_op_matches_torch(data, dtype):
    attrs = data.draw(activation_layer())
    layers = [{"activation": attrs}, {"linear": {"out": 2}}]
    if data.draw(st.booleans()):  # the input then requires grad: the activation's backward runs
        layers.insert(0, {"layernorm": {}})
    check_exact(spec_text([data.draw(small), data.draw(small)], layers, dtype))


@SETTINGS
@given(st.data())
def test_mlp_and_moe_fn_match_torch(data):
    fn = data.draw(st.sampled_from(FNS))
    c = data.draw(small)
    if data.draw(st.booleans()):
        layer = {"mlp": {"hidden": data.draw(small), "gated": data.draw(st.booleans()), "fn": fn,
                         "bias": data.draw(st.booleans())}}
    else:
        layer = {"moe": {"experts": 2, "top_k": 1, "hidden": data.draw(small), "fn": fn,
                         "gated": data.draw(st.booleans())}}
    check_exact(spec_text([data.draw(small), data.draw(small), c], [{"layernorm": {}}, layer]))


# ----------------------------------------------------------------------------------------------
# The python-level forms, op by op (FLOPs per element from the cost table)
# ----------------------------------------------------------------------------------------------
def flops(fn: str, phase: Phase) -> int:
    from costspec.core.cost_table import flops_per_element

    table = flops_per_element()
    return int(sum(table[kind] * n for kind, n in activation_work(fn, 1, phase).pointwise.items()))


@pytest.mark.parametrize("fn, forward, backward", [
    ("gelu_new", 9, 13),  # x^3 (2), 3 scale, 2 add, tanh, mul; backward: 3 mul, 4 scale, square, tanh', 2 add
    ("gelu_fast", 9, 15),  # 3 scale, 3 mul, 2 add, tanh; backward: 6 mul, 3 scale, tanh', 3 add
    ("gelu_tanh", 9, 17),  # one fused kernel each way
    ("relu6", 2, 2), ("hardtanh", 2, 2), ("hardswish", 5, 5), ("hardsigmoid", 4, 3), ("leaky_relu", 2, 2),
    ("squared_relu", 2, 3),  # relu, x*x; backward: *2, *g, relu's threshold_backward
])
def test_flops_per_element(fn, forward, backward):
    assert (flops(fn, Phase.FORWARD), flops(fn, Phase.BACKWARD)) == (forward, backward)


def test_gelu_new_kinds_are_the_ops_transformers_runs():
    """NewGELUActivation's aten ops, counted by the runtime counter, are the kinds gelu_new charges."""
    pytest.importorskip("transformers")
    from transformers.activations import ACT2FN

    from costspec.runtime.runtime_count import measure

    x = torch.randn(3, 7, device="meta", requires_grad=True)
    measured = measure(ACT2FN["gelu_new"], x, train=True)
    for phase in (Phase.FORWARD, Phase.BACKWARD):
        expected = {k: int(v) for k, v in activation_work("gelu_new", 21, phase).pointwise.items()}
        assert dict(measured.pointwise[str(phase)][""]) == expected
    assert not measured.unknown


# ----------------------------------------------------------------------------------------------
# aten ops priced by their arguments
# ----------------------------------------------------------------------------------------------
class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("fn, kinds", [
    (lambda x: torch.pow(x, 2), {"square": 12}),
    (lambda x: torch.pow(x, 3.0), {"cube": 12}),
    (lambda x: torch.pow(x, -2), {"square": 12, "pow": 12}),  # 1 / (x * x)
    (lambda x: torch.pow(x, 0.5), {"pow": 12}),
    (lambda x: torch.pow(x, 1), {}),  # a copy
    (lambda x: torch.pow(2.0, x), {"pow": 12}),  # a scalar base
    (lambda x: x.clamp(min=None, max=1.0), {"clamp_bound": 12}),
    (lambda x: x.clamp(-1.0, 1.0), {"clamp": 12}),
    (lambda x: x.clamp_min(0.5), {"clamp_bound": 12}),
])
def test_runtime_counter_prices_pow_and_clamp_by_their_arguments(fn, kinds):
    from costspec.runtime.runtime_count import measure

    measured = measure(_Fn(fn), torch.randn(3, 4, device="meta"), train=False)
    assert dict(measured.pointwise["forward"].get("", {})) == kinds
    assert not measured.unknown


def test_clamp_backward_is_a_compare_per_bound_and_a_where():
    from costspec.runtime.runtime_count import measure

    one = measure(_Fn(lambda x: x.clamp(max=1.0)), torch.randn(3, 4, device="meta", requires_grad=True), True)
    two = measure(_Fn(lambda x: x.clamp(-1.0, 1.0)), torch.randn(3, 4, device="meta", requires_grad=True), True)
    assert dict(one.pointwise["backward"][""]) == {"select": 2 * 12}  # le, where
    assert dict(two.pointwise["backward"][""]) == {"select": 4 * 12}  # ge, le, logical_and, where


# ----------------------------------------------------------------------------------------------
# Activations a spec prices itself
# ----------------------------------------------------------------------------------------------
CUSTOM = """\
costspec: 1
name: custom
costs: {my_act: 7, my_act_backward: 12}
input: [3, 5]
layers:
  - layernorm: {}
  - activation: {fn: my_act}
  - mlp: {hidden: 8, fn: my_act}
"""


def test_a_declared_activation_is_priced_by_its_costs():
    model = costspec.loads(CUSTOM)
    rows = {r.name: r for r in model.report("train", model.bind()).rows}
    assert rows["act"].cuda_flops == 15 * (7 + 12)  # 3 x 5 elements, forward and backward
    assert rows["mlp.act"].cuda_flops == 3 * 8 * (7 + 12)
    forward = {r.name: r for r in model.report("forward", model.bind()).rows}
    assert forward["act"].cuda_flops == 15 * 7


@pytest.mark.parametrize("text, message", [
    (CUSTOM.replace(", my_act_backward: 12", ""),
     "$.costs.my_act: unknown cost kind 'my_act' (expected one of add, "),
    (CUSTOM.replace("my_act: 7, ", ""), "$.costs.my_act_backward: unknown cost kind 'my_act_backward'"),
    (CUSTOM.replace("fn: my_act}\n  - mlp", "fn: gelu}\n  - mlp").replace("fn: my_act}", "fn: silu}"),
     "$.costs.my_act: cost kind 'my_act' declares an activation that no layer uses"),
    (CUSTOM.replace("activation: {fn: my_act}", "activation: {fn: my_actt}"),
     "$.layers[1].activation.fn: bad value 'my_actt' (expected one of relu, "),
    (CUSTOM.replace("costs: {my_act: 7, my_act_backward: 12}", "costs: {gelu: 7, gelu_backward2: 1}"),
     "unknown cost kind 'gelu_backward2'"),
])
def test_declared_activation_errors(text, message):
    with pytest.raises(SpecError) as err:
        costspec.loads(text)
    assert message in str(err.value)


def test_a_declared_activation_is_refused_by_the_torch_build():
    """validate builds the spec in torch: a SpecError naming the layer (the CLI's exit 2), not a traceback."""
    model = costspec.loads(CUSTOM)
    with pytest.raises(SpecError) as err:
        validate(model, model.bind(), "forward", "meta")
    assert "$.layers[1].activation.fn: activation 'my_act' is priced by the spec's costs: (my_act, " \
           "my_act_backward) and has no torch module" in str(err.value)


@pytest.mark.parametrize("attrs, message", [
    ("fn: relu, min_val: 0.0", "min_val is an option of fn: hardtanh, and this activation is relu"),
    ("fn: gelu, negative_slope: 0.2", "negative_slope is an option of fn: leaky_relu"),
    ("fn: hardtanh, min_val: 2.0, max_val: 1.0", "hardtanh's bounds are empty: min_val 2.0 >= max_val 1.0"),
])
def test_activation_options_belong_to_their_function(attrs, message):
    with pytest.raises(SpecError, match=message):
        costspec.loads(f"costspec: 1\nname: a\ninput: [3, 5]\nlayers:\n  - activation: {{{attrs}}}\n")
