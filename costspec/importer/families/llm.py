"""Dense decoder LLMs beyond Llama: Mistral (sliding-window attention), Qwen2 (q/k/v biases, sliding
layers by layer_types), Gemma (embeddings scaled by sqrt(C), GeGLU, head_dim 256)."""
from __future__ import annotations

from costspec.importer.config import HFConfig
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.llm_parts import (
    DECODER_KEYS,
    EMBED,
    IGNORED,
    ROTATE_HALF_IGNORE,
    Decoder,
    attention_line,
    block_layout,
    block_text,
    decoder_dims,
    decoder_layers,
    gated_fn,
    header_note,
    rope,
)
from costspec.importer.head import CausalLM

# the token ids of the input (the embedding reads them)
TOKENS = ["B", "S"]


def dense_block(dec: Decoder, fn: str, window: str, q: bool = False, k: bool = False, v: bool = False,
                o: bool = False) -> str:
    """One pre-RMSNorm decoder block: attention, then the gated MLP of width F."""
    return f"""\
- residual:
    - rmsnorm: {{}}  # input_layernorm (rms_norm_eps does not change the cost)
      source: input_layernorm
    - {attention_line(dec, q, k, v, o, window, indent=6)}
      source: self_attn
- residual:
    - rmsnorm: {{}}
      source: post_attention_layernorm
    - mlp: {{hidden: F, gated: true, fn: {fn}, bias: false}}  # down(act(gate(x)) * up(x)); hidden_act
      source: mlp
"""


def describe(name: str, dec: Decoder, extra: str) -> str:
    window = f", sliding window {dec.window} on {sum(dec.sliding)} of {dec.layers} layers" if dec.window else ""
    attention = f"{dec.heads} query and {dec.kv} key/value heads of {dec.head_dim}, RoPE, causal{window}"
    return (f"{name} decoder imported from a Hugging Face config: embedding, {dec.layers} pre-RMSNorm blocks "
            f"(hidden {dec.C}, {attention}{extra}), final RMSNorm")


def _finish(spec: SpecText, cfg: HFConfig, hf_class: str, dec: Decoder, block: str, embed: str = EMBED) -> str:
    params, _, at = block_layout(dec)
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(TOKENS, "token ids")
    spec.block("decoder_block", block_text(params, block))
    header_note(spec, hf_class)
    spec.ignore(ROTATE_HALF_IGNORE)
    spec.layers(decoder_layers(embed, "decoder_block", params, at))
    return spec.render()


# ----------------------------------------------------------------------------------------------
# Mistral
# ----------------------------------------------------------------------------------------------
def build_mistral(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type mistral, transformers' MistralModel)")
    rope(cfg)
    dec = decoder_dims(spec, cfg, cfg.get_int("sliding_window", 0, minimum=0))  # null: full causal attention
    spec.dim("F", cfg.get_int("intermediate_size"), "gated MLP width", "intermediate_size")
    fn = gated_fn(cfg)
    window = block_layout(dec)[1]
    spec.doc = describe("Mistral", dec, f"; gated {fn} MLP")
    text = _finish(spec, cfg, "MistralModel", dec, dense_block(dec, fn, window))
    cfg.check_understood(IGNORED)
    return text


# ----------------------------------------------------------------------------------------------
# Qwen2
# ----------------------------------------------------------------------------------------------
def qwen_window(cfg: HFConfig) -> int:
    """sliding_window counts only with use_sliding_window (transformers' Qwen2 / Qwen2-MoE configs)."""
    use = cfg.get_bool("use_sliding_window", False)
    window = cfg.get_int("sliding_window", 0, minimum=0)
    cfg.get("max_window_layers")
    return window if use else 0


def build_qwen2(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type qwen2, transformers' Qwen2Model)")
    rope(cfg)
    window = qwen_window(cfg)
    first_full = cfg.get_int("max_window_layers", 28, minimum=0)
    dec = decoder_dims(spec, cfg, window, lambda i: i >= first_full)  # Qwen2: layers from max_window_layers on
    spec.dim("F", cfg.get_int("intermediate_size"), "gated MLP width", "intermediate_size")
    fn = gated_fn(cfg)
    spec.doc = describe("Qwen2", dec, f"; q/k/v biases, none on o; gated {fn} MLP")
    text = _finish(spec, cfg, "Qwen2Model", dec, dense_block(dec, fn, block_layout(dec)[1], q=True, k=True, v=True))
    cfg.check_understood(IGNORED)
    return text


# ----------------------------------------------------------------------------------------------
# Gemma
# ----------------------------------------------------------------------------------------------
GEMMA_IGNORED = dict(IGNORED, hidden_activation="transformers 5 ignores it: the MLP runs hidden_act (its legacy "
                     "'gelu' read as gelu_pytorch_tanh)")

GEMMA_EMBED = """\
- sequence:
    - embedding: {vocab: V, dim: C}
    - scale: {by: sqrt(C)}  # Gemma's normaliser: embeddings times sqrt(hidden_size)
  name: embed_tokens
  source: embed_tokens
"""


def build_gemma(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type gemma, transformers' GemmaModel)")
    rope(cfg)
    if cfg.get_bool("use_bidirectional_attention", False):
        raise cfg.refuse("use_bidirectional_attention", "bidirectional Gemma is not supported by this importer "
                         "(the spec is a causal decoder)")
    dec = decoder_dims(spec, cfg, 0)
    spec.dim("F", cfg.get_int("intermediate_size"), "gated MLP width", "intermediate_size")
    legacy = cfg.get("hidden_act") == "gelu"
    fn = "gelu_tanh" if legacy else gated_fn(cfg, default="gelu_pytorch_tanh")
    if legacy:
        spec.note("hidden_act gelu: transformers' GemmaConfig reads Gemma's legacy 'gelu' as gelu_pytorch_tanh "
                  "(the tanh GELU: GeGLU with gelu_tanh)")
    bias = cfg.get_bool("attention_bias", False)
    spec.note("Gemma's RMSNorm multiplies by (1 + weight): the same C parameters and, as costspec prices "
              "an RMSNorm per element of its input, the same cost")
    spec.doc = describe("Gemma", dec, f"; embeddings scaled by sqrt(C); GeGLU MLP ({fn})")
    block = dense_block(dec, fn, "", bias, bias, bias, bias)
    text = _finish(spec, cfg, "GemmaModel", dec, block, GEMMA_EMBED)
    cfg.check_understood(GEMMA_IGNORED)
    return text


ROPE_REFUSED = "a rope_type other than default / linear (rope_parameters, rope_scaling)"
MISTRAL = Family(("mistral",), "MistralForCausalLM", build_mistral,
                 "Mistral causal LM: GQA, RoPE, sliding-window causal attention, SwiGLU, LM head",
                 architectures=("MistralModel",), keys=DECODER_KEYS,
                 lm=CausalLM("MistralForCausalLM", "MistralModel", "model"),
                 refused=(ROPE_REFUSED, "num_key_value_heads that does not divide num_attention_heads"))
QWEN2 = Family(("qwen2",), "Qwen2ForCausalLM", build_qwen2,
               "Qwen2 causal LM: q/k/v biases, GQA, RoPE, sliding layers by layer_types, SwiGLU, LM head",
               architectures=("Qwen2Model",), keys=DECODER_KEYS, lm=CausalLM("Qwen2ForCausalLM", "Qwen2Model", "model"),
               refused=(ROPE_REFUSED, "layer_types of another length than num_hidden_layers, or naming another "
                        "attention kind"))
GEMMA = Family(("gemma",), "GemmaForCausalLM", build_gemma,
               "Gemma causal LM: embeddings x sqrt(C), head_dim from the config (256 in Gemma), GeGLU, "
               "RMSNorm (1 + w), tied LM head",
               architectures=("GemmaModel",), keys=DECODER_KEYS,
               lm=CausalLM("GemmaForCausalLM", "GemmaModel", "model", tied_default=True),
               refused=(ROPE_REFUSED, "use_bidirectional_attention: true"))

FAMILY_LIST = (MISTRAL, QWEN2, GEMMA)
