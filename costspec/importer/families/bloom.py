"""BLOOM (transformers' BloomForCausalLM), imported whole with its LM head: token embeddings and their
LayerNorm (word_embeddings_layernorm), pre-LN blocks (or, with apply_residual_connection_post_layernorm, the
LayerNorm's output as the residual) of multi-head attention with ALiBi (a per-head linear bias added to every
score inside baddbmm, the causal mask beside it), one biased fused query_key_value projection split per head,
a biased MLP of 4 x hidden with BLOOM's own tanh GELU (python-level ops), a final LayerNorm and a tied (or
untied) LM head.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, heads, layers, size
from costspec.importer.emit import SpecText, wrap_comment
from costspec.importer.families import Family
from costspec.importer.families.common import check_divides
from costspec.importer.families.modern_template import DEFAULT_S, item, precision

HF_CLASS = "BloomForCausalLM"


def block_lines(post_residual: bool) -> list[str]:
    """x + attn(ln(x)), then x + mlp(ln(x)); with apply_residual_connection_post_layernorm the residual is
    the LayerNorm's output: ln(x) + attn(ln(x)), then y + mlp(y) with y = ln(...)."""
    attn = item("attention: {heads: heads, fused_qkv: true, qkv_bias: true, proj_bias: true, alibi: true, "
                "causal: true, backend: eager}", "self_attention")
    mlp = item("mlp: {hidden: F, fn: gelu_tanh, bias: true}", "mlp")
    ln1, ln2 = item("layernorm: {}", "input_layernorm"), item("layernorm: {}", "post_attention_layernorm")
    if post_residual:
        return [*ln1, "- residual:", *("    " + x for x in attn), *ln2, "- residual:", *("    " + x for x in mlp)]
    return ["- residual:", *("    " + x for x in ln1 + attn), "- residual:", *("    " + x for x in ln2 + mlp)]


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


def build(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type bloom, transformers' {HF_CLASS})")
    if cfg.get_bool("slow_but_exact", False) and cfg.get_int("pretraining_tp", 1) > 1:
        raise cfg.refuse("slow_but_exact", "with pretraining_tp > 1 BloomAttention and BloomMLP run their output "
                         "projections as pretraining_tp sliced F.linear calls summed into a zeros tensor (not "
                         "supported by this importer: set slow_but_exact: false, the same matmul FLOPs)")
    key = "n_embed" if cfg.has("n_embed") else "hidden_size"
    C, h = cfg.get_int(key), cfg.get_int("n_head")
    check_divides(cfg, key, C, "n_head", h)
    L, V = cfg.get_int("n_layer"), cfg.get_int("vocab_size")
    post_residual = cfg.get_bool("apply_residual_connection_post_layernorm", False)
    tied = cfg.get_bool("tie_word_embeddings", True)
    spec.dim("B", 1, "batch size")
    spec.dim("S", DEFAULT_S, f"sequence length (tokens): {DEFAULT_S} (ALiBi has no maximum length); --set S=... "
             "for another")
    spec.dim("C", C, "hidden size", key)
    spec.dim("heads", h, "attention heads", "n_head")
    spec.derived("D", "C / heads", "head dim")
    spec.derived("F", "4 * C", "MLP width (BloomMLP: 4 x hidden)")
    spec.dim("L", L, "decoder layers", "n_layer")
    spec.dim("V", V, "vocabulary size", "vocab_size")
    precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    spec.block("bloom_block", "\n".join(block_lines(post_residual)) + "\n")
    spec.note("BloomForCausalLM runs eager attention (baddbmm with the ALiBi bias, a float causal mask, softmax, "
              "bmm): the attention is written with backend: eager, as it runs; drop it for the cost of a flash "
              "kernel with ALiBi")
    spec.header.extend(wrap_comment(f"`source:` and `ignore:` name modules of transformers' {HF_CLASS} "
                                    "(transformers 5)"))
    spec.ignore(rules(gelu_rule("transformer.h.*.mlp.gelu_impl", "L*B*S*F")))
    spec.doc = (f"BLOOM causal LM imported from a Hugging Face config: embedding and its LayerNorm, {L} blocks "
                f"(hidden {C}, {h} heads of {C // h}, fused qkv, ALiBi, causal; GELU MLP of {4 * C}"
                f"{'; the LayerNorm output as residual' if post_residual else ''}), final LayerNorm, LM head"
                f"{' tied to the embedding' if tied else ''}")
    spec.layers(f"""\
- embedding: {{vocab: V, dim: C}}
  name: word_embeddings
  source: transformer.word_embeddings
- layernorm: {{}}
  name: word_embeddings_layernorm
  source: transformer.word_embeddings_layernorm
- repeat: L
  name: h
  body: bloom_block
  source: transformer.h
- layernorm: {{}}
  name: ln_f
  source: transformer.ln_f
- lm_head: {{vocab: V{', tied: true' if tied else ''}}}  # tie_word_embeddings: {'true' if tied else 'false'}
  source: lm_head
""")
    text = spec.render()
    cfg.check_understood({
        "pretraining_tp": "the tensor-parallel degree at pretraining: read only with slow_but_exact",
        "seq_length": "the pretraining context length: ALiBi has no position table (S is set by --set S=...)",
        "masked_softmax_fusion": "a Megatron kernel switch, unused by transformers",
        "offset_alibi": "unused by transformers' BLOOM",
        "unk_token_id": "a tokenizer id"})
    return text


KEYS = (size("vocab_size"), size("hidden_size"), size("n_embed"), layers("n_layer"), heads("n_head", "hidden_size"))
BLOOM = Family(("bloom",), HF_CLASS, build,
               "BLOOM causal LM with its LM head: embedding LayerNorm, fused qkv split per head, ALiBi, eager "
               "attention, biased GELU MLP of 4 x hidden (BLOOM's GELU as python-level ops)",
               architectures=(HF_CLASS,), keys=KEYS,
               refused=("slow_but_exact: true with pretraining_tp > 1 (sliced output projections summed)",))
FAMILY_LIST = (BLOOM,)
