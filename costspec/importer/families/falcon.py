"""Falcon (transformers' FalconForCausalLM), imported whole with its LM head: the three block layouts of its
config (Falcon-7B's multi-query attention and MLP in parallel on one LayerNorm; the new decoder architecture
of Falcon-40B / 180B, grouped key/value heads and a LayerNorm per branch; sequential pre-LN blocks), one
fused query_key_value projection, RoPE, a plain MLP (dense_h_to_4h, activation, dense_4h_to_h), optional
biases, a tied (or untied) LM head: a row of the GPT-like template (gpt_template.py), the reader of its switches
and its rules.

With `alibi: true` (Falcon-RW) the attention has no RoPE: FalconModel folds ALiBi's per-head linear bias
and the causal mask into one float mask given to SDPA, the attention op's `alibi` option.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.families.gpt_template import (
    PARALLEL_ONE_NORM,
    PARALLEL_TWO_NORMS,
    PRE_LN,
    GptLike,
    Keys,
    Layer,
    Paths,
    Sizes,
    family,
)
from costspec.importer.families.modern_template import BASE_IGNORED, ROPE_REFUSED, rope

HF_CLASS = "FalconForCausalLM"


def variant(cfg: HFConfig) -> tuple[bool, bool, int]:
    """(new_decoder_architecture, parallel_attn, LayerNorms per parallel block) as FalconDecoderLayer reads
    them; a combination transformers' layer cannot run is refused."""
    new = cfg.get_bool("new_decoder_architecture", False)
    parallel = cfg.get_bool("parallel_attn", True)
    norms = cfg.get("num_ln_in_parallel_attn")
    if norms is None:
        norms = 2 if new else 1
    if norms not in (1, 2) or isinstance(norms, bool):
        raise cfg.refuse("num_ln_in_parallel_attn", "expected 1 or 2 (LayerNorms feeding the parallel attention "
                         "and MLP)")
    if new and not parallel:
        raise cfg.refuse("parallel_attn", "new_decoder_architecture with sequential blocks: FalconDecoderLayer "
                         "reads the MLP's input from a parallel LayerNorm it did not build (transformers cannot "
                         "run it)")
    return new, parallel, norms if (new or parallel) else 1


def kv_heads(cfg: HFConfig, new: bool, h: int) -> int:
    """Key/value heads: num_kv_heads (new architecture), 1 (multi_query), else every head."""
    multi_query = cfg.get_bool("multi_query", True)
    kv = cfg.get_int("num_kv_heads", h)
    if new:
        if h % kv:
            raise ImportProblem(f"{cfg.where('num_kv_heads')} = {kv} does not divide num_attention_heads = {h}")
        return kv
    if multi_query:
        return 1
    if kv != h:
        raise cfg.refuse("num_kv_heads", f"expected num_attention_heads ({h}) without multi_query or "
                         "new_decoder_architecture (FalconAttention reshapes k and v to num_kv_heads heads of a "
                         "3 x hidden_size projection: transformers cannot run another value)")
    return h


ALIBI_RULE = """\
- module: "transformer"
  extra: {select: "B*S*S + B*heads*S*S", "unknown:aten.lt": "B*S*S"}
  pass: forward
  reason: >-
    with alibi FalconModel builds the mask once per forward: the boolean causal mask [B, 1, S, S] turned into a
    float one (a where per element, B*S*S), compared with -1 (an lt per element, a kind the cost table has not)
    and ALiBi's bias (scaled by 1/sqrt(head_dim): constants) masked_fill'd into a [B, h, S, S] float mask (a
    select per element); the layers add it to their scores
"""


def rules(new: bool, multi_query: bool, alibi: bool) -> str:
    """How FalconAttention splits its fused projection and applies RoPE (or how FalconModel builds the ALiBi
    mask), where the spec's attention runs otherwise (each with its formula)."""
    rope_k = "heads" if new else "KV"  # the new architecture broadcasts k to every query head before RoPE
    out = ALIBI_RULE if alibi else f"""\
- module: "transformer.h.*.self_attention"
  extra: {{scale: "L*B*S*(heads + {rope_k})*D/2"}}
  reason: >-
    transformers' rotate_half builds [-x2, x1] with a neg (a multiplication by -1: the `scale` kind) of
    half of q and k, B*S*(h + {'h' if new else 'kv'})*d/2 elements per layer, forward and backward; the spec's RoPE
    folds the sign into the sin table (2 mul + 1 add per element)
- module: "transformer.h.*.self_attention"
  extra: {{add: "L*B*S*(heads + {rope_k})*D"}}
  pass: backward
  reason: >-
    rotate_half's backward: the gradients of the two halves it slices from q and k are added back into
    one tensor, one add per element of q and k
"""
    if new and not alibi:
        out += """\
- module: "transformer.h.*.self_attention"
  extra: {mul: "L*B*S*(heads - KV)*D*2", add: "L*B*S*(heads - KV)*D"}
  reason: >-
    the new decoder architecture broadcasts k to all heads before RoPE, so RoPE rotates h heads of k, not
    kv: 2 mul + 1 add per extra element, forward and backward
"""
    if new:
        out += """\
- module: "transformer.h.*.self_attention"
  extra: {scatter_add: "L*B*S*2*KV*D", add: "2*L*B*S*(heads + 2*KV)*D"}
  pass: backward
  reason: >-
    _split_heads views the fused output as KV groups of (heads/KV + 2) heads and takes q as a slice, k and v
    by index ([-2], [-1]) of each group: the backward scatter-adds the k and v gradients (B*S*kv*d each) and
    adds the three zero-filled gradients of the fused output (2 adds per element of its B*S*(h+2*kv)*d)
"""
    elif multi_query:
        out += """\
- module: "transformer.h.*.self_attention"
  extra: {scatter_add: "L*B*S*2*D", add: "2*L*B*S*(heads + 2)*D"}
  pass: backward
  reason: >-
    _split_heads takes q as a slice and k, v by index ([-2], [-1]) of the fused qkv output: the backward
    scatter-adds the k and v gradients (B*S*d each) and adds the three zero-filled gradients of the fused
    output (2 adds per element of its B*S*(h+2)*d)
"""
    else:
        out += """\
- module: "transformer.h.*.self_attention"
  extra: {add: "2*L*B*S*(heads + 2*KV)*D"}
  pass: backward
  reason: >-
    _split_heads views the fused output as (heads, 3, d) and selects q, k and v ([..., 0, :], [..., 1, :],
    [..., 2, :]): the backward adds the three zero-filled gradients of the fused output (2 adds per element of
    its B*S*3*h*d)
"""
    return out


def read(cfg: HFConfig, dims: Sizes) -> Layer:
    """Falcon's switches: the block layout (new_decoder_architecture, parallel_attn, num_ln_in_parallel_attn),
    the key/value heads (multi_query, num_kv_heads), RoPE or ALiBi, biases."""
    alibi = cfg.get_bool("alibi", False)
    rope(cfg, False)  # read with alibi too: FalconModel computes RoPE's tables either way (constants)
    new, parallel, norms = variant(cfg)
    kv = kv_heads(cfg, new, dims.heads)
    b = "true" if cfg.get_bool("bias", False) else "false"
    names: tuple[str, ...]
    if not parallel:
        layout, names = PRE_LN, ("input_layernorm", "post_attention_layernorm")
    elif norms == 2:
        layout, names = PARALLEL_TWO_NORMS, ("ln_attn", "ln_mlp")
    else:
        layout, names = PARALLEL_ONE_NORM, ("input_layernorm",)
    kv_key = "num_kv_heads" if new else "multi_query" if kv == 1 else "num_attention_heads"
    return Layer(attn=(f"attention: {{heads: heads, kv_heads: KV, fused_qkv: true, qkv_bias: {b}, proj_bias: {b}, "
                       f"{'alibi' if alibi else 'rope'}: true, causal: true}}"),
                 layout=layout, norms=names, mlp_bias=b == "true",
                 dims=(("KV", kv, "key/value heads (1: multi-query; fewer than heads: grouped-query)", kv_key),),
                 ignore=rules(new, cfg.get_bool("multi_query", True), alibi),
                 understood={k: v for k, v in BASE_IGNORED.items() if cfg.has(k)},
                 blocks=(f"embedding, {dims.L} blocks ({layout}; hidden {dims.C}, {dims.heads} query and {kv} "
                         f"key/value heads of {dims.C // dims.heads}, fused qkv, {'ALiBi' if alibi else 'RoPE'}, "
                         f"causal; {dims.fn} MLP), final LayerNorm"))


TABLE = GptLike(
    "falcon", HF_CLASS, "Falcon causal LM with its LM head: fused qkv (multi-query, grouped or full key/value "
    "heads), RoPE (or ALiBi), attention and MLP in parallel on one or two LayerNorms (or sequential), optional "
    "biases",
    Keys(width=("hidden_size",), heads="num_attention_heads", layers="num_hidden_layers", mlp="ffn_hidden_size",
         activation="activation", activation_default="gelu"),
    Paths("transformer", "word_embeddings", "h", "ln_f", "self_attention", "mlp"), read, "falcon_block",
    declared=(size("vocab_size"), size("hidden_size"), layers("num_hidden_layers"),
              heads("num_attention_heads", "hidden_size", rope=True), heads("num_kv_heads", "num_attention_heads"),
              size("ffn_hidden_size"), size("max_position_embeddings")),
    architectures=(HF_CLASS,), doc_name="Falcon causal LM",
    refused=(ROPE_REFUSED, "new_decoder_architecture with parallel_attn: false (transformers cannot run it)",
             "num_kv_heads other than num_attention_heads without multi_query or new_decoder_architecture"))
FALCON = family(TABLE)
FAMILY_LIST = (FALCON,)
