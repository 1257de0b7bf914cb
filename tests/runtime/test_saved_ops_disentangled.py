"""What DeBERTa's disentangled attention keeps for backward: the spec's count (`DisentangledAttention.saved`, the
shared table by `rel_embeddings`) against every tensor a saved_tensors_hooks pack hook sees in a training forward
of the generated module (FakeTensorMode, deduplicated by storage, parameters excluded), per op row, on
hypothesis-drawn small layers, fp32 and 16 bits."""
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


def _text(b: int, s: int, c: int, layers: list, dtype: str) -> str:
    return yaml.safe_dump({"costspec": 1, "name": "case", "dims": {"B": b}, "precision": {"dtype": dtype},
                           "input": ["B", s, c], "layers": layers}, sort_keys=False)


def _compared(text: str):
    model = costspec.loads(text)
    comparison = compare_saved(model, model.bind())
    assert not comparison.failures(), text + "\n" + "\n".join(comparison.failures())
    return model, comparison


@SETTINGS
@given(st.data(), st.sampled_from(["fp32", "bf16", "fp16"]))
def test_disentangled_attention_equals_autograd(data, dtype):
    """One to two layers reading one table (normalised or the parameter itself, with rows beyond 2*span), c2p and
    p2c or one of them, shared or separate position projections, the input needing a gradient or not."""
    heads, span, layers = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
    c = heads * data.draw(st.integers(1, 3))
    attrs = {"heads": heads, "span": span, "share_att_key": data.draw(st.booleans()), "bias": data.draw(st.booleans())}
    attrs.update(data.draw(st.sampled_from([{}, {"c2p": False}, {"p2c": False}])))
    table = {"rel_embeddings": {"rows": 2 * span + data.draw(st.integers(0, 2)), "readers": layers,
                                "norm": data.draw(st.booleans())}}
    pre = [{"layernorm": {}}] if data.draw(st.booleans()) else []
    body = [{"disentangled_attention": attrs}, {"linear": {"out": c}}]
    _, comparison = _compared(_text(data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), c,
                                    pre + [table] + body * layers, dtype))
    assert sum(m for _, _, m in comparison.rows) > 0


def test_by_hand():
    """bf16, B=2, S=3, C=8, 2 heads of 4, span 2 over a normalised table of 6 rows, two layers: the first layer
    keeps the table (6 x 8) for both; each keeps its input, k / scale, q folded twice (QK^T and c2p: copies), k
    folded for p2c and v for AV (copies), the two projected tables repeated over the batch (B*h x 4 x 4) and the
    probabilities (B*h x S x S)."""
    b, s, c, h, d, k2, rows = 2, 3, 8, 2, 4, 4, 6
    body = [{"disentangled_attention": {"heads": h, "span": k2 // 2}}, {"linear": {"out": c}}]
    model, _ = _compared(_text(b, s, c, [{"rel_embeddings": {"rows": rows, "readers": 2}}] + body * 2, "bf16"))
    nq = b * h * s * d
    layer = 2 * (b * s * c + nq + 2 * nq + nq + nq + 2 * b * h * k2 * d + b * h * s * s)
    counted = {k: int(v.xreplace(model.bind())) for k, v in saved_bytes(model.root).items()}
    assert counted["rel_embeddings"] == 2 * 2 * rows  # the table norm's mean and 1/std
    assert counted["attn1"] == layer + 2 * rows * c and counted["attn2"] == layer
