"""What attention keeps for backward with q/k norms and as cross-attention: the spec's count
(`costspec.ops.attention.saved`) against every tensor a saved_tensors_hooks pack hook sees in a training forward
of the generated module (FakeTensorMode, deduplicated by storage, parameters excluded), per op row, on
hypothesis-drawn small layers, each SDPA kernel family (flash, math, eager), fp32 and 16 bits."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.runtime.saved_bytes import compare_saved  # noqa: E402
from costspec.tree.saved import saved_bytes  # noqa: E402

SETTINGS = settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = st.sampled_from(["fp32", "bf16", "fp16"])


def _text(dims: dict, shape: list, layers: list, dtype: str) -> str:
    return yaml.safe_dump({"costspec": 1, "name": "case", "dims": dims, "precision": {"dtype": dtype},
                           "input": shape, "layers": layers}, sort_keys=False)


def _equal(text: str) -> None:
    model = costspec.loads(text)
    comparison = compare_saved(model, model.bind())
    assert sum(m for _, _, m in comparison.rows) > 0
    assert not comparison.failures(), text + "\n" + "\n".join(comparison.failures())


@st.composite
def _heads(draw, rope_ok: bool = True) -> dict:
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    rope = rope_ok and draw(st.booleans())
    attrs = {"heads": heads, "kv_heads": kv, "head_dim": 2 * draw(st.integers(1, 2)),
             "fused_qkv": draw(st.booleans()), "backend": draw(st.sampled_from(["flash", "math", "eager"])),
             "rope": rope, "causal": draw(st.booleans())}
    if rope and attrs["head_dim"] == 4 and draw(st.booleans()):
        attrs["rope_dims"] = 2
    return attrs


@st.composite
def _qk_norm(draw) -> dict:
    attrs = {"qk_norm": draw(st.sampled_from(["rmsnorm", "layernorm"])),
             "qk_norm_over": draw(st.sampled_from(["head", "all"]))}
    if attrs["qk_norm_over"] == "head":
        attrs["qk_norm_weight"] = draw(st.sampled_from(["shared", "per_head"]))
    if attrs["qk_norm"] == "layernorm":
        attrs["qk_norm_bias"] = draw(st.booleans())
    return attrs


@SETTINGS
@given(st.data(), DTYPES)
def test_qk_norm_equals_autograd(data, dtype):
    """Every norm kind, per head (a shared or a per-head weight) or over the width, with RoPE, grouped queries,
    fused or separate projections, on every kernel family."""
    attrs = {**data.draw(_heads()), **data.draw(_qk_norm())}
    c = attrs["heads"] * attrs["head_dim"]
    pre = [{"linear": {"out": c}}] if data.draw(st.booleans()) else []
    _equal(_text({"B": data.draw(st.integers(1, 3))}, ["B", data.draw(st.integers(1, 4)), c], pre + [
        {"attention": attrs}], dtype))


def test_qk_norm_by_hand():
    """Qwen3's q/k RMSNorm per head in bf16, separate projections, flash, no RoPE: the layer's input (the
    projections' weight gradients; the linear before keeps the model's input); per norm its fp32 input copy, its fp32 1/rms per row and its fp32 normalised values; the SDPA's
    q and k (the norms' bf16 outputs), v (its projection's output), the output and the fp32 logsumexp; the output
    projection's input, a copy of the kernel's (B, h, S, d) output."""
    b, s, h, kv, d = 2, 3, 4, 2, 4
    c = h * d
    text = _text({}, [b, s, c], [{"linear": {"out": c}}, {"attention": {
        "heads": h, "kv_heads": kv, "fused_qkv": False, "qk_norm": "rmsnorm", "backend": "flash"}}], "bf16")
    model = costspec.loads(text)
    nq, nk = b * h * s * d, b * kv * s * d
    norms = sum(4 * n + 4 * (n // d) + 4 * n for n in (nq, nk))
    sdpa = 2 * nq + 2 * nk + 2 * nk + 2 * nq + 4 * b * h * s
    assert {k: int(v) for k, v in saved_bytes(model.root).items()} == {
        "linear": 2 * b * s * c, "attn": 2 * b * s * c + norms + sdpa + 2 * nq}
    _equal(text)


@SETTINGS
@given(st.data(), DTYPES)
def test_cross_attention_equals_autograd(data, dtype):
    """kv: another model input (no gradient), a layer's output (a gradient) or a slice of one, of another width and
    token count;
    q/k norms, RoPE, causal, grouped queries, fused or separate projections, on every kernel family."""
    attrs = data.draw(_heads())
    if data.draw(st.booleans()):
        attrs.update(data.draw(_qk_norm()))
    b, s, t = (data.draw(st.integers(1, n)) for n in (3, 4, 5))
    c, ckv = attrs["heads"] * attrs["head_dim"], data.draw(st.integers(1, 6))
    q_path = [{"linear": {"out": c}}] if data.draw(st.booleans()) else [{"dropout": {}}]
    source = data.draw(st.sampled_from(["layer", "input", "slice"]))
    if source == "layer":  # kv made by a layer from the main input; q from the second input
        shape, other = ["B", t, ckv], f"{{q: [B, {s}, {c}]}}"
        layers = [{"linear": {"out": ckv}, "save": "enc"}, {**q_path[0], "input": "q"}, {"attention": {
            **attrs, "kv": "enc"}}]
    elif source == "input":  # kv: the second input as it is
        shape, other = ["B", s, c], f"{{enc: [B, {t}, {ckv}]}}"
        layers = q_path + [{"attention": {**attrs, "kv": "enc"}}]
    else:  # kv: the first t <= s tokens of a layer's output, a strided view unless one sample, one token or all
        t, other = min(t, s), ""
        shape = ["B", s, c]
        layers = [{"linear": {"out": ckv}, "save": "src"}, {"slice": {"axis": 1, "start": 0, "end": t}, "save": "enc"},
                  {**q_path[0], "input": "src"} if ckv == c else {"linear": {"out": c}, "input": "src"},
                  {"attention": {**attrs, "kv": "enc"}}]
    text = _text({"B": b}, shape, layers, dtype)
    _equal(text.replace("input:\n", f"inputs: {other}\ninput:\n", 1) if other else text)


@pytest.mark.parametrize("layers", [2, 3])
def test_encoder_output_read_by_a_repeat_of_cross_attentions_is_one_tensor(layers):
    """Every decoder layer of an encoder-decoder reads the one encoder output for its k and v projections:
    autograd keeps that storage once, so the later instances of the repeat charge nothing for it (the walk
    of a repeat's first instance hands what it counted from outside back to the next)."""
    c = 8
    block = [{"residual": [{"attention": {"heads": 2, "head_dim": 4, "causal": True}}]},
             {"residual": [{"attention": {"heads": 2, "head_dim": 4, "kv": "enc"}}]}]
    spec = {"costspec": 1, "name": "case", "dims": {"B": 2}, "precision": {"dtype": "bf16"},
            "inputs": {"dec": ["B", 3, c]}, "input": ["B", 5, c],
            "blocks": {"block": block},
            "layers": [{"linear": {"out": c}, "save": "enc"}, {"dropout": {}, "input": "dec"},
                       {"repeat": layers, "body": "block"}]}
    _equal(yaml.safe_dump(spec, sort_keys=False))
