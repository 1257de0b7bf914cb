"""T5, whole (T5ForConditionalGeneration) or its encoder (`--tower encoder`: T5EncoderModel).

The encoder reads the token ids: a lookup of the `shared` table, pre-norm blocks (RMS norms, no biases, no score
scale) whose self-attention adds a relative-position bias of bidirectional buckets made in the first block and
read by the others, a final norm, saved as `enc`. The decoder reads its token ids as a second model input
(`decoder_input_ids`, T tokens): a second lookup of the same table (`embedding` with `tied: true`: counted once),
blocks of causal self-attention whose bias has one-directional buckets (made in the first block, masked
causally in every block), cross-attention over `enc` and the MLP, a final norm, then the LM head, which reads
the same table: transformers 5's T5Config ties it whatever the config says. T5 v1.0 (tie_word_embeddings true,
the default) scales the decoder's output by d_model**-0.5 before the head; v1.1 / Flan-T5
(tie_word_embeddings false) does not: the key then only turns the scale off.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import TOWER, Family, Variant
from costspec.importer.families.common import ACTIVATIONS, GELU_NEW_NOTE

WHOLE, ENCODER = "T5ForConditionalGeneration", "T5EncoderModel"
DECODER_ONLY = "describes the decoder, which --tower encoder leaves out (the spec is the encoder)"
LEGACY = {
    "dense_act_fn": "derived by T5Config from feed_forward_proj (read)",
    "is_gated_act": "derived by T5Config from feed_forward_proj (read)",
    "n_positions": "a legacy key T5 does not use: its positions are the relative-position bias",
    "output_past": "a legacy generation flag (use_cache)",
}
ENCODER_IGNORED = {
    **LEGACY,
    "num_decoder_layers": DECODER_ONLY,
    "scale_decoder_outputs": DECODER_ONLY,
    "is_encoder_decoder": "the model is an encoder-decoder; the spec is its encoder",
    "tie_word_embeddings": "ties the LM head to the embedding: no LM head in the encoder",
}
WHOLE_IGNORED = {**LEGACY, "is_encoder_decoder": "the model is an encoder-decoder: the spec is both"}
T5_REFUSED = ("feed_forward_proj with an activation the importer does not price",
              "relative_attention_max_distance not above relative_attention_num_buckets / 4 (the encoder's "
              "buckets), or, with the decoder, not above relative_attention_num_buckets / 2 (its one-directional "
              "buckets: a log of max_distance / exact distances that is not positive)")
DEFAULT_DTYPE = "bf16"


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


def _block(causal: bool, buckets: int, distance: int, mlp: str) -> str:
    """One encoder block (or, `causal`, decoder block: causal self-attention, cross-attention over `enc`) as
    transformers' T5Block names its sub-layers (layer.0 self-attention, layer.1 cross-attention, then the MLP)."""
    mask = "causal: true, " if causal else ""
    comment = ("# causal: the bias (one-directional buckets) kept below the diagonal by a where in every block\n"
               if causal else "# no attention mask: every sequence fills S. The first block gathers the bias, the "
                              "others read it\n")
    text = f"""\
params: {{reads: true, readers: 0}}
layers:
  - residual:
      - rmsnorm: {{}}  # T5LayerNorm: no mean subtracted, no bias (layer_norm_epsilon does not change the cost)
        name: norm1
        source: layer.0.layer_norm
      {comment}      - attention: {{heads: heads, head_dim: D, fused_qkv: false, qkv_bias: false, proj_bias: false,
                    {mask}scale: none, rel_bias: t5, buckets: {buckets}, max_distance: {distance},
                    rel_bias_shared: reads, rel_bias_readers: readers}}
        source: layer.0.SelfAttention
"""
    if causal:
        text += """\
  - residual:
      - rmsnorm: {}
        name: norm2
        source: layer.1.layer_norm
      # queries from the decoder's T tokens, keys and values from the encoder's S states; no bias table of its
      # own: T5Attention makes a zero position bias, added to every score as the SDPA's float mask
      - attention: {heads: heads, head_dim: D, kv: enc, zero_bias: true, fused_qkv: false, qkv_bias: false,
                    proj_bias: false, scale: none}
        source: layer.1.EncDecAttention
"""
    last = 2 if causal else 1
    return text + f"""\
  - residual:
      - rmsnorm: {{}}
        name: norm{last + 1}
        source: layer.{last}.layer_norm
      {mlp}
        source: layer.{last}.DenseReluDense
"""


def _first(blocks: str, count: int) -> str:
    """The repeat's first block makes the bias the `count - 1` others read (`blocks`: the dim of the count)."""
    if count > 1:
        return f"\n  at:\n    - {{indices: [0], name: first, args: {{reads: false, readers: {blocks} - 1}}}}"
    return "\n  args: {reads: false}"


def _stack(which: str, blocks: str, count: int, body: str) -> str:
    """A stack's repeat of its `count` blocks (the dim `blocks`), the first making the shared bias for the
    others, and its final norm."""
    return (f"- repeat: {blocks}\n  name: {which}\n  body: {body}\n  source: {which}.block{_first(blocks, count)}\n"
            f"- rmsnorm: {{}}\n  name: {which}_final_norm\n  source: {which}.final_layer_norm\n")


def _bucket_ignores(prefix: str, whole: bool) -> str:
    text = f"""\
- module: {prefix}block.0.layer.0.SelfAttention
  extra: {{select: "S*S", add: "S*S"}}
  pass: forward
  reason: >-
    T5's _relative_position_bucket picks exact or log-spaced buckets with torch.where and adds the
    direction offset in place on the (S, S) grid of positions: work on shapes only, which the counter
    keeps because it counts torch.where for SDPA's causal masks; the spec's bucket index is a buffer
"""
    if whole:
        text += """\
- module: decoder.block.0.layer.0.SelfAttention
  extra: {select: "T*T", add: "T*T"}
  pass: forward
  reason: >-
    the decoder's one-directional buckets: the exact / log-spaced choice (torch.where) on the (T, T)
    grid of positions and its sum with the integer 0 (an add): work on shapes only, which the counter
    keeps; the spec's bucket index is a buffer
"""
    return text


def _common(cfg: HFConfig, spec: SpecText, whole: bool) -> tuple[str, int, int, int, str, str]:
    """The dims both forms share, the MLP line and the bucket settings: (mlp kind, L, buckets, distance, mlp
    line, fn)."""
    C = cfg.get_int("d_model", 512)
    n_heads = cfg.get_int("num_heads", 8)
    D = cfg.get_int("d_kv", 64)
    buckets = cfg.get_int("relative_attention_num_buckets", 32)
    distance = cfg.get_int("relative_attention_max_distance", 128)
    if buckets < 4 or distance <= buckets // 4:
        raise cfg.refuse("relative_attention_max_distance", f"with {buckets} buckets: expected at least 4 buckets "
                                                             "and a max distance above buckets / 4")
    if whole and distance <= buckets // 2:
        raise cfg.refuse("relative_attention_max_distance", f"with {buckets} buckets: the decoder's one-directional "
                                                             "buckets need a max distance above buckets / 2 (half of "
                                                             "them are exact distances; --tower encoder imports the "
                                                             "encoder alone)")
    gated, fn, act = _t5_mlp(cfg)
    L = cfg.get_int("num_layers", 6)
    spec.dim("B", 1, "batch size")
    spec.dim("S", 512, ("encoder tokens (input_ids" if whole else "sequence length (tokens")
             + "; T5's relative positions have no table limit)")
    if whole:
        spec.dim("T", 512, "decoder tokens (decoder_input_ids)")
    spec.dim("C", C, "width", "d_model")
    spec.dim("heads", n_heads, "attention heads", "num_heads")
    spec.dim("D", D, "per-head dim (heads*D need not be C)", "d_kv")
    spec.dim("F", cfg.get_int("d_ff", 2048), "MLP hidden size", "d_ff")
    spec.dim("L", L, "encoder blocks", "num_layers")
    if whole:
        spec.dim("LD", cfg.get_int("num_decoder_layers", L), "decoder blocks", "num_decoder_layers")
    spec.dim("V", cfg.get_int("vocab_size", 32128), "vocabulary size", "vocab_size")
    if act == "gelu_new":
        spec.note(GELU_NEW_NOTE.replace("hidden activation gelu_new", "feed_forward_proj gated-gelu (gelu_new)"))
    mlp = (f"- mlp: {{hidden: F, gated: true, fn: {fn}, bias: false}}  # {act}(wi_0(x)) * wi_1(x) -> wo" if gated
           else f"- mlp: {{hidden: F, fn: {fn}, bias: false}}  # wi -> {act} -> wo")
    return (f"gated {fn}" if gated else fn), L, buckets, distance, mlp, fn


def build_encoder(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type t5, transformers' {ENCODER})")
    mlp_kind, L, buckets, distance, mlp, _ = _common(cfg, spec, whole=False)
    spec.note(f"The encoder only (--tower encoder: num_decoder_layers {cfg.get('num_decoder_layers', L)} decoder "
              "blocks and the LM head are not imported). The relative-position bias is made in the first block and "
              "read by the others; their gradients are summed where it is made.")
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", "S"], "token ids")
    spec.doc = (f"T5 encoder imported from a Hugging Face config: token embedding, {L} pre-norm blocks (width "
                f"{cfg.get('d_model', 512)}, {cfg.get('num_heads', 8)} heads of dim {cfg.get('d_kv', 64)} with "
                f"separate q/k/v/o projections, no score scale, a relative-position bias of {buckets} buckets shared "
                f"by all blocks, {mlp_kind} MLP), RMS norms, final norm; no biases")
    spec.block("t5_block", _block(False, buckets, distance, mlp))
    spec.header.append(f"# `source:` and `ignore:` name modules of transformers' {ENCODER}")
    spec.ignore(_bucket_ignores("encoder.", False))
    at = _first("L", L)
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
    cfg.check_understood(ENCODER_IGNORED)
    return spec.render()


def build_whole(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type t5, transformers' {WHOLE})")
    mlp_kind, L, buckets, distance, mlp, _ = _common(cfg, spec, whole=True)
    LD = cfg.get_int("num_decoder_layers", L)
    # T5Config: scale_decoder_outputs is `tie_word_embeddings is not False` unless the config names it itself
    scaled = cfg.get_bool("scale_decoder_outputs", cfg.get_bool("tie_word_embeddings", True))
    if cfg.dtype_source == "--dtype" or cfg.get("torch_dtype") is not None or cfg.get("dtype") is not None:
        spec.precision(cfg.dtype, cfg.dtype_source)
    else:
        spec.precision(DEFAULT_DTYPE, "the config names no dtype: bf16, as these models are run (--dtype to change)")
    spec.note("One token table (`shared`) serves the encoder's and the decoder's lookups and the LM head: transformers "
              "5's T5Config ties the head whatever tie_word_embeddings says (false, T5 v1.1 / Flan-T5, only turns off "
              "the decoder's output scale). Each stack's relative-position bias is made in its first block and read "
              "by the others, their gradients summed where it is made; the decoder's is causal.")
    if ENCODER in (cfg.get("architectures") or []):
        spec.note(f"The config's architectures name {ENCODER} (a checkpoint of the encoder alone, e.g. a text "
                  "encoder): `costspec import hf --tower encoder` imports that; this spec is the whole model.")
    spec.input(["B", "S"], "the encoder's token ids (input_ids)")
    spec.further_input("decoder_input_ids", ["B", "T"], "the decoder's token ids (passed by name)")
    spec.doc = (f"T5 encoder-decoder imported from a Hugging Face config: one token table shared by the encoder's and "
                f"the decoder's lookups and the LM head; the encoder ({L} pre-norm blocks, a bidirectional "
                f"relative-position bias of {buckets} buckets shared by its blocks, {mlp_kind} MLP) and the decoder "
                f"({cfg.get('num_decoder_layers', L)} blocks of causal self-attention with a one-directional bias, "
                f"cross-attention over the encoder's states and the MLP); RMS norms, no biases, no score scale"
                + ("; the decoder's output scaled by d_model**-0.5 before the head" if scaled else ""))
    spec.block("encoder_block", _block(False, buckets, distance, mlp))
    spec.block("decoder_block", _block(True, buckets, distance, mlp))
    spec.header.append(f"# `source:` and `ignore:` name modules of transformers' {WHOLE}; validate --against passes "
                       "decoder_input_ids (the spec's second input) by name")
    spec.ignore(_bucket_ignores("encoder.", True))
    scale = ("- scale: {by: 1/sqrt(C)}  # scale_decoder_outputs: sequence_output * d_model**-0.5\n"
             "  name: decoder_output_scale\n") if scaled else ""
    spec.layers("- embedding: {vocab: V, dim: C}\n  name: embed\n"
                "  source: [shared, encoder.embed_tokens]  # one table: `shared` holds it, embed_tokens looks it up\n"
                + _stack("encoder", "L", L, "encoder_block") + "  save: enc\n"
                + "- embedding: {vocab: V, dim: C, tied: true}  # the same table as the encoder's: counted once\n"
                  "  name: decoder_embed\n  input: decoder_input_ids\n  source: decoder.embed_tokens\n"
                + _stack("decoder", "LD", LD, "decoder_block") + scale
                + "- lm_head: {vocab: V, tied: true}  # the shared table (no bias)\n  source: lm_head\n")
    cfg.check_understood(WHOLE_IGNORED)
    return spec.render()


TOWERS = ("encoder",)


def build(cfg: HFConfig) -> str:
    return build_encoder(cfg) if cfg.tower == "encoder" else build_whole(cfg)


def variant(cfg: HFConfig) -> Variant:
    return Variant(ENCODER if cfg.tower == "encoder" else WHOLE)


T5_KEYS = (size("vocab_size"), size("d_model"), size("d_kv"), size("d_ff"), layers("num_layers"),
           layers("num_decoder_layers"), heads("num_heads", "d_model"), size("relative_attention_num_buckets"),
           size("relative_attention_max_distance"))
T5 = Family(("t5",), WHOLE, build, "T5 encoder-decoder with its LM head, one token table shared by the encoder, the "
            "decoder and the head; the decoder's T tokens are a second input, decoder_input_ids (--tower encoder: "
            "the encoder alone, T5EncoderModel)",
            architectures=(WHOLE, ENCODER, "T5Model"), refused=T5_REFUSED, keys=T5_KEYS, options=(TOWER,),
            variant=variant, towers=TOWERS)
FAMILY_LIST = (T5,)
