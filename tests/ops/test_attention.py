"""The ops and options the model zoo needs, by their conventions: windowed attention with SAM's
padding, decomposed relative positions, grouped-query attention, the two causal counting modes,
RoPE, gated MLPs, token embeddings and the tied LM head; and the zoo's totals next to published
or independently derived figures."""
from __future__ import annotations

import textwrap

import pytest

import costspec
from costspec.core.errors import SpecError
from tests.common import ROOT, run_cli

torch = pytest.importorskip("torch")

from costspec.nn.modules import window_partition, window_unpartition  # noqa: E402
from costspec.runtime.validate import render_table, validate  # noqa: E402


def spec(layers: str, dims: str = "{B: 2, S: 6, C: 8}", input_: str = "[B, S, C]") -> costspec.Model:
    return costspec.loads(textwrap.dedent(f"""\
        costspec: 1
        name: t
        dims: {dims}
        input: {input_}
        layers:
        """) + textwrap.indent(textwrap.dedent(layers), "  "))


def rows(model, pass_="forward", **dims):
    return {r.name: r for r in model.evaluate(pass_, **dims).rows}


def matmul(model, name, pass_="forward"):
    node = next(n for n, *_ in model.walk() if n.name == name)
    cost = node.forward() if pass_ == "forward" else node.backward(True)
    return int(sum(cost.matmul.values()).xreplace(model.bind()))


def check(model, pass_="train", device="meta"):
    result = validate(model, model.bind(), pass_, device)
    assert result.ok, render_table(result)
    return result


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
    assert any("counted as useful" in n for n in result.notes) and "note: attn: causal" in render_table(result)


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


# -- gated MLP ----------------------------------------------------------------------------------
def test_gated_mlp_has_three_projections_and_one_product():
    model = spec("""\
        - layernorm: {}
        - mlp: {hidden: 5, gated: true, fn: silu, bias: false}
        """)
    m, c, f = 2 * 6, 8, 5
    r = rows(model)
    assert [n for n in r if n.startswith("mlp.")] == ["mlp.gate", "mlp.up", "mlp.act", "mlp.mul", "mlp.down"]
    assert r["mlp"].tc_flops == 3 * 2 * m * c * f and r["mlp"].params == 3 * c * f
    assert r["mlp.mul"].cuda_flops == m * f and r["mlp.act"].cuda_flops == 5 * m * f  # silu: 5 FLOPs per element
    check(model)


# -- embeddings and the LM head -----------------------------------------------------------------
LM = """\
    - embedding: {vocab: 11, dim: C}
    - position_embedding: {length: 9}
    - layernorm: {}
    - lm_head: {vocab: 11, tied: TIED}
    """


def test_embedding_input_is_token_ids_in_range():
    model = spec(LM.replace("TIED", "true"), input_="[B, S]")
    _, make_input = model.to_torch()
    ids = make_input("cpu")
    assert ids.dtype == torch.int64 and ids.shape == (2, 6) and 0 <= int(ids.min()) and int(ids.max()) < 11
    assert rows(model)["embed"].tc_flops == rows(model)["embed"].cuda_flops == 0  # a lookup: bytes, no FLOPs


def test_tied_lm_head_shares_the_table_and_counts_it_once():
    tied, untied = (spec(LM.replace("TIED", t), input_="[B, S]") for t in ("true", "false"))
    vocab, c = 11, 8
    assert rows(tied)["lm_head"].params == 0
    assert untied.evaluate().params - tied.evaluate().params == vocab * c
    module, _ = tied.to_torch()
    assert module.lm_head.weight is module.embed.weight
    assert sum(p.numel() for p in module.parameters()) == tied.evaluate().params
    result = check(tied)
    moved = [a for a in result.reconciliations if a.rule == "tied-weight-grad-sum"]
    assert {(a.row, a.pointwise["add"]) for a in moved} == {("lm_head", -vocab * c), ("embed", vocab * c)}
    check(tied, device="cpu")


def test_tied_lm_head_needs_an_embedding():
    model = spec("- lm_head: {vocab: 11, tied: true}")
    with pytest.raises(SpecError, match="tied to the model's embedding layer, but the model has none"):
        model.to_torch()


def test_position_table_must_cover_the_sequence():
    with pytest.raises(SpecError, match="position table length 4 is shorter than the 6 tokens"):
        spec("- position_embedding: {length: 4}")


# -- the zoo ------------------------------------------------------------------------------------
def test_sam_eval_shows_windowed_and_global_blocks_with_counts():
    report = costspec.load(ROOT / "specs/sam_vit_b.yaml").evaluate()
    r = {x.name: x for x in report.rows}
    assert r["blocks[global]"].count == 4 and r["blocks[others]"].count == 8
    assert r["blocks"].repeat == 12
    out = run_cli("eval", "specs/sam_vit_b.yaml", "--depth", "2")
    assert out.returncode == 0, out.stderr
    assert "global x4" in out.stdout and "others x8" in out.stdout


# Forward, batch 1: Tensor-Core FLOPs (2 per multiply-add) and parameters, next to the figures they
# are checked against (see each spec's source).
ZOO = {
    # SAM ViT-B: ~487 GMACs (fvcore MACs, as efficient-SAM papers tabulate); image encoder 89.67 M params
    "sam_vit_b": (972_077_334_528, 89_670_912),
    # CLIP ViT-L/14 @ 224: open_clip's 81.08 "GFLOPs" are fvcore MACs; 303.97 M visual params
    "clip_vit_l14": (162_025_537_536, 303_966_208),
    # DeepEncoder: SAM-B (+ 2 convs) + CLIP-L; the paper quotes ~80 M + ~300 M params
    "deepencoder": (1_138_624_856_064, 398_144_768),
    # BERT-base: 2 * 84.93 M weights * 512 + 4 * S^2 * C * L; 108.89 M params (109.48 M with the pooler)
    "bert_base": (96_636_764_160, 108_891_648),
    # GPT-2 small: 2 * 84.93 M * 1024 + 4 * S^2 * C * L + LM head 2 * S * C * V; 124.44 M params
    "gpt2_small": (291_648_307_200, 124_439_808),
    # Llama-style 1B: 2 * 721.4 M weights * 2048 + 4 * S^2 * C * L
    "llama_1b": (3_504_693_313_536, 787_023_872),
}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_totals(name):
    report = costspec.load(ROOT / f"specs/{name}.yaml").evaluate()
    tc, params = ZOO[name]
    assert (report.tc, report.params) == (tc, params)


def test_zoo_totals_against_independent_derivations():
    def macs(name):
        return ZOO[name][0] // 2

    assert abs(macs("sam_vit_b") / 487e9 - 1) < 0.01
    assert abs(macs("clip_vit_l14") / 81.08e9 - 1) < 0.01
    C, L = 768, 12
    weights = L * 12 * C * C  # per layer 4 C^2 attention + 8 C^2 MLP
    assert ZOO["bert_base"][0] == 2 * weights * 512 + 4 * 512 ** 2 * C * L
    assert ZOO["gpt2_small"][0] == 2 * weights * 1024 + 4 * 1024 ** 2 * C * L + 2 * 1024 * C * 50257
    C, L, kv, F, S = 2048, 16, 8 * 64, 5632, 2048
    weights = L * (2 * C * C + 2 * C * kv + 3 * C * F)
    assert ZOO["llama_1b"][0] == 2 * weights * S + 4 * S ** 2 * C * L

