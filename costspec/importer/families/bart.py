"""BART-like encoder-decoders, whole (Bart-, MBart-, PegasusForConditionalGeneration, MarianMTModel): one template
driven by a per-family table of switches (`Seq2Seq`).

The encoder reads the token ids: the token embedding (a lookup of `model.shared`'s table, times embed_scale),
positions (BART's and mBART's learned (max_position_embeddings + 2) x d_model table, with BART's offset of 2
rows; Pegasus's and Marian's frozen sinusoidal table), a LayerNorm of the embeddings (not Pegasus, Marian),
post-LN (BART, Marian) or pre-LN (mBART, Pegasus: with a final LayerNorm) blocks, saved as `enc`. The decoder reads
its token ids as a second model input (`decoder_input_ids`, T tokens): a second lookup of the same table
(`embedding` with `tied: true`: its parameters counted once), positions, blocks of causal self-attention,
cross-attention over `enc` and an MLP, and the LM head tied to the table.
"""
from __future__ import annotations

from dataclasses import dataclass

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import GELU_NEW_NOTE, activation
from costspec.importer.families.encdec import seq2seq_block, seq2seq_sizes

NOT_IN_EVAL = "a training-time drop; costspec counts the model as it runs in eval mode"
HEADS = "a sequence-classification / question-answering head's setting, not the conditional-generation model's"
IGNORED = {
    "encoder_layerdrop": NOT_IN_EVAL, "decoder_layerdrop": NOT_IN_EVAL,
    "classifier_dropout": HEADS, "classif_dropout": HEADS, "num_labels": HEADS,
    "output_past": "a legacy generation flag (use_cache)",
    "init_std": "initialisation only",
    "is_encoder_decoder": "the model is an encoder-decoder: the spec is both",
    "forced_eos_token_id": "a generation setting (which token ends the output): not the forward's cost",
    "forced_bos_token_id": "a generation setting (which token starts the output): not the forward's cost",
    "num_hidden_layers": "an alias the config class sets to encoder_layers (read)",
    "normalize_before": "a legacy key the transformers class ignores (the family fixes where its norms are)",
    "add_bias_logits": "a legacy key the transformers class ignores",
    "add_final_layer_norm": "a legacy key the transformers class ignores (the family fixes its final norms)",
    "normalize_embedding": "a legacy key the transformers class ignores (layernorm_embedding is always built)",
    "static_position_embeddings": "a legacy key the transformers class ignores (the family fixes its positions)",
    "extra_pos_embeddings": "a legacy key the transformers class ignores (the offset of 2 is fixed)",
}
REFUSED = ("tie_word_embeddings false: the untied model holds four tables (model.shared, which no forward reads, "
           "besides the encoder's, the decoder's and the head's); a spec counts only layers that run",
           "activation_function the importer does not price",
           "num_hidden_layers other than encoder_layers")
DEFAULT_DTYPE = "bf16"


@dataclass(frozen=True)
class Seq2Seq:
    """What sets one BART-like family apart: `model_type`, its transformers class (`whole`) and class prefix;
    `pre_norm`: LayerNorm before each sub-layer (and a final LayerNorm per stack) instead of after it;
    `scale_default`: the config class's scale_embedding default; `sinusoidal`: a frozen sinusoidal table of
    max_position_embeddings rows looked up with [S] ids (Pegasus) instead of BART's learned table with its
    offset of 2 rows looked up with [B, S] ids; `embed_norm`: a LayerNorm of the embeddings
    (layernorm_embedding); `separate_vocab`: the family can give the decoder its own table (Marian's
    share_encoder_decoder_embeddings and decoder_vocab_size), which the template refuses."""

    model_type: str
    whole: str
    prefix: str
    pre_norm: bool
    scale_default: bool
    blurb: str
    sinusoidal: bool = False
    embed_norm: bool = True
    separate_vocab: bool = False


BART = Seq2Seq("bart", "BartForConditionalGeneration", "Bart", pre_norm=False, scale_default=False,
               blurb="post-LN blocks")
MBART = Seq2Seq("mbart", "MBartForConditionalGeneration", "MBart", pre_norm=True, scale_default=False,
                blurb="pre-LN blocks and a final LayerNorm per stack")
PEGASUS = Seq2Seq("pegasus", "PegasusForConditionalGeneration", "Pegasus", pre_norm=True, scale_default=False,
                  blurb="pre-LN blocks and a final LayerNorm per stack, no LayerNorm of the embeddings",
                  sinusoidal=True, embed_norm=False)
MARIAN = Seq2Seq("marian", "MarianMTModel", "Marian", pre_norm=False, scale_default=False,
                 blurb="post-LN blocks, no LayerNorm of the embeddings", sinusoidal=True, embed_norm=False,
                 separate_vocab=True)


def _stack(t: Seq2Seq, which: str, cfg_scale: bool, ids: str, tied: bool, L: str, body: str, last: str) -> str:
    """One stack's layers: the token lookup, embed_scale, positions, layernorm_embedding, the blocks (and the
    final LayerNorm of a pre-LN stack)."""
    scale = "sqrt(C)" if cfg_scale else "1.0"
    source = f"[model.shared, model.{which}.embed_tokens]" if not tied else f"model.{which}.embed_tokens"
    lines = [f"- embedding: {{vocab: V, dim: C{', tied: true' if tied else ''}}}"
             + ("  # the same table as the encoder's: counted once" if tied else ""),
             f"  name: {which}_embed", *([f"  input: {ids}"] if ids else []), f"  source: {source}",
             f"- scale: {{by: {scale}}}  # embed_scale ({'sqrt(d_model)' if cfg_scale else 'scale_embedding false'}: "
             "transformers multiplies anyway)",
             f"  name: {which}_embed_scale",
             ("- position_embedding: {length: P, trainable: false}  # a frozen sinusoidal table: counted, never "
              "trained" if t.sinusoidal else
              "- position_embedding: {length: P + 2}  # learned positions; the first 2 rows are BART's offset"),
             f"  name: {which}_positions", f"  source: model.{which}.embed_positions",
             *(["- layernorm: {}", f"  name: {which}_layernorm_embedding",
                f"  source: model.{which}.layernorm_embedding"] if t.embed_norm else []),
             f"- repeat: {L}", f"  name: {which}", f"  body: {body}", f"  source: model.{which}.layers"]
    if t.pre_norm:
        lines += ["- layernorm: {}", f"  name: {which}_layer_norm", f"  source: model.{which}.layer_norm"]
    if last:
        lines.append(f"  save: {last}")
    return "\n".join(lines) + "\n"


def _ignores(t: Seq2Seq) -> str:
    head = """\
- module: ""
  extra: {add: "B*T*V"}
  pass: forward
  reason: >-
    the model adds final_logits_bias, a (1, vocab) buffer of zeros (no parameter, no gradient), to the
    B*T*V logits: one add per logit that the spec leaves out
"""
    if t.sinusoidal:  # looked up with [S] ids under no_grad: added as the spec adds it
        return head
    return head + """\
- module: model.encoder.embed_positions
  extra: {bias_grad: "-B*S*C*min(1, B - 1)", scatter_add: "(B - 1)*S*C"}
  pass: backward
  reason: >-
    the encoder looks its positions up with ids expanded to [B, S] (the decoder's are [1, T]): the rows are
    added without a broadcast, so autograd sums no batch, and the lookup's backward scatter-adds all B*S*C
    gradient rows into the table (the spec's position table sums the batch, then scatter-adds S*C rows)
"""


def build(t: Seq2Seq, cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {t.model_type}, transformers' "
                                  f"{t.whole})")
    C, eheads, dheads, L = seq2seq_sizes(cfg, f"{t.prefix}Config", 1024, 16, 12)
    LD = cfg.get_int("decoder_layers", 12)
    fn = activation(cfg, "activation_function", "gelu")
    if not cfg.get_bool("tie_word_embeddings", True):
        raise cfg.refuse("tie_word_embeddings", f"false: the untied {t.whole} holds four tables (model.shared, which "
                                                "no forward reads, besides the encoder's, the decoder's and the "
                                                "head's); a spec counts only layers that run (expected true)")
    scaled = cfg.get_bool("scale_embedding", t.scale_default)
    V = cfg.get_int("vocab_size", 50265)
    if t.separate_vocab:
        if not cfg.get_bool("share_encoder_decoder_embeddings", True):
            raise cfg.refuse("share_encoder_decoder_embeddings", "false: the decoder then looks up a table of its own "
                                                                 "(decoder_vocab_size rows), which this template does "
                                                                 "not write (expected true)")
        if cfg.get_int("decoder_vocab_size", V) != V:
            raise ImportProblem(f"{cfg.where('decoder_vocab_size')} = {cfg.get('decoder_vocab_size')!r} differs from "
                                f"vocab_size = {V}: with share_encoder_decoder_embeddings the decoder looks up the "
                                "shared table of vocab_size rows (expected them equal)")
    P = cfg.get_int("max_position_embeddings", 1024)
    spec.dim("B", 1, "batch size")
    spec.dim("S", P, f"encoder tokens (input_ids; at most max_position_embeddings = {P})", "max_position_embeddings")
    spec.dim("T", P, f"decoder tokens (decoder_input_ids; at most max_position_embeddings = {P})",
             "max_position_embeddings")
    spec.dim("P", P, "position table length" + ("" if t.sinusoidal else ", less BART's offset of 2 rows"),
             "max_position_embeddings")
    spec.dim("C", C, "width", "d_model")
    spec.dim("heads", eheads, "encoder attention heads", "encoder_attention_heads")
    spec.dim("dheads", dheads, "decoder attention heads", "decoder_attention_heads")
    spec.dim("F", cfg.get_int("encoder_ffn_dim", 4096), "encoder MLP hidden size", "encoder_ffn_dim")
    spec.dim("FD", cfg.get_int("decoder_ffn_dim", 4096), "decoder MLP hidden size", "decoder_ffn_dim")
    spec.dim("L", L, "encoder blocks", "encoder_layers")
    spec.dim("LD", LD, "decoder blocks", "decoder_layers")
    spec.dim("V", V, "vocabulary size", "vocab_size")
    if cfg.get("activation_function") == "gelu_new":
        spec.note(GELU_NEW_NOTE.replace("hidden activation", "activation_function"))
    if cfg.dtype_source == "--dtype" or cfg.get("torch_dtype") is not None or cfg.get("dtype") is not None:
        spec.precision(cfg.dtype, cfg.dtype_source)
    else:
        spec.precision(DEFAULT_DTYPE, "the config names no dtype: bf16, as these models are run (--dtype to change)")
    spec.input(["B", "S"], "the encoder's token ids (input_ids)")
    spec.further_input("decoder_input_ids", ["B", "T"], "the decoder's token ids (passed by name)")
    positions = "frozen sinusoidal positions" if t.sinusoidal else "learned positions"
    spec.doc = (f"{t.prefix} encoder-decoder imported from a Hugging Face config: one token table shared by the "
                f"encoder's and the decoder's lookups and the LM head, {positions}, {t.blurb}; the encoder "
                f"({L} blocks of width {C}, {eheads} heads, {fn} MLP) and the decoder ({LD} blocks of causal "
                f"self-attention, cross-attention over the encoder's states and {fn} MLP), then the tied LM head")
    spec.block("encoder_block", seq2seq_block("heads", "F", fn, cross=False, pre_norm=t.pre_norm))
    spec.block("decoder_block", seq2seq_block("dheads", "FD", fn, cross=True, pre_norm=t.pre_norm))
    spec.header.append(f"# `source:` and `ignore:` name modules of transformers' {t.whole}; validate --against "
                       "passes decoder_input_ids (the spec's second input) by name")
    spec.ignore(_ignores(t))
    spec.layers(_stack(t, "encoder", scaled, "", False, "L", "encoder_block", "enc")
                + _stack(t, "decoder", scaled, "decoder_input_ids", True, "LD", "decoder_block", "")
                + "- lm_head: {vocab: V, tied: true}  # the shared table (no bias)\n  source: lm_head\n")
    cfg.check_understood(IGNORED)
    return spec.render()


KEYS = (layers("encoder_layers"), layers("decoder_layers"), layers("num_hidden_layers"),
        heads("encoder_attention_heads", "d_model"), heads("decoder_attention_heads", "d_model"),
        size("encoder_ffn_dim"), size("decoder_ffn_dim"), size("d_model"), size("max_position_embeddings"),
        size("vocab_size"), size("decoder_vocab_size"))


def family(t: Seq2Seq) -> Family:
    refused = REFUSED + (("share_encoder_decoder_embeddings false (the decoder's own table)",
                          "decoder_vocab_size other than vocab_size") if t.separate_vocab else ())
    return Family((t.model_type,), t.whole, lambda cfg: build(t, cfg),
                  f"{t.prefix} encoder-decoder with its LM head, one token table shared by the encoder, the decoder "
                  "and the head; the decoder's T tokens are a second input, decoder_input_ids",
                  architectures=(t.whole, f"{t.prefix}Model"), refused=refused, keys=KEYS)


FAMILY_LIST = (family(BART), family(MBART), family(PEGASUS), family(MARIAN))
