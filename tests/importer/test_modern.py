"""`costspec import hf` for the families of the decoder template (costspec/importer/families/modern.py):
qwen3, qwen3_moe, gemma2, gemma3_text, phi3, starcoder2, olmo, olmo2, olmoe, granite, cohere, ministral,
smollm3, gpt_oss, deepseek_v2, deepseek_v3.

Each family: a small config built with its transformers config class (2 layers, small widths), imported, and
the spec checked with `validate --against hf:<*ForCausalLM>` on meta, forward and train: every row PASS,
matmul FLOPs (after the named rules) and parameters exactly equal. A hypothesis property test draws the
template's switches (biases, head_dim, GQA, sliding layers, soft-caps, tied head, multipliers) over several
families; the refusals are checked key by key, and through the CLI (exit 2).
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.cli import main  # noqa: E402
from costspec.importer import FAMILIES, import_hf  # noqa: E402
from costspec.importer.config import ImportProblem  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.importer.check import assert_exact, import_and_check, write_config  # noqa: E402

BASE = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
            vocab_size=100, max_position_embeddings=16, pad_token_id=0, bos_token_id=1, eos_token_id=1)
MLA = dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, num_key_value_heads=4,
           n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, first_k_dense_replace=1)
SMALL = {
    "qwen3": ("Qwen3Config", dict(head_dim=16, attention_bias=True, use_sliding_window=True, sliding_window=8,
                                  max_window_layers=1, layer_types=["full_attention", "sliding_attention"])),
    "qwen3_moe": ("Qwen3MoeConfig", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                         mlp_only_layers=[1], norm_topk_prob=True)),
    "gemma2": ("Gemma2Config", dict(head_dim=16, sliding_window=8)),
    "gemma3_text": ("Gemma3TextConfig", dict(head_dim=16, sliding_window=8,
                                             layer_types=["sliding_attention", "full_attention"])),
    "phi3": ("Phi3Config", dict(sliding_window=8, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                   "partial_rotary_factor": 0.5})),
    "starcoder2": ("Starcoder2Config", dict(sliding_window=8)),
    "olmo": ("OlmoConfig", {}),
    "olmo2": ("Olmo2Config", {}),
    "olmoe": ("OlmoeConfig", dict(num_experts=4, num_experts_per_tok=2)),
    "granite": ("GraniteConfig", dict(embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=8.0,
                                      attention_multiplier=0.015625)),
    "cohere": ("CohereConfig", dict(use_qk_norm=True)),
    "ministral": ("MinistralConfig", dict(head_dim=16, sliding_window=8,
                                          layer_types=["sliding_attention", "full_attention"])),
    "smollm3": ("SmolLM3Config", dict(no_rope_layers=[1, 0], use_sliding_window=True, sliding_window=8,
                                      layer_types=["sliding_attention", "full_attention"])),
    "gpt_oss": ("GptOssConfig", dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8)),
    "deepseek_v2": ("DeepseekV2Config", dict(MLA, q_lora_rank=None)),
    "deepseek_v3": ("DeepseekV3Config", dict(MLA, q_lora_rank=24, n_group=4, topk_group=2)),
}
# the fast profile keeps one family per kind of block (the rest, 2-6 s each here, are slow)
FAST = ("qwen3", "gemma2", "phi3", "gpt_oss", "deepseek_v3")


def config(model_type: str, **changes):
    name, small = SMALL[model_type]
    kwargs = {**BASE, **small, **changes}
    return getattr(transformers, name)(**kwargs)


@pytest.mark.parametrize("model_type", [pytest.param(m, marks=() if m in FAST else pytest.mark.slow)
                                        for m in sorted(SMALL)])
def test_small_config_matches_its_causal_lm(tmp_path, model_type):
    model, results = import_and_check(config(model_type), tmp_path)
    totals = assert_exact(results)
    # the whole causal LM: its LM head is a row of the spec and of transformers' class
    assert any(row.name == "lm_head" and row.matched for row in results["forward"].phases["forward"].rows)
    assert totals["forward"]["spec_params"] == sum(p.numel() for p in real_module(model_type, tmp_path).parameters())


def real_module(model_type: str, folder):
    cls = getattr(transformers, FAMILIES[model_type].hf_class)
    cfg = getattr(transformers, SMALL[model_type][0]).from_json_file(str(folder / "config.json"))
    with torch.device("meta"):
        return cls(cfg)


def test_every_template_family_is_tested():
    from costspec.importer.families.modern import TEMPLATES
    from tests.importer.test_llm import SMALL as OLDER  # mistral, qwen2, gemma, mixtral, qwen2_moe

    # llama: tests/importer/test_decoders.py; phi: tests/importer/test_resnet_neox.py
    assert sorted(t.model_type for t in TEMPLATES) == sorted([*SMALL, *OLDER, "llama", "phi"])


def test_qwen3_counts_by_hand(tmp_path):
    """S = 16 (max_position_embeddings, under 4096), C 64, 4 heads of 16 / 2 KV heads, F 96, L 2, V 100,
    untied head (Qwen3's default)."""
    text = import_hf(write_config(config("qwen3", attention_bias=False, use_sliding_window=False), tmp_path)).text
    report = loads(text).report("forward", loads(text).bind())
    S, C, F, L, V, kvd = 16, 64, 96, 2, 100, 32
    per_layer = 2 * S * C * (C + 2 * kvd) + 2 * S * C * C + 3 * 2 * S * C * F + 2 * 2 * 4 * S * S * 16
    assert report.tc == L * per_layer + 2 * S * C * V == 2_301_952
    assert report.params == V * C + L * (C * (C + 2 * kvd) + C * C + 3 * C * F + 2 * 16 + 2 * C) + C + C * V == 74_624


def test_defaults_bf16_and_s(tmp_path):
    """No dtype in the config: bf16, stated; S = min(4096, max_position_embeddings), the maximum in its doc."""
    cfg = config("qwen3", max_position_embeddings=32768).to_dict()
    cfg.pop("dtype", None)
    text = import_hf(write_config(cfg, tmp_path)).text
    assert "precision: {dtype: bf16}  # the config names no dtype: bf16" in text
    assert 'S: {value: 4096, doc: "sequence length (tokens): min(4096, the maximum 32768)' in text
    cfg["dtype"] = "float32"
    assert "precision: {dtype: fp32}  # dtype: float32" in import_hf(write_config(cfg, tmp_path)).text


def test_switches_show_in_the_spec(tmp_path):
    gemma2 = import_hf(write_config(config("gemma2"), tmp_path)).text
    assert "softcap: 50.0" in gemma2 and "- scale: {by: 1/30.0}" in gemma2 and "tied: true" in gemma2
    assert "- scale: {by: sqrt(C)}" in gemma2 and "source: post_feedforward_layernorm" in gemma2
    cohere = import_hf(write_config(config("cohere"), tmp_path)).text
    assert "qk_norm: layernorm" in cohere and "qk_norm_weight: per_head" in cohere and "- parallel:" in cohere
    v3 = import_hf(write_config(config("deepseek_v3"), tmp_path)).text
    assert "- {block: dense_block, name: layer0, source: model.layers.0}" in v3
    assert "scoring: sigmoid," in v3 and "score_bias: true, n_group: 4, topk_group: 2, renorm: true" in v3


@pytest.mark.parametrize("model_type, key, value, message", [
    ("gemma2", "use_bidirectional_attention", True, "use_bidirectional_attention = True: not supported by the "
                                                    "Gemma 2 importer (the spec is a causal decoder)"),
    ("olmo", "clip_qkv", 8.0, "clip_qkv = 8.0: not supported by the OLMo importer (q, k and v clamped"),
    ("qwen3", "rope_parameters", {"rope_type": "ntk", "factor": 2.0}, "RoPE 'ntk' is not a rope_type transformers 5 "
                                                                      "has"),
    ("phi3", "rope_parameters", {"rope_type": "longrope", "scale": 2}, "scale: not a RoPE frequency key"),
    ("deepseek_v2", "topk_method", "group_limited_greedy", "topk_method = 'group_limited_greedy': not supported"),
    ("deepseek_v2", "mlp_bias", True, "mlp_bias = True: not supported by the DeepSeek-V2 importer"),
    ("gpt_oss", "swiglu_alpha", 1.5, "swiglu_alpha = 1.5: the clamped SwiGLU's sigmoid slope must be 1.702"),
    ("qwen3_moe", "mlp_only_layers", [5], "expected a list of layer indices below 2"),
    ("gemma3_text", "layer_types", ["full_attention"], "expected 2 entries (num_hidden_layers)"),
    ("olmo2", "num_experts", 8, "key num_experts not understood by the olmo2 importer"),
])
def test_refusals_name_the_key(tmp_path, capsys, model_type, key, value, message):
    data = config(model_type).to_dict()
    data[key] = value
    path = write_config(data, tmp_path)
    with pytest.raises(ImportProblem, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        import_hf(path)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path)])
    assert exc.value.code == 2 and key in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# the template's switches, drawn
# ----------------------------------------------------------------------------------------------
@st.composite
def switches(draw) -> tuple[str, dict]:
    """A family of the template and random valid values of the switches its config has."""
    model_type = draw(st.sampled_from(["qwen3", "gemma2", "gemma3_text", "granite", "cohere", "starcoder2", "olmo2"]))
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([8, 16]))
    layers = draw(st.integers(1, 3))
    out = dict(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
               hidden_size=heads * head_dim, intermediate_size=draw(st.integers(4, 48)),
               vocab_size=draw(st.integers(8, 120)), max_position_embeddings=draw(st.integers(4, 24)),
               tie_word_embeddings=draw(st.booleans()))
    if model_type in ("qwen3", "gemma2", "gemma3_text"):
        out["head_dim"] = draw(st.sampled_from([8, 12, 16]))
        out["sliding_window"] = draw(st.integers(2, 16))
        out["layer_types"] = draw(st.lists(st.sampled_from(["full_attention", "sliding_attention"]),
                                           min_size=layers, max_size=layers))
    if model_type == "qwen3":
        out.update(attention_bias=draw(st.booleans()), use_sliding_window=draw(st.booleans()),
                   max_window_layers=draw(st.integers(0, layers)))
    if model_type in ("gemma2", "gemma3_text"):
        out["attn_logit_softcapping"] = draw(st.sampled_from([None, 50.0]))
        out["final_logit_softcapping"] = draw(st.sampled_from([None, 30.0]))
    if model_type == "granite":
        out.update(embedding_multiplier=draw(st.sampled_from([1.0, 12.0])),
                   residual_multiplier=draw(st.sampled_from([1.0, 0.22])),
                   logits_scaling=draw(st.sampled_from([1.0, 8.0])), attention_bias=draw(st.booleans()),
                   mlp_bias=draw(st.booleans()))
    if model_type == "cohere":
        out["use_qk_norm"] = draw(st.booleans())
    if model_type == "starcoder2":
        out.update(use_bias=draw(st.booleans()), sliding_window=draw(st.sampled_from([None, 4])))
    return model_type, out


@pytest.mark.slow
def test_random_switches_import_and_match_transformers(tmp_path_factory):
    @settings(max_examples=4, deadline=None)
    @given(switches())
    def check(drawn):
        model_type, changes = drawn
        folder = tmp_path_factory.mktemp(model_type)
        _, results = import_and_check(config(model_type, **changes), folder)
        assert_exact(results)

    check()


@pytest.mark.slow
def test_gemma2_without_soft_caps_runs_eager_attention(tmp_path):
    """Gemma2ForCausalLM has no SDPA path: without soft-caps the spec still follows its eager attention."""
    cfg = config("gemma2", attn_logit_softcapping=None, final_logit_softcapping=None)
    model, results = import_and_check(cfg, tmp_path)
    assert_exact(results)
    assert "backend: eager" in import_hf(tmp_path / "config.json").text


def test_smollm3_nope_layers_are_their_own_block(tmp_path):
    text = import_hf(write_config(config("smollm3"), tmp_path)).text
    assert "- {block: nope_block, name: layer1, source: model.layers.1, args: {window: 0}}" in text
    assert 'extra: {scale: "1*B*S*(heads + KV)*D/2"}' in text  # rotate_half runs in the one RoPE layer


def test_ministral_needs_head_dim(tmp_path):
    data = config("ministral").to_dict()
    data["head_dim"] = None
    with pytest.raises(ImportProblem, match="head_dim: missing"):
        import_hf(write_config(data, tmp_path))


def test_import_is_deterministic_and_loads(tmp_path):
    path = write_config(config("gpt_oss"), tmp_path)
    first, second = import_hf(path).text, import_hf(path).text
    assert first == second
    assert 'S: {value: 16, doc: "sequence length (tokens): min(4096, the maximum 16)' in first
    loads(first)
    assert json.loads(path.read_text())["model_type"] == "gpt_oss"


# DeepSeek-V3's published config.json (its keys and values, quantization_config left out): the real-world keys
# (auto_map, ep_size, moe_layer_freq, scoring_func, topk_method, yarn rope_scaling with mscale) import
DEEPSEEK_V3_671B = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}, "aux_loss_alpha": 0.001,
    "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
    "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
    "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280}


def test_deepseek_v3_published_config_counts_its_671b_parameters(tmp_path):
    """DeepseekV3ForCausalLM built from these values on meta holds 671,026,404,352 parameters (measured with
    transformers 5.23; the MTP layer is not built); the import's S is 4096 of 163,840."""
    model = loads(import_hf(write_config(DEEPSEEK_V3_671B, tmp_path)).text)
    assert model.report("forward", model.bind()).params == 671_026_404_352
    bad = dict(DEEPSEEK_V3_671B, moe_layer_freq=2)
    with pytest.raises(ImportProblem, match="moe_layer_freq = 2"):
        import_hf(write_config(bad, tmp_path))


@pytest.mark.parametrize("model_type", sorted(SMALL))
@pytest.mark.parametrize("key, value", [("num_hidden_layers", 10**30), ("hidden_size", "abc")])
def test_a_hostile_config_value_is_refused_before_anything_is_built(tmp_path, model_type, key, value):
    """Every family of the template declares the numeric keys it reads: a value out of range or of the wrong
    type is refused with the key named (no 10**30-layer spec is built)."""
    path = write_config(config(model_type), tmp_path)
    data = json.loads(path.read_text())
    data[key] = value
    path.write_text(json.dumps(data))
    with pytest.raises(ImportProblem, match=f"{key} = "):
        import_hf(path)
