"""DeBERTa-v2 / v3 encoders (DebertaV2Model, what AutoModel builds: no pooler, no head): disentangled attention
over one relative-position table of 2 x position_buckets rows, normalised once per forward, read by every layer;
post-LN BERT-style layers. The spec's structure is tests/against/specs/deberta_v2_disentangled.yaml's.

Imported as DeBERTa-v3 and the v2 checkpoints without a conv layer configure it: relative_attention with log
position buckets; without relative_attention (DebertaV2Config's default) as content-only attention, the eager
`attention` op (bmm QK^T, softmax, bmm AV), as DisentangledSelfAttention runs it then. What transformers runs
that the spec does not price (position-only bucket arithmetic, the all-ones padding mask the model builds when
called without one, k divided by the scale) is named in `ignore:` rules with their counts.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, count, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.bert import DEFAULT_DTYPE
from costspec.importer.families.common import GELU_NEW_NOTE, activation, check_divides

HEAD = "the heads of DebertaV2For* classes (DebertaV2Model, the spec, has none)"
IGNORED = {
    "tie_word_embeddings": "the spec is the encoder: no masked-LM head whose weight could be tied",
    "legacy": "picks the masked-LM head's layout (DebertaV2ForMaskedLM only)",
    "pooler_hidden_size": HEAD, "pooler_hidden_act": HEAD, "pooler_dropout": HEAD,
    "classifier_dropout": HEAD,
    "max_relative_positions": "with position buckets, a constant of make_log_bucket_position's log scale",
    "conv_groups": "describes the ConvLayer, absent while conv_kernel_size is 0 (refused otherwise)",
    "conv_act": "describes the ConvLayer, absent while conv_kernel_size is 0 (refused otherwise)",
}
# DebertaV2Model called without an attention_mask looks for pad_token_id in the ids (a .item(), which meta
# tensors cannot do); without a pad token it skips the look. The padding row's gradient is the same work.
NO_PAD_CHECK = {"pad_token_id": "null"}
REFUSED = ("position_buckets missing or below 2 with relative_attention (relative positions without log buckets)",
           "norm_rel_ebd: layer_norm without relative_attention (a LayerNorm built and never run)",
           "conv_kernel_size > 0 (DeBERTa-v2-xlarge's ConvLayer after the first layer)",
           "pos_att_type naming no c2p / p2c, or anything else",
           "norm_rel_ebd other than none or layer_norm",
           "attention_head_size other than hidden_size / num_attention_heads (DebertaV2Model cannot run it)")
KEYS = (size("vocab_size"), size("hidden_size"), layers("num_hidden_layers"),
        heads("num_attention_heads", "hidden_size"), size("attention_head_size"),
        size("intermediate_size"), size("max_position_embeddings"), count("type_vocab_size"),
        size("embedding_size"), count("conv_kernel_size"))


def _terms(cfg: HFConfig) -> tuple[bool, bool]:
    """(c2p, p2c) from pos_att_type: "p2c|c2p" or a list (DebertaV2Config splits the string)."""
    value = cfg.get("pos_att_type", [])
    items = value.lower().split("|") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise cfg.refuse("pos_att_type", "expected a list of c2p / p2c, or a string such as \"p2c|c2p\"")
    terms = {i.strip() for i in items}
    if not terms or not terms <= {"c2p", "p2c"}:
        raise cfg.refuse("pos_att_type", "expected c2p and / or p2c (the disentangled terms the importer prices)")
    return "c2p" in terms, "p2c" in terms


def _precision(spec: SpecText, cfg: HFConfig) -> None:
    if cfg.dtype_source == "--dtype" or cfg.get("torch_dtype") is not None or cfg.get("dtype") is not None:
        spec.precision(cfg.dtype, cfg.dtype_source)
    else:
        spec.precision(DEFAULT_DTYPE, "the config names no dtype: bf16, as these models are run (--dtype to change)")


def build_deberta(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type deberta-v2, transformers' "
                                  "DebertaV2Model)")
    relative = cfg.get_bool("relative_attention", False)
    buckets = cfg.get_int("position_buckets", -1, minimum=-2**31) if relative else 0
    if relative and buckets < 2:  # make_log_bucket_position divides by buckets // 2
        raise cfg.refuse("position_buckets", "expected a positive number of log buckets, at least 2 (DeBERTa-v3: "
                                             "256); unbucketed relative positions are not imported")
    if cfg.get_int("conv_kernel_size", 0, minimum=0) > 0:
        raise cfg.refuse("conv_kernel_size", "DeBERTa-v2's ConvLayer (a grouped conv1d over the first layer's "
                                             "input, masked) is not imported (expected 0 or absent)")
    norms = {n.strip() for n in cfg.get_str("norm_rel_ebd", "none").lower().split("|")}
    if not norms <= {"none", "layer_norm"}:
        raise cfg.refuse("norm_rel_ebd", "expected none or layer_norm")
    norm = "layer_norm" in norms
    if not relative and norm:
        raise cfg.refuse("norm_rel_ebd", "without relative_attention DebertaV2Encoder still builds the table's "
                                         "LayerNorm but never runs it: expected none")
    c2p, p2c = _terms(cfg) if relative else (False, False)
    share = cfg.get_bool("share_att_key", False) if relative else False
    C = cfg.get_int("hidden_size", 1536)
    heads = cfg.get_int("num_attention_heads", 24)
    check_divides(cfg, "hidden_size", C, "num_attention_heads", heads)
    if cfg.get_int("attention_head_size", C // heads) != C // heads:
        raise cfg.refuse("attention_head_size", f"expected hidden_size / num_attention_heads = {C // heads} "
                                                "(DebertaV2Model cannot run another: its output dense reads C)")
    E = cfg.get_int("embedding_size", C)
    P = cfg.get_int("max_position_embeddings", 512)
    biased = cfg.get_bool("position_biased_input", True)
    segments = cfg.get_int("type_vocab_size", 0, minimum=0)
    L = cfg.get_int("num_hidden_layers", 24)
    fn = activation(cfg, "hidden_act", "gelu")
    spec.dim("B", 1, "batch size")
    spec.dim("S", min(512, P), "sequence length (tokens)", "max_position_embeddings, at most 512")
    spec.dim("C", C, "hidden size", "hidden_size")
    if E != C:
        spec.dim("E", E, "embedding width (projected to C by embed_proj)", "embedding_size")
    spec.dim("heads", heads, "attention heads", "num_attention_heads")
    spec.dim("L", L, "layers", "num_hidden_layers")
    spec.dim("F", cfg.get_int("intermediate_size", 6144), "MLP hidden width", "intermediate_size")
    spec.dim("V", cfg.get_int("vocab_size", 128100), "vocabulary size", "vocab_size")
    if relative:
        spec.dim("K", buckets, "relative-position buckets on each side (the table has 2K rows)", "position_buckets")
    if biased:
        spec.dim("P", P, "position table length", "max_position_embeddings")
    if cfg.get("hidden_act") == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    _precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    terms = " and ".join(t for t, on in (("c2p", c2p), ("p2c", p2c)) if on)
    what = (f"disentangled attention: {terms} over one table of 2 x {buckets} log buckets"
            + (" normalised once" if norm else "")
            + (", projected by the layers' own key / query projections" if share else
               ", projected by pos_key_proj / pos_query_proj") if relative else
            "content-only attention (relative_attention false): QK^T, softmax, AV, run as bmm")
    spec.doc = ("DeBERTa-v2/v3 encoder imported from a Hugging Face config: token embedding"
                + (", learned positions" if biased else "") + (", token types" if segments else "")
                + (", a projection from the embedding width" if E != C else "")
                + f", LayerNorm; {L} post-LN layers (width {C}, {heads} heads of {what}), {fn} MLP; no pooler, no head")
    flags = "".join(f", {k}: false" for k, on in (("c2p", c2p), ("p2c", p2c)) if not on)
    share_flag = "" if share else ", share_att_key: false"
    attention = (f"""\
    - disentangled_attention: {{heads: heads, span: K{flags}{share_flag}}}
      source: attention.self
    - linear: {{out: C}}
      source: attention.output.dense
""" if relative else """\
    - attention: {heads: heads, fused_qkv: false, backend: eager}
      source: [attention.self, attention.output.dense]
""")
    spec.block("deberta_layer", f"""\
- residual:
{attention}- layernorm: {{}}
  source: attention.output.LayerNorm
- residual:
    - linear: {{out: F}}
      source: intermediate.dense
    - activation: {{fn: {fn}}}
    - linear: {{out: C}}
      source: output.dense
- layernorm: {{}}
  source: output.LayerNorm
""")
    spec.header.append("# `source:` and `ignore:` name modules of transformers' DebertaV2Model, called without an "
                       "attention_mask (it builds an all-ones one)")
    width = "E" if E != C else "C"
    spec.ignore(_rules(c2p, p2c) if relative else _plain_rules())
    if share and not (c2p and p2c):
        spec.ignore(f"""\
- module: "encoder.layer.*.attention.self"
  extra: {{matmul: "L*2*(2*K)*C*C", bias_add: "L*(2*K)*C"}}
  pass: forward
  reason: >-
    with share_att_key, DisentangledSelfAttention projects the table by both query_proj and key_proj
    whatever pos_att_type holds; with {"c2p" if c2p else "p2c"} alone the {"query" if c2p else "key"}
    projection of the 2K rows is never read (2*2K*C*C FLOPs and 2K*C bias adds per layer; no gradient
    reaches it)
""")
    layers_text = (f"- embedding: {{vocab: V, dim: {width}, segments: {segments}}}\n"
                   "  source: [embeddings.word_embeddings, embeddings.token_type_embeddings]\n" if segments else
                   f"- embedding: {{vocab: V, dim: {width}}}\n  source: embeddings.word_embeddings\n")
    if biased:
        layers_text += "- position_embedding: {length: P}\n  source: embeddings.position_embeddings\n"
    if E != C:
        layers_text += "- linear: {out: C, bias: false}\n  name: embed_proj\n  source: embeddings.embed_proj\n"
    table_source = "[rel_embeddings, LayerNorm]" if norm else "rel_embeddings"
    if not relative:
        layers_text += """\
- layernorm: {}
  source: embeddings.LayerNorm
- repeat: L
  name: layers
  body: deberta_layer
  source: encoder.layer
"""
    else:
        layers_text += f"""\
- layernorm: {{}}
  source: embeddings.LayerNorm
- sequence:
    - rel_embeddings: {{rows: 2*K, readers: L{'' if norm else ', norm: false'}}}
      source: {table_source}
    - repeat: L
      name: layers
      body: deberta_layer
      source: layer
  name: encoder
  source: encoder
"""
    spec.layers(layers_text)
    cfg.check_understood({**IGNORED, **({} if relative else PLAIN_IGNORED)})
    return spec.render()


PLAIN_IGNORED = {
    "position_buckets": "read with relative_attention only (false here: no relative positions)",
    "share_att_key": "read with relative_attention only (false here: no relative-position table)",
    "pos_att_type": "without relative_attention only the score scale 1/sqrt(d*(1 + terms)): a constant, the same cost",
}


def _plain_rules() -> str:
    """What DebertaV2Model runs without relative_attention beside the spec's eager attention."""
    return """\
- module: embeddings
  extra: {mul: "B*S*C"}
  reason: >-
    DebertaV2Embeddings multiplies the embeddings by the padding mask (all ones: DebertaV2Model builds it when
    called without one) after its LayerNorm, B*S*C multiplies forward and backward; the spec has no padding
- module: "encoder.layer.*.attention.self"
  extra: {scale: "L*(B*S*C - B*heads*S*S + 1)", "unknown:aten.sqrt": "L", select: "L*B*heads*S*S"}
  pass: forward
  reason: >-
    per layer: DisentangledSelfAttention divides k by the scale sqrt(d*(1 + terms)) before QK^T (B*h*S*d
    divisions, where the spec's eager attention scales the B*h*S*S scores), computes that scale from a
    one-element tensor (a sqrt and a multiplication), and masked_fills the (constant, all-ones) padding mask
    into every score (B*h*S*S selects)
- module: "encoder.layer.*.attention.self"
  extra: {scale: "L*(B*S*C - B*heads*S*S)", select: "L*B*heads*S*S"}
  pass: backward
  reason: >-
    per layer: the backward of k's division by the scale (B*h*S*d, where the spec's scales the scores) and
    masked_fill's backward on every score (B*h*S*S selects)
"""


def _rules(c2p: bool, p2c: bool) -> str:
    """The ignore rules of tests/against/specs/deberta_v2_disentangled.yaml, for the terms the config has."""
    terms = int(c2p) + int(p2c)
    return f"""\
- module: embeddings
  extra: {{mul: "B*S*C"}}
  reason: >-
    DebertaV2Embeddings multiplies the embeddings by the padding mask (all ones: DebertaV2Model builds it when
    called without one) after its LayerNorm, B*S*C multiplies forward and backward; the spec has no padding
- module: encoder
  extra: {{select: "3*S*S", scale: "3*S*S", add: "S*S", mul: "S*S", "unknown:aten.log": "S*S + 1",
          "unknown:aten.ceil": "S*S"}}
  pass: forward
  reason: >-
    DeBERTa's log-bucketed relative positions (make_log_bucket_position, once per forward over the S x S
    pairs: two where, a division, a log and a ceil, a scaling, an add, a comparison, a sign product):
    position-only work a compiler folds (torch.where is always counted, so the ops after it are too); the
    spec's module keeps each pair's bucket as a buffer. The [B, 1, S, S] padding mask made from the all-ones
    mask is a constant, not counted
- module: "encoder.layer.*.attention.self"
  extra: {{add: "L*({terms}*S*S + B*heads*S*S)", scale: "L*({int(p2c)}*S*S + {1 + terms})", clamp: "L*{terms}*S*S",
          "unknown:aten.sqrt": "L*{1 + terms}", select: "L*B*heads*S*S"}}
  pass: forward
  reason: >-
    per layer: the c2p / p2c bucket indices offset by the span and clamped ({terms}*S*S adds and clamps;
    the p2c indices negated: S*S multiplications by -1), the scale sqrt(d*(1 + terms)) computed from
    one-element tensors once for the scores and once per term (a sqrt and a multiplication each), the
    score sum started from 0 (B*h*S*S adds of zero) and masked_fill of the (constant) padding mask on
    every score (B*h*S*S), and each term's gather of its bucket (data movement, no arithmetic: not counted)
- module: "encoder.layer.*.attention.self"
  extra: {{select: "L*B*heads*S*S"}}
  pass: backward
  reason: >-
    per layer: masked_fill's backward on every score (B*h*S*S selects); each gather's backward (a
    scatter_add_ of the gathered gradients) is the spec's own scatter_add
"""


DEBERTA = Family(("deberta-v2",), "DebertaV2Model", build_deberta,
                 "DeBERTa-v2/v3 encoder: disentangled attention over a shared table of log-bucketed relative "
                 "positions, or content-only eager attention without relative_attention (no pooler, no head)",
                 architectures=("DebertaV2Model", "DebertaV2ForMaskedLM"), refused=REFUSED, keys=KEYS,
                 hf_kwargs=NO_PAD_CHECK)

FAMILY_LIST = (DEBERTA,)
