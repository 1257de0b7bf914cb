"""OPT (transformers' OPTForCausalLM), imported whole with its LM head: token embeddings (of
word_embed_proj_dim, projected in and out when it is not the hidden size), learned absolute positions (a
table of max_position_embeddings + 2 rows: OPT's offset of 2), pre-LN blocks (or post-LN, OPT-350m's
do_layer_norm_before: false) of multi-head attention with q scaled after its projection and a plain MLP
(fc1, activation, fc2), optional biases (enable_bias) and LayerNorm weights, a tied (or untied) LM head.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, heads, layers, size
from costspec.importer.emit import SpecText, wrap_comment
from costspec.importer.families import Family
from costspec.importer.families.common import activation, check_divides
from costspec.importer.families.gptj import gelu_new_rule
from costspec.importer.families.modern_template import DEFAULT_S, item, precision

HF_CLASS = "OPTForCausalLM"
OFFSET = 2  # OPTLearnedPositionalEmbedding holds max_position_embeddings + 2 rows and looks up position + 2


def block_lines(attn: str, fn: str, bias: str, norm: str, pre: bool) -> list[str]:
    """Pre-LN: x + attn(ln(x)), then x + fc2(act(fc1(ln(x)))); post-LN: ln(x + attn(x)), ln(x + mlp(x))."""
    mlp = [*item(f"linear: {{out: F, bias: {bias}}}", "fc1"), *item(f"activation: {{fn: {fn}}}", "activation_fn"),
           *item(f"linear: {{out: C, bias: {bias}}}", "fc2")]
    attn_norm, mlp_norm = item(norm, "self_attn_layer_norm"), item(norm, "final_layer_norm")
    if pre:
        return (["- residual:", *("    " + x for x in attn_norm + item(attn, "self_attn")),
                 "- residual:", *("    " + x for x in mlp_norm + mlp)])
    return (["- residual:", *("    " + x for x in item(attn, "self_attn")), *attn_norm,
             "- residual:", *("    " + x for x in mlp), *mlp_norm])


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


def build(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type opt, transformers' {HF_CLASS})")
    C, h = cfg.get_int("hidden_size"), cfg.get_int("num_attention_heads")
    check_divides(cfg, "hidden_size", C, "num_attention_heads", h)
    P = cfg.get_int("word_embed_proj_dim", C)
    F, L, V = cfg.get_int("ffn_dim"), cfg.get_int("num_hidden_layers"), cfg.get_int("vocab_size")
    most = cfg.get_int("max_position_embeddings", 2048)
    S = min(DEFAULT_S, most)
    pre = cfg.get_bool("do_layer_norm_before", True)
    removed = cfg.get_bool("_remove_final_layer_norm", False)  # read either way: post-LN has none
    final_norm = pre and not removed
    affine = cfg.get_bool("layer_norm_elementwise_affine", True)
    bias = "true" if cfg.get_bool("enable_bias", True) else "false"
    fn = activation(cfg, "activation_function", "relu")
    tied = cfg.get_bool("tie_word_embeddings", True)
    spec.dim("B", 1, "batch size")
    spec.dim("S", S, f"sequence length (tokens): min({DEFAULT_S}, the maximum {most}); --set S=... for another "
             f"length up to {most}", "max_position_embeddings")
    spec.dim("C", C, "hidden size", "hidden_size")
    if P != C:
        spec.dim("P", P, "token embedding width (projected in and out of the hidden size)", "word_embed_proj_dim")
    spec.dim("heads", h, "attention heads", "num_attention_heads")
    spec.dim("F", F, "MLP width", "ffn_dim")
    spec.dim("L", L, "decoder layers", "num_hidden_layers")
    spec.dim("V", V, "vocabulary size", "vocab_size")
    spec.dim("T", most + OFFSET, f"position table rows (max_position_embeddings + OPT's offset {OFFSET})",
             "max_position_embeddings")
    precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    norm = "layernorm: {}" if affine else "layernorm: {affine: false}"
    attn = f"attention: {{heads: heads, fused_qkv: false, qkv_bias: {bias}, proj_bias: {bias}, causal: true}}"
    spec.block("opt_block", "\n".join(block_lines(attn, fn, bias, norm, pre)) + "\n")
    spec.header.extend(wrap_comment(f"`source:` and `ignore:` name modules of transformers' {HF_CLASS} "
                                    "(transformers 5)"))
    spec.ignore(rules(cfg.get("activation_function") == "gelu_new"))
    width = "P" if P != C else "C"
    lines = [*item(f"embedding: {{vocab: V, dim: {width}}}", "model.decoder.embed_tokens")]
    lines.insert(1, "  name: embed_tokens")
    if P != C:
        lines += item("linear: {out: C, bias: false}", "model.decoder.project_in")
    lines += item("position_embedding: {length: T}", "model.decoder.embed_positions")
    lines += ["- repeat: L", "  name: layers", "  body: opt_block", "  source: model.decoder.layers"]
    if final_norm:
        lines += item(norm, "model.decoder.final_layer_norm")
    if P != C:
        lines += item("linear: {out: P, bias: false}", "model.decoder.project_out")
    lines += [f"- lm_head: {{vocab: V{', tied: true' if tied else ''}}}  # tie_word_embeddings: "
              f"{'true' if tied else 'false'}", "  source: lm_head"]
    spec.layers("\n".join(lines) + "\n")
    projected = f" (width {P}, projected in)" if P != C else ""
    spec.doc = (f"OPT causal LM imported from a Hugging Face config: token embedding{projected}, "
                f"learned positions, {L} {'pre' if pre else 'post'}-LN blocks (hidden {C}, {h} heads of {C // h}, "
                f"causal; {fn} MLP of {F}){', final LayerNorm' if final_norm else ''}"
                f"{', projected out' if P != C else ''}, LM head{' tied to the embedding' if tied else ''}")
    text = spec.render()
    cfg.check_understood({"layerdrop": "layers skipped at random in training only (0 in eval)",
                          "init_std": "initialisation only"})
    return text


KEYS = (size("vocab_size"), size("hidden_size"), layers("num_hidden_layers"),
        heads("num_attention_heads", "hidden_size"), size("ffn_dim"), size("word_embed_proj_dim"),
        size("max_position_embeddings"))
OPT = Family(("opt",), HF_CLASS, build,
             "OPT causal LM with its LM head: learned positions (offset 2), pre- or post-LN blocks, q scaled after "
             "its projection, plain MLP, optional biases, embeddings projected in and out when narrower",
             architectures=(HF_CLASS,), keys=KEYS, refused=("activation_function the importer does not price",))
FAMILY_LIST = (OPT,)
