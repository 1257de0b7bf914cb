"""What `mla` (transformers' form and the weight-absorbed one; flash, math and eager attention) and `moe` (every
router variant, gpt-oss's clamped and interleaved experts) keep for backward: the spec's count
(`costspec.tree.saved`) against every tensor autograd saves in a training forward of the generated module
(FakeTensorMode, deduplicated by storage, parameters excluded), at small random dims in fp32 and bf16; and the
saved tensors of each form written out from the dims."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.runtime.saved_bytes import measure_saved  # noqa: E402
from costspec.tree.saved import saved_bytes  # noqa: E402
from tests.runtime.saved_cases import assert_saved_equal, spec_text  # noqa: E402

SETTINGS = settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
small = st.integers(1, 4)


# ----------------------------------------------------------------------------------------------
# mla
# ----------------------------------------------------------------------------------------------
@SETTINGS
@given(st.data(), st.sampled_from(["fp32", "bf16"]), st.sampled_from(["flash", "math", "eager"]), st.booleans())
def test_mla_saved_bytes_match_autograd(data, dtype, backend, absorb):
    b, s, h = data.draw(small), data.draw(small), data.draw(st.integers(1, 3))
    attrs = {"heads": h, "kv_lora_rank": data.draw(small), "q_lora_rank": data.draw(st.integers(0, 4)),
             "qk_nope_head_dim": data.draw(small), "qk_rope_head_dim": 2 * data.draw(st.integers(1, 2)),
             "v_head_dim": data.draw(small), "bias": data.draw(st.booleans()), "causal": data.draw(st.booleans()),
             "backend": backend, "absorb": absorb}
    if not absorb and data.draw(st.booleans()):  # the flash kernel takes the call: d_n + d_r = d_v
        attrs["v_head_dim"] = attrs["qk_nope_head_dim"] + attrs["qk_rope_head_dim"]
    layers = ([{"layernorm": {}}] if data.draw(st.booleans()) else []) + [{"mla": attrs}]
    assert assert_saved_equal(spec_text([b, s, data.draw(st.integers(2, 8))], layers, dtype)) > 0


def mla_spec(dtype: str, b: int, s: int, c: int, attrs: dict) -> str:
    return spec_text([b, s, c], [{"mla": attrs}], dtype)


def by_rows(text: str, row: str) -> tuple[int, int]:
    """(the spec's saved bytes of `row`, autograd's)."""
    model = costspec.loads(text)
    values = model.bind()
    return int(saved_bytes(model.root)[row].xreplace(values)), measure_saved(model, values).by_layer[row]


@pytest.mark.parametrize("b, s, h", [(2, 5, 3), (3, 4, 2), (1, 3, 2), (2, 1, 1)])
def test_absorbed_mla_by_hand(b, s, h):
    """The weight-absorbed form in bf16 on the math composite (what flash runs too: its query, r + d_r dims, is
    never v's r): the norms' fp32 statistics, uk's input (q's projection output), the scaled q and k, the
    probabilities and v repeated to the h heads in fp32, uv's and proj's inputs."""
    c, rq, r, dn, dr, dv = 16, 4, 6, 4, 2, 3
    m, heads, dk = b * s, b * h * s, r + dr
    attrs = dict(heads=h, kv_lora_rank=r, q_lora_rank=rq, qk_nope_head_dim=dn, qk_rope_head_dim=dr, v_head_dim=dv,
                 causal=True, absorb=True)
    norms = (m * rq * 4 + m * 4 + m * rq * 4 + m * rq * 2) + (m * r * 4 + m * 4 + m * r * 4)  # q_norm, kv_norm
    attention = 4 * (2 * heads * dk + heads * s + heads * r)
    expected = m * c * 2 + norms + m * h * (dn + dr) * 2 + attention + m * h * r * 2 + m * h * dv * 2
    for backend in ("flash", "math"):
        assert by_rows(mla_spec("bf16", b, s, c, {**attrs, "backend": backend}), "attn") == (expected, expected)


@pytest.mark.parametrize("b, s, h", [(2, 5, 3), (1, 3, 2)])
def test_eager_mla_by_hand(b, s, h):
    """Eager attention in fp32, in both forms: transformers' keeps the concatenated query and key, the
    probabilities, v (a copy unless it folds) and proj's input; the absorbed form repeats the latent's one key and
    value head to the h heads, a copy for B > 1 and stride-0 views of the concatenation and the latent for one
    sample."""
    c, r, dn, dr, dv = 8, 6, 4, 2, 3
    m, heads = b * s, b * h * s
    attrs = dict(heads=h, kv_lora_rank=r, qk_nope_head_dim=dn, qk_rope_head_dim=dr, v_head_dim=dv, backend="eager")
    kv_norm = m * (r + dr) + m + m * r  # fp32: kv_a's output itself, 1/rms, the normalised values
    v = m * h * (dn + dv) if 1 in (b, h, s) else heads * dv
    plain = m * c + kv_norm + m * r + 2 * heads * (dn + dr) + heads * s + v + heads * dv
    assert by_rows(mla_spec("fp32", b, s, c, attrs), "attn") == (4 * plain, 4 * plain)
    repeated = heads if b > 1 else m  # the rows of the key's and v's folded (B*h, S, .) operands
    absorbed = (m * c + kv_norm + m * h * (dn + dr) + heads * (r + dr) + repeated * (r + dr) + heads * s
                + repeated * r + heads * r + heads * dv)
    assert by_rows(mla_spec("fp32", b, s, c, {**attrs, "absorb": True}), "attn") == (4 * absorbed, 4 * absorbed)


# ----------------------------------------------------------------------------------------------
# moe: gpt-oss's experts under each router
# ----------------------------------------------------------------------------------------------
@st.composite
def clamped_moe(draw) -> dict:
    experts = draw(st.integers(1, 4))
    attrs = {"experts": experts, "top_k": draw(st.integers(1, experts)), "hidden": draw(small),
             "fn": draw(st.sampled_from(["quick_gelu", "silu", "gelu", "relu"])), "bias": draw(st.booleans()),
             "fused_gate_up": True, "interleaved_gate_up": draw(st.booleans()),
             "router_bias": draw(st.booleans()), "scoring": draw(st.sampled_from(["topk_softmax", "softmax", "sigmoid"]))}
    if not attrs["interleaved_gate_up"] or draw(st.booleans()):
        attrs["swiglu_limit"] = draw(st.sampled_from([7.0, 0.5]))
    if attrs["scoring"] == "topk_softmax":
        attrs["renorm"] = False
    if draw(st.booleans()):
        attrs["routed_scaling_factor"] = 2.5
    if draw(st.booleans()):
        attrs.update(shared_experts=1, shared_hidden=draw(small))
    if draw(st.booleans()):
        attrs["capacity_factor"] = draw(st.sampled_from([0.5, 1.25]))
    return attrs


@SETTINGS
@given(st.data(), st.sampled_from(["fp32", "bf16"]))
def test_clamped_moe_saved_bytes_match_autograd(data, dtype):
    shape = [data.draw(small) for _ in range(data.draw(st.integers(1, 2)))] + [data.draw(st.integers(2, 6))]
    layers = ([{"layernorm": {}}] if data.draw(st.booleans()) else []) + [{"moe": data.draw(clamped_moe())}]
    assert assert_saved_equal(spec_text(shape, layers, dtype)) > 0


@pytest.mark.parametrize("t, k, e, limit", [(6, 2, 3, 7.0), (5, 3, 4, 7.0), (6, 2, 3, 0)])
def test_gpt_oss_experts_by_hand(t, k, e, limit):
    """gpt-oss's router (top-k of the biased logits, softmax over the k) and its interleaved, clamped QuickGELU
    experts in fp32: the input, the k indices (int64) and weights, the T*k routed rows, per routed row gate_up
    (2F: the clamps' inputs are views of it), then the clamped gate, sigmoid(1.702 x), act, up + 1 and the
    product (F each; without the clamp, act's input is the gate view and there is no up + 1), the k outputs."""
    c, f = 8, 5
    attrs = dict(experts=e, top_k=k, hidden=f, fn="quick_gelu", bias=True, fused_gate_up=True,
                 interleaved_gate_up=True, swiglu_limit=limit, scoring="topk_softmax", renorm=False, router_bias=True)
    rows = t * k
    per_row = 2 * f + (5 if limit else 3) * f
    expected = 4 * (t * c + t * k + rows * c + rows * per_row + rows * c) + 8 * t * k
    assert by_rows(spec_text([t, c], [{"moe": attrs}], "fp32"), "moe") == (expected, expected)
