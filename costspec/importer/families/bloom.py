"""BLOOM (transformers' BloomForCausalLM), imported whole with its LM head: token embeddings and their
LayerNorm (word_embeddings_layernorm), pre-LN blocks (or, with apply_residual_connection_post_layernorm, the
LayerNorm's output as the residual) of multi-head attention with ALiBi (a per-head linear bias added to every
score inside baddbmm, the causal mask beside it), one biased fused query_key_value projection split per head,
a biased MLP of 4 x hidden with BLOOM's own tanh GELU (python-level ops), a final LayerNorm and a tied (or
untied) LM head: a row of the GPT-like template (gpt_template.py), the reader of its switches and its rules.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, heads, layers, size
from costspec.importer.families.gpt_template import NORMED_RESIDUAL, PRE_LN, GptLike, Keys, Layer, Paths, Sizes, family

HF_CLASS = "BloomForCausalLM"


def gelu_rule(module: str, elements: str) -> str:
    """BLOOM's GELU (GeLUFunction: bloom_gelu_forward, bloom_gelu_back) as the python-level ops it runs, against
    the one gelu_tanh op the spec prices (the same function)."""
    return f"""\
- module: "{module}"
  extra: {{gelu_tanh: "-{elements}", scale: "3*{elements}", mul: "3*{elements}", add: "2*{elements}",
          tanh: "{elements}"}}
  pass: forward
  reason: >-
    bloom_gelu_forward is x * 0.5 * (1 + tanh(0.79788456 * x * (1 + 0.044715 * x * x))), per element: x * 0.5,
    0.044715 * x and 0.79788456 * x (3 scale), three products (3 mul), two sums with 1 (2 add) and tanh; the
    spec prices the same function as one gelu_tanh
- module: "{module}"
  extra: {{gelu_tanh_backward: "-{elements}", scale: "5*{elements}", mul: "7*{elements}", add: "4*{elements}",
          "unknown:aten.rsub": "{elements}", tanh: "{elements}"}}
  pass: backward
  reason: >-
    GeLUFunction's backward (bloom_gelu_back) recomputes t = tanh(0.79788456 * x * (1 + 0.044715 * x * x)) (2
    scale, 2 mul, 1 add, tanh), forms 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1
    + t) (3 scale, 4 mul, 3 add and the 1 - t*t, an rsub the cost table has no kind for) and multiplies by the
    gradient (1 mul); the spec prices one gelu_tanh_backward
"""


def rules(gelu: str) -> str:
    """How BloomModel and BloomAttention run the mask, the ALiBi scores and the fused projection, where the spec's
    attention runs otherwise (each with its formula), and BLOOM's GELU (`gelu`)."""
    return """\
- module: "transformer.h.*.self_attention"
  extra: {scale: "-L*B*heads*S*S"}
  pass: forward
  reason: >-
    BloomAttention forms the scores with alibi.baddbmm(q, k^T, beta=1, alpha=1/sqrt(d)): one aten op that
    FlopCounterMode counts as its bmm alone (2*B*h*S^2*d, the spec's QK^T); the scale by alpha and the ALiBi add
    run inside it (no pointwise op), and the causal float mask is then added to every score (B*h*S^2 adds,
    where the spec adds ALiBi's bias with the mask folded in: one add per score either way); the spec's eager
    attention scales every score (B*h*S^2)
- module: "transformer.h.*.self_attention"
  extra: {scale: "2*L*B*S*C - L*B*heads*S*S", add: "6*L*B*S*C"}
  pass: backward
  reason: >-
    baddbmm's backward scales the gradients of q and k by alpha (2*B*S*C elements) where the spec scales every
    score's gradient (B*h*S^2); _reshape views the fused output as (heads, 3, d) and selects q, k and v: the
    backward adds the three zero-filled gradients of the fused output (2 adds per element of its B*S*3C)
- module: "transformer"
  extra: {select: "B*S*S"}
  pass: forward
  reason: >-
    BloomModel builds the causal mask once per forward, a boolean [B, 1, S, S] turned into an additive float
    mask with one where per element (B*S*S selects)
""" + gelu


UNDERSTOOD = {
    "pretraining_tp": "the tensor-parallel degree at pretraining: read only with slow_but_exact",
    "seq_length": "the pretraining context length: ALiBi has no position table (S is set by --set S=...)",
    "masked_softmax_fusion": "a Megatron kernel switch, unused by transformers",
    "offset_alibi": "unused by transformers' BLOOM",
    "unk_token_id": "a tokenizer id"}


def read(cfg: HFConfig, dims: Sizes) -> Layer:
    """BLOOM's switches: the embedding LayerNorm, ALiBi with eager attention, the biased fused qkv, BLOOM's GELU,
    pre-LN blocks or the LayerNorm's output as residual (apply_residual_connection_post_layernorm)."""
    if cfg.get_bool("slow_but_exact", False) and cfg.get_int("pretraining_tp", 1) > 1:
        raise cfg.refuse("slow_but_exact", "with pretraining_tp > 1 BloomAttention and BloomMLP run their output "
                         "projections as pretraining_tp sliced F.linear calls summed into a zeros tensor (not "
                         "supported by this importer: set slow_but_exact: false, the same matmul FLOPs)")
    post_residual = cfg.get_bool("apply_residual_connection_post_layernorm", False)
    return Layer(attn=("attention: {heads: heads, fused_qkv: true, qkv_bias: true, proj_bias: true, alibi: true, "
                       "causal: true, backend: eager}"),
                 layout=NORMED_RESIDUAL if post_residual else PRE_LN,
                 norms=("input_layernorm", "post_attention_layernorm"), embed_norm=True,
                 notes=("BloomForCausalLM runs eager attention (baddbmm with the ALiBi bias, a float causal mask, "
                        "softmax, bmm): the attention is written with backend: eager, as it runs; drop it for the cost "
                        "of a flash kernel with ALiBi",),
                 ignore=rules(gelu_rule("transformer.h.*.mlp.gelu_impl", "L*B*S*F")), understood=UNDERSTOOD,
                 blocks=(f"embedding and its LayerNorm, {dims.L} blocks (hidden {dims.C}, {dims.heads} heads of "
                         f"{dims.C // dims.heads}, fused qkv, ALiBi, causal; GELU MLP of {dims.F}"
                         f"{'; the LayerNorm output as residual' if post_residual else ''}), final LayerNorm"))


TABLE = GptLike(
    "bloom", HF_CLASS, "BLOOM causal LM with its LM head: embedding LayerNorm, fused qkv split per head, ALiBi, "
    "eager attention, biased GELU MLP of 4 x hidden (BLOOM's GELU as python-level ops)",
    Keys(width=("n_embed", "hidden_size"), heads="n_head", layers="n_layer", positions=()),
    Paths("transformer", "word_embeddings", "h", "ln_f", "self_attention", "mlp",
          embed_norm="word_embeddings_layernorm"), read, "bloom_block",
    declared=(size("vocab_size"), size("hidden_size"), size("n_embed"), layers("n_layer"),
              heads("n_head", "hidden_size")),
    architectures=(HF_CLASS,), doc_name="BLOOM causal LM",
    refused=("slow_but_exact: true with pretraining_tp > 1 (sliced output projections summed)",))
BLOOM = family(TABLE)
FAMILY_LIST = (BLOOM,)
