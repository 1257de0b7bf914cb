"""Imported decoder specs against their transformers models (on meta): GPT-2 (GPT2LMHeadModel) and
Llama (LlamaModel). Forward and train: no failing row, matmul FLOPs and parameters exactly equal.

Batch 1: GPT-2 looks its learned positions up in an nn.Embedding (see test_import_encoders.py)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from costspec.against.check import summary  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.importer.config import ImportProblem  # noqa: E402
from tests.importer.check import assert_exact, import_and_check, write_config  # noqa: E402

GPT2_SMALL = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 24,
              "activation_function": "gelu_pytorch_tanh", "bos_token_id": 0, "eos_token_id": 0}
LLAMA_SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 24}

DECODERS = {
    "gpt2": lambda: transformers.GPT2Config(**GPT2_SMALL),
    "gpt2_untied_n_inner": lambda: transformers.GPT2Config(**GPT2_SMALL, tie_word_embeddings=False, n_inner=80),
    "llama_gqa": lambda: transformers.LlamaConfig(**LLAMA_SMALL),
    "llama_mqa_head_dim_biases": lambda: transformers.LlamaConfig(**{**LLAMA_SMALL, "num_key_value_heads": 1},
                                                                  head_dim=24, attention_bias=True, mlp_bias=True),
    "llama_rope_scaling": lambda: transformers.LlamaConfig(**LLAMA_SMALL, rope_scaling={"rope_type": "linear",
                                                                                       "factor": 2.0}),
}


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_import_matches_the_transformers_model(name, tmp_path):
    _, results = import_and_check(DECODERS[name](), tmp_path, batch=1)
    totals = assert_exact(results)
    assert totals["forward"]["spec_matmul"] > 0


def test_gpt2_default_gelu_new_agrees_on_matmul_and_params(tmp_path):
    """gelu_new (GPT-2's default) is priced as the one tanh GELU op; transformers runs it as python-level
    ops, so only the MLP's pointwise kinds differ: the matmul FLOPs and parameters are exact."""
    config = transformers.GPT2Config(**{**GPT2_SMALL, "activation_function": "gelu_new"})
    _, results = import_and_check(config, tmp_path, passes=("forward",), batch=1)
    failures = results["forward"].phases["forward"].failures
    assert {kind for _, kind, _, _ in failures} >= {"gelu_tanh", "tanh"}
    assert not {kind for _, kind, _, _ in failures} & {"matmul", "params"}
    totals = summary(results["forward"])["forward"]
    assert totals["real_reconciled"] == totals["spec_matmul"] and totals["real_params"] == totals["spec_params"]
    assert "gelu_new: the tanh GELU" in import_hf(tmp_path / "config.json").text


def test_llama_refuses_what_it_cannot_price(tmp_path):
    data = transformers.LlamaConfig(**LLAMA_SMALL).to_dict()
    data["num_key_value_heads"] = 3
    with pytest.raises(ImportProblem, match="num_key_value_heads = 3 does not divide num_attention_heads = 4"):
        import_hf(write_config(data, tmp_path))
    data["num_key_value_heads"] = 2
    data["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    # bitsandbytes' default 4-bit type is FP4: not a costspec weight format (NF4 is)
    with pytest.raises(ImportProblem, match="quantization_config.bnb_4bit_quant_type: 'fp4'"):
        import_hf(write_config(data, tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({**data, "quantization_config": None, "hidden_act": "relu2"}))
    with pytest.raises(ImportProblem, match="hidden_act = 'relu2'"):
        import_hf(tmp_path / "config.json")


def _check(config) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _, results = import_and_check(config, Path(folder), batch=1)
        assert_exact(results)


@pytest.mark.slow
@settings(max_examples=5)
@given(heads=st.integers(1, 4), head_dim=st.sampled_from([4, 8, 16]), layers=st.integers(1, 3),
       vocab=st.integers(8, 300), positions=st.integers(4, 40), tied=st.booleans(),
       inner=st.one_of(st.none(), st.integers(4, 64)), scale=st.booleans())
def test_random_gpt2(heads, head_dim, layers, vocab, positions, tied, inner, scale):
    _check(transformers.GPT2Config(n_head=heads, n_embd=heads * head_dim, n_layer=layers, vocab_size=vocab,
                                   n_positions=positions, tie_word_embeddings=tied, n_inner=inner,
                                   scale_attn_weights=scale, activation_function="gelu_pytorch_tanh",
                                   bos_token_id=0, eos_token_id=0))


@st.composite
def llama_configs(draw) -> dict:
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([4, 8, 16]))
    explicit = draw(st.booleans())
    # LlamaConfig wants hidden_size a multiple of the heads even when head_dim is given
    width = heads * (head_dim if not explicit else draw(st.sampled_from([4, 8, 12, 16])))
    return {"num_attention_heads": heads, "num_key_value_heads": kv, "hidden_size": width,
            **({"head_dim": head_dim} if explicit else {}), "num_hidden_layers": draw(st.integers(1, 3)),
            "intermediate_size": draw(st.integers(4, 64)), "vocab_size": draw(st.integers(8, 300)),
            "max_position_embeddings": draw(st.integers(4, 40)), "attention_bias": draw(st.booleans()),
            "mlp_bias": draw(st.booleans()), "bos_token_id": 0, "eos_token_id": 0}


@pytest.mark.slow
@settings(max_examples=5)
@given(cfg=llama_configs())
def test_random_llama(cfg):
    _check(transformers.LlamaConfig(**cfg))
