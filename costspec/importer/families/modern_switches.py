"""The switches of the decoder template (`Template`: one Llama-like family) and the dims a config resolved to
(`Dims`), shared by the template's build (modern_template.py) and its named rules (modern_rules.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from costspec.importer.families.modern_moe import MoE


@dataclass
class Dims:
    """What the shared dims resolved to."""

    C: int
    heads: int
    kv: int
    head_dim: int
    layers: int
    S: int
    sliding: tuple[bool, ...] = ()
    window: int = 0
    extra: dict[str, int] = field(default_factory=dict)
    eager: bool = False  # transformers runs eager attention (soft-capping, sinks): masks built as floats
    extra_rope: int = -1  # layers with RoPE (-1: all)


@dataclass(frozen=True)
class Template:
    """The switches of one Llama-like family (see the module doc); `None` / "" switch a feature off."""

    model_type: str
    hf_class: str  # the *ForCausalLM class the spec describes
    title: str
    norm: str = "rmsnorm"  # rmsnorm | layernorm | layernorm_nobias | layernorm_plain (no weights)
    layout: str = "pre"  # pre | sandwich (pre and post norms) | post (norms after, OLMo-2) | parallel (Cohere)
    qk_norm: str = "none"  # none | rmsnorm | layernorm
    qk_norm_over: str = "head"  # head | all
    qk_norm_weight: str = "shared"  # shared | per_head
    qk_norm_key: str = ""  # a config bool switching the q/k norm on (Cohere's use_qk_norm); "": always on
    qk_norm_bias: bool = False  # the q/k LayerNorm has a bias (Phi's qk_layernorm)
    bias_key: str = "attention_bias"  # the config bool of the attention's biases ("": none)
    bias_default: bool = False
    o_bias: bool = True  # the bias key covers o_proj too
    mlp: str = "gated"  # gated | plain (fc, act, proj)
    mlp_bias_key: str = ""  # a config bool for the MLP's biases ("": mlp_bias_default)
    mlp_bias_default: bool = False
    fused_qkv: bool = False  # one qkv_proj (Phi-3)
    fused_gate_up: bool = False  # one gate_up_proj (Phi-3)
    act_keys: tuple[str, ...] = ("hidden_act",)
    act_default: str = "silu"
    legacy_gelu: bool = False  # the activation key's "gelu" read as the tanh GELU (Gemma's legacy configs)
    # none | all (sliding_window on every layer) | layer_types | qwen (use_sliding_window, layers from
    # max_window_layers on) | qwen2_moe (use_sliding_window, even layers below max_window_layers)
    sliding: str = "none"
    attn_softcap_key: str = ""
    final_softcap_key: str = ""
    partial_rotary: bool = False  # rope_parameters.partial_rotary_factor (q and k always sliced, as Phi-3)
    rotary_default: float = 1.0  # the rotated fraction when the config names none (Phi's 0.5)
    nope_key: str = ""  # a per-layer list of RoPE on (1) / off (0): SmolLM3's no_rope_layers
    embed_scale: str = ""  # "" | sqrt (x sqrt(C)) | a config key (Granite's embedding_multiplier)
    residual_scale_key: str = ""  # Granite's residual_multiplier: each branch scaled before its residual add
    logits: str = ""  # "" | "div:<key>" | "mul:<key>": the logits divided / multiplied by a config constant
    refuse_true: tuple[str, ...] = ()  # bool keys whose true the family cannot price
    refuse_set: tuple[str, ...] = ()  # keys whose non-null value the family cannot price
    needs: dict[str, str] = field(default_factory=dict)  # keys transformers' class cannot do without, and why
    tied_default: bool = False
    head_bias: bool = False  # the LM head adds a bias (Phi)
    final_norm: str = "norm"  # the final norm's module under model.
    positions_default: int = 4096  # transformers' max_position_embeddings default
    sinks: bool = False  # gpt-oss's attention sinks (eager attention)
    eager: bool = False  # transformers always runs eager attention (Gemma 2: no SDPA, soft-cap or not)
    moe: MoE | None = None  # the MoE switches (modern_moe.py)
    mla: str = ""  # "" | v2 | v3: DeepSeek's multi-head latent attention
    ignored: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # written into every spec of the family (what it prices the same way)
    refused: tuple[str, ...] = ()  # what else the family refuses, for docs/import.md
    blurb: str = ""  # what the family is, for docs/import.md
