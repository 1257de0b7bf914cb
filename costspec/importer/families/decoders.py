"""GPT-2 with its LM head (GPT2LMHeadModel), with the decoder template's defaults (bf16 when the config names no
dtype, S = min(4096, n_ctx or n_positions)); the Llama-like decoders are entries of the template (modern.py)."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import GELU_NEW_NOTE, activation, check_divides
from costspec.importer.families.modern_template import precision, sequence_dim
from costspec.importer.head import CausalLM

DOUBLE_HEADS = "GPT2DoubleHeadsModel's multiple-choice head only"


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
    context = cfg.get_int("n_ctx", P)
    if context > P:
        raise ImportProblem(f"{cfg.where('n_ctx')} = {context} exceeds n_positions = {P} (the position table)")
    inner = cfg.get("n_inner")
    tied = cfg.get_bool("tie_word_embeddings", True)
    spec.dim("B", 1, "batch size")
    sequence_dim(spec, cfg, P, "n_ctx" if cfg.has("n_ctx") else "n_positions")
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
    precision(spec, cfg)
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


FAMILY_LIST = (GPT2,)
