"""`moe` with every router variant and expert form against torch: softmax, sigmoid and topk_softmax
scores, the score-correction bias, group-limited choice, renormalisation with or without an epsilon,
routed_scaling_factor, a router bias, gpt-oss's clamped and interleaved experts, shared experts with
or without a gate, capacity; analytic matmul FLOPs == FlopCounterMode and pointwise kinds == the aten
ops executed, forward and backward (meta tensors). Then each option rule with its exact error, and the
routing work of DeepSeek-V3's router written out by hand."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.core.errors import SpecError  # noqa: E402
from costspec.runtime.validate import render_table, validate  # noqa: E402

SETTINGS = settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
small = st.integers(1, 5)


def spec_text(shape: list, layers: list, dtype: str) -> str:
    return yaml.safe_dump({"costspec": 1, "name": "case", "precision": {"dtype": dtype}, "input": shape,
                           "layers": layers}, sort_keys=False)


@st.composite
def moe_attrs(draw) -> dict:
    scoring = draw(st.sampled_from(["softmax", "sigmoid", "topk_softmax"]))
    groups = scoring != "topk_softmax" and draw(st.booleans())
    if groups:  # n_group groups of at least 2 experts, topk_group of them kept, top_k within them
        n_group = draw(st.integers(1, 3))
        per = draw(st.integers(2, 3))
        experts, topk_group = n_group * per, draw(st.integers(1, n_group))
        top_k = draw(st.integers(1, topk_group * per))
    else:
        experts = draw(st.integers(1, 6))
        top_k = draw(st.integers(1, experts))
    attrs = {"experts": experts, "top_k": top_k, "hidden": draw(small), "gated": draw(st.booleans()),
             "fn": draw(st.sampled_from(["silu", "gelu", "relu", "quick_gelu"])), "bias": draw(st.booleans()),
             "scoring": scoring, "router_bias": draw(st.booleans())}
    if groups:
        attrs.update(n_group=n_group, topk_group=topk_group)
    if scoring == "topk_softmax":
        attrs["renorm"] = False
    else:
        attrs["renorm"] = draw(st.booleans())
        attrs["score_bias"] = draw(st.booleans())
        if attrs["renorm"]:
            attrs["renorm_eps"] = draw(st.booleans())
    if draw(st.booleans()):
        attrs["routed_scaling_factor"] = draw(st.sampled_from([1.0, 2.5]))
    if attrs["gated"]:
        attrs["fused_gate_up"] = draw(st.booleans())
        if attrs["fused_gate_up"]:
            attrs["interleaved_gate_up"] = draw(st.booleans())
            if draw(st.booleans()):
                attrs["swiglu_limit"] = 7.0
    if draw(st.booleans()):
        attrs.update(shared_experts=draw(st.integers(1, 2)), shared_hidden=draw(small), shared_gate=draw(st.booleans()))
    if draw(st.booleans()):
        attrs["capacity_factor"] = draw(st.sampled_from([0.5, 1.25]))
    return attrs


@SETTINGS
@given(st.data(), st.sampled_from(["fp32", "bf16"]))
def test_moe_router_variants_match_torch(data, dtype):
    attrs = data.draw(moe_attrs())
    shape = [data.draw(small) for _ in range(data.draw(st.integers(1, 2)))] + [data.draw(small)]
    layers = ([{"layernorm": {}}] if data.draw(st.booleans()) else []) + [{"moe": attrs}]
    text = spec_text(shape, layers, dtype)
    model = costspec.loads(text)
    result = validate(model, model.bind(), "train", "meta", saved=True)  # and the bytes saved for backward
    assert result.ok, text + "\n" + render_table(result)
    assert result.saved is not None, result.notes
    for phase in ("forward", "backward"):
        total = result.total(phase)
        assert total.matmul_reconciled == total.matmul_analytic


# ----------------------------------------------------------------------------------------------
# The option rules
# ----------------------------------------------------------------------------------------------
def moe_spec(attrs: str) -> str:
    return f"costspec: 1\nname: m\ndims: {{E: 8}}\ninput: [6, 16]\nlayers:\n  - moe: {{hidden: 4, {attrs}}}\n"


@pytest.mark.parametrize("attrs, message", [
    ("experts: 8, top_k: 2, scoring: topk_softmax",
     "renorm does not apply to scoring topk_softmax (its softmax over the k already weighs the chosen experts) "
     "(expected renorm: false with topk_softmax)"),
    ("experts: 8, top_k: 2, scoring: topk_softmax, renorm: false, score_bias: true",
     "score_bias does not apply to scoring topk_softmax"),
    ("experts: 8, top_k: 2, scoring: topk_softmax, renorm: false, n_group: 2, topk_group: 1",
     "group-limited choice (n_group) needs scores over all experts: scoring softmax or sigmoid"),
    ("experts: 8, top_k: 2, renorm: false, renorm_eps: true",
     "renorm_eps adds an epsilon to the renormalisation's sum: set renorm"),
    ("experts: 8, top_k: 2, routed_scaling_factor: -1.0", "routed_scaling_factor -1.0 is negative"),
    ("experts: 8, top_k: 2, n_group: 4", "group-limited choice takes both n_group and topk_group"),
    ("experts: 8, top_k: 2, topk_group: 2", "group-limited choice takes both n_group and topk_group"),
    ("experts: 8, top_k: 2, swiglu_limit: 7.0",
     "swiglu_limit is an option of fused_gate_up: true experts: set fused_gate_up: true"),
    ("experts: 8, top_k: 2, interleaved_gate_up: true", "interleaved_gate_up is an option of fused_gate_up: true"),
    ("experts: 8, top_k: 2, fused_gate_up: true, swiglu_limit: -1.0", "swiglu_limit -1.0 is negative"),
    ("experts: E, top_k: 2, n_group: 3, topk_group: 1", "the 8 experts do not split into n_group 3 groups"),
    ("experts: E, top_k: 2, n_group: 8, topk_group: 1",
     "groups of experts/n_group = 8/8 have fewer than the 2 experts the group score sums"),
    ("experts: E, top_k: 2, n_group: 2, topk_group: 3", "topk_group 3 is more than the n_group 2 groups"),
    ("experts: E, top_k: 5, n_group: 2, topk_group: 1", "top_k 5 is more than the experts in topk_group 1 of 2 "
     "groups of 8"),
])
def test_router_option_rules(attrs, message):
    with pytest.raises(SpecError) as err:
        costspec.loads(moe_spec(attrs))
    assert message in str(err.value)


def test_deepseek_v3_routing_work_by_hand():
    """T tokens, E experts in G groups (TG kept), top-k: every routing step of DeepseekV3TopkRouter."""
    T, C, E, K, G, TG, F = 6, 16, 8, 2, 4, 2, 4
    model = costspec.loads(moe_spec(f"experts: {E}, top_k: {K}, scoring: sigmoid, score_bias: true, n_group: {G}, "
                                    f"topk_group: {TG}, renorm_eps: true, routed_scaling_factor: 2.5, "
                                    "fused_gate_up: true").replace("hidden: 4", f"hidden: {F}"))
    node = next(model.op_nodes())
    (route,) = [p for p in node.op.forward(node.call) if p.name == "route"]
    assert dict(route.work.pointwise) == {
        "sigmoid": T * E, "add": T * E + T,  # the score-correction bias; the epsilon on each token's sum
        "topk": T * E + T * G + T * E,  # the top-2 of each group, the top groups, the top-k experts
        "sum": 2 * T * G + T * K + T * K * C,  # the group scores, the renormalisation, the weighted outputs
        "select": 2 * T * E,  # ~mask, masked_fill
        "div": T * K, "scale": T * K,  # the renormalisation, routed_scaling_factor
        "mul": T * K * C,  # each expert output times its weight
    }
    (back,) = [p for p in node.op.backward(node.call, True) if p.name == "route"]
    assert back.work.pointwise["scatter_add"] == T * K  # the gather's backward
    assert back.work.pointwise["sigmoid_backward"] == T * E


def test_router_bias_and_score_bias_parameters():
    """gpt-oss's router bias is E parameters; DeepSeek-V3's correction bias is a buffer (no parameter)."""
    def params(attrs: str) -> int:
        model = costspec.loads(moe_spec(attrs))
        return int(model.report("forward", model.bind()).params)

    plain = params("experts: 8, top_k: 2")
    assert params("experts: 8, top_k: 2, router_bias: true") == plain + 8
    assert params("experts: 8, top_k: 2, scoring: sigmoid, score_bias: true") == plain


def test_a_router_variant_states_its_routing_work_per_token():
    model = costspec.loads(moe_spec("experts: 8, top_k: 2, scoring: topk_softmax, renorm: false, router_bias: true"))
    notes = " ".join(model.report("forward", model.bind()).notes)
    assert ("router (topk_softmax scores): per token, forward softmax 2, topk 8; backward softmax_backward 2"
            in notes)
    plain = costspec.loads(moe_spec("experts: 8, top_k: 2"))
    assert not any("router (" in n for n in plain.report("forward", plain.bind()).notes)
