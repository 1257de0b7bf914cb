"""The block template of the encoder-decoders (`seq2seq_block`: Whisper's and the BART-like families' encoder
and decoder blocks), and the encoder of T5 (T5EncoderModel); Whisper's whole model is whisper.py, BART's bart.py.

Only T5's encoder stack is imported: the decoder's self-attention is causal with a relative-position bias of
one-directional buckets, which the `attention` op refuses (causal or an additive bias, not both); the shared
token table itself is writable (`embedding: {tied: true}`). The config keys that describe the decoder are
read as such and named in the spec's notes.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import ACTIVATIONS, GELU_NEW_NOTE, check_divides

# ----------------------------------------------------------------------------------------------
# The block of Whisper and the BART-like families
# ----------------------------------------------------------------------------------------------
CROSS_NOTE = "queries from the decoder's T tokens, keys and values from the encoder's S states"


def seq2seq_sizes(cfg: HFConfig, config_class: str, width: int, heads_: int, layers_: int) -> tuple[int, int, int, int]:
    """(d_model, encoder heads, decoder heads, encoder layers) of an encoder-decoder config, with the class's
    defaults: each head count divides d_model, and num_hidden_layers (an alias the config class keeps equal
    to encoder_layers) may not differ."""
    C = cfg.get_int("d_model", width)
    eheads = cfg.get_int("encoder_attention_heads", heads_)
    check_divides(cfg, "d_model", C, "encoder_attention_heads", eheads)
    dheads = cfg.get_int("decoder_attention_heads", heads_)
    check_divides(cfg, "d_model", C, "decoder_attention_heads", dheads)
    L = cfg.get_int("encoder_layers", layers_)
    alias = cfg.get("num_hidden_layers", L)
    if alias != L:
        raise ImportProblem(f"{cfg.where('num_hidden_layers')} = {alias!r} differs from encoder_layers = {L} "
                            f"({config_class} keeps them equal)")
    return C, eheads, dheads, L


def _sub(pre_norm: bool, norm: str, layer: str) -> str:
    """One residual sub-layer with its LayerNorm (`source: norm`) before (pre-LN) or after (post-LN) the add."""
    body = "\n".join("    " + line for line in layer.splitlines())
    if pre_norm:
        return f"- residual:\n    - layernorm: {{}}\n      source: {norm}\n{body}\n"
    return f"- residual:\n{body}\n- layernorm: {{}}\n  source: {norm}\n"


def seq2seq_block(heads: str, hidden: str, fn: str, cross: bool, pre_norm: bool, k_bias: bool = True,
                  self_note: str = "") -> str:
    """One encoder (or, `cross`, decoder) block as transformers' Whisper / BART layers name it: self-attention
    (causal in the decoder; `self_note` a comment above it), cross-attention over the saved `enc`, an MLP
    fc1 -> activation -> fc2; each sub-layer a residual with its LayerNorm before it (`pre_norm`) or after
    the add; q, v and out_proj with biases, k_proj too unless not `k_bias` (Whisper)."""
    bias = "" if k_bias else ", k_bias: false"
    note = f"# {self_note}\n" if self_note else ""
    text = _sub(pre_norm, "self_attn_layer_norm",
                f"{note}- attention: {{heads: {heads}, fused_qkv: false{bias}{', causal: true' if cross else ''}}}\n"
                "  source: self_attn")
    if cross:
        text += _sub(pre_norm, "encoder_attn_layer_norm", f"# {CROSS_NOTE}\n- attention: {{heads: {heads}, kv: enc, "
                                                          f"fused_qkv: false{bias}}}\n  source: encoder_attn")
    return text + _sub(pre_norm, "final_layer_norm", f"- mlp: {{hidden: {hidden}, fn: {fn}}}  # fc1 -> activation "
                                                     "-> fc2\n  source: [fc1, fc2]")


DECODER_ONLY = "describes the decoder, which this importer leaves out (the spec is the encoder)"

# ----------------------------------------------------------------------------------------------
# T5
# ----------------------------------------------------------------------------------------------
T5_IGNORED = {
    "num_decoder_layers": DECODER_ONLY,
    "scale_decoder_outputs": DECODER_ONLY,
    "is_encoder_decoder": "the model is an encoder-decoder; the spec is its encoder",
    "tie_word_embeddings": "ties the LM head to the embedding: no LM head in the encoder",
    "dense_act_fn": "derived by T5Config from feed_forward_proj (read)",
    "is_gated_act": "derived by T5Config from feed_forward_proj (read)",
    "n_positions": "a legacy key T5 does not use: its positions are the relative-position bias",
    "output_past": "a legacy generation flag (use_cache)",
}
T5_REFUSED = ("feed_forward_proj with an activation the importer does not price",
              "relative_attention_max_distance not above relative_attention_num_buckets / 4")


def _t5_mlp(cfg: HFConfig) -> tuple[bool, str, str]:
    """(gated, costspec fn, transformers' activation) from feed_forward_proj ('relu', 'gated-gelu', ...)."""
    proj = cfg.get_str("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = len(parts) == 2 and parts[0] == "gated"
    if len(parts) > 2 or (len(parts) == 2 and not gated):
        raise cfg.refuse("feed_forward_proj", "expected an activation or gated-<activation> (relu, gated-gelu, ...)")
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]  # T5Config's special case
    if act not in ACTIVATIONS:
        raise cfg.refuse("feed_forward_proj", f"an activation the importer does not price (expected one of "
                                              f"{', '.join(ACTIVATIONS)}, or gated-<one of them>)")
    return gated, ACTIVATIONS[act], act


def build_t5(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type t5, transformers' T5EncoderModel)")
    C = cfg.get_int("d_model", 512)
    heads = cfg.get_int("num_heads", 8)
    D = cfg.get_int("d_kv", 64)
    buckets = cfg.get_int("relative_attention_num_buckets", 32)
    distance = cfg.get_int("relative_attention_max_distance", 128)
    if buckets < 4 or distance <= buckets // 4:
        raise cfg.refuse("relative_attention_max_distance", f"with {buckets} buckets: expected at least 4 buckets "
                                                             "and a max distance above buckets / 4")
    gated, fn, act = _t5_mlp(cfg)
    L = cfg.get_int("num_layers", 6)
    spec.dim("B", 1, "batch size")
    spec.dim("S", 512, "sequence length (tokens; T5's relative positions have no table limit)")
    spec.dim("C", C, "width", "d_model")
    spec.dim("heads", heads, "attention heads", "num_heads")
    spec.dim("D", D, "per-head dim (heads*D need not be C)", "d_kv")
    spec.dim("F", cfg.get_int("d_ff", 2048), "MLP hidden size", "d_ff")
    spec.dim("L", L, "encoder blocks", "num_layers")
    spec.dim("V", cfg.get_int("vocab_size", 32128), "vocabulary size", "vocab_size")
    if act == "gelu_new":
        spec.note(GELU_NEW_NOTE.replace("hidden activation gelu_new", "feed_forward_proj gated-gelu (gelu_new)"))
    spec.note(f"The encoder only (num_decoder_layers {cfg.get('num_decoder_layers', L)} decoder blocks and the LM "
              "head are not imported). The relative-position bias is made in the first block and read by the others; "
              "their gradients are summed where it is made.")
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", "S"], "token ids")
    mlp_kind = f"gated {fn}" if gated else fn
    spec.doc = (f"T5 encoder imported from a Hugging Face config: token embedding, {L} pre-norm blocks (width {C}, "
                f"{heads} heads of dim {D} with separate q/k/v/o projections, no score scale, a relative-position "
                f"bias of {buckets} buckets shared by all blocks, {mlp_kind} MLP), RMS norms, final norm; no biases")
    mlp = (f"- mlp: {{hidden: F, gated: true, fn: {fn}, bias: false}}  # {act}(wi_0(x)) * wi_1(x) -> wo" if gated
           else f"- mlp: {{hidden: F, fn: {fn}, bias: false}}  # wi -> {act} -> wo")
    spec.block("t5_block", f"""\
params: {{reads: true, readers: 0}}
layers:
  - residual:
      - rmsnorm: {{}}  # T5LayerNorm: no mean subtracted, no bias (layer_norm_epsilon does not change the cost)
        name: norm1
        source: layer.0.layer_norm
      # no attention mask: every sequence fills S. The first block gathers the bias, the others read it
      - attention: {{heads: heads, head_dim: D, fused_qkv: false, qkv_bias: false, proj_bias: false,
                    scale: none, rel_bias: t5, buckets: {buckets}, max_distance: {distance},
                    rel_bias_shared: reads, rel_bias_readers: readers}}
        source: layer.0.SelfAttention
  - residual:
      - rmsnorm: {{}}
        name: norm2
        source: layer.1.layer_norm
      {mlp}
        source: layer.1.DenseReluDense
""")
    spec.header.append("# `source:` and `ignore:` name modules of transformers' T5EncoderModel")
    spec.ignore("""\
- module: encoder.block.0.layer.0.SelfAttention
  extra: {select: "S*S", add: "S*S"}
  pass: forward
  reason: >-
    T5's _relative_position_bucket picks exact or log-spaced buckets with torch.where and adds the
    direction offset in place on the (S, S) grid of positions: work on shapes only, which the counter
    keeps because it counts torch.where for SDPA's causal masks; the spec's bucket index is a buffer
""")
    at = "\n  at:\n    - {indices: [0], name: first, args: {reads: false, readers: L - 1}}" if L > 1 else (
        "\n  args: {reads: false}")
    spec.layers(f"""\
- embedding: {{vocab: V, dim: C}}
  name: embed
  source: [shared, encoder.embed_tokens]  # one table: `shared` holds it, embed_tokens looks it up
- repeat: L
  name: blocks
  body: t5_block
  source: encoder.block{at}
- rmsnorm: {{}}
  name: final_norm
  source: encoder.final_layer_norm
""")
    cfg.check_understood(T5_IGNORED)
    return spec.render()


T5_KEYS = (size("vocab_size"), size("d_model"), size("d_kv"), size("d_ff"), layers("num_layers"),
           layers("num_decoder_layers"), heads("num_heads", "d_model"), size("relative_attention_num_buckets"),
           size("relative_attention_max_distance"))
T5 = Family(("t5",), "T5EncoderModel", build_t5, "T5 encoder (the encoder stack of an encoder-decoder; no decoder)",
            architectures=("T5EncoderModel", "T5ForConditionalGeneration", "T5Model"), refused=T5_REFUSED,
            keys=T5_KEYS)
FAMILY_LIST = (T5,)
