"""The BERT-like encoder template: post-LN layers with separate q/k/v, learned positions, and a table of
switches (`Encoder`) per family: BERT, RoBERTa, XLM-RoBERTa, ELECTRA, DistilBERT.

The switches: the config keys of the widths (DistilBERT's dim / n_heads / hidden_dim), how positions are
numbered (from 0, or after pad_token_id as RoBERTa does), token-type (segment) embeddings, an embedding
width that a projection widens (ELECTRA's embedding_size), the pooler `AutoModel` builds (dense + tanh on the
first token: the spec's output is then pooler_output) and the module paths of the layer's parts. A new
BERT-like family is one entry in ENCODERS plus its test (tests/importer/test_encoders.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from costspec.importer.config import HFConfig, Key, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, Family, Variant
from costspec.importer.families.common import ENCODER_KEYS, GELU_NEW_NOTE, activation, check_divides

NO_HEAD = "the spec is the encoder without pooler: no masked-LM head whose weight could be tied"
POOLED_NO_HEAD = "the spec is the encoder and its pooler: no masked-LM head whose weight could be tied"
BERT_IGNORED = {
    "tie_word_embeddings": NO_HEAD,
    "classifier_dropout": "a classification head's dropout (no head in the spec)",
}
POOLED = "pooler_output"
NO_POOLER = (("add_pooling_layer", "false"),)  # the constructor argument that builds the model without its pooler
DEFAULT_DTYPE = "bf16"

BERT_REFUSED = ("is_decoder: true (a causal BERT)", "add_cross_attention: true",
                "position_embedding_type other than absolute")


@dataclass(frozen=True)
class Parts:
    """The module paths of one encoder layer's parts and of the model's containers (transformers' names)."""

    attention: str = "[attention.self, attention.output.dense]"
    attention_note: str = "query / key / value / output dense, all with bias"
    attention_norm: str = "attention.output.LayerNorm"
    mlp: str = "[intermediate, output.dense]"
    mlp_note: str = "intermediate (hidden_act) and output dense"
    mlp_norm: str = "output.LayerNorm"
    stack: str = "encoder.layer"


DISTILBERT_KEYS = (size("dim"), heads("n_heads", "dim"), layers("n_layers"), size("hidden_dim"), size("vocab_size"),
                   size("max_position_embeddings"))
DISTILBERT_PARTS = Parts("attention", "q_lin / k_lin / v_lin / out_lin, all with bias", "sa_layer_norm", "ffn",
                         "lin1, activation, lin2", "output_layer_norm", "transformer.layer")


@dataclass(frozen=True)
class Encoder:
    """The switches of one BERT-like family (see the module doc)."""

    model_type: str
    hf_class: str  # the class AutoModel builds for this model_type
    title: str
    blurb: str
    width_key: str = "hidden_size"
    heads_key: str = "num_attention_heads"
    layers_key: str = "num_hidden_layers"
    ffn_key: str = "intermediate_size"
    act_key: str = "hidden_act"
    defaults: tuple[int, int, int, int, int] = (768, 12, 12, 3072, 30522)  # C, heads, L, F, V
    positions_after_pad: bool = False  # RoBERTa's create_position_ids_from_input_ids
    segments: bool = True  # token_type_embeddings (type_vocab_size)
    embedding_size: bool = False  # ELECTRA: embeddings of width embedding_size, projected to hidden_size
    # the dense + tanh pooler on the first token (output: pooler_output); hf_class then takes add_pooling_layer,
    # and --no-pooler builds it without the pooler (the spec: last_hidden_state)
    pooler: bool = False
    bert_keys: bool = True  # is_decoder, add_cross_attention, position_embedding_type (BertConfig's) are read
    sines_key: str = ""  # a bool key that initialises the position table with sines (DistilBERT's)
    parts: Parts = field(default_factory=Parts)
    keys: tuple[Key, ...] = ENCODER_KEYS
    bf16_default: bool = True  # no dtype in the config: bf16 (BERT and RoBERTa keep transformers' fp32)
    architectures: tuple[str, ...] = ()
    ignored: tuple[tuple[str, str], ...] = ()


def _precision(spec: SpecText, cfg: HFConfig, e: Encoder) -> None:
    named = cfg.dtype_source == "--dtype" or cfg.get("torch_dtype") is not None or cfg.get("dtype") is not None
    if named or not e.bf16_default:
        spec.precision(cfg.dtype, cfg.dtype_source)
    else:
        spec.precision(DEFAULT_DTYPE, "the config names no dtype: bf16, as these models are run (--dtype to change)")


def _refuse_decoder(cfg: HFConfig, e: Encoder) -> None:
    if not e.bert_keys:
        return
    if cfg.get_bool("is_decoder", False):
        raise cfg.refuse("is_decoder", f"{e.title} as a causal decoder is not supported by this importer "
                                       "(expected false: the bidirectional encoder)")
    if cfg.get_bool("add_cross_attention", False):
        raise cfg.refuse("add_cross_attention", "cross-attention layers are not supported by this importer "
                                                "(expected false)")
    position_kind = cfg.get("position_embedding_type", "absolute")
    if position_kind != "absolute":
        raise cfg.refuse("position_embedding_type", "only absolute position embeddings are supported")


def build_encoder(e: Encoder, cfg: HFConfig) -> str:
    dropped = e.pooler and not cfg.pooler  # --no-pooler: the class built with add_pooling_layer=False
    if dropped:
        e = replace(e, pooler=False)
    hf, label, parts = e.hf_class, e.title, e.parts
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' {hf})")
    _refuse_decoder(cfg, e)
    C0, heads0, L0, F0, V0 = e.defaults
    C = cfg.get_int(e.width_key, C0)
    heads = cfg.get_int(e.heads_key, heads0)
    check_divides(cfg, e.width_key, C, e.heads_key, heads)
    P = cfg.get_int("max_position_embeddings", 512)
    if e.positions_after_pad and P < 3:
        raise cfg.refuse("max_position_embeddings", f"{label} numbers positions from pad_token_id + 1: expected at "
                                                    "least 3 rows")
    E = cfg.get_int("embedding_size", C) if e.embedding_size else C
    spec.dim("B", 1, "batch size")
    # RoBERTa's positions start after padding_idx (pad_token_id + 1), so a sequence fills at most P - 2
    S = min(512, P - 2) if e.positions_after_pad else min(512, P)
    spec.dim("S", S, "sequence length (tokens)", "max_position_embeddings" + (" - 2" if e.positions_after_pad else "")
             + ", at most 512")
    spec.dim("C", C, "hidden size", e.width_key)
    if E != C:
        spec.dim("E", E, "embedding width (projected to C by embeddings_project)", "embedding_size")
    spec.dim("heads", heads, "attention heads", e.heads_key)
    spec.dim("L", cfg.get_int(e.layers_key, L0), "layers", e.layers_key)
    spec.dim("F", cfg.get_int(e.ffn_key, F0), "MLP hidden width", e.ffn_key)
    spec.dim("V", cfg.get_int("vocab_size", V0), "vocabulary size", "vocab_size")
    spec.dim("P", P, "position table length", "max_position_embeddings")
    fn = activation(cfg, e.act_key, "gelu")
    if cfg.get(e.act_key) == "gelu_new":
        spec.note(GELU_NEW_NOTE if e.act_key == "hidden_act" else GELU_NEW_NOTE.replace("hidden activation", e.act_key))
    sinusoidal = cfg.get_bool(e.sines_key, False) if e.sines_key else False
    _precision(spec, cfg, e)
    spec.input(["B", "S"], "token ids")
    embeds = ("token + segment + learned position" if e.segments else
              "token + " + ("sine-initialised" if sinusoidal else "learned") + " position")
    spec.doc = (f"{label} encoder imported from a Hugging Face config: {embeds} embeddings, LayerNorm, "
                + ("a projection from the embedding width, " if E != C else "") + "post-LN layers "
                f"(width {C}, {heads} heads with separate q/k/v projections, {fn} MLP); "
                + ("the pooler (dense + tanh on the first token), no LM head" if e.pooler else "no pooler, no LM head"))
    if e.positions_after_pad:
        spec.note(f"{label} numbers positions from pad_token_id + 1 (create_position_ids_from_input_ids), so S is at "
                  "most max_position_embeddings - 2; the position ids are integer work on the input ids, not "
                  "counted")
    spec.block("bert_layer", f"""\
# post-LN: x = LN(x + attn(x)); x = LN(x + mlp(x)); no attention mask (every sequence fills S)
- residual:
    - attention: {{heads: heads, fused_qkv: false}}  # {parts.attention_note}
      source: {parts.attention}
- layernorm: {{}}  # {parts.attention_norm} (layer_norm_eps does not change the cost)
  source: {parts.attention_norm}
- residual:
    - mlp: {{hidden: F, fn: {fn}}}  # {parts.mlp_note}
      source: {parts.mlp}
- layernorm: {{}}  # {parts.mlp_norm}
  source: {parts.mlp_norm}
""")
    if dropped:
        spec.header.append(f"# `source:` names modules of transformers' {hf} (add_pooling_layer=false: the spec has "
                           "no pooler); the spec's output is its last_hidden_state (imported with --no-pooler)")
    else:
        spec.header.append(f"# `source:` names modules of transformers' {hf}"
                           + ("; the spec's output is its pooler_output" if e.pooler else ""))
    width = "E" if E != C else "C"
    if e.segments:
        segments = cfg.get_int("type_vocab_size", 2)  # the model looks up segment 0 even when the table is empty
        embed = """\
# word + token-type embeddings (type_vocab_size); segment ids all 0, as the model defaults
- embedding: {vocab: V, dim: %s, segments: %d}
  name: embeddings
  source: [embeddings.word_embeddings, embeddings.token_type_embeddings]
""" % (width, segments)
    else:
        embed = """\
- embedding: {vocab: V, dim: %s}
  name: embeddings
  source: embeddings.word_embeddings
""" % width
    if e.positions_after_pad:
        spec.ignore(f"""\
- module: embeddings
  kinds: [unknown:aten.ne, cumsum, unknown:aten.gather, mul]
  pass: forward
  reason: >-
    {label} computes the position ids from the input ids (mask = ids != pad; cumsum(mask) * mask +
    pad) and gathers the token-type ids from a buffer: integer work on S ids, not on the activations
- module: embeddings
  extra: {{add: "2*B*S"}}
  pass: forward
  reason: >-
    the two integer adds of the position ids above (+ past_key_values_length, + padding_idx), one
    each per token
""")
    # sinusoidal_pos_embds only initialises the table: transformers 5 copies the sines into the parameter,
    # which stays trainable (the requires_grad=False of create_sinusoidal_embeddings is set on a scratch copy)
    positions = ("- position_embedding: {length: P}  # initialised with sines (sinusoidal_pos_embds), trained\n"
                 if sinusoidal else "- position_embedding: {length: P}\n")
    body = embed + positions + """\
  source: embeddings.position_embeddings
- layernorm: {}  # embeddings.LayerNorm (dropout is the identity at inference)
  name: emb_norm
  source: embeddings.LayerNorm
"""
    if E != C:
        body += """\
- linear: {out: C}  # embedding_size -> hidden_size
  name: embeddings_project
  source: embeddings_project
"""
    body += f"""\
- repeat: L
  name: layers
  body: bert_layer
  source: {parts.stack}
"""
    if e.pooler:
        body += """\
# the pooler: dense + tanh on the first token (the model's pooler_output)
- take_token: {index: 0}
  name: first_token
- linear: {out: C}
  name: pooler
  source: pooler.dense
- activation: {fn: tanh}
  name: pooler_act
  source: pooler.activation
"""
    spec.layers(body)
    ignored = {**BERT_IGNORED, **dict(e.ignored)}
    if e.pooler:
        ignored["tie_word_embeddings"] = POOLED_NO_HEAD
    cfg.check_understood(ignored)
    return spec.render()


ELECTRA_HEAD = "the sequence-summary head of ElectraFor{SequenceClassification,MultipleChoice} (not ElectraModel)"
DISTILBERT_HEAD = "a task head's dropout (DistilBertModel has no head)"
ENCODERS = (
    Encoder("bert", "BertModel", "BERT", "BERT encoder with the pooler BertModel builds (pooler_output); no LM head",
            bf16_default=False, pooler=True, architectures=("BertForMaskedLM", "BertForPreTraining")),
    Encoder("roberta", "RobertaModel", "RoBERTa",
            "RoBERTa encoder with the pooler RobertaModel builds (pooler_output); no LM head", positions_after_pad=True,
            defaults=(768, 12, 12, 3072, 50265), bf16_default=False, pooler=True,
            architectures=("RobertaForMaskedLM",)),
    Encoder("xlm-roberta", "XLMRobertaModel", "XLM-RoBERTa",
            "XLM-RoBERTa encoder with the pooler XLMRobertaModel builds (pooler_output); no LM head",
            positions_after_pad=True, pooler=True,
            architectures=("XLMRobertaForMaskedLM", "XLMRobertaModel")),
    Encoder("electra", "ElectraModel", "ELECTRA",
            "ELECTRA encoder: embeddings of width embedding_size projected to hidden_size (no pooler, no head)",
            defaults=(256, 4, 12, 1024, 30522), embedding_size=True,
            architectures=("ElectraForPreTraining", "ElectraForMaskedLM", "ElectraModel"),
            ignored=tuple((k, ELECTRA_HEAD) for k in ("summary_type", "summary_use_proj", "summary_activation"))),
    Encoder("distilbert", "DistilBertModel", "DistilBERT",
            "DistilBERT encoder: no token types, learned positions (sine-initialised or not) (no pooler, no head)",
            width_key="dim", heads_key="n_heads", layers_key="n_layers", ffn_key="hidden_dim", act_key="activation",
            segments=False, parts=DISTILBERT_PARTS, bert_keys=False, sines_key="sinusoidal_pos_embds",
            keys=DISTILBERT_KEYS,
            architectures=("DistilBertForMaskedLM", "DistilBertModel"),
            ignored=(("qa_dropout", DISTILBERT_HEAD), ("seq_classif_dropout", DISTILBERT_HEAD))),
)


def encoder_variant(e: Encoder):
    """The class an import describes: with --no-pooler, hf_class(add_pooling_layer=False)'s last_hidden_state."""
    def variant(cfg: HFConfig) -> Variant:
        if not cfg.pooler:
            return Variant(e.hf_class, dict(NO_POOLER), "last_hidden_state")
        return Variant(e.hf_class, {}, POOLED if e.pooler else None)
    return variant


def family(e: Encoder) -> Family:
    keys = e.keys + ((size("embedding_size"),) if e.embedding_size else ())
    refused: tuple[str, ...] = BERT_REFUSED if e.bert_keys else ()
    if e.positions_after_pad:
        refused += ("max_position_embeddings below 3 (positions are numbered from pad_token_id + 1)",)
    return Family((e.model_type,), e.hf_class, lambda cfg: build_encoder(e, cfg), e.blurb,
                  architectures=e.architectures, refused=refused, keys=keys,
                  hf_output=(lambda cfg: POOLED) if e.pooler else None,
                  options=(POOLER,) if e.pooler else (),
                  variant=encoder_variant(e) if e.pooler else None)


FAMILY_LIST = tuple(family(e) for e in ENCODERS)
