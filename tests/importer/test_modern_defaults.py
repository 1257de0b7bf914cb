"""The decoder template on keys transformers' own config classes leave null by default: DeepSeek-V2's
num_experts_per_tok and Ministral's head_dim. Each is refused with the reason transformers itself cannot run
it (checked here: the class fails on meta with that config), and what transformers can run is imported
exactly (a DeepSeek-V2 whose layers are all dense never reads the top-k)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.importer import import_hf  # noqa: E402
from costspec.importer.config import ImportProblem  # noqa: E402
from tests.importer.check import assert_exact, import_and_check, write_config  # noqa: E402

BASE = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=96, vocab_size=100,
            max_position_embeddings=16, pad_token_id=0, bos_token_id=1, eos_token_id=1)
MLA = dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, num_key_value_heads=4,
           n_routed_experts=8, moe_intermediate_size=16, q_lora_rank=None)


def runs(cls_name: str, config) -> None:
    """Build transformers' class from `config` on meta and run a forward of 4 tokens."""
    with torch.device("meta"):
        model = getattr(transformers, cls_name)(config)
        model(torch.zeros(1, 4, dtype=torch.long))


def test_deepseek_v2_default_top_k_is_refused_because_transformers_cannot_run_it(tmp_path):
    config = transformers.DeepseekV2Config(**BASE, **MLA, first_k_dense_replace=1)
    assert config.num_experts_per_tok is None  # the class default
    with pytest.raises(TypeError, match="topk"):
        runs("DeepseekV2ForCausalLM", config)
    with pytest.raises(ImportProblem) as err:
        import_hf(write_config(config, tmp_path))
    message = str(err.value)
    assert "num_experts_per_tok: null (DeepseekV2Config's default" in message
    assert "torch.topk(scores, k=num_experts_per_tok), which fails on None" in message


def test_deepseek_v2_without_a_moe_layer_never_reads_the_top_k(tmp_path):
    """first_k_dense_replace at the depth: every layer a dense MLP, the router never built."""
    config = transformers.DeepseekV2Config(**BASE, **MLA, first_k_dense_replace=2)
    runs("DeepseekV2ForCausalLM", config)
    _, results = import_and_check(config, tmp_path, passes=("forward",))
    assert_exact(results)
    text = import_hf(tmp_path / "config.json").text
    assert "moe: {" not in text and "every layer dense: no MoE layer" in text


def test_deepseek_v2_with_a_top_k_imports_exactly(tmp_path):
    config = transformers.DeepseekV2Config(**BASE, **MLA, first_k_dense_replace=1, num_experts_per_tok=2)
    _, results = import_and_check(config, tmp_path, passes=("forward",))
    assert_exact(results)


def test_ministral_without_head_dim_is_refused_because_transformers_cannot_run_it(tmp_path):
    config = transformers.MinistralConfig(**BASE, num_key_value_heads=2, sliding_window=8)
    assert config.head_dim is None  # the class default: MinistralConfig does not derive it
    with pytest.raises(TypeError):
        runs("MinistralForCausalLM", config)
    with pytest.raises(ImportProblem) as err:
        import_hf(write_config(config, tmp_path))
    message = str(err.value)
    assert "head_dim: missing or null: transformers' MinistralForCausalLM cannot run without it" in message
    assert "getattr(config, 'head_dim', hidden_size // num_attention_heads)" in message


def test_ministral_with_head_dim_c_over_heads_imports_exactly(tmp_path):
    config = transformers.MinistralConfig(**BASE, num_key_value_heads=2, sliding_window=8, head_dim=16)
    _, results = import_and_check(config, tmp_path, passes=("forward",))
    assert_exact(results)
