"""The block template of the encoder-decoders (`seq2seq_block`: Whisper's and the BART-like families' encoder
and decoder blocks) and their sizes (`seq2seq_sizes`); Whisper's whole model is whisper.py, BART's bart.py,
T5's t5.py."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.families.common import check_divides

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
