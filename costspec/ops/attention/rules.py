"""Which combinations of attention's options a spec may use: one table of rules (`RULES`), each a
name, the attribute an error points at, a predicate over the layer's resolved options (`Use`), the
message and the expected text, checked in order by `check`; the first broken rule is the error."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy

from costspec.core.vocab import Backend
from costspec.ops.attention.geometry import cross, learned_queries, local, pair, windowed
from costspec.ops.attrs import Attrs
from costspec.ops.opdef import OpCall, same_size
from costspec.ops.work import Expr, Shape, is_zero


@dataclass(frozen=True)
class Use:
    """What the rules read: one layer's resolved attributes and the facts its inputs add."""

    a: Attrs
    windowed: bool
    queries: bool  # learned queries
    cross: bool  # kv: cross-attention
    sliding: bool  # a causal sliding window
    shift: bool  # Swin's shifted windows
    rel_bias: bool  # a rel_bias table (t5 or swin)
    local: bool  # a bidirectional local window
    grid: tuple[Expr, Expr]
    kv_shape: Shape  # the shape of the kv value, () without cross-attention
    batch: Expr

    @classmethod
    def of(cls, call: OpCall) -> Use:
        a = call.attrs
        kv_shape = tuple(call.wiring.extra[0]) if cross(call) else ()
        return cls(a, windowed(call), learned_queries(call), cross(call), not is_zero(a.sliding_window),
                   not is_zero(a.shift), a.rel_bias != "none", local(call), pair(a.grid), kv_shape, call.in_shape[0])


@dataclass(frozen=True)
class Rule:
    """One rule: `broken(use)` says the layer breaks it. `message` is a format string over `a` (the
    attributes), `kv_shape` (a list) and `batch`."""

    name: str
    attr: str
    broken: Callable[[Use], bool]
    message: str
    expected: str


def _window_over_flat_side(u: Use, side: int) -> bool:
    """`window` is SAM's 2-D window: on a grid one token high or wide (`{window: 4096, grid: [1, S]}`,
    meant as Mistral's 1-D sliding window) it pads that side to w and charges w x w windows of padding."""
    if not u.windowed:
        return False
    size = u.grid[side]
    too_big = sympy.sympify(u.a.window - size)
    return sympy.sympify(size) == 1 and bool(too_big.is_number and too_big > 0)


def _flat_side(side: str) -> str:
    return (f"window {{a.window}} on a grid of {side} 1: `window` is SAM's 2-D w x w window on a token grid (the "
            "grid is padded to whole windows); for 1-D sliding-window attention over the sequence write "
            "sliding_window: {a.window} (with causal: true)")


def _alibi_mixed(u: Use) -> bool:
    a = u.a
    return a.alibi and (u.windowed or u.sliding or u.local or u.queries or u.cross or a.rel_pos or u.rel_bias
                        or a.rope or not is_zero(a.cache) or bool(a.softcap) or bool(a.sinks))


_NO_POSITIONS = "learned queries do not take {} (the queries have no positions)"
_CAUSAL_BIAS = ("causal attention with a relative position bias is not supported (SDPA takes either is_causal or "
                "an additive mask)")
_SHARED = "{} shares a T5 or BEiT bias between layers: set rel_bias: t5 or beit"

RULES: tuple[Rule, ...] = (
    Rule("causal-with-rel-pos", "rel_pos", lambda u: u.a.causal and u.a.rel_pos,
         _CAUSAL_BIAS, "causal or rel_pos, not both"),
    Rule("causal-with-rel-bias", "rel_bias", lambda u: u.a.causal and u.rel_bias and u.a.rel_bias != "t5",
         "causal attention with a {a.rel_bias} relative-position bias is not supported (only T5's decoder masks "
         "its bias causally, with one-directional buckets)", "causal or rel_bias, not both (or rel_bias: t5)"),
    Rule("causal-t5-bias-without-window", "rel_bias",
         lambda u: u.a.causal and u.a.rel_bias == "t5" and (u.sliding or u.windowed),
         "a causal T5 bias is masked to the lower triangle: no sliding_window or window with it",
         "causal: true and rel_bias: t5 without windows"),
    Rule("one-position-bias", "rel_bias", lambda u: u.a.rel_pos and u.rel_bias,
         "rel_pos and rel_bias are two position biases: choose one", "one of them"),
    Rule("window-on-flat-grid-height", "window", lambda u: _window_over_flat_side(u, 0),
         _flat_side("height"), "a window no larger than the grid, or sliding_window"),
    Rule("window-on-flat-grid-width", "window", lambda u: _window_over_flat_side(u, 1),
         _flat_side("width"), "a window no larger than the grid, or sliding_window"),
    Rule("sliding-window-needs-causal", "sliding_window", lambda u: u.sliding and not u.a.causal,
         "sliding_window is a causal sliding window (Mistral): set causal: true (a bidirectional window, ModernBERT's, "
         "is local_window)", "causal: true with it"),
    Rule("local-window-is-bidirectional", "local_window", lambda u: u.local and u.a.causal,
         "local_window is a bidirectional window (ModernBERT): for a causal window write sliding_window: "
         "{a.local_window} with causal: true", "causal: false, or sliding_window"),
    Rule("local-window-alone", "local_window",
         lambda u: u.local and (u.windowed or u.sliding or u.queries or u.cross or u.a.rel_pos or u.rel_bias),
         "local_window is a band over one sequence of tokens: no window, sliding_window, queries, kv, rel_pos or "
         "rel_bias with it", "local_window alone"),
    Rule("sliding-window-or-window", "sliding_window", lambda u: u.sliding and u.windowed,
         "sliding_window (1-D, over the sequence) and window (2-D, on a grid) exclude each other", "one of them"),
    Rule("queries-without-rope", "rope", lambda u: u.queries and u.a.rope,
         _NO_POSITIONS.format("rope"), "queries without rope"),
    Rule("queries-without-rel-pos", "rel_pos", lambda u: u.queries and u.a.rel_pos,
         _NO_POSITIONS.format("rel_pos"), "queries without rel_pos"),
    Rule("queries-without-causal", "causal", lambda u: u.queries and u.a.causal,
         _NO_POSITIONS.format("causal"), "queries without causal"),
    Rule("queries-attend-to-all", "queries", lambda u: u.queries and (u.windowed or u.rel_bias),
         "learned queries attend to all tokens: no window or rel_bias", "queries without window / rel_bias"),
    Rule("cache-is-causal-self-attention", "cache",
         lambda u: not is_zero(u.a.cache) and (not u.a.causal or u.windowed or u.queries or u.cross or u.a.rel_pos
                                               or (u.rel_bias and u.a.rel_bias != "t5")),
         "cache holds the keys and values of earlier tokens of one sequence: it needs causal self-attention (no "
         "window, queries, kv, rel_pos or rel_bias other than T5's)", "causal: true, or cache: 0"),
    Rule("kv-cache-alone", "kv_cache",
         lambda u: not is_zero(u.a.kv_cache) and (u.a.causal or u.cross or not is_zero(u.a.cache) or u.windowed
                                                  or u.queries or u.sliding or u.local or u.a.rel_pos or u.rel_bias
                                                  or u.a.rope or u.a.alibi or u.a.qk_norm != "none"),
         "kv_cache is cross-attention over cached keys and values (an encoder-decoder's decode step): no causal, kv, "
         "cache, window, sliding_window, local_window, queries, rel_pos, rel_bias, rope, alibi or qk_norm with it",
         "kv_cache alone (zero_bias allowed)"),
    Rule("kv-is-tokens", "kv", lambda u: u.cross and len(u.kv_shape) != 3,
         "kv: '{a.kv}' has shape {kv_shape}, not tokens [B, T, C]", "a value of rank 3"),
    Rule("kv-batch", "kv", lambda u: u.cross and same_size(u.kv_shape[0], u.batch) is False,
         "kv={kv_shape[0]} does not match the input's batch {batch}", "the input's batch"),
    Rule("kv-without-rel-pos", "rel_pos", lambda u: u.cross and u.a.rel_pos,
         "cross-attention (kv) does not take rel_pos (SAM's relative positions index one grid whose tokens are both "
         "the queries and the keys)", "kv without rel_pos"),
    Rule("kv-alone", "kv", lambda u: u.cross and (u.windowed or u.rel_bias or u.queries or u.sliding),
         "cross-attention (kv) attends to all of the value's tokens: no window, sliding_window, rel_bias or queries",
         "kv alone"),
    Rule("shift-needs-window", "shift", lambda u: u.shift and (not u.windowed or u.a.rel_pos or u.a.causal),
         "shift is Swin's shifted window: it needs window (and grid), without rel_pos or causal",
         "window: w, 0 < shift < w"),
    Rule("shift-below-window", "shift",
         lambda u: u.shift and u.windowed and bool(sympy.sympify(u.a.shift - u.a.window).is_number
                                                   and u.a.shift >= u.a.window),
         "shift {a.shift} is not smaller than the window {a.window}", "0 < shift < window"),
    Rule("shared-bias-needs-t5-or-beit", "rel_bias_shared",
         lambda u: u.a.rel_bias_shared and u.a.rel_bias not in ("t5", "beit"),
         _SHARED.format("rel_bias_shared"), "rel_bias: t5 or beit with it"),
    Rule("bias-readers-need-t5-or-beit", "rel_bias_readers",
         lambda u: not is_zero(u.a.rel_bias_readers) and u.a.rel_bias not in ("t5", "beit"),
         _SHARED.format("rel_bias_readers"), "rel_bias: t5 or beit with it"),
    Rule("shared-bias-has-no-readers", "rel_bias_readers",
         lambda u: u.a.rel_bias_shared and not is_zero(u.a.rel_bias_readers),
         "a layer reading another layer's bias (rel_bias_shared) has no table for others to read",
         "rel_bias_readers on the layer with the table"),
    Rule("swin-bias-needs-window", "rel_bias", lambda u: u.a.rel_bias == "swin" and not u.windowed,
         "rel_bias: swin is Swin's table over the offsets inside a window: set window (and grid)",
         "window: w with it"),
    Rule("beit-bias-global", "rel_bias", lambda u: u.a.rel_bias == "beit" and u.windowed,
         "rel_bias: beit is BEiT's table over the whole patch grid after a class token: no window",
         "grid: [H, W] without window"),
    Rule("eager-options-not-in-sdpa", "backend",
         lambda u: u.a.backend == Backend.MATH and (bool(u.a.softcap) or bool(u.a.sinks)),
         "backend math is PyTorch's SDPA decomposition, which has no soft-capping or sinks: use backend flash (a fused "
         "kernel with them, flash-attn's) or eager (transformers' eager_attention_forward)", "backend: flash or eager"),
    Rule("qk-norm-weight-per-head", "qk_norm_weight",
         lambda u: u.a.qk_norm_weight == "per_head" and (u.a.qk_norm == "none" or u.a.qk_norm_over == "all"),
         "qk_norm_weight: per_head gives a head norm (qk_norm with qk_norm_over: head) one weight per head; over "
         "the whole width (qk_norm_over: all) the weight already spans every head", "qk_norm with qk_norm_over: head"),
    Rule("qk-norm-bias-is-layernorm", "qk_norm_bias", lambda u: u.a.qk_norm_bias and u.a.qk_norm != "layernorm",
         "qk_norm_bias is a LayerNorm's bias: set qk_norm: layernorm (an RMSNorm has none)", "qk_norm: layernorm"),
    Rule("fused-qkv-one-bias", "fused_qkv",
         lambda u: u.a.fused_qkv and not u.queries and not u.cross
         and not bool(u.a.q_bias) == bool(u.a.k_bias) == bool(u.a.v_bias),
         "fused_qkv is one projection with one bias: q_bias, k_bias and v_bias must agree (set fused_qkv: false "
         "for a bias on some of them)", "fused_qkv: false"),
    Rule("zero-bias-alone", "zero_bias",
         lambda u: u.a.zero_bias and (u.a.rel_pos or u.rel_bias or u.a.alibi or u.a.causal or not is_zero(u.a.cache)),
         "zero_bias is T5's all-zero position bias of a layer without a table (its cross-attention): no rel_pos, "
         "rel_bias, alibi, causal or cache with it", "zero_bias alone"),
    Rule("alibi-alone", "alibi", _alibi_mixed,
         "alibi is a linear bias over the key positions of one sequence of self-attention: no rope, rel_pos, "
         "rel_bias, window, sliding_window, local_window, queries, kv, cache, softcap or sinks with it",
         "alibi alone (with causal or not)"),
)


def check(call: OpCall) -> None:
    """Raise the SpecError of the first rule the layer breaks."""
    use = Use.of(call)
    for rule in RULES:
        if rule.broken(use):
            message = rule.message.format(a=use.a, kv_shape=list(use.kv_shape), batch=use.batch)
            raise call.fail(message, rule.attr, rule.expected)
