"""Decoder-only language models: GPT-2 (with its tied LM head) and Llama (the backbone, LlamaModel)."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import GELU_NEW_NOTE, activation, check_divides
from costspec.importer.families.llm_parts import DECODER_KEYS, rope
from costspec.importer.head import CausalLM

DOUBLE_HEADS = "GPT2DoubleHeadsModel's multiple-choice head only"
ROPE_CONSTANTS = ("the rotary frequencies (theta, scaling type and factor) are constants: RoPE costs 2 mul + 1 add "
                  "per element of q and k whatever they are")


# ----------------------------------------------------------------------------------------------
# GPT-2
# ----------------------------------------------------------------------------------------------
GPT2_IGNORED = {
    "summary_type": DOUBLE_HEADS, "summary_use_proj": DOUBLE_HEADS, "summary_activation": DOUBLE_HEADS,
    "summary_proj_to_labels": DOUBLE_HEADS, "summary_first_dropout": DOUBLE_HEADS,
    "scale_attn_by_inverse_layer_idx": "divides the score scale by the layer index: a constant, the same cost",
    "reorder_and_upcast_attn": "used only by the eager attention (the same QK^T and AV, in fp32); transformers "
                               "runs GPT-2 with SDPA",
}


def build_gpt2(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type gpt2, transformers' GPT2LMHeadModel)")
    C = cfg.get_int("n_embd", 768)
    heads = cfg.get_int("n_head", 12)
    check_divides(cfg, "n_embd", C, "n_head", heads)
    P = cfg.get_int("n_positions", 1024)
    S = cfg.get_int("n_ctx", P)
    if S > P:
        raise ImportProblem(f"{cfg.where('n_ctx')} = {S} exceeds n_positions = {P} (the position table)")
    inner = cfg.get("n_inner")
    tied = cfg.get_bool("tie_word_embeddings", True)
    spec.dim("B", 1, "batch size")
    spec.dim("S", S, "sequence length (tokens; the context, n_ctx or n_positions)", "n_ctx" if cfg.has("n_ctx")
             else "n_positions")
    spec.dim("C", C, "width", "n_embd")
    spec.dim("heads", heads, "attention heads", "n_head")
    spec.dim("L", cfg.get_int("n_layer", 12), "layers", "n_layer")
    if inner is not None:
        spec.dim("F", cfg.get_int("n_inner"), "MLP hidden width", "n_inner")
    spec.dim("V", cfg.get_int("vocab_size", 50257), "vocabulary size", "vocab_size")
    spec.dim("P", P, "position table length", "n_positions")
    fn = activation(cfg, "activation_function", "gelu_new")
    if cfg.get("activation_function", "gelu_new") == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", "S"], "token ids")
    spec.doc = (f"GPT-2 imported from a Hugging Face config: token + learned position embeddings, pre-LN causal "
                f"blocks (width {C}, {heads} heads, fused qkv, {fn} MLP), final LayerNorm"
                + ("" if cfg.backbone else " and the LM head" + (" tied to the token embedding" if tied else
                                                                  " (its own weight: tie_word_embeddings false)")))
    scale = "" if cfg.get_bool("scale_attn_weights", True) else ", scale: none"
    hidden = "F" if inner is not None else "4*C"
    scale_note = "; scale_attn_weights" if scale else ""
    inner_note = "" if inner is not None else " (n_inner null: 4 x n_embd)"
    spec.block("gpt2_block", f"""\
- residual:
    - layernorm: {{}}  # ln_1 (layer_norm_epsilon does not change the cost)
      source: ln_1
    # causal: QK^T and AV counted over the full S x S (as executed, as FlopCounterMode counts)
    - attention: {{heads: heads, causal: true{scale}}}  # c_attn (fused qkv, bias), c_proj{scale_note}
      source: attn
- residual:
    - layernorm: {{}}  # ln_2
      source: ln_2
    - mlp: {{hidden: {hidden}, fn: {fn}}}  # c_fc -> activation_function -> c_proj{inner_note}
      source: mlp
""")
    spec.header.append("# `source:` names modules of transformers' GPT2LMHeadModel")
    spec.layers(f"""\
- embedding: {{vocab: V, dim: C}}
  name: wte
  source: transformer.wte
- position_embedding: {{length: P}}
  name: wpe
  source: transformer.wpe
- repeat: L
  name: h
  body: gpt2_block
  source: transformer.h
- layernorm: {{}}
  name: ln_f
  source: transformer.ln_f
- lm_head: {{vocab: V{", tied: true" if tied else ""}}}  # tie_word_embeddings; no bias
  source: lm_head
""")
    cfg.check_understood(GPT2_IGNORED)
    return spec.render()


GPT2_KEYS = (size("n_embd"), heads("n_head", "n_embd"), layers("n_layer"), size("n_positions"), size("n_ctx"),
             size("n_inner"), size("vocab_size"))
GPT2 = Family(("gpt2",), "GPT2LMHeadModel", build_gpt2, "GPT-2 with its LM head (tied unless the config says not)",
             keys=GPT2_KEYS,
             lm=CausalLM("GPT2LMHeadModel", "GPT2Model", "transformer", writes="whole", tied_default=True),
              architectures=("GPT2Model",), refused=("n_ctx larger than n_positions", "add_cross_attention: true"))


# ----------------------------------------------------------------------------------------------
# Llama
# ----------------------------------------------------------------------------------------------
LLAMA_IGNORED = {
    "tie_word_embeddings": "read by the LM head (importer/head.py), which the backbone (--backbone) does not have",
    "pretraining_tp": "the tensor-parallel degree of the original pretraining; transformers 5 computes the same "
                      "projections whatever it says",
}


def build_llama(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type llama, transformers' LlamaModel)")
    C = cfg.get_int("hidden_size", 4096)
    heads = cfg.get_int("num_attention_heads", 32)
    kv = cfg.get_int("num_key_value_heads", heads)
    if heads % kv:
        raise ImportProblem(f"{cfg.where('num_key_value_heads')} = {kv} does not divide num_attention_heads = {heads}")
    if cfg.get("head_dim") is not None:
        head_dim = cfg.get_int("head_dim")
    else:  # LlamaConfig: head_dim = hidden_size // num_attention_heads
        check_divides(cfg, "hidden_size", C, "num_attention_heads", heads)
        head_dim = C // heads
    explicit_d = head_dim * heads != C
    spec.dim("B", 1, "batch size")
    spec.dim("S", cfg.get_int("max_position_embeddings", 2048),
             "sequence length (tokens): the context the config allows; --set S=... for shorter sequences",
             "max_position_embeddings")
    spec.dim("C", C, "hidden size", "hidden_size")
    spec.dim("heads", heads, "query heads", "num_attention_heads")
    spec.dim("KV", kv, f"key/value heads ({'grouped-query attention' if kv < heads else 'multi-head'})",
             "num_key_value_heads")
    if explicit_d:
        spec.dim("D", head_dim, "head dim (not hidden_size / heads)", "head_dim")
    spec.dim("F", cfg.get_int("intermediate_size", 11008), "gated MLP intermediate size", "intermediate_size")
    spec.dim("L", cfg.get_int("num_hidden_layers", 32), "decoder layers", "num_hidden_layers")
    spec.dim("V", cfg.get_int("vocab_size", 32000), "vocabulary size", "vocab_size")
    fn = activation(cfg, "hidden_act", "silu")
    rope(cfg)
    attn_bias = cfg.get_bool("attention_bias", False)
    mlp_bias = cfg.get_bool("mlp_bias", False)
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", "S"], "token ids")
    spec.note("Causal attention is counted over the full S x S scores, as executed.")
    d = "D" if explicit_d else "C/heads"
    spec.doc = (f"Llama-style decoder imported from a Hugging Face config: token embedding, pre-RMSNorm causal blocks "
                f"(hidden {C}, {heads} query heads and {kv} key/value heads of dim {head_dim}, RoPE, gated {fn} MLP "
                f"{cfg.get('intermediate_size', 11008)}), final RMSNorm")
    bias = f"qkv_bias: {str(attn_bias).lower()}, proj_bias: {str(attn_bias).lower()}"
    spec.block("llama_block", f"""\
- residual:
    - rmsnorm: {{}}  # input_layernorm (rms_norm_eps does not change the cost)
      source: input_layernorm
    # GQA: SDPA counted at the query heads (k and v expanded); RoPE on q and k
    - attention: {{heads: heads, kv_heads: KV,{" head_dim: D," if explicit_d else ""} fused_qkv: false, {bias},
                  rope: true, causal: true}}  # attention_bias
      source: self_attn
- residual:
    - rmsnorm: {{}}  # post_attention_layernorm
      source: post_attention_layernorm
    - mlp: {{hidden: F, gated: true, fn: {fn}, bias: {str(mlp_bias).lower()}}}  # hidden_act, mlp_bias
      source: mlp
""")
    spec.header.append("# `source:` and `ignore:` name modules of transformers' LlamaModel")
    spec.ignore(f"""\
- module: "layers.*.self_attn"
  extra: {{scale: "L*B*S*(heads + KV)*({d})/2"}}
  reason: >-
    transformers' rotate_half builds [-x2, x1] with a neg (a multiplication by -1: the `scale` kind) of
    half of q and k, B*S*(h+kv)*d/2 elements per layer, forward and backward; the spec's RoPE folds the
    sign into the sin table (2 mul + 1 add per element)
- module: "layers.*.self_attn"
  extra: {{add: "L*B*S*(heads + KV)*({d})"}}
  pass: backward
  reason: >-
    rotate_half's backward: the gradients of the two halves it slices from q and k are added back into
    one tensor, one add per element of q and k (B*S*(h+kv)*d per layer) that the spec's RoPE does not run
""")
    spec.layers("""\
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
""")
    cfg.check_understood(LLAMA_IGNORED)
    return spec.render()


LLAMA = Family(("llama",), "LlamaForCausalLM", build_llama, "Llama-style causal LM (LlamaForCausalLM, LM head "
               "tied or not)", keys=DECODER_KEYS, architectures=("LlamaModel",),
               lm=CausalLM("LlamaForCausalLM", "LlamaModel", "model"),
               refused=("num_key_value_heads that does not divide num_attention_heads",))

FAMILY_LIST = (GPT2, LLAMA)
