"""A Falcon-7B-shaped decoder (multi-query attention, attention and MLP in parallel on one LayerNorm
output, a prebuilt boolean causal mask) against transformers' FalconModel on meta, forward and train.

FalconModel: new_decoder_architecture false, multi_query true, parallel_attn true (Falcon-7B's config),
at small widths: 2 layers, width 256, 4 heads of 64 (as Falcon-7B's), MLP 4 x 256.
"""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.report import to_result  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.core.render import render  # noqa: E402
from costspec.model import loads  # noqa: E402

FALCON = """
costspec: 1
name: falcon_7b_shaped
doc: Falcon-7B's decoder at 2 layers and small widths
dims:
  B: {value: 2, doc: batch size}
  S: {value: 32, doc: tokens}
  C: {value: 256, doc: hidden size}
  heads: {value: 4, doc: "query heads (one key/value head: multi-query)"}
  L: {value: 2, doc: layers}
  V: {value: 1024, doc: vocabulary}
precision: {dtype: fp32}
input: [B, S]
blocks:
  falcon_block:
    # parallel_attn: x + attn(ln(x)) + mlp(ln(x)), one LayerNorm read by both branches
    - parallel:
        branches:
          - []
          - - layernorm: {}
              source: input_layernorm
            - parallel:
                branches:
                  - - attention: {heads: heads, kv_heads: 1, qkv_bias: false, proj_bias: false, rope: true,
                                  causal: true}
                      source: self_attention
                  - - mlp: {hidden: 4*C, fn: gelu, bias: false}
                      source: mlp
ignore:
  - module: "h.*.self_attention"
    extra: {scale: "L*B*S*(heads + 1)*(C/heads)/2"}
    reason: rotate_half negates half of q (h heads) and k (one head), forward and backward
  - module: "h.*.self_attention"
    extra: {add: "L*B*S*(heads + 1)*(C/heads)"}
    pass: backward
    reason: rotate_half's backward adds the gradients of the two halves it slices from q and k
  - module: "h.*.self_attention"
    extra: {scatter_add: "L*B*S*2*(C/heads)", add: "2*L*B*S*(heads + 2)*(C/heads)"}
    pass: backward
    reason: >-
      _split_heads takes q as a slice and k, v by index ([-2], [-1]) of the fused qkv output: the
      backward scatter-adds the k and v gradients (B*S*d each) and adds the three zero-filled
      gradients of the fused output (2 adds per element of its B*S*(h+2)*d)
layers:
  - embedding: {vocab: V, dim: C}
    name: word_embeddings
    source: word_embeddings
  - repeat: L
    name: h
    body: falcon_block
    source: h
  - layernorm: {}
    name: ln_f
    source: ln_f
"""

CONFIG = {"hidden_size": "256", "num_attention_heads": "4", "num_hidden_layers": "2", "vocab_size": "1024",
          "new_decoder_architecture": "false", "multi_query": "true", "parallel_attn": "true", "alibi": "false",
          "bias": "false"}


def falcon(pass_: str, batch: int = 2, spec: str = FALCON, config: dict | None = None):
    model = loads(spec)
    values = model.bind(sets={"B": batch})
    real = load_target("hf:FalconModel", model, values, "meta", None, config or CONFIG)
    return validate_against(model, values, real, pass_)


def no_negative_count(result) -> None:
    for ph in result.phases.values():
        for row in ph.rows:
            if row.matched:
                assert row.real_reconciled >= 0 and all(v >= 0 for v in row.real_pointwise.values()), row.name
    assert not re.search(r"real -\d", render(to_result(result)))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_falcon_7b_shaped_spec_passes(pass_, batch):
    result = falcon(pass_, batch)
    assert result.ok, "\n".join(result.failures())
    no_negative_count(result)
    B, S, C, h, d, L = batch, 32, 256, 4, 64, 2
    fwd = result.phases["forward"].rows[-1]
    # per layer: qkv C -> (h + 2)*d, dense, the two MLP GEMMs; SDPA over the full S x S scores
    per_layer = 2 * B * S * C * ((h + 2) * d + C + 2 * 4 * C) + 2 * B * h * S * S * d * 2
    assert fwd.real_matmul == fwd.spec_matmul == L * per_layer
    assert fwd.real_params == 1024 * C + L * (C * (h + 2) * d + C * C + 2 * 4 * C * C + 2 * C) + 2 * C
    text = render(to_result(result))
    assert "structure: exact" in text and "result: PASS" in text
    assert "differences" not in text  # the boundary moves are listed once, under scope-boundary


def test_sdpa_rule_is_read_from_what_ran():
    """k is scaled as passed (one head: B*S*d, not B*h*S*d) and the mask is transformers' boolean
    [B, 1, S, S] (one where per element, not tril + where)."""
    result = falcon("forward", batch=1)
    (rule,) = [a for a in result.reconciliations if a.rule == "sdpa-math-decomposition"]
    assert "k as passed at its kv heads" in rule.text and "boolean mask passed, [1, 1, Sq, Sk]" in rule.text
    S, h, d, L = 32, 4, 64, 2
    assert rule.pointwise["scale"] == L * ((h * S * d + S * d) - h * S * S)  # q and one k head vs every score
    assert rule.pointwise["select"] == L * (S * S - h * S * S)  # the mask's where vs flash's select per score


def test_parallel_branches_keep_their_backward():
    """The attention's backward lands in its own row, not the MLP's (they read one LayerNorm output)."""
    result = falcon("train")
    rows = {r.name: r for r in result.phases["backward"].rows}
    B, S, C, h, d, L = 2, 32, 256, 4, 64, 2
    mlp = L * 2 * 2 * (2 * B * S * C * 4 * C)  # dX and dW of both GEMMs
    attn_gemms = L * 2 * 2 * B * S * C * ((h + 2) * d + C)
    attn_sdpa = L * 8 * B * h * S * S * d  # the math decomposition's 4 bmm
    assert rows["h.mlp"].real_matmul == mlp
    assert rows["h.attn"].real_matmul == attn_gemms + attn_sdpa
    assert not any("ambiguous module scope" in p or "overlapped" in p for p in result.problems + result.attribution)


def test_wrong_falcon_spec_still_fails():
    """The rules are read from what ran, not fitted to it: a spec with 4 key/value heads (not 1) fails on
    its parameters and matmul FLOPs, a spec without the causal mask on its mask work."""
    mha = falcon("forward", spec=FALCON.replace("kv_heads: 1, ", ""))
    assert not mha.ok and any("params" in f for f in mha.failures())
    unmasked = falcon("forward", spec=FALCON.replace("causal: true", "causal: false"))
    assert not unmasked.ok
    assert any("select" in f or "add" in f for f in unmasked.failures())


def test_eager_attention_gets_the_eager_rule():
    """With eager attention (its own matmuls, as Gemma-2 always runs) the scores are scaled one by one,
    as flash does, and the causal mask is a float tensor added to them: the rule read from what ran is
    `sdpa-eager`, not PyTorch's math decomposition, and every attention row agrees."""
    result = falcon("train", config={**CONFIG, "_attn_implementation": "eager"})
    rules = {a.rule for a in result.reconciliations}
    assert "sdpa-eager" in rules and "sdpa-math-decomposition" not in rules
    for ph in result.phases.values():
        assert {r.name: r.status for r in ph.rows if r.name.startswith("h")}["h.attn"] in ("PASS", "moved")
    # what is left is the model's own: FalconModel turns its boolean mask into the float one eager attention
    # adds, once, in its own forward (one where per element of [B, 1, S, S]); no layer of the spec runs it
    B, S = 2, 32
    assert [f for f in result.failures() if "total" in f] == [
        f"forward: total: select: spec {2 * B * 4 * S * S:,} elements, real {2 * B * 4 * S * S + B * S * S:,} "
        f"(+{B * S * S:,})"]
