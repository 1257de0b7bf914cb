"""The attention variants against the transformers modules that run them, on meta, forward and train: every
row PASS (matmul FLOPs after the named rules, parameters, every pointwise kind), at two layers and small widths.

DeepSeek-V3's and DeepSeek-V2-Lite's multi-head latent attention (`mla`, dense MLPs so no router is
involved), Gemma 2's soft-capped
attention and post-norms (the zoo spec, shrunk), gpt-oss's attention sinks (GptOssAttention alone: its MoE
block is not this file's), q/k norms (Qwen3: RMSNorm per head; OLMo-2: RMSNorm over the width, norms after the
attention and the MLP; Cohere: LayerNorm per head with a weight per head), ModernBERT's alternating global and
local (bidirectional window) layers. The specs are in tests/against/specs/; every `ignore:` there is a named
rule with its formula.
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import Target, load_target  # noqa: E402
from costspec.model import load, loads  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).resolve().parent / "specs"
PASSES = ["forward", "train"]


def check(model, target: str, pass_: str, config: dict, dims: dict | None = None):
    values = model.bind(sets=dims or {})
    real = load_target(target, model, values, "meta", None, {k: str(v) for k, v in config.items()})
    return validate_against(model, values, real, pass_)


def assert_exact(result) -> dict:
    assert result.ok, "\n".join(result.failures())
    totals = summary(result)
    for phase in totals.values():
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    assert not result.rowmap.unmatched_real
    return totals


def row(result, phase: str, name: str):
    return next(r for r in result.phases[phase].rows if r.name == name)


# -- multi-head latent attention ---------------------------------------------------------------------------
DEEPSEEK = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
            "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
            "intermediate_size": 96, "vocab_size": 100, "first_k_dense_replace": 2}


@pytest.mark.parametrize("pass_", PASSES)
def test_mla_matches_deepseek_v3_attention(pass_):
    result = check(load(SPECS / "deepseek_v3_dense.yaml"), "hf:DeepseekV3Model", pass_, DEEPSEEK)
    assert_exact(result)
    attn = row(result, "forward", "layers.attn")
    # per layer, M = B*S = 16 rows: q_a 64->24, q_b 24->4*(8+4), kv_a 64->16+4, kv_b 16->4*(8+8), o 4*8->64;
    # SDPA 2*h*S*S*((d_n + d_r) + d_v) = 2*4*16*16*(12 + 8)
    M, C, h = 16, 64, 4
    linears = 2 * M * (C * 24 + 24 * h * 12 + C * 20 + 16 * h * 16 + h * 8 * C)
    assert attn.real_matmul == attn.spec_matmul == 2 * (linears + 2 * h * 16 * 16 * 20) == 532_480
    # q_a, q_a_layernorm, q_b, kv_a, kv_a_layernorm, kv_b, o (no biases)
    assert attn.real_params == 2 * (C * 24 + 24 + 24 * h * 12 + C * 20 + 16 + 16 * h * 16 + h * 8 * C) == 14_160


@pytest.mark.parametrize("pass_", PASSES)
def test_mla_with_one_q_projection_matches_deepseek_v2_lite_attention(pass_):
    """q_lora_rank null (DeepSeek-V2-Lite): one q projection; DeepSeek-V2 rotates with complex numbers."""
    config = {**DEEPSEEK, "q_lora_rank": "null"}
    result = check(load(SPECS / "deepseek_v2_lite_dense.yaml"), "hf:DeepseekV2Model", pass_, config)
    assert_exact(result)
    attn = row(result, "forward", "layers.attn")
    assert attn.real_params == attn.spec_params == 2 * (64 * 4 * 12 + 64 * 20 + 16 + 16 * 4 * 16 + 4 * 8 * 64)


def test_absorbed_mla_costs_the_latent_attention_and_the_same_projections():
    """The weight-absorbed form: per token uk + uv cost what kv_b cost (h*r*(d_n + d_v) multiply-adds);
    the SDPA multiplies over 2*r + d_r dims per (query, key) pair instead of d_n + d_r + d_v."""
    text = (SPECS / "deepseek_v3_dense.yaml").read_text()
    plain = loads(text).evaluate("forward")
    absorbed = loads(text.replace("causal: true}", "causal: true, absorb: true}")).evaluate("forward")
    B, S, h, r, dn, dr, dv, L = 1, 16, 4, 16, 8, 4, 8, 2
    assert absorbed.params == plain.params
    assert absorbed.tc - plain.tc == L * 2 * B * h * S * S * ((2 * r + dr) - (dn + dr + dv)) == 65_536


# -- soft-capping and post-norms: the zoo's Gemma 2 2B, shrunk ---------------------------------------------
GEMMA2_SMALL = ({"S": 64, "W": 16, "L": 2, "C": 64, "F": 96, "heads": 4, "KV": 2, "D": 16, "V": 100},
                {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "head_dim": 16, "intermediate_size": 96, "vocab_size": 100, "sliding_window": 16})


def gemma2(layers: int | None = None):
    """specs/gemma2_2b.yaml; with `layers`, its global layers' indices cut to those below it (the odd ones)."""
    text = (ROOT / "specs" / "gemma2_2b.yaml").read_text()
    if layers is not None:
        full = "indices: [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25]"
        assert full in text
        text = text.replace(full, f"indices: {list(range(1, layers, 2))}")
    return loads(text)


@pytest.mark.parametrize("pass_", PASSES)
def test_small_gemma2_matches_gemma2_for_causal_lm(pass_):
    dims, config = GEMMA2_SMALL
    result = check(gemma2(2), "hf:Gemma2ForCausalLM", pass_, config, dims)
    totals = assert_exact(result)
    rules = {a.rule for a in result.reconciliations}
    assert "attention-eager" in rules  # soft-capping: transformers runs eager attention, the spec counts flash
    S, C, h, kv, d, F, V = 64, 64, 4, 2, 16, 96, 100
    per_layer = 2 * S * C * (h * d + 2 * kv * d) + 2 * S * h * d * C + 3 * 2 * S * C * F + 2 * 2 * h * S * S * d
    assert totals["forward"]["spec_matmul"] == 2 * per_layer + 2 * S * C * V == 10_780_672
    # the soft-cap: 2 scale + 1 tanh per score, in each layer's attention
    attn = row(result, "forward", "layers[global].attn")
    assert attn.spec_pointwise["tanh"] == attn.real_pointwise["tanh"] == h * S * S


@pytest.mark.slow
@pytest.mark.parametrize("pass_", PASSES)
def test_gemma2_2b_full_size_matches_gemma2_for_causal_lm(pass_):
    """S = 8192 on meta: Gemma2Config()'s defaults are gemma-2-2b's (sliding_window 4096)."""
    totals = assert_exact(check(gemma2(), "hf:Gemma2ForCausalLM", pass_, {}))
    assert totals["forward"]["spec_params"] == 2_614_341_888


# -- attention sinks: GptOssAttention alone ----------------------------------------------------------------
def gpt_oss_attention(seq: int):
    """transformers' GptOssAttention with its rotary embedding and a causal float mask built once (as the
    model's eager mask), on meta."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding

    class AttentionOnly(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.rotary = GptOssRotaryEmbedding(config)
            self.attn = GptOssAttention(config, layer_idx=0)
            self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1)[None, None], persistent=False)
            self.register_buffer("positions", torch.arange(seq)[None], persistent=False)

        def forward(self, x):
            return self.attn(x, self.rotary(x, self.positions), self.mask)[0]

    config = GptOssConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                          num_hidden_layers=1, layer_types=["full_attention"])
    config._attn_implementation = "eager"
    with torch.device("meta"):
        return AttentionOnly(config)


@pytest.mark.parametrize("pass_", PASSES)
def test_sinks_match_gpt_oss_attention(pass_):
    model = load(SPECS / "gpt_oss_sinks.yaml")
    values = model.bind()
    x = torch.randn(2, 16, 64, device="meta")
    result = validate_against(model, values, Target("GptOssAttention", gpt_oss_attention(16), (x,)), pass_)
    assert_exact(result)
    attn = row(result, "forward", "attn")
    assert attn.real_params == attn.spec_params == 2 * (64 * 64 + 64) + 2 * (64 * 32 + 32) + 4  # q, o; k, v; sinks
    assert attn.spec_pointwise["softmax"] == attn.real_pointwise["softmax"] == 2 * 4 * 16 * 17  # S + 1 per row


# -- q/k normalisation ---------------------------------------------------------------------------------------
LLM = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
       "intermediate_size": 96, "vocab_size": 100}


@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("spec,target,config", [
    ("qwen3_qk_norm", "hf:Qwen3Model", {"head_dim": 16}),
    ("olmo2_norms_after", "hf:Olmo2Model", {}),
    ("cohere_qk_layernorm", "hf:CohereModel", {"use_qk_norm": True}),
], ids=["qwen3", "olmo2", "cohere"])
def test_qk_norms_match(spec, target, config, pass_):
    result = check(load(SPECS / f"{spec}.yaml"), target, pass_, {**LLM, **config})
    assert_exact(result)
    attn = row(result, "forward", "layers.attn")
    kind = "layernorm" if spec.startswith("cohere") else "rmsnorm"
    # q and k normalised once each per layer: B*S*(h + kv)*d elements over the 2 layers
    assert attn.spec_pointwise[kind] == attn.real_pointwise[kind] == 2 * 16 * (4 + 2) * 16


# -- ModernBERT: a global layer and a local one ------------------------------------------------------------
MODERNBERT = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96,
              "vocab_size": 100, "local_attention": 8, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
              "cls_token_id": 2, "sep_token_id": 1, "layer_types": "[full_attention, sliding_attention]"}


@pytest.mark.parametrize("pass_", PASSES)
def test_alternating_local_attention_matches_modernbert(pass_):
    result = check(load(SPECS / "modernbert_local.yaml"), "hf:ModernBertModel", pass_, MODERNBERT)
    assert_exact(result)
    if pass_ == "forward":  # the local layer's mask: flash selects per score (B*h*S*S); meta's math SDPA turns
        # the boolean [1, 1, S, S] mask it is handed into a float one (S*S wheres) and adds it to the scores
        applied = [a for a in result.reconciliations if a.rule == "sdpa-math-decomposition" and a.row == "local.attn.sdpa"]
        assert applied and applied[0].pointwise == {"add": 4 * 32 * 32, "select": -4 * 32 * 32 + 32 * 32}


# -- DeBERTa-v2/v3's disentangled attention ----------------------------------------------------------------
def deberta(pass_: str):
    """transformers' DebertaV2Model as DeBERTa-v3 configures it (relative attention with log buckets, the table
    normalised, share_att_key, c2p and p2c, no absolute positions), small, with an all-ones attention mask (its
    relative-attention keys are not config attributes transformers declares: the config is built directly)."""
    from transformers import DebertaV2Config, DebertaV2Model

    from costspec.against.target import spec_input

    config = DebertaV2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                             vocab_size=100, max_position_embeddings=64, relative_attention=True, position_buckets=4,
                             norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type="p2c|c2p",
                             position_biased_input=False, type_vocab_size=0)
    with torch.device("meta"):
        real = DebertaV2Model(config).eval()
    model = load(SPECS / "deberta_v2_disentangled.yaml")
    values = model.bind()
    ids = spec_input(model, values, "meta")
    mask = torch.ones(ids.shape, dtype=torch.long, device="meta")
    return validate_against(model, values, Target("DebertaV2Model", real, (ids,), {"attention_mask": mask}), pass_)


@pytest.mark.parametrize("pass_", PASSES)
def test_disentangled_attention_matches_deberta_v2(pass_):
    result = deberta(pass_)
    assert_exact(result)
    B, S, C, h, d, K2, L = 2, 16, 64, 4, 16, 8, 2
    attn = row(result, "forward", "encoder.layers.attn")
    # q, k, v on the B*S tokens; the table's 2K rows through k (c2p) and q (p2c); QK^T and AV; c2p and p2c
    linears = 3 * 2 * B * S * C * C + 2 * 2 * K2 * C * C
    assert attn.real_matmul == attn.spec_matmul == L * (linears + 2 * 2 * B * h * S * S * d + 2 * 2 * B * h * S * K2 * d)
    table = row(result, "forward", "encoder.rel_embeddings")
    assert table.real_params == table.spec_params == K2 * C + 2 * C  # the table and its LayerNorm
