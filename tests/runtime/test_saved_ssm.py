"""What `mamba` (its sequential selective scan, fp32 and 16 bits, with and without Jamba's inner norms) keeps for
backward: the spec's count (`costspec.tree.saved`) against every tensor autograd saves in a training forward of the
generated module (FakeTensorMode, deduplicated by storage, parameters excluded), at small random dims; and the
saved tensors written out from the dims."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.runtime.saved_bytes import compare_saved, measure_saved  # noqa: E402
from costspec.tree.saved import saved_bytes  # noqa: E402

SETTINGS = settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = st.sampled_from(["fp32", "bf16", "fp16"])


def spec_text(shape: list, layers: list, dtype: str) -> str:
    return yaml.safe_dump({"costspec": 1, "name": "case", "precision": {"dtype": dtype}, "input": shape,
                           "layers": layers}, sort_keys=False)


def assert_saved_equal(text: str) -> int:
    model = costspec.loads(text)
    comparison = compare_saved(model, model.bind())
    assert not comparison.failures(), text + "\n" + "\n".join(comparison.failures())
    return sum(m for _, _, m in comparison.rows)


def by_rows(text: str, row: str) -> tuple[int, int]:
    """(the spec's saved bytes of `row`, autograd's)."""
    model = costspec.loads(text)
    values = model.bind()
    return int(saved_bytes(model.root)[row].xreplace(values)), measure_saved(model, values).by_layer[row]


# ----------------------------------------------------------------------------------------------
# mamba
# ----------------------------------------------------------------------------------------------
@SETTINGS
@given(st.data(), DTYPES)
def test_mamba_saved_bytes_match_autograd(data, dtype):
    """The scan's python loop runs S steps: S up to 4."""
    attrs = {"d_state": data.draw(st.integers(1, 3)), "d_conv": data.draw(st.integers(1, 3)),
             "expand": data.draw(st.integers(1, 2)), "bias": data.draw(st.booleans()),
             "conv_bias": data.draw(st.booleans()), "inner_norms": data.draw(st.booleans())}
    if data.draw(st.booleans()):
        attrs["dt_rank"] = data.draw(st.integers(1, 3))
    shape = [data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))]
    layers = ([{"layernorm": {}}] if data.draw(st.booleans()) else []) + [{"mamba": attrs}]
    assert assert_saved_equal(spec_text(shape, layers, dtype)) > 0


def mamba_bytes(b: int, s: int, c: int, e: int, n: int, r: int, k: int, p: int, norms: bool) -> int:
    """transformers' slow path in p-byte dtypes, written out (see costspec.ops.ssm.mamba_saved)."""
    t, bes, besn, ben = b * s, b * e * s, b * e * s * n, b * e * n
    fold = 0 if 1 in (b, s, e) else t * e
    front = p * (t * c + t * 2 * e + b * e * (s + k - 1) + bes + fold)
    if p == 4:
        proj = 4 * t * (r + 2 * n) + (4 * (3 * t + 2 * t * (r + 2 * n)) if norms else 0)
        scan = 4 * (2 * e * n + 2 * bes + 2 * besn + (s + 1) * ben + 3 * bes)
        return front + proj + scan
    # 16 bits: the norms' fp32 input copies, 1/rms and normalised values, the dt and C norms' outputs
    proj = (4 * (3 * t + 2 * t * (r + 2 * n)) + p * t * (r + n)) if norms else p * t * (r + 2 * n)
    scan = (4 * (2 * e * n + 2 * besn + b * s * n + bes + (s - 1) * ben + e + bes)
            + p * (2 * bes + ben + s * ben + 2 * bes))
    return front + proj + scan


@pytest.mark.parametrize("b, s, c", [(2, 5, 3), (1, 3, 2), (2, 1, 4), (3, 2, 1)])
@pytest.mark.parametrize("dtype, p", [("fp32", 4), ("bf16", 2), ("fp16", 2)])
@pytest.mark.parametrize("norms", [False, True])
def test_mamba_by_hand(b, s, c, dtype, p, norms):
    """In 16 bits transformers upcasts B and x for dt*B*x (fp32 copies), keeps D as an fp32 copy, runs the states
    in fp32 from a 16-bit zero start and casts each to 16 bits for its contraction with C; the gated output is
    fp32 and cast back for out_proj."""
    n, r, k, expand = 3, 2, 4, 2
    attrs = {"d_state": n, "dt_rank": r, "d_conv": k, "expand": expand, "inner_norms": norms}
    expected = mamba_bytes(b, s, c, expand * c, n, r, k, p, norms)
    assert by_rows(spec_text([b, s, c], [{"mamba": attrs}], dtype), "mixer") == (expected, expected)
