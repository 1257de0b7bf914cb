"""The attention variants' numbers by hand: the unmasked pairs `causal_flops: useful` counts (causal with
fewer keys than queries, a sliding window, ModernBERT's local band) against the masks the modules build,
soft-capping's and sinks' kinds, q/k norms' parameters, the eager backend, multi-head latent attention in
both forms, and DeBERTa's table: its readers, its pass-through gradient state and its errors."""
from __future__ import annotations

import pytest
import sympy

import costspec
from costspec.core.errors import SpecError
from costspec.core.vocab import Backend
from costspec.ops.attention.sdpa import Sdpa, sdpa_backward, sdpa_forward

HEAD = "costspec: 1\nname: variants\n"


def spec(layers: str, dims: str = "{B: 2, S: 8, C: 16}", input_: str = "[B, S, C]", extra: str = "") -> costspec.Model:
    return costspec.loads(f"{HEAD}dims: {dims}\ninput: {input_}\n{extra}layers:\n{layers}")


def rows(model, pass_="forward"):
    return {r.name: r for r in model.evaluate(pass_).table.rows}


# -- the unmasked pairs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sq,sk,causal,sliding,local", [
    (7, 7, True, 0, 0), (7, 3, True, 0, 0), (3, 7, True, 0, 0), (9, 9, True, 4, 0), (9, 9, True, 12, 0),
    (9, 9, False, 0, 4), (9, 9, False, 0, 5), (5, 5, False, 0, 16), (1, 1, False, 0, 2)])
def test_useful_pairs_are_the_mask_the_module_builds(sq, sk, causal, sliding, local):
    torch = pytest.importorskip("torch")
    from costspec.nn.attention import band_mask

    shape = Sdpa(1, 1, 1, sq, sk, 1, 1, causal=causal, useful=True, window=sympy.Integer(sliding),
                 local=sympy.Integer(local))
    assert shape.pairs == int(torch.isfinite(band_mask(sq, sk, causal, sliding, local)).sum())


def test_local_window_counts_the_band_of_radius_half_the_window():
    """ModernBERT's local_attention 128 at S = 8192: |i - j| <= 64, 129 keys a query away from the ends."""
    r, s = 64, 8192
    shape = Sdpa(1, 1, 1, s, s, 1, 1, useful=True, local=sympy.Integer(128))
    assert shape.pairs == s * (2 * r + 1) - r * (r + 1) == 1_052_608


# -- soft-capping, sinks, the eager backend ----------------------------------------------------------------
def test_softcap_adds_two_scalings_and_a_tanh_per_score():
    plain = rows(spec("  - attention: {heads: 2, causal: true}\n"))["attn.sdpa"]
    capped = rows(spec("  - attention: {heads: 2, causal: true, softcap: 50.0}\n"))["attn.sdpa"]
    scores = 2 * 2 * 8 * 8  # B*h*S*S
    assert capped.values["tc_flops"] == plain.values["tc_flops"]  # no matmul FLOPs
    assert capped.values["cuda_flops"] - plain.values["cuda_flops"] == 3 * scores  # scale, tanh, scale: 1 FLOP each


def test_sinks_lengthen_every_softmax_row_by_one_and_add_a_logit_per_head():
    a = Sdpa(2, 4, 4, 8, 8, 16, 16, sinks=True)
    work = sdpa_forward(a, Backend.FLASH)
    assert work.pointwise["softmax"] == 2 * 4 * 8 * 9
    back = sdpa_backward(a, Backend.FLASH)
    assert back.pointwise["softmax_backward"] == 2 * 4 * 8 * 9 and back.pointwise["bias_grad"] == 2 * 4 * 8
    model = spec("  - attention: {heads: 4, sinks: true}\n")
    assert rows(model)["attn.sinks"].values["params"] == 4


def test_eager_scales_every_score_and_adds_the_mask_without_recomputing():
    a = Sdpa(1, 2, 2, 8, 8, 4, 4, causal=True)
    eager, flash = sdpa_forward(a, Backend.EAGER), sdpa_forward(a, Backend.FLASH)
    assert eager.pointwise == {"softmax": 128, "scale": 128, "add": 128}
    assert flash.pointwise == {"softmax": 128, "scale": 128, "select": 128}
    assert sdpa_backward(a, Backend.EAGER).matmul["sdpa"] == 2 * 4 * 2 * 64 * 4  # 4 products, none recomputed


def test_math_backend_refuses_what_pytorchs_sdpa_cannot_run():
    with pytest.raises(SpecError, match="no soft-capping or sinks"):
        spec("  - attention: {heads: 2, backend: math, sinks: true}\n")


# -- q/k norms -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("attrs,params", [
    ("qk_norm: rmsnorm", 2 * 4),  # Qwen3: one d-wide weight for q, one for k
    ("qk_norm: rmsnorm, qk_norm_over: all", 4 * 4 + 2 * 4),  # OLMo-2: h*d and kv*d
    ("qk_norm: layernorm, qk_norm_weight: per_head", 4 * 4 + 2 * 4),  # Cohere: (heads, d) weights
    ("qk_norm: layernorm, qk_norm_bias: true", 2 * 2 * 4),  # weight and bias per norm
])
def test_qk_norm_parameters(attrs, params):
    model = spec(f"  - attention: {{heads: 4, kv_heads: 2, {attrs}}}\n")
    r = rows(model)
    assert r["attn.q_norm"].values["params"] + r["attn.k_norm"].values["params"] == params
    kind = "layernorm" if "layernorm" in attrs else "rmsnorm"
    flops = {"layernorm": 7, "rmsnorm": 4}[kind]
    assert r["attn.q_norm"].values["cuda_flops"] == flops * 2 * 8 * 16  # B*S*h*d elements of q
    assert r["attn.k_norm"].values["cuda_flops"] == flops * 2 * 8 * 8  # B*S*kv*d of k


# -- multi-head latent attention -----------------------------------------------------------------------------
MLA = "  - mla: {heads: 4, kv_lora_rank: 32, q_lora_rank: 16, qk_nope_head_dim: 8, qk_rope_head_dim: 4, v_head_dim: 8"


def test_mla_parts_as_transformers_runs_them():
    r = rows(spec(MLA + ", causal: true}\n", dims="{B: 1, S: 8, C: 64}"))
    M = 8
    assert r["attn.q_a"].values["tc_flops"] == 2 * M * 64 * 16
    assert r["attn.q_b"].values["tc_flops"] == 2 * M * 16 * 4 * 12
    assert r["attn.kv_a"].values["tc_flops"] == 2 * M * 64 * (32 + 4)
    assert r["attn.kv_b"].values["tc_flops"] == 2 * M * 32 * 4 * 16
    assert r["attn.sdpa"].values["tc_flops"] == 2 * 4 * 8 * 8 * (12 + 8)
    assert r["attn.rope"].values["cuda_flops"] == 3 * M * (4 + 1) * 4  # q's 4 heads and the shared key


def test_absorbed_mla_runs_the_same_projections_per_token_and_attends_over_the_latent():
    plain = rows(spec(MLA + "}\n", dims="{B: 1, S: 8, C: 64}"))
    absorbed = rows(spec(MLA + ", absorb: true}\n", dims="{B: 1, S: 8, C: 64}"))
    assert plain["attn.kv_b"].values["tc_flops"] == absorbed["attn.uk"].values["tc_flops"] + \
        absorbed["attn.uv"].values["tc_flops"]
    assert absorbed["attn.sdpa"].values["tc_flops"] == 2 * 4 * 8 * 8 * ((32 + 4) + 32)
    assert plain["attn"].values["params"] == absorbed["attn"].values["params"]
    notes = costspec.loads(f"{HEAD}dims: {{B: 1, S: 8, C: 64}}\ninput: [B, S, C]\nlayers:\n{MLA}, absorb: true}}\n")
    assert any("attention over the latent" in n for n in notes.evaluate("forward").notes)


def test_mla_mscale_changes_no_flops_and_says_so():
    plain = spec(MLA + "}\n").evaluate("train")
    scaled = spec(MLA + ", mscale: 1.37}\n").evaluate("train")
    assert (plain.tc, plain.cuda) == (scaled.tc, scaled.cuda)
    assert any("mscale" in n and "no FLOPs" in n for n in scaled.notes)


# -- DeBERTa: the shared table -------------------------------------------------------------------------------
DEBERTA = """  - rel_embeddings: {rows: 8, readers: READERS}
  - disentangled_attention: {heads: 2, span: 4}
  - linear: {out: C}
  - disentangled_attention: {heads: 2, span: 4}
"""


def test_the_table_sums_its_readers_gradients_and_leaves_the_running_value_without_one():
    model = spec(DEBERTA.replace("READERS", "2"), dims="{B: 1, S: 6, C: 16}")
    back = rows(model, "backward")
    # the table is the first layer with parameters, yet the input passes through it: the first attention's
    # q, k, v compute no dX (dW only, 2*M*C*C each), the second's do
    assert back["attn1.q"].values["tc_flops"] == 2 * 6 * 16 * 16 + 2 * 8 * 16 * 16 * 2  # + the table's call (dX, dW)
    assert back["attn1.v"].values["tc_flops"] == 2 * 6 * 16 * 16
    assert back["attn2.v"].values["tc_flops"] == 2 * 2 * 6 * 16 * 16
    assert back["rel_embeddings.table"].values["cuda_flops"] == 1 * 8 * 16 + 11 * 8 * 16  # one add, the norm


@pytest.mark.parametrize("readers,message", [
    ("1", "more disentangled_attention layers read 'rel_embeddings' than its readers 1"),
])
def test_every_reader_needs_a_slot_of_the_table(readers, message):
    pytest.importorskip("torch")
    model = spec(DEBERTA.replace("READERS", readers), dims="{B: 1, S: 6, C: 16}")
    with pytest.raises(SpecError, match=message):
        model.to_torch()


def test_disentangled_attention_needs_a_table_before_it():
    pytest.importorskip("torch")
    model = spec("  - disentangled_attention: {heads: 2, span: 4}\n", dims="{B: 1, S: 6, C: 16}")
    with pytest.raises(SpecError, match="and there is none"):
        model.to_torch()


def test_disentangled_attention_without_terms_is_refused():
    with pytest.raises(SpecError, match="write `attention`"):
        spec("  - rel_embeddings: {rows: 8, readers: 1}\n  - disentangled_attention: {heads: 2, span: 4, c2p: false, "
             "p2c: false}\n")
