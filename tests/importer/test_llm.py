"""`costspec import hf` for the decoder LLM families mistral, qwen2, gemma, mixtral, qwen2_moe (entries of the
decoder template), and the defaults every decoder family shares (bf16, S at most 4096).

Each family: a small transformers config (its config class, no download) written as config.json,
imported, and the spec checked with `validate --against hf:<class>` on meta, forward and train:
matmul FLOPs (after the named rules) and parameters exactly, every pointwise kind exactly. A
hypothesis property test draws random valid configs per family (slow) and checks the same.
"""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.importer import FAMILIES, import_hf  # noqa: E402
from costspec.importer.config import ImportProblem  # noqa: E402
from costspec.model import loads  # noqa: E402

CONFIGS = {"mistral": "MistralConfig", "qwen2": "Qwen2Config", "gemma": "GemmaConfig", "mixtral": "MixtralConfig",
           "qwen2_moe": "Qwen2MoeConfig"}


def write_config(tmp_path, model_type: str, **kwargs):
    config = getattr(transformers, CONFIGS[model_type])(**kwargs)
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps(config.to_dict()))
    return path


def check_import(path) -> dict:
    """Import the config at `path` and validate the spec against its transformers class, both passes;
    the totals per phase."""
    imported = import_hf(path)
    family = imported.family
    model = loads(imported.text)
    values = model.bind()
    totals = {}
    for pass_ in ("forward", "train"):
        real = load_target(f"hf:{family.hf_class}", model, values, "meta", str(path), dict(family.hf_kwargs))
        result = validate_against(model, values, real, pass_)
        assert result.ok, imported.text + "\n".join(result.failures())
        assert not result.rowmap.unmatched_real
        for phase, numbers in summary(result).items():
            assert numbers["real_reconciled"] == numbers["spec_matmul"]
            assert numbers["real_params"] == numbers["spec_params"]
            totals[phase] = numbers
    return totals


def hf_params(path, model_type: str) -> int:
    config = getattr(transformers, CONFIGS[model_type]).from_json_file(str(path))
    with torch.device("meta"):
        module = getattr(transformers, FAMILIES[model_type].hf_class)(config)
    return sum(p.numel() for p in module.parameters())


SMALL = {
    "mistral": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=100, max_position_embeddings=32, sliding_window=8),
    "qwen2": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=100, max_position_embeddings=32, use_sliding_window=True,
                  sliding_window=8, max_window_layers=1),
    "gemma": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=24, vocab_size=100, max_position_embeddings=32),
    "mixtral": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=100, max_position_embeddings=32, num_local_experts=4,
                    num_experts_per_tok=2),
    "qwen2_moe": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, max_position_embeddings=32, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=48,
                      mlp_only_layers=[1], norm_topk_prob=True),
}


# gemma, qwen2 and qwen2_moe take 3-11 s each here (the 2-core machine): slow; mistral and mixtral run in the fast
# profile (the rotate_half, mask, gather and fused gate_up rules all show in them)
FAST = ("mistral", "mixtral")


@pytest.mark.parametrize("model_type", [pytest.param(m, marks=() if m in FAST else pytest.mark.slow)
                                        for m in sorted(SMALL)])
def test_small_config_imports_and_matches_transformers(tmp_path, model_type):
    path = write_config(tmp_path, model_type, **SMALL[model_type])
    totals = check_import(path)
    assert totals["forward"]["spec_params"] == hf_params(path, model_type)


def test_mistral_counts_by_hand(tmp_path):
    path = write_config(tmp_path, "mistral", dtype="bfloat16", **SMALL["mistral"])
    model = loads(import_hf(path, backbone=True).text)
    report = model.report("forward", model.bind())
    # MistralModel (--backbone): S = 32 (max_position_embeddings), C 64, 4 heads / 2 KV heads of 16, F 96, L 2,
    # V 100: q, o 2*S*C*C; k, v 2*S*C*32; gate, up, down 2*S*C*F; SDPA executed 4*S*S*C
    S, C, F, L, V = 32, 64, 96, 2, 100
    assert report.tc == L * (4 * S * C * C + 4 * S * C * 32 + 6 * S * C * F + 4 * S * S * C) == 4_456_448
    assert report.params == V * C + L * (2 * C * C + 2 * C * 32 + 3 * C * F + 2 * C) + C == 68_160
    # MistralForCausalLM (the default): its untied LM head adds 2*S*C*V FLOPs and C*V parameters
    whole = loads(import_hf(path).text)
    report = whole.report("forward", whole.bind())
    assert report.tc == 4_456_448 + 2 * S * C * V and report.params == 68_160 + C * V


def test_qwen2_sliding_layers_are_variants(tmp_path):
    path = write_config(tmp_path, "qwen2", **SMALL["qwen2"])
    text = import_hf(path).text
    # layer 0 below max_window_layers is full attention, layers 1 and 2 slide
    assert "- {indices: [0], name: full, args: {window: 0}}" in text
    assert "q_bias: true, k_bias: true, v_bias: true, o_bias: false" in text
    # the math SDPA's where over transformers' boolean sliding-window mask is read from what ran (the
    # sdpa-math-decomposition rule), not written into the spec
    assert "select" not in text


def test_gemma_scales_embeddings_and_uses_geglu(tmp_path):
    path = write_config(tmp_path, "gemma", **SMALL["gemma"])
    text = import_hf(path).text
    assert "- scale: {by: sqrt(C)}" in text and "fn: gelu_tanh" in text
    assert "D: {value: 24, doc: head dim (not C / heads)}  # head_dim" in text


def test_qwen2_moe_dense_layers_listed_one_by_one(tmp_path):
    path = write_config(tmp_path, "qwen2_moe", **SMALL["qwen2_moe"])
    text = import_hf(path).text
    assert "- {block: dense_block, name: layer1, source: model.layers.1}" in text
    assert "shared_experts: 1, shared_hidden: FS, shared_gate: true" in text and "renorm: true" in text
    assert 'extra: {scatter_add: "2*B*S*K*3*FE*C"}' in text  # the 2 MoE layers' gathers


def test_window_longer_than_s_is_full_attention_with_a_note(tmp_path):
    path = write_config(tmp_path, "mistral", **dict(SMALL["mistral"], sliding_window=64))
    text = import_hf(path).text
    assert "sliding_window 64 is longer than S = 32" in text
    assert "W: {value" not in text and "sliding_window: " not in text.split("\nblocks:")[1]
    check_import(path)


@pytest.mark.parametrize("model_type, key, value, message", [
    ("mistral", "num_experts", 8, "key num_experts not understood by the mistral importer"),
    ("mixtral", "rope_parameters", {"rope_type": "ntk", "factor": 4.0}, "RoPE 'ntk' is not a rope_type transformers 5 has"),
    ("gemma", "use_bidirectional_attention", True, "not supported by the Gemma importer (the spec is a causal decoder)"),
    ("qwen2_moe", "mlp_only_layers", [7], "expected a list of layer indices below 3"),
    ("qwen2", "layer_types", ["full_attention"], "expected 3 entries (num_hidden_layers)"),
    ("mixtral", "num_experts_per_tok", 5, "num_experts_per_tok = 5 is more than num_local_experts = 4"),
])
def test_bad_or_unknown_keys_are_errors(tmp_path, model_type, key, value, message):
    path = write_config(tmp_path, model_type, **SMALL[model_type])
    data = json.loads(path.read_text())
    data[key] = value
    path.write_text(json.dumps(data))
    with pytest.raises(ImportProblem, match=re.escape(message)):
        import_hf(path)


# ----------------------------------------------------------------------------------------------
# random valid configs
# ----------------------------------------------------------------------------------------------
@st.composite
def decoder_config(draw, model_type: str) -> dict:
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([8, 16]))
    layers = draw(st.integers(1, 3))
    config = dict(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv,
                  intermediate_size=draw(st.integers(4, 48)), num_hidden_layers=layers,
                  vocab_size=draw(st.integers(8, 200)), max_position_embeddings=draw(st.integers(4, 40)))
    if model_type in ("mistral", "mixtral"):
        config["sliding_window"] = draw(st.sampled_from([None, 2, 8, 64]))
    if model_type in ("qwen2", "qwen2_moe"):
        config.update(use_sliding_window=draw(st.booleans()), sliding_window=draw(st.integers(2, 16)),
                      max_window_layers=draw(st.integers(0, layers)))
    if model_type == "gemma":
        config["head_dim"] = draw(st.sampled_from([8, 12, 32]))
    if model_type in ("mixtral", "qwen2_moe"):
        experts = draw(st.integers(1, 4))
        config["num_experts_per_tok"] = draw(st.integers(1, experts))
        config["num_local_experts" if model_type == "mixtral" else "num_experts"] = experts
    if model_type == "qwen2_moe":
        config.update(moe_intermediate_size=draw(st.integers(4, 24)),
                      shared_expert_intermediate_size=draw(st.integers(4, 24)),
                      norm_topk_prob=draw(st.booleans()), decoder_sparse_step=draw(st.integers(1, 2)),
                      mlp_only_layers=draw(st.lists(st.integers(0, layers - 1), unique=True, max_size=1)))
    return config


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_random_configs_import_and_match_transformers(tmp_path_factory, model_type):
    @settings(max_examples=5, deadline=None)
    @given(decoder_config(model_type))
    def check(config):
        path = write_config(tmp_path_factory.mktemp(model_type), model_type, **config)
        totals = check_import(path)
        assert totals["forward"]["spec_params"] == hf_params(path, model_type)

    check()


# ----------------------------------------------------------------------------------------------
# the decoders' defaults: bf16 when the config names no dtype, S = min(4096, the maximum)
# ----------------------------------------------------------------------------------------------
DEFAULTS = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "gemma": "GemmaConfig",
            "mixtral": "MixtralConfig", "qwen2_moe": "Qwen2MoeConfig", "phi": "PhiConfig",
            "gpt_neox": "GPTNeoXConfig", "gpt2": "GPT2Config"}


@pytest.mark.parametrize("model_type", sorted(DEFAULTS))
def test_defaults_are_bf16_and_at_most_4096_tokens(tmp_path, model_type):
    """transformers' default config of each class (real sizes: 2,048 to 131,072 positions), without a dtype."""
    data = getattr(transformers, DEFAULTS[model_type])().to_dict()
    data.pop("dtype", None)
    data.pop("torch_dtype", None)
    most = data.get("max_position_embeddings") or data.get("n_ctx") or data["n_positions"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    text = import_hf(path).text
    model = loads(text)
    assert model.precision.dtype == "bf16"
    assert "precision: {dtype: bf16}  # the config names no dtype: bf16" in text
    assert model.dims.dims["S"].default == min(4096, most)
    assert f"min(4096, the maximum {most}); --set S=... for another length up to {most}" in text
    data["dtype"] = "float32"  # a dtype the config names is kept
    path.write_text(json.dumps(data))
    assert loads(import_hf(path).text).precision.dtype == "fp32"
