"""Whisper, the whole encoder-decoder (WhisperForConditionalGeneration): the audio encoder (two conv1d + GELU, a
frozen sinusoidal position table, pre-LN blocks, a final LayerNorm) saved as `enc`; the decoder reads its token
ids as a second model input (`decoder_input_ids`, T tokens): token embedding + learned positions, pre-LN blocks
of causal self-attention, cross-attention over `enc` and an MLP, a final LayerNorm and the LM head (proj_out,
tied to the token embedding unless the config says not).
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import GELU_NEW_NOTE, activation
from costspec.importer.families.encdec import seq2seq_block, seq2seq_sizes

NOT_IN_EVAL = "a training-time augmentation or drop; costspec counts the model as it runs in eval mode"
CLASSIFIER = "WhisperForAudioClassification's head only"
GENERATION = "a generation setting (which tokens are forced or suppressed): not the forward's cost"
WHISPER_IGNORED = {
    "forced_decoder_ids": GENERATION, "alignment_heads": "word-level timestamps (post-processing of cross-attention)",
    "median_filter_width": "word-level timestamps of the decoder's cross-attention (post-processing)",
    "scale_embedding": "WhisperDecoder computes embed_scale from it and never applies it (transformers 5)",
    "encoder_layerdrop": NOT_IN_EVAL, "decoder_layerdrop": NOT_IN_EVAL, "apply_spec_augment": NOT_IN_EVAL,
    "mask_time_prob": NOT_IN_EVAL, "mask_time_length": NOT_IN_EVAL, "mask_time_min_masks": NOT_IN_EVAL,
    "mask_feature_prob": NOT_IN_EVAL, "mask_feature_length": NOT_IN_EVAL, "mask_feature_min_masks": NOT_IN_EVAL,
    "use_weighted_layer_sum": CLASSIFIER, "classifier_proj_size": CLASSIFIER,
    "init_std": "initialisation only",
    "num_hidden_layers": "an alias WhisperConfig sets to encoder_layers (read)",
    "is_encoder_decoder": "the model is an encoder-decoder: the spec is both",
}
WHISPER_REFUSED = ("activation_function the importer does not price",
                   "num_hidden_layers other than encoder_layers")
DEFAULT_DTYPE = "bf16"


def build_whisper(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type whisper, transformers' "
                                  "WhisperForConditionalGeneration)")
    C, heads, dheads, L = seq2seq_sizes(cfg, "WhisperConfig", 384, 6, 4)
    fn = activation(cfg, "activation_function", "gelu")
    tied = cfg.get_bool("tie_word_embeddings", True)
    spec.dim("B", 1, "batch size")
    spec.dim("M", cfg.get_int("num_mel_bins"), "mel bins", "num_mel_bins")
    spec.dim("S", cfg.get_int("max_source_positions"), "encoder positions after the stride-2 conv",
             "max_source_positions")
    spec.derived("frames", "2*S", "input frames (WhisperEncoder requires exactly 2 * max_source_positions)")
    P = cfg.get_int("max_target_positions")
    spec.dim("T", P, f"decoder tokens (decoder_input_ids; at most max_target_positions = {P})",
             "max_target_positions")
    spec.dim("P", P, "decoder position table length", "max_target_positions")
    spec.dim("C", C, "width", "d_model")
    spec.dim("heads", heads, "encoder attention heads", "encoder_attention_heads")
    spec.dim("dheads", dheads, "decoder attention heads", "decoder_attention_heads")
    spec.dim("F", cfg.get_int("encoder_ffn_dim"), "encoder MLP hidden size", "encoder_ffn_dim")
    spec.dim("FD", cfg.get_int("decoder_ffn_dim"), "decoder MLP hidden size", "decoder_ffn_dim")
    spec.dim("L", L, "encoder blocks", "encoder_layers")
    spec.dim("LD", cfg.get_int("decoder_layers"), "decoder blocks", "decoder_layers")
    spec.dim("V", cfg.get_int("vocab_size"), "vocabulary size", "vocab_size")
    if cfg.get("activation_function") == "gelu_new":
        spec.note(GELU_NEW_NOTE.replace("hidden activation", "activation_function"))
    if cfg.dtype_source == "--dtype" or cfg.get("torch_dtype") is not None or cfg.get("dtype") is not None:
        spec.precision(cfg.dtype, cfg.dtype_source)
    else:
        spec.precision(DEFAULT_DTYPE, "the config names no dtype: bf16, as these models are run (--dtype to change)")
    spec.input(["B", "M", "frames"], "log-Mel spectrogram (input_features)")
    spec.further_input("decoder_input_ids", ["B", "T"], "the decoder's token ids (passed by name)")
    spec.doc = (f"Whisper encoder-decoder imported from a Hugging Face config: the audio encoder (two conv1d + GELU, "
                f"the second with stride 2, a frozen sinusoidal position table, {L} pre-LN blocks of width {C} with "
                f"{heads} heads, k_proj without bias, {fn} MLP, final LayerNorm) and the decoder (token embedding + "
                f"learned positions, {cfg.get('decoder_layers', 4)} pre-LN blocks of causal self-attention, "
                f"cross-attention over the encoder's states and {fn} MLP, final LayerNorm) with the LM head proj_out"
                + (" tied to the token embedding" if tied else " (its own weight)"))
    spec.block("encoder_block", seq2seq_block("heads", "F", fn, cross=False, pre_norm=True, k_bias=False,
                                              self_note="q_proj, v_proj and out_proj have a bias, k_proj none (no "
                                                        "attention mask: Whisper ignores it)"))
    spec.block("decoder_block", seq2seq_block("dheads", "FD", fn, cross=True, pre_norm=True, k_bias=False,
                                              self_note="q_proj, v_proj and out_proj have a bias, k_proj none; no "
                                                        "mask: causal SDPA"))
    spec.header.append("# `source:` and `ignore:` name modules of transformers' WhisperForConditionalGeneration; "
                       "validate --against passes decoder_input_ids (the spec's second input) by name")
    spec.ignore("""\
- module: "model.encoder.layers.*.self_attn"
  extra: {scale: "L*B*S*C"}
  reason: &qscale >-
    transformers' WhisperAttention multiplies q by head_dim**-0.5 after q_proj and calls SDPA with
    scaling 1.0, which still multiplies: one extra multiply per element of q (B*S*C per encoder layer,
    B*T*C per decoder self- and cross-attention), forward and backward; the spec scales once, in the SDPA
- module: "model.decoder.layers.*.self_attn"
  extra: {scale: "LD*B*T*C"}
  reason: *qscale
- module: "model.decoder.layers.*.encoder_attn"
  extra: {scale: "LD*B*T*C"}
  reason: *qscale
- module: model.decoder.embed_positions
  extra: {scatter_add: "B*T*C"}
  pass: backward
  reason: >-
    WhisperPositionalEmbedding gathers its rows with weight[position_ids] ([B, T] ids): the index's backward
    scatter-adds the B*T*C gradients into the table (index_put with accumulate); the spec's position table
    is added as the first T rows
""")
    spec.layers(f"""\
- sequence:
    - conv1d: {{out: C, kernel: 3, padding: 1}}
      name: conv1
      source: conv1
    - activation: {{fn: gelu}}  # Whisper's convs are followed by GELU whatever activation_function says
      name: act1
    - conv1d: {{out: C, kernel: 3, stride: 2, padding: 1}}
      name: conv2
      source: conv2
    - activation: {{fn: gelu}}
      name: act2
    - permute: {{order: [0, 2, 1]}}  # [B, C, S] -> [B, S, C]
    # sinusoidal positions stored as a frozen (S x C) table: counted in the parameters, never trained
    - position_embedding: {{length: S, trainable: false}}
      name: embed_positions
      source: embed_positions
    - repeat: L
      name: layers
      body: encoder_block
      source: layers
    - layernorm: {{}}
      name: layer_norm
      source: layer_norm
      save: enc  # the encoder's states, read by every cross-attention
  name: encoder
  source: model.encoder
- embedding: {{vocab: V, dim: C}}
  name: embed_tokens
  input: decoder_input_ids
  source: model.decoder.embed_tokens
- position_embedding: {{length: P}}  # learned (max_target_positions x C), its first T rows
  name: decoder_positions
  source: model.decoder.embed_positions
- repeat: LD
  name: decoder
  body: decoder_block
  source: model.decoder.layers
- layernorm: {{}}
  name: decoder_norm
  source: model.decoder.layer_norm
- lm_head: {{vocab: V, tied: {"true" if tied else "false"}}}  # proj_out (no bias)
  name: proj_out
  source: proj_out
""")
    cfg.check_understood(WHISPER_IGNORED)
    return spec.render()


WHISPER_KEYS = (size("num_mel_bins"), layers("encoder_layers"), layers("decoder_layers"), layers("num_hidden_layers"),
                heads("encoder_attention_heads", "d_model"), heads("decoder_attention_heads", "d_model"),
                size("encoder_ffn_dim"), size("decoder_ffn_dim"), size("d_model"), size("max_source_positions"),
                size("max_target_positions"), size("vocab_size"))
WHISPER = Family(("whisper",), "WhisperForConditionalGeneration", build_whisper,
                 "Whisper encoder-decoder with its LM head (tied unless the config says not); the decoder's T "
                 "tokens are a second input, decoder_input_ids",
                 architectures=("WhisperForConditionalGeneration", "WhisperModel"), refused=WHISPER_REFUSED,
                 keys=WHISPER_KEYS)

FAMILY_LIST = (WHISPER,)
