"""OPT (transformers' OPTForCausalLM), imported whole with its LM head: token embeddings (of
word_embed_proj_dim, projected in and out when it is not the hidden size), learned absolute positions (a
table of max_position_embeddings + 2 rows: OPT's offset of 2), pre-LN blocks (or post-LN, OPT-350m's
do_layer_norm_before: false) of multi-head attention with q scaled after its projection and a plain MLP
(fc1, activation, fc2), optional biases (enable_bias) and LayerNorm weights, a tied (or untied) LM head: a row
of the GPT-like template (gpt_template.py), the reader of its switches and its rules.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, heads, layers, size
from costspec.importer.families.common import gelu_new_rule
from costspec.importer.families.gpt_template import POST_LN, PRE_LN, GptLike, Keys, Layer, Paths, Sizes, family

HF_CLASS = "OPTForCausalLM"
OFFSET = 2  # OPTLearnedPositionalEmbedding holds max_position_embeddings + 2 rows and looks up position + 2


def rules(gelu_new: bool) -> str:
    """How OPT runs its positions and its q scaling, where the spec's ops run otherwise (each with its formula)."""
    out = """\
- module: "model.decoder.layers.*.self_attn"
  extra: {scale: "L*B*S*C"}
  reason: >-
    OPTAttention multiplies q by 1/sqrt(head_dim) after its projection (B*S*C elements per layer, forward and
    backward) and calls the attention with scale 1; the spec's attention scales inside the kernel
- module: "model.decoder"
  extra: {"unknown:aten.cumsum": "B*S", mul: "B*S", add: "B*S"}
  pass: forward
  reason: >-
    OPTDecoder computes the position ids from a [B, S] mask of ones: cumsum (B*S values, a scan the cost table
    has no kind for), times the mask (mul) and minus 1 (add), B*S each
- module: "model.decoder.embed_positions"
  extra: {add: "B*S"}
  pass: forward
  reason: >-
    OPTLearnedPositionalEmbedding adds its offset of 2 to the [B, S] position ids before the lookup (B*S adds)
- module: "model.decoder.embed_positions"
  extra: {scatter_add: "B*S*C", bias_grad: "-B*S*C*min(1, B - 1)"}
  pass: backward
  reason: >-
    the positions are looked up per sequence ([B, S] ids, not [1, S]): the lookup's backward scatter-adds all
    B*S*C gradient rows into the table, with no sum over the batch first (the spec's position_embedding sums
    its broadcast gradient over the batch when B > 1)
"""
    return out + (gelu_new_rule("model.decoder.layers.*.activation_fn", "L*B*S*F") if gelu_new else "")


def read(cfg: HFConfig, dims: Sizes) -> Layer:
    """OPT's switches: learned positions (offset 2), token embeddings of word_embed_proj_dim projected in and out,
    pre- or post-LN blocks (do_layer_norm_before), the final LayerNorm (none post-LN or with
    _remove_final_layer_norm), LayerNorm weights (layer_norm_elementwise_affine), biases (enable_bias)."""
    C = dims.C
    P = cfg.get_int("word_embed_proj_dim", C)
    most = cfg.get_int("max_position_embeddings", 2048)
    pre = cfg.get_bool("do_layer_norm_before", True)
    removed = cfg.get_bool("_remove_final_layer_norm", False)  # read either way: post-LN has none
    bias = "true" if cfg.get_bool("enable_bias", True) else "false"
    own = ((("P", P, "token embedding width (projected in and out of the hidden size)", "word_embed_proj_dim"),)
           if P != C else ())
    mlp = ((f"linear: {{out: F, bias: {bias}}}", "fc1"), (f"activation: {{fn: {dims.fn}}}", "activation_fn"),
           (f"linear: {{out: C, bias: {bias}}}", "fc2"))
    projected = f" (width {P}, projected in)" if P != C else ""
    attn = f"attention: {{heads: heads, fused_qkv: false, qkv_bias: {bias}, proj_bias: {bias}, causal: true}}"
    return Layer(attn=attn,
                 layout=PRE_LN if pre else POST_LN, norms=("self_attn_layer_norm", "final_layer_norm"), mlp=mlp,
                 norm="layernorm: {}" if cfg.get_bool("layer_norm_elementwise_affine", True) else
                 "layernorm: {affine: false}",
                 dims=(*own, ("T", most + OFFSET, f"position table rows (max_position_embeddings + OPT's offset "
                                                   f"{OFFSET})", "max_position_embeddings")),
                 positions="position_embedding: {length: T}", project=P != C, final_norm=pre and not removed,
                 ignore=rules(cfg.get("activation_function") == "gelu_new"),
                 understood={"layerdrop": "layers skipped at random in training only (0 in eval)",
                             "init_std": "initialisation only"},
                 blocks=(f"token embedding{projected}, learned positions, {dims.L} {'pre' if pre else 'post'}-LN "
                         f"blocks (hidden {C}, {dims.heads} heads of {C // dims.heads}, causal; {dims.fn} MLP of "
                         f"{dims.F}){', final LayerNorm' if pre and not removed else ''}"
                         f"{', projected out' if P != C else ''}"))


TABLE = GptLike(
    "opt", HF_CLASS, "OPT causal LM with its LM head: learned positions (offset 2), pre- or post-LN blocks, q "
    "scaled after its projection, plain MLP, optional biases, embeddings projected in and out when narrower",
    Keys(width=("hidden_size",), heads="num_attention_heads", layers="num_hidden_layers", mlp="ffn_dim",
         mlp_ratio=None, activation="activation_function", activation_default="relu"),
    Paths("model.decoder", "embed_tokens", "layers", "final_layer_norm", "self_attn", "mlp",
          positions="embed_positions", project_in="project_in", project_out="project_out"), read, "opt_block",
    declared=(size("vocab_size"), size("hidden_size"), layers("num_hidden_layers"),
              heads("num_attention_heads", "hidden_size"), size("ffn_dim"), size("word_embed_proj_dim"),
              size("max_position_embeddings")),
    architectures=(HF_CLASS,), doc_name="OPT causal LM", refused=("activation_function the importer does not price",))
OPT = family(TABLE)
FAMILY_LIST = (OPT,)
