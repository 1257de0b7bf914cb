"""costspec.ops.attention, by its conventions: windowed attention with SAM's padding, decomposed relative
positions, grouped-query attention, the two causal counting modes, RoPE, and the options (sliding window,
learned queries, relative-bias tables, partial RoPE, per-projection bias, Swin's shifted windows)."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, check, matmul, out_shape, rows

torch = pytest.importorskip("torch")

from costspec.nn.attention import window_partition, window_unpartition  # noqa: E402
from costspec.runtime.validate import render_table, validate  # noqa: E402

spec = builder(dims="{B: 2, S: 6, C: 8}", input_="[B, S, C]")
spec_nc = builder(dims="{B: 2}", input_="[B, 4, 10]")


# -- windowed attention -----------------------------------------------------------------------
def test_window_pads_a_64_grid_to_70_and_25_windows():
    model = spec("- attention: {heads: 2, window: 14, grid: [64, 64]}", dims="{B: 1, S: 4096, C: 8}")
    b, c, h, d = 1, 8, 2, 4
    tokens = 70 * 70  # 64 -> 70 = 5 windows of 14 per side
    assert matmul(model, "attn.qkv") == 2 * b * tokens * c * 3 * c  # projections run on the padded grid
    assert matmul(model, "attn.proj") == 2 * b * tokens * c * c
    assert matmul(model, "attn.sdpa") == 2 * (b * 25) * h * 196 * 196 * (d + d)  # 25 windows of 196 tokens
    x = torch.randn(2, 64, 64, 3)
    windows, padded = window_partition(x, 14)
    assert windows.shape == (2 * 25, 196, 3) and padded == (70, 70)
    assert torch.equal(window_unpartition(windows, 14, padded, (64, 64), 2), x.reshape(2, 64 * 64, 3))
    # the bottom-right window covers rows and columns 56..69: 8 x 8 real tokens, the other 132 are zero padding
    assert int((windows[-1].abs().sum(-1) == 0).sum()) == 196 - 8 * 8


def test_window_dividing_the_grid_needs_no_padding_and_validates():
    model = spec("""\
        - layernorm: {}
        - attention: {heads: 2, window: 3, grid: [3, 6], rel_pos: true}
        """, dims="{B: 2, S: 18, C: 8}")
    assert matmul(model, "attn.qkv") == 2 * 2 * 18 * 8 * 24  # no padded tokens
    check(model)
    check(model, device="cpu")


def test_window_grid_must_hold_the_tokens():
    with pytest.raises(SpecError, match=r"grid 4 x 4 does not hold the 18 tokens"):
        spec("- attention: {heads: 2, window: 3, grid: [4, 4]}", dims="{B: 2, S: 18, C: 8}")


def test_rel_pos_tables_follow_the_window_or_the_grid():
    windowed = spec("- attention: {heads: 2, window: 14, grid: [64, 64], rel_pos: true}", dims="{B: 1, S: 4096, C: 8}")
    global_ = spec("- attention: {heads: 2, grid: [64, 64], rel_pos: true}", dims="{B: 1, S: 4096, C: 8}")
    d = 4
    assert rows(windowed)["attn.rel_pos"].params == 2 * (2 * 14 - 1) * d
    assert rows(global_)["attn.rel_pos"].params == 2 * (2 * 64 - 1) * d
    # two einsums q . R: 2 * B*h * Hq*Wq * (Hq + Wq) * d, per window
    assert matmul(windowed, "attn.rel_pos") == 2 * 25 * 2 * 14 * 14 * (14 + 14) * d
    assert matmul(global_, "attn.rel_pos") == 2 * 2 * 64 * 64 * (64 + 64) * d


# -- grouped-query attention --------------------------------------------------------------------
def test_gqa_projects_kv_to_fewer_heads_and_counts_sdpa_at_query_heads():
    model = spec("""\
        - layernorm: {}
        - attention: {heads: 4, kv_heads: 2, fused_qkv: false, qkv_bias: false}
        """)
    b, s, c, h, kv, d = 2, 6, 8, 4, 2, 2
    r = rows(model)
    assert r["attn.k"].params == r["attn.v"].params == c * kv * d
    assert matmul(model, "attn.sdpa") == 2 * b * h * s * s * (d + d)  # as FlopCounterMode counts GQA
    backward = next(n for n, *_ in model.walk() if n.name == "attn.sdpa").backward(True).pointwise
    assert int(backward["bias_grad"].xreplace(model.bind())) == b * h * s * (d + d)  # dK, dV summed per group
    module, _ = model.to_torch()
    assert module.attn.k.out_features == kv * d
    check(model)


def test_kv_heads_equal_to_heads_is_plain_multi_head_attention():
    plain, same = spec("- attention: {heads: 4}"), spec("- attention: {heads: 4, kv_heads: 4}")
    assert plain.cost("backward").pointwise == same.cost("backward").pointwise


def test_kv_heads_must_divide_heads():
    with pytest.raises(SpecError, match=r"kv_heads 3 must divide heads 4"):
        spec("- attention: {heads: 4, kv_heads: 3}")
    with pytest.raises(SpecError, match=r"kv_heads 8 must divide heads 4"):
        spec("- attention: {heads: 4, kv_heads: KV}", dims="{B: 2, S: 6, C: 8, KV: 8}")


@pytest.mark.parametrize("kv", [1, 2, 4])
def test_one_spec_sweeps_kv_heads_from_multi_query_to_multi_head(kv):
    # KV is a dim: the group sum of dK and dV (B*h*S*2d elements) is there for KV < heads and gone at KV = heads
    model = spec("""\
        - layernorm: {}
        - attention: {heads: 4, kv_heads: KV}
        """, dims="{B: 2, S: 6, C: 8, KV: 1}")
    b, s, h, d = 2, 6, 4, 2
    backward = next(n for n, *_ in model.walk() if n.name == "attn.sdpa").backward(True).pointwise
    assert int(backward["bias_grad"].xreplace(model.bind(sets={"KV": kv}))) == (b * h * s * 2 * d if kv < h else 0)
    result = validate(model, model.bind(sets={"KV": kv}), "train", "meta")
    assert result.ok, render_table(result)


# -- causal counting ----------------------------------------------------------------------------
def test_causal_executed_counts_full_scores_and_useful_the_unmasked_pairs():
    executed = spec("- attention: {heads: 2, causal: true}")
    useful = spec("- attention: {heads: 2, causal: true, causal_flops: useful}")
    b, s, h, d = 2, 6, 2, 4
    assert matmul(executed, "attn.sdpa") == 2 * b * h * s * s * 2 * d
    assert matmul(useful, "attn.sdpa") == 2 * b * h * (s * (s + 1) // 2) * 2 * d
    assert matmul(spec("- attention: {heads: 2}"), "attn.sdpa") == matmul(executed, "attn.sdpa")
    [note] = executed.root.children[0].op.notes(executed.root.children[0].call)
    assert "counted as executed" in note
    result = check(useful)
    rule = {(a.rule, a.phase): a for a in result.reconciliations}[("causal-useful-flops", "forward")]
    assert rule.matmul == 2 * b * h * (s * s - s * (s + 1) // 2) * 2 * d  # FlopCounterMode counts all S x S
    assert any("counted as useful" in n for n in result.notes) and "note: attn: masked attention counted as useful" in render_table(result)


def test_causal_with_rel_pos_is_refused():
    with pytest.raises(SpecError, match="causal attention with a relative position bias is not supported"):
        spec("- attention: {heads: 2, causal: true, rel_pos: true, grid: [2, 3]}")


# -- RoPE ---------------------------------------------------------------------------------------
def test_rope_costs_three_flops_per_q_and_k_element_and_needs_even_head_dim():
    model = spec("- attention: {heads: 4, kv_heads: 2, rope: true}")
    b, s, h, kv, d = 2, 6, 4, 2, 2
    elements = b * s * (h + kv) * d
    r = rows(model)
    assert r["attn.rope"].cuda_flops == 3 * elements and r["attn.rope"].tc_flops == 0  # 2 mul + 1 add
    check(model)
    with pytest.raises(SpecError, match="rope needs an even head_dim, got 3"):
        spec("- attention: {heads: 2, head_dim: 3, rope: true}")


# -- attention options -----------------------------------------------------------------------------
def test_sliding_window_counts_useful_pairs_and_refuses_the_2d_window_misuse():
    # Mistral-style: S = 8 tokens, window 3, one head of dim 4 (C = 4)
    useful = spec_nc("- attention: {heads: 1, causal: true, sliding_window: 3, causal_flops: useful}",
                  dims="{B: 1}", input_="[B, 8, 4]")
    pairs = 3 * 4 // 2 + (8 - 3) * 3  # queries 0..2 see 1, 2, 3 keys; the other 5 see 3 each: 21
    node = next(n for n, *_ in useful.walk() if n.name == "attn.sdpa")
    assert int(node.forward().matmul["sdpa"].xreplace(useful.bind())) == 2 * pairs * (4 + 4)
    executed = spec_nc("- attention: {heads: 1, causal: true, sliding_window: 3}", dims="{B: 1}", input_="[B, 8, 4]")
    node = next(n for n, *_ in executed.walk() if n.name == "attn.sdpa")
    assert int(node.forward().matmul["sdpa"].xreplace(executed.bind())) == 2 * 8 * 8 * (4 + 4)
    with pytest.raises(SpecError, match=r"window 4096 on a grid of height 1: .*sliding_window: 4096"):
        spec_nc("- attention: {heads: 1, window: 4096, grid: [1, S]}", dims="{B: 1, S: 8192}", input_="[B, S, 4]")
    with pytest.raises(SpecError, match=r"sliding_window is a causal sliding window"):
        spec_nc("- attention: {heads: 1, sliding_window: 3}", input_="[B, 8, 4]")


def test_learned_queries_pool_the_tokens():
    # SigLIP's attention-pooling head core: 1 learned query over S = 196 tokens, C = 8, 2 heads
    model = spec_nc("- attention: {heads: 2, queries: 1, fused_qkv: true}", dims="{B: 2}", input_="[B, 196, 8]")
    assert out_shape(model) == (2, 1, 8)
    rows = {r.name: r for r in model.evaluate("forward").rows}
    assert rows["attn.queries"].params == 8
    gemm = {n.name: int(n.forward().matmul["gemm"].xreplace(model.bind())) for n, *_ in model.walk()
            if n.name in ("attn.kv", "attn.q")}
    assert gemm == {"attn.kv": 2 * 2 * 196 * 8 * 16, "attn.q": 2 * 2 * 1 * 8 * 8}  # k, v on B*S rows; q on B*n
    sdpa = next(n for n, *_ in model.walk() if n.name == "attn.sdpa").forward().matmul["sdpa"]
    assert int(sdpa.xreplace(model.bind())) == 2 * 2 * 2 * 1 * 196 * (4 + 4)  # B * h queries x 196 keys, QK^T and AV


def test_relative_bias_tables_partial_rope_and_per_projection_bias():
    t5 = spec_nc("- attention: {heads: 2, rel_bias: t5, scale: none}", input_="[B, 6, 8]")
    assert {r.name: r.params for r in t5.evaluate("forward").rows}["attn.rel_bias"] == 32 * 2  # buckets x heads
    swin = spec_nc("- attention: {heads: 2, window: 3, grid: [6, 6], rel_bias: swin}", input_="[B, 36, 8]")
    assert {r.name: r.params for r in swin.evaluate("forward").rows}["attn.rel_bias"] == 5 * 5 * 2
    partial = spec_nc("- attention: {heads: 2, head_dim: 8, rope: true, rope_dims: 2}", input_="[B, 6, 16]")
    rope = next(n for n, *_ in partial.walk() if n.name == "attn.rope").forward().pointwise
    assert int(rope["add"].xreplace(partial.bind())) == 2 * (2 + 2) * 6 * 2  # B*(h+kv)*S*rope_dims
    whisper = spec_nc("- attention: {heads: 2, fused_qkv: false, k_bias: false}", input_="[B, 6, 8]")
    rows = {r.name: r.params for r in whisper.evaluate("forward").rows}
    assert (rows["attn.q"], rows["attn.k"], rows["attn.v"]) == (8 * 8 + 8, 8 * 8, 8 * 8 + 8)
    with pytest.raises(SpecError, match=r"fused_qkv is one projection with one bias"):
        spec_nc("- attention: {heads: 2, k_bias: false}", input_="[B, 6, 8]")
    with pytest.raises(SpecError, match=r"rope needs an even rope_dims of at most head_dim 4, got 3"):
        spec_nc("- attention: {heads: 2, rope: true, rope_dims: 3}", input_="[B, 6, 8]")
    with pytest.raises(SpecError, match=r"rel_bias: swin is Swin's table"):
        spec_nc("- attention: {heads: 2, rel_bias: swin}", input_="[B, 36, 8]")
    beit = spec_nc("- attention: {heads: 2, grid: [4, 3], rel_bias: beit}", input_="[B, 13, 8]")
    assert {r.name: r.params for r in beit.evaluate("forward").rows}["attn.rel_bias"] == (7 * 5 + 3) * 2
    with pytest.raises(SpecError, match=r"needs 4 x 3 \+ 1 tokens \(the class token first\), not 12"):
        spec_nc("- attention: {heads: 2, grid: [4, 3], rel_bias: beit}", input_="[B, 12, 8]")


def test_a_shared_beit_bias_is_made_once_and_read_by_later_layers():
    """BEiT's shared_position_bias: one table (in the first layer) whose bias every layer adds; the readers'
    gradients are summed where it is made (one add per (head, query, key) element and reader)."""
    model = spec_nc("""\
        - layernorm: {}
        - attention: {heads: 2, grid: [3, 3], rel_bias: beit, rel_bias_readers: 2}
        - attention: {heads: 2, grid: [3, 3], rel_bias: beit, rel_bias_shared: true}
        - attention: {heads: 2, grid: [3, 3], rel_bias: beit, rel_bias_shared: true}
        """, input_="[B, 10, 8]")
    params = {r.name: r.params for r in model.evaluate("forward").rows}
    assert params["attn1.rel_bias"] == (5 * 5 + 3) * 2 and "attn2.rel_bias" not in params
    backward = {n.name: n for n, *_ in model.walk()}["attn1.rel_bias"].backward(True)
    assert int(backward.pointwise["add"].xreplace(model.bind())) == 2 * 2 * 10 * 10  # 2 readers x h*S*S
    result = validate(model, model.bind(), "train", "meta")
    assert result.ok, render_table(result)


def test_swin_shifted_windows_mask_every_score_and_validate():
    from costspec.runtime.validate import render_table, validate

    model = spec_nc("""\
        - layernorm: {}
        - attention: {heads: 2, window: 3, grid: [6, 6], shift: 1, rel_bias: swin}
        """, input_="[B, 36, 8]")
    node = next(n for n, *_ in model.walk() if n.name == "attn.sdpa")
    scores = 2 * 4 * 2 * 9 * 9  # B * 4 windows, 2 heads, 9 x 9 scores per window
    # flash: one add of the (shift mask + table) bias per score, and one add combining the two masks
    assert int(node.forward().pointwise["add"].xreplace(model.bind())) == scores + scores
    for device in ("meta", "cpu"):
        result = validate(model, model.bind(), "train", device)
        assert result.ok, render_table(result)
    with pytest.raises(SpecError, match=r"shift 3 is not smaller than the window 3"):
        spec_nc("- attention: {heads: 2, window: 3, grid: [6, 6], shift: 3}", input_="[B, 36, 8]")
    with pytest.raises(SpecError, match=r"shifted windows need the grid 6 x 7 divisible by the window 3"):
        spec_nc("- attention: {heads: 2, window: 3, grid: [6, 7], shift: 1}", input_="[B, 42, 8]")
