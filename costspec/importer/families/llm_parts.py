"""Pieces of the Llama-style decoder families (mistral, qwen2, gemma, mixtral, qwen2_moe): the dims, RoPE,
sliding-window layouts, the attention line and the named rules their transformers classes need."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from costspec.importer import rope as rope_tables
from costspec.importer.config import HFConfig, ImportProblem, count, heads, layers, size
from costspec.importer.emit import SpecText, wrap_comment
from costspec.importer.families.common import activation, check_divides

DEFAULT_S = 4096  # the sequence length when the config names no max_position_embeddings

# keys these configs carry that never change the cost of the backbone (the *Model class)
IGNORED = {
    "tie_word_embeddings": "read by the LM head (importer/head.py), which the backbone (--backbone) does not have",
    "pretraining_tp": "a tensor-parallel slicing of the same GEMMs at pretraining",
}
# the numeric keys of the Llama-style decoders (declared to HFConfig.validate)
DECODER_KEYS = (size("vocab_size"), size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
                heads("num_attention_heads", "hidden_size", unless="head_dim", rope=True),
                heads("num_key_value_heads", "num_attention_heads"), size("head_dim", even=True),
                size("max_position_embeddings"), count("sliding_window"), count("max_window_layers"))
MOE_KEYS = DECODER_KEYS + (size("moe_intermediate_size"), size("shared_expert_intermediate_size"),
                           size("num_experts_per_tok"), size("num_local_experts"), count("num_experts"),
                           size("decoder_sparse_step"), count("mlp_only_layers", items=True))

ROTATE_HALF_IGNORE = """\
- module: "layers.*.self_attn"
  extra: {scale: "L*B*S*(heads + KV)*D/2"}
  reason: >-
    transformers' rotate_half builds [-x2, x1] with a neg (a multiplication by -1: the `scale` kind) of
    half of q and k, B*S*(h+kv)*d/2 elements per layer, forward and backward; the spec's RoPE folds the
    sign into the sin table (2 mul + 1 add per element)
- module: "layers.*.self_attn"
  extra: {add: "L*B*S*(heads + KV)*D"}
  pass: backward
  reason: >-
    rotate_half's backward: the gradients of the two halves it slices from q and k are added back into
    one tensor, one add per element of q and k (B*S*(h+kv)*d per layer) that the spec's RoPE does not run
"""


@dataclass(frozen=True)
class Decoder:
    """What the shared decoder dims resolved to."""

    C: int
    heads: int
    kv: int
    head_dim: int
    layers: int
    S: int
    sliding: tuple[bool, ...]  # per layer: a sliding-window layer (at this S: only when S >= window)
    window: int  # 0: none


def rope(cfg: HFConfig) -> None:
    """RoPE's settings (importer/rope.py): every rope_type transformers has, none changing the cost; the whole
    head rotated (a partial_rotary_factor is refused)."""
    rope_tables.read(cfg)


def layer_types(cfg: HFConfig, layers: int, window: int, derive: Callable[[int], bool]) -> list[bool]:
    """Per layer, sliding (True) or full attention: `layer_types` when the config lists them, else
    `derive(i)` (each family's rule from use_sliding_window / max_window_layers)."""
    listed = cfg.get("layer_types")
    if listed is None:
        return [bool(window) and derive(i) for i in range(layers)]
    kinds = ("full_attention", "sliding_attention")
    if not isinstance(listed, list) or len(listed) != layers or not all(isinstance(t, str) and t in kinds
                                                                        for t in listed):
        raise cfg.refuse("layer_types", f"expected {layers} entries (num_hidden_layers), each full_attention or "
                         "sliding_attention")
    sliding = [t == "sliding_attention" for t in listed]
    if any(sliding) and not window:
        raise cfg.refuse("layer_types", "sliding_attention layers without a sliding_window")
    return sliding


def decoder_dims(spec: SpecText, cfg: HFConfig, window: int,
                 derive: Callable[[int], bool] = lambda i: True) -> Decoder:
    """B, S, C, heads, KV, D, L, V (and W) from the config, each commented with its key."""
    C = cfg.get_int("hidden_size")
    heads = cfg.get_int("num_attention_heads")
    kv = cfg.get_int("num_key_value_heads", heads)
    if heads % kv:
        raise ImportProblem(f"{cfg.where('num_key_value_heads')} = {kv} does not divide num_attention_heads = {heads}")
    if cfg.get("head_dim") is None:  # transformers' default: hidden_size / num_attention_heads
        check_divides(cfg, "hidden_size", C, "num_attention_heads", heads)
    head_dim = cfg.get_int("head_dim", C // heads)
    L = cfg.get_int("num_hidden_layers")
    S = cfg.get_int("max_position_embeddings", DEFAULT_S)
    spec.dim("B", 1, "batch size")
    spec.dim("S", S, "sequence length (tokens): the context the config allows; --set S=... for shorter sequences",
             "max_position_embeddings")
    spec.dim("C", C, "hidden size", "hidden_size")
    spec.dim("heads", heads, "query heads", "num_attention_heads")
    spec.dim("KV", kv, "key/value heads (grouped-query attention when fewer than heads)", "num_key_value_heads")
    if head_dim * heads == C:
        spec.derived("D", "C / heads", "head dim")
    else:
        spec.dim("D", head_dim, "head dim (not C / heads)", "head_dim")
    spec.dim("L", L, "decoder layers", "num_hidden_layers")
    spec.dim("V", cfg.get_int("vocab_size"), "vocabulary size", "vocab_size")
    sliding = layer_types(cfg, L, window, derive)
    if any(sliding) and S < window:
        spec.note(f"sliding_window {window} is longer than S = {S}: every query sees all earlier tokens, so the "
                  "layers are written as full causal attention (transformers skips the window mask too); at "
                  f"S >= {window} add `sliding_window: {window}` to the attention of the sliding layers")
        sliding = [False] * L
    if any(sliding):
        spec.dim("W", window, "attention sliding window (query i sees keys i-W+1..i)", "sliding_window")
    return Decoder(C, heads, kv, head_dim, L, S, tuple(sliding), window if any(sliding) else 0)


def attention_line(dec: Decoder, q: bool = False, k: bool = False, v: bool = False, o: bool = False,
                   window: str = "", indent: int = 0) -> str:
    """The attention op of one decoder block (transformers' separate q/k/v/o projections), its second
    line indented to sit under the first's braces at column `indent`."""
    bias = ", ".join(f"{name}_bias: {'true' if on else 'false'}" for name, on in (("q", q), ("k", k), ("v", v),
                                                                                   ("o", o)))
    slide = f", sliding_window: {window}" if window else ""
    return (f"attention: {{heads: heads, kv_heads: KV, head_dim: D, fused_qkv: false, rope: true, causal: true,\n"
            f"{' ' * (indent + 12)}{bias}{slide}}}")


def block_layout(dec: Decoder) -> tuple[str, str, str]:
    """(block params line, the attention's window argument, the repeat's `at:` lines) for the sliding
    layout: one block whose `window` parameter is W on sliding layers and 0 on full ones."""
    return sliding_layout(dec.window, dec.sliding)


def sliding_layout(window: int, sliding: Sequence[bool]) -> tuple[str, str, str]:
    """`block_layout` for a window and the per-layer sliding flags (shared with the decoder template)."""
    if not window:
        return "", "", ""
    on = [i for i, s in enumerate(sliding) if s]
    full = [i for i, s in enumerate(sliding) if not s]
    if not full:
        return "", "W", ""
    majority_sliding = len(on) >= len(full)
    params = f"params: {{window: {'W' if majority_sliding else 0}}}  # W on sliding-window layers, 0 on full ones"
    minority, name, value = (full, "full", "0") if majority_sliding else (on, "sliding", "W")
    at = f"at:\n  - {{indices: {minority}, name: {name}, args: {{window: {value}}}}}  # layer_types"
    return params, "window", at


def gated_fn(cfg: HFConfig, keys: tuple[str, ...] = ("hidden_act",), default: str = "silu") -> str:
    """The gated MLP's activation from the first of `keys` present (Gemma: hidden_activation)."""
    for key in keys:
        if cfg.get(key) is not None:
            return activation(cfg, key, default)
    return activation(cfg, keys[0], default)


def decoder_layers(embed: str, block: str, params: str, at: str) -> str:
    """The top-level layers: embedding (or Gemma's scaled one), the repeat of `block`, the final norm."""
    repeat = f"- repeat: L\n  name: layers\n  body: {block}\n  source: layers\n"
    if at:
        repeat += "\n".join("  " + line for line in at.splitlines()) + "\n"
    return embed + repeat + "- rmsnorm: {}\n  name: norm\n  source: norm\n"


EMBED = "- embedding: {vocab: V, dim: C}\n  name: embed_tokens\n  source: embed_tokens\n"


def block_text(params: str, body: str) -> str:
    """A block: its layers, under `params:` / `layers:` when it has parameters."""
    if not params:
        return body
    return params + "\nlayers:\n" + "\n".join("  " + line if line else "" for line in body.splitlines()) + "\n"


def header_note(spec: SpecText, hf_class: str) -> None:
    spec.header.extend(wrap_comment(f"`source:` and `ignore:` name modules of transformers' {hf_class} "
                                    "(transformers 5)"))
