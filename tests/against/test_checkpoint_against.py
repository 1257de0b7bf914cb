"""validate --against with activation checkpointing: a spec whose repeat is checkpointed (or --checkpoint)
against transformers' LlamaModel with its activation checkpointing on (every_n_layers alike), on meta:
the backward gains exactly the forward of the checkpointed layers, on both sides."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec import loads  # noqa: E402
from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.analysis.checkpointing import checkpoint_doc  # noqa: E402
from costspec.model import Model  # noqa: E402
from tests.against.helpers import failures_text  # noqa: E402

LLAMA = """
costspec: 1
name: small_llama
dims: {B: 1, S: 16, C: 64, heads: 4, KV: 2, F: 96, L: 3, V: 128}
precision: {dtype: bf16}
input: [B, S]
blocks:
  llama_block:
    - residual:
        - rmsnorm: {}
          source: input_layernorm
        - attention: {heads: heads, kv_heads: KV, fused_qkv: false, qkv_bias: false, proj_bias: false,
                      rope: true, causal: true}
          source: self_attn
    - residual:
        - rmsnorm: {}
          source: post_attention_layernorm
        - mlp: {hidden: F, gated: true, fn: silu, bias: false}
          source: mlp
ignore:
  - module: "layers.*.self_attn"
    extra: {scale: "L*B*S*(heads + KV)*(C/heads)/2"}
    reason: rotate_half's neg of half of q and k
  - module: "layers.*.self_attn"
    extra: {add: "L*B*S*(heads + KV)*(C/heads)"}
    pass: backward
    reason: rotate_half's backward adds the two halves' gradients
layers:
  - embedding: {vocab: V, dim: C}
    name: embed_tokens
    source: embed_tokens
  - repeat: L
    name: layers
    body: llama_block
    source: layers
  - rmsnorm: {}
    name: norm
    source: norm
"""
CONFIG = {"hidden_size": "64", "intermediate_size": "96", "num_hidden_layers": "3", "num_attention_heads": "4",
          "num_key_value_heads": "2", "vocab_size": "128", "max_position_embeddings": "64"}


def run(checkpoint: str):
    plain = loads(LLAMA)
    model = Model(checkpoint_doc(plain.doc, checkpoint))
    values = model.bind()
    real = load_target("hf:LlamaModel", model, values, "meta", None, CONFIG)
    result = validate_against(model, values, real, "train")
    assert result.ok, failures_text(result)
    return result, summary(result)


def test_checkpointed_layers_match_transformers_activation_checkpointing():
    _, none = run("none")
    per_layer = none["forward"]["real_matmul"] // 3  # the embedding and the norms run no matmul
    for setting, layers in (("blocks", 3), ("every:2", 2)):  # every:2: layers 0 and 2, as every_n_layers=2
        result, got = run(setting)
        assert any("activation_checkpointing_enable" in line for line in result.described)
        for phase in got.values():
            assert phase["real_reconciled"] == phase["spec_matmul"]
        assert got["forward"] == none["forward"]
        assert got["backward"]["real_matmul"] == none["backward"]["real_matmul"] + layers * per_layer
        assert got["backward"]["spec_matmul"] == none["backward"]["spec_matmul"] + layers * per_layer
