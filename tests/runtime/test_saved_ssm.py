"""What `mamba` (its sequential selective scan, fp32 and 16 bits, with and without Jamba's inner norms) and `mamba2`
(the chunked SSD scan, fp32 and 16 bits) keep for backward: the spec's count (`costspec.tree.saved`) against every tensor autograd saves in a training forward of the
generated module (FakeTensorMode, deduplicated by storage, parameters excluded), at small random dims; and the
saved tensors written out from the dims."""
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
DTYPES = st.sampled_from(["fp32", "bf16", "fp16"])


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


# ----------------------------------------------------------------------------------------------
# mamba2
# ----------------------------------------------------------------------------------------------
@st.composite
def mamba2_case(draw) -> tuple[list, dict]:
    """Chunks that divide S or pad it; 1-2 groups of 1-2 heads; d_state and chunk 2 or more."""
    groups = draw(st.integers(1, 2))
    heads, head_dim = groups * draw(st.integers(1, 2)), draw(st.integers(1, 3))
    expand = 2 if heads * head_dim % 2 == 0 and draw(st.booleans()) else 1
    attrs = {"d_state": draw(st.integers(2, 3)), "d_conv": draw(st.integers(1, 3)), "expand": expand,
             "head_dim": head_dim, "heads": heads, "groups": groups, "chunk": draw(st.integers(2, 4)),
             "bias": draw(st.booleans()), "conv_bias": draw(st.booleans())}
    return [draw(st.integers(1, 2)), draw(st.integers(1, 6)), heads * head_dim // expand], attrs


@SETTINGS
@given(st.data(), DTYPES)
def test_mamba2_saved_bytes_match_autograd(data, dtype):
    shape, attrs = data.draw(mamba2_case())
    layers = ([{"layernorm": {}}] if data.draw(st.booleans()) else []) + [{"mamba2": attrs}]
    assert assert_saved_equal(spec_text(shape, layers, dtype)) > 0


def mamba2_bytes(b: int, s: int, c: int, h: int, p: int, g: int, n: int, q: int, k: int, size: int) -> int:
    """Written out for `size`-byte dtypes: each einsum folds its operands' (b, c, h) dims to one batch, a view or a
    copy as the dims of size 1 allow (see costspec.ops.ssm.mamba2_saved); the bool masks one byte each."""
    e, nc = h * p, -(-s // q)
    sp, t, conv_dim = nc * q, b * s, h * p + 2 * g * n
    chunked = b * nc * h * q
    bc_view = h == 1 or (b == 1 and nc == 1)  # B and C chunked: (B, c, Q, H, N) contiguous
    x_view = nc == 1 or (h == 1 and (b == 1 or p == 1))  # x chunked: S innermost
    states_view = nc == 1 or (b == 1 and h == 1)  # the recurrence's output, laid out (b, h, c, p, n)
    own = size * (t * c + t * (2 * e + 2 * g * n + h) + b * conv_dim * (s + k - 1) + 2 * t * h + t * e)
    # fp32: SiLU's output and the clamped dt; 16 bits: fp32 copies of x, of the clamped dt (twice) and of the gate
    reads = b * conv_dim * s + t * h if size == 4 else t * e + 2 * t * h + t * e
    segments = b * h * nc * q * q + b * h * (nc + 1) ** 2 + 2 * b * h * nc * q
    einsums = ((1 if bc_view else 2) * chunked * n + (0 if bc_view else chunked * n) + 2 * chunked * q
               + (b * sp * h * p if x_view else 2 * chunked * p) + b * sp * h * n + chunked * n
               + b * (nc + 1) * h * p * n + (nc + 1 if states_view else nc) * b * h * p * n + chunked * p)
    norm = b * sp * e + 3 * t * e + t * g
    masks = 2 * q * q + 2 * (nc + 1) ** 2
    return own + 4 * (2 * h + reads + b * sp * e + segments + einsums + norm) + masks


@pytest.mark.parametrize("b, s, h, p, g, q", [
    (2, 5, 4, 2, 2, 2),  # padded, every operand a copy
    (2, 4, 2, 3, 2, 4),  # one chunk: x's operands views of its chunks, C states' of the recurrence's output
    (1, 3, 1, 2, 1, 3),  # one head: B's and C's operands views
    (1, 6, 1, 1, 1, 2),  # one sample, one head: every operand a view
    (2, 6, 1, 1, 1, 4),  # one head of one channel: x's views, the recurrence's a copy
    (1, 5, 2, 2, 1, 2),  # one sample, two heads, three chunks: copies
])
@pytest.mark.parametrize("dtype, size", [("fp32", 4), ("bf16", 2)])
def test_mamba2_by_hand(b, s, h, p, g, q, dtype, size):
    """16 bits as transformers casts: the scan and the gated norm in fp32, x, dt and the gate upcast copies."""
    n, k, c = 2, 3, h * p
    attrs = {"d_state": n, "d_conv": k, "expand": 1, "head_dim": p, "heads": h, "groups": g, "chunk": q}
    expected = mamba2_bytes(b, s, c, h, p, g, n, q, k, size)
    assert by_rows(spec_text([b, s, c], [{"mamba2": attrs}], dtype), "mixer") == (expected, expected)
