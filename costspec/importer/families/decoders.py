"""GPT-2 with its LM head (GPT2LMHeadModel): a row of the GPT-like template (gpt_template.py; bf16 when the
config names no dtype, S = min(4096, n_ctx or n_positions)) and the reader of its switches; the Llama-like
decoders are entries of the decoder template (modern.py)."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.families.gpt_template import PRE_LN, GptLike, Keys, Layer, Paths, Sizes, family, gelu_new_note
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


def read_gpt2(cfg: HFConfig, dims: Sizes) -> Layer:
    """GPT-2's switches: learned positions (n_positions rows, n_ctx at most that), fused biased qkv, pre-LN
    blocks, the score scale (scale_attn_weights)."""
    P = cfg.get_int("n_positions", 1024)
    context = cfg.get_int("n_ctx", P)
    if context > P:
        raise ImportProblem(f"{cfg.where('n_ctx')} = {context} exceeds n_positions = {P} (the position table)")
    scale = "" if cfg.get_bool("scale_attn_weights", True) else ", scale: none"
    return Layer(attn=f"attention: {{heads: heads, causal: true{scale}}}", layout=PRE_LN, norms=("ln_1", "ln_2"),
                 ignore="", dims=(("P", P, "position table length", "n_positions"),),
                 positions="position_embedding: {length: P}", notes=gelu_new_note(cfg, GPT2_KEYS),
                 blocks=(f"token + learned position embeddings, {dims.L} pre-LN causal blocks (width {dims.C}, "
                         f"{dims.heads} heads, fused qkv, {dims.fn} MLP), final LayerNorm"),
                 understood=GPT2_IGNORED, attn_note="c_attn (fused qkv, bias), c_proj" + (
                     "; scale_attn_weights false" if scale else ""), head_note="; no bias")


GPT2_KEYS = Keys(width=("n_embd",), heads="n_head", layers="n_layer", mlp="n_inner",
                 positions=("n_ctx", "n_positions"), positions_default=1024, activation="activation_function",
                 activation_default="gelu_new",
                 defaults={"n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257})
GPT2_TABLE = GptLike(
    "gpt2", "GPT2LMHeadModel", "GPT-2 with its LM head (tied unless the config says not)", GPT2_KEYS,
    Paths("transformer", "wte", "h", "ln_f", "attn", "mlp", positions="wpe"), read_gpt2, "gpt2_block",
    lm=CausalLM("GPT2LMHeadModel", "GPT2Model", "transformer", writes="whole", tied_default=True),
    declared=(size("n_embd"), heads("n_head", "n_embd"), layers("n_layer"), size("n_positions"), size("n_ctx"),
              size("n_inner"), size("vocab_size")),
    architectures=("GPT2Model",), refused=("n_ctx larger than n_positions", "add_cross_attention: true"),
    doc_name="GPT-2")
GPT2 = family(GPT2_TABLE)
FAMILY_LIST = (GPT2,)
