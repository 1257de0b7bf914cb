"""BERT-style encoders: BERT and RoBERTa (post-LN, separate q/k/v, learned positions, token types)."""
from __future__ import annotations

from costspec.importer.config import HFConfig
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import ENCODER_KEYS, GELU_NEW_NOTE, activation, check_divides

NO_HEAD = "the spec is the encoder without pooler: no masked-LM head whose weight could be tied"
BERT_IGNORED = {
    "tie_word_embeddings": NO_HEAD,
    "classifier_dropout": "a classification head's dropout (no head in the spec)",
}

BERT_REFUSED = ("is_decoder: true (a causal BERT)", "add_cross_attention: true",
                "position_embedding_type other than absolute")


def build_bert(cfg: HFConfig, roberta: bool = False) -> str:
    hf = "RobertaModel" if roberta else "BertModel"
    label = "RoBERTa" if roberta else "BERT"
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' {hf})")
    if cfg.get_bool("is_decoder", False):
        raise cfg.refuse("is_decoder", f"{label} as a causal decoder is not supported by this importer "
                                       "(expected false: the bidirectional encoder)")
    if cfg.get_bool("add_cross_attention", False):
        raise cfg.refuse("add_cross_attention", "cross-attention layers are not supported by this importer "
                                                "(expected false)")
    position_kind = cfg.get("position_embedding_type", "absolute")
    if position_kind != "absolute":
        raise cfg.refuse("position_embedding_type", "only absolute position embeddings are supported")
    C = cfg.get_int("hidden_size", 768)
    heads = cfg.get_int("num_attention_heads", 12)
    check_divides(cfg, "hidden_size", C, "num_attention_heads", heads)
    P = cfg.get_int("max_position_embeddings", 512)
    segments = cfg.get_int("type_vocab_size", 2)  # the model looks up segment 0 even when the table is empty
    spec.dim("B", 1, "batch size")
    # RoBERTa's positions start after padding_idx (pad_token_id + 1), so a sequence fills at most P - 2
    S = min(512, P - 2) if roberta else min(512, P)
    spec.dim("S", S, "sequence length (tokens)", "max_position_embeddings" + (" - 2" if roberta else "")
             + ", at most 512")
    spec.dim("C", C, "hidden size", "hidden_size")
    spec.dim("heads", heads, "attention heads", "num_attention_heads")
    spec.dim("L", cfg.get_int("num_hidden_layers", 12), "layers", "num_hidden_layers")
    spec.dim("F", cfg.get_int("intermediate_size", 3072), "MLP hidden width", "intermediate_size")
    spec.dim("V", cfg.get_int("vocab_size", 30522), "vocabulary size", "vocab_size")
    spec.dim("P", P, "position table length", "max_position_embeddings")
    fn = activation(cfg, "hidden_act", "gelu")
    if cfg.get("hidden_act") == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", "S"], "token ids")
    spec.doc = (f"{label} encoder imported from a Hugging Face config: token + segment + learned position "
                "embeddings, LayerNorm, post-LN layers "
                f"(width {C}, {heads} heads with separate q/k/v projections, {fn} MLP); no pooler, no LM head")
    if roberta:
        spec.note("RoBERTa numbers positions from pad_token_id + 1 (create_position_ids_from_input_ids), so S is at "
                  "most max_position_embeddings - 2; the position ids are integer work on the input ids, not "
                  "counted")
    spec.block("bert_layer", """\
# post-LN: x = LN(x + attn(x)); x = LN(x + mlp(x)); no attention mask (every sequence fills S)
- residual:
    - attention: {heads: heads, fused_qkv: false}  # query / key / value / output dense, all with bias
      source: [attention.self, attention.output.dense]
- layernorm: {}  # attention.output.LayerNorm (layer_norm_eps does not change the cost)
  source: attention.output.LayerNorm
- residual:
    - mlp: {hidden: F, fn: %s}  # intermediate (hidden_act) and output dense
      source: [intermediate, output.dense]
- layernorm: {}  # output.LayerNorm
  source: output.LayerNorm
""" % fn)
    spec.header.append(f"# `source:` names modules of transformers' {hf} (add_pooling_layer=false: the spec has no "
                       "pooler)")
    embed = """\
# word + token-type embeddings (type_vocab_size); segment ids all 0, as the model defaults
- embedding: {vocab: V, dim: C, segments: %d}
  name: embeddings
  source: [embeddings.word_embeddings, embeddings.token_type_embeddings]
""" % segments
    if roberta:
        spec.ignore("""\
- module: embeddings
  kinds: [unknown:aten.ne, cumsum, unknown:aten.gather, mul]
  pass: forward
  reason: >-
    RoBERTa computes the position ids from the input ids (mask = ids != pad; cumsum(mask) * mask +
    pad) and gathers the token-type ids from a buffer: integer work on S ids, not on the activations
- module: embeddings
  extra: {add: "2*B*S"}
  pass: forward
  reason: >-
    the two integer adds of the position ids above (+ past_key_values_length, + padding_idx), one
    each per token
""")
    spec.layers(embed + """\
- position_embedding: {length: P}
  source: embeddings.position_embeddings
- layernorm: {}  # embeddings.LayerNorm (dropout is the identity at inference)
  name: emb_norm
  source: embeddings.LayerNorm
- repeat: L
  name: layers
  body: bert_layer
  source: encoder.layer
""")
    cfg.check_understood(BERT_IGNORED)
    return spec.render()


BERT = Family(("bert",), "BertModel", build_bert, "BERT encoder (no pooler, no head)", keys=ENCODER_KEYS,
              hf_kwargs={"add_pooling_layer": "false"}, architectures=("BertForMaskedLM", "BertForPreTraining"),
              refused=BERT_REFUSED)
ROBERTA = Family(("roberta",), "RobertaModel", lambda cfg: build_bert(cfg, roberta=True),
                 "RoBERTa encoder (no pooler, no head)", hf_kwargs={"add_pooling_layer": "false"},
                 architectures=("RobertaForMaskedLM",), refused=BERT_REFUSED, keys=ENCODER_KEYS)

FAMILY_LIST = (BERT, ROBERTA)
