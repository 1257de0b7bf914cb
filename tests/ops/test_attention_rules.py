"""Attention's option rules (costspec.ops.attention.rules.RULES): one case per rule, a spec that
breaks that rule and no other, with the exact error the user sees."""
from typing import NamedTuple

import pytest

import costspec
from costspec.core.errors import SpecError
from costspec.ops.attention import rules

HEAD = "costspec: 1\nname: rules\n"


class Case(NamedTuple):
    attrs: str  # of the attention layer
    message: str  # the error
    inputs: str = ""  # the spec's further inputs (a kv value)
    input: str = "[B, 36, 8]"


CASES = {
    "cache-is-causal-self-attention": Case(
        "heads: 2, cache: 16",
        "cache holds the keys and values of earlier tokens of one sequence: it needs causal self-attention (no "
        "window, queries, kv, rel_pos or rel_bias other than T5's)"),
    "kv-cache-alone": Case(
        "heads: 2, kv_cache: 12, rope: true",
        "kv_cache is cross-attention over cached keys and values (an encoder-decoder's decode step): no causal, kv, "
        "cache, window, sliding_window, local_window, queries, rel_pos, rel_bias, rope, alibi or qk_norm with it"),
    "causal-with-rel-pos": Case(
        "heads: 2, causal: true, rel_pos: true",
        "causal attention with a relative position bias is not supported (SDPA takes either is_causal or an "
        "additive mask)"),
    "causal-with-rel-bias": Case(
        "heads: 2, causal: true, rel_bias: beit, grid: [5, 7]",
        "causal attention with a beit relative-position bias is not supported (only T5's decoder masks its bias "
        "causally, with one-directional buckets)"),
    "causal-t5-bias-without-window": Case(
        "heads: 2, causal: true, rel_bias: t5, sliding_window: 4",
        "a causal T5 bias is masked to the lower triangle: no sliding_window or window with it"),
    "zero-bias-alone": Case(
        "heads: 2, zero_bias: true, causal: true",
        "zero_bias is T5's all-zero position bias of a layer without a table (its cross-attention): no rel_pos, "
        "rel_bias, alibi, causal or cache with it"),
    "one-position-bias": Case(
        "heads: 2, rel_pos: true, rel_bias: t5",
        "rel_pos and rel_bias are two position biases: choose one"),
    "window-on-flat-grid-height": Case(
        "heads: 2, window: 4096, grid: [1, 36]",
        "window 4096 on a grid of height 1: `window` is SAM's 2-D w x w window on a token grid (the grid is padded "
        "to whole windows); for 1-D sliding-window attention over the sequence write sliding_window: 4096 (with "
        "causal: true)"),
    "window-on-flat-grid-width": Case(
        "heads: 2, window: 4096, grid: [36, 1]",
        "window 4096 on a grid of width 1: `window` is SAM's 2-D w x w window on a token grid (the grid is padded "
        "to whole windows); for 1-D sliding-window attention over the sequence write sliding_window: 4096 (with "
        "causal: true)"),
    "sliding-window-needs-causal": Case(
        "heads: 2, sliding_window: 3",
        "sliding_window is a causal sliding window (Mistral): set causal: true (a bidirectional window, ModernBERT's, "
        "is local_window)"),
    "local-window-is-bidirectional": Case(
        "heads: 2, local_window: 8, causal: true",
        "local_window is a bidirectional window (ModernBERT): for a causal window write sliding_window: 8 with "
        "causal: true"),
    "local-window-alone": Case(
        "heads: 2, local_window: 8, rel_bias: t5",
        "local_window is a band over one sequence of tokens: no window, sliding_window, queries, kv, rel_pos or "
        "rel_bias with it"),
    "sliding-window-or-window": Case(
        "heads: 2, causal: true, sliding_window: 3, window: 3, grid: [6, 6]",
        "sliding_window (1-D, over the sequence) and window (2-D, on a grid) exclude each other"),
    "queries-without-rope": Case(
        "heads: 2, queries: 1, rope: true",
        "learned queries do not take rope (the queries have no positions)"),
    "queries-without-rel-pos": Case(
        "heads: 2, queries: 1, rel_pos: true",
        "learned queries do not take rel_pos (the queries have no positions)"),
    "queries-without-causal": Case(
        "heads: 2, queries: 1, causal: true",
        "learned queries do not take causal (the queries have no positions)"),
    "queries-attend-to-all": Case(
        "heads: 2, queries: 1, rel_bias: t5",
        "learned queries attend to all tokens: no window or rel_bias"),
    "kv-is-tokens": Case(
        "heads: 2, kv: enc",
        "kv: 'enc' has shape [B, 8], not tokens [B, T, C]",
        inputs="{enc: [B, 8]}"),
    "kv-batch": Case(
        "heads: 2, kv: enc",
        "kv=3 does not match the input's batch 2",
        inputs="{enc: [3, 5, 8]}", input="[2, 36, 8]"),
    "kv-without-rel-pos": Case(
        "heads: 2, kv: enc, rel_pos: true",
        "cross-attention (kv) does not take rel_pos (SAM's relative positions index one grid whose tokens are both "
        "the queries and the keys)",
        inputs="{enc: [B, 5, 8]}"),
    "kv-alone": Case(
        "heads: 2, kv: enc, rel_bias: t5",
        "cross-attention (kv) attends to all of the value's tokens: no window, sliding_window, rel_bias or queries",
        inputs="{enc: [B, 5, 8]}"),
    "shift-needs-window": Case(
        "heads: 2, shift: 1",
        "shift is Swin's shifted window: it needs window (and grid), without rel_pos or causal"),
    "shift-below-window": Case(
        "heads: 2, window: 3, grid: [6, 6], shift: 3",
        "shift 3 is not smaller than the window 3"),
    "shared-bias-needs-t5-or-beit": Case(
        "heads: 2, rel_bias_shared: true",
        "rel_bias_shared shares a T5 or BEiT bias between layers: set rel_bias: t5 or beit"),
    "bias-readers-need-t5-or-beit": Case(
        "heads: 2, rel_bias_readers: 2",
        "rel_bias_readers shares a T5 or BEiT bias between layers: set rel_bias: t5 or beit"),
    "shared-bias-has-no-readers": Case(
        "heads: 2, rel_bias: t5, rel_bias_shared: true, rel_bias_readers: 2",
        "a layer reading another layer's bias (rel_bias_shared) has no table for others to read"),
    "swin-bias-needs-window": Case(
        "heads: 2, rel_bias: swin",
        "rel_bias: swin is Swin's table over the offsets inside a window: set window (and grid)"),
    "beit-bias-global": Case(
        "heads: 2, window: 3, grid: [6, 6], rel_bias: beit",
        "rel_bias: beit is BEiT's table over the whole patch grid after a class token: no window"),
    "eager-options-not-in-sdpa": Case(
        "heads: 2, backend: math, softcap: 50.0",
        "backend math is PyTorch's SDPA decomposition, which has no soft-capping or sinks: use backend flash (a fused "
        "kernel with them, flash-attn's) or eager (transformers' eager_attention_forward)"),
    "qk-norm-weight-per-head": Case(
        "heads: 2, qk_norm: rmsnorm, qk_norm_over: all, qk_norm_weight: per_head",
        "qk_norm_weight: per_head gives a head norm (qk_norm with qk_norm_over: head) one weight per head; over the "
        "whole width (qk_norm_over: all) the weight already spans every head"),
    "qk-norm-bias-is-layernorm": Case(
        "heads: 2, qk_norm: rmsnorm, qk_norm_bias: true",
        "qk_norm_bias is a LayerNorm's bias: set qk_norm: layernorm (an RMSNorm has none)"),
    "fused-qkv-one-bias": Case(
        "heads: 2, k_bias: false",
        "fused_qkv is one projection with one bias: q_bias, k_bias and v_bias must agree (set fused_qkv: false for "
        "a bias on some of them)"),
    "alibi-alone": Case(
        "heads: 2, alibi: true, rope: true, causal: true",
        "alibi is a linear bias over the key positions of one sequence of self-attention: no rope, rel_pos, rel_bias, "
        "window, sliding_window, local_window, queries, kv, cache, softcap or sinks with it"),
}

RULES = {rule.name: rule for rule in rules.RULES}


def test_every_rule_has_a_case_and_every_case_a_rule():
    assert len(RULES) == len(rules.RULES), "rule names are unique"
    assert sorted(CASES) == sorted(RULES)


@pytest.mark.parametrize("name", list(CASES))
def test_a_spec_breaking_one_rule_gets_its_error(name, monkeypatch):
    case, rule = CASES[name], RULES[name]
    broken: list[list[str]] = []
    check = rules.check

    def spy(call):
        use = rules.Use.of(call)
        broken.append([r.name for r in rules.RULES if r.broken(use)])
        check(call)

    monkeypatch.setattr(rules, "check", spy)
    inputs = f"inputs: {case.inputs}\n" if case.inputs else ""
    spec = f"{HEAD}dims: {{B: 2}}\ninput: {case.input}\n{inputs}layers:\n  - attention: {{{case.attrs}}}\n"
    with pytest.raises(SpecError) as err:
        costspec.loads(spec)
    assert broken == [[name]], "the case breaks exactly its rule"
    assert err.value.message == case.message
    assert err.value.expected == rule.expected
    assert err.value.location is not None and err.value.location.path.endswith(f".attention.{rule.attr}")


# Combinations the rules once refused and accept now (each validated against its module in
# tests/ops/test_vs_torch.py's attention case): cross-attention with rope (q at positions 0..S-1, k at
# 0..T-1) and with a causal mask (PyTorch's top-left alignment when T != S).
ACCEPTED = {
    "kv with rope": "heads: 2, kv: enc, rope: true",
    "kv with causal": "heads: 2, kv: enc, causal: true",
    "kv with causal and rope, fewer keys": "heads: 2, kv: enc, causal: true, rope: true, causal_flops: useful",
    # T5's decoder: its one-directional bias masked causally, its cross-attention's zero position bias
    "causal with a t5 bias": "heads: 2, causal: true, rel_bias: t5, buckets: 8, max_distance: 20",
    "kv with a zero bias": "heads: 2, kv: enc, zero_bias: true",
    # an encoder-decoder's decode step: T5's decoder bias over a cache, cross-attention over cached keys and values
    "causal t5 bias with a cache": "heads: 2, causal: true, rel_bias: t5, buckets: 8, max_distance: 20, cache: 7",
    "kv_cache with a zero bias": "heads: 2, kv_cache: 12, zero_bias: true",
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_combinations_no_rule_refuses(name):
    spec = (f"{HEAD}dims: {{B: 2}}\ninput: [B, 36, 8]\ninputs: {{enc: [B, 5, 8]}}\nlayers:\n"
            f"  - attention: {{{ACCEPTED[name]}}}\n")
    model = costspec.loads(spec)
    assert model.evaluate("train").tc > 0
