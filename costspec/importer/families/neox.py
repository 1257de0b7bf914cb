"""GPT-NeoX / Pythia (transformers' GPTNeoXModel: x + attn(ln1(x)) + mlp(ln2(x)), or sequential), a parallel
residual with two LayerNorms and partial rotary embeddings, under its own module names (embed_in, attention,
final_layer_norm, embed_out): a row of the GPT-like template (gpt_template.py; bf16 when the config names no
dtype, S = min(4096, max_position_embeddings)), the reader of its switches and its partial-rotary rules; the LM
head is importer/head.py's. Phi is an entry of the decoder template (modern.py)."""
from __future__ import annotations

import textwrap

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.families.gpt_template import (
    PARALLEL_TWO_NORMS,
    PRE_LN,
    GptLike,
    Keys,
    Layer,
    Paths,
    Sizes,
    family,
    gelu_new_note,
)
from costspec.importer.head import CausalLM

ROPE_CONSTANTS = ("the rotary frequencies (theta, scaling type and factor) are constants: RoPE costs 2 mul + 1 add "
                  "per element of q and k whatever they are")
# rope_parameters keys (default, linear and dynamic scaling) that shape the cos/sin tables only:
# computed from a buffer and the positions (constants, outside the counted work), never a cost
ROPE_TABLE_KEYS = ("rope_theta", "rope_type", "type", "factor", "original_max_position_embeddings")
ROPE_IGNORED = {"rotary_emb_base": ROPE_CONSTANTS, "rope_theta": ROPE_CONSTANTS, "rope_scaling": ROPE_CONSTANTS,
                **{f"rope_parameters.{key}": ROPE_CONSTANTS for key in ROPE_TABLE_KEYS}}
NO_LM_HEAD = "read by the LM head (importer/head.py), which the backbone (--backbone) does not have"

NEG_REASON = (
    "transformers' rotate_half builds [-x2, x1] with a neg (a multiplication by -1: the `scale` kind) of half of "
    "the rotary part of q and k, B*S*(h + kv)*R/2 elements per layer, forward and backward; the spec's RoPE "
    "folds the sign into the sin table (2 mul + 1 add per element)")
SLICE_REASON = (
    "transformers slices q and k into a rotary part (q[..., :R]) and a pass-through part (q[..., R:]) and "
    "rotate_half slices the rotary part into two halves: autograd adds the gradients of the slices back into "
    "one tensor, one add per element of q and k (B*S*(h + kv)*d per layer) and per rotary element "
    "(B*S*(h + kv)*R); the spec's partial RoPE rotates its slice and concatenates")


def _folded(text: str) -> str:
    return "\n".join("    " + line for line in textwrap.wrap(text, 100))


def rotary_dims(cfg: HFConfig, head_dim: int) -> int:
    """R = int(head_dim * partial_rotary_factor), as transformers computes it, from `rope_parameters`
    (transformers 5) or the legacy top-level `rotary_pct`."""
    legacy_key = pct_key = "rotary_pct"
    pct = cfg.get(legacy_key)
    if cfg.get("rope_parameters") is not None:
        params = cfg.sub("rope_parameters")
        if params.get("partial_rotary_factor") is not None:
            pct, pct_key = params.get("partial_rotary_factor"), "rope_parameters.partial_rotary_factor"
    if pct is None:
        raise ImportProblem(f"{cfg.where(legacy_key)}: missing (the fraction of each head's dims that is rotated)")
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 1:
        raise ImportProblem(f"{cfg.where(pct_key)} = {pct!r}: expected a fraction in (0, 1]")
    rotary = int(head_dim * pct)
    if rotary < 2 or rotary % 2:
        raise ImportProblem(f"{cfg.where(pct_key)} = {pct!r}: int(head_dim {head_dim} * {pct}) = {rotary} rotary dims; "
                            "expected an even number >= 2 (rotate_half pairs the dims)")
    return rotary


def rope_ignores() -> str:
    """The two named differences of transformers' partial rotary code (forward and backward)."""
    return f"""\
- module: "layers.*.attention"
  extra: {{scale: "L*B*S*(heads + heads)*R/2"}}
  reason: >-
{_folded(NEG_REASON)}
- module: "layers.*.attention"
  extra: {{add: "L*B*S*(heads + heads)*(C/heads + R)"}}
  pass: backward
  reason: >-
{_folded(SLICE_REASON)}
"""


# ----------------------------------------------------------------------------------------------
# GPT-NeoX / Pythia
# ----------------------------------------------------------------------------------------------
GPT_NEOX_IGNORED = {"tie_word_embeddings": NO_LM_HEAD, **ROPE_IGNORED}


def read_gpt_neox(cfg: HFConfig, dims: Sizes) -> Layer:
    """GPT-NeoX's switches: partial rotary (R of each head's dims), fused qkv with or without bias
    (attention_bias), parallel residual on two LayerNorms (use_parallel_residual) or sequential pre-LN."""
    d = dims.C // dims.heads
    rotary = rotary_dims(cfg, d)
    bias = cfg.get_bool("attention_bias", True)
    parallel = cfg.get_bool("use_parallel_residual", True)
    attn = ("attention: {heads: heads, rope: true" + (", rope_dims: R" if rotary < d else "") + ", causal: true"
            + ("" if bias else ", qkv_bias: false, proj_bias: false") + "}")
    return Layer(attn=attn, layout=PARALLEL_TWO_NORMS if parallel else PRE_LN,
                 norms=("input_layernorm", "post_attention_layernorm"), ignore=rope_ignores(),
                 dims=(("R", rotary, f"rotary dims per head (int(head_dim {d} * rotary fraction))", "rotary_pct"),),
                 notes=gelu_new_note(cfg, NEOX_KEYS), understood=GPT_NEOX_IGNORED,
                 blocks=(f"token embedding, {dims.L} "
                         + ("parallel-residual blocks x + attn(ln1(x)) + mlp(ln2(x))" if parallel
                            else "sequential pre-LN blocks") + f" (hidden {dims.C}, {dims.heads} heads of dim {d}, "
                         f"fused qkv {'with' if bias else 'without'} bias, rotary on {rotary} of {d} dims, "
                         f"{dims.fn} MLP), final LayerNorm"))


NEOX_KEYS = Keys(width=("hidden_size",), heads="num_attention_heads", layers="num_hidden_layers",
                 mlp="intermediate_size", mlp_ratio=None, activation="hidden_act", activation_default="gelu")
# rotary dims (a fraction of the head dim) are checked by the family: they need not be all of it
NEOX_TABLE = GptLike(
    "gpt_neox", "GPTNeoXModel", "GPT-NeoX / Pythia causal LM: parallel (or sequential) residual, partial rotary, "
    "LM head", NEOX_KEYS, Paths("", "embed_in", "layers", "final_layer_norm", "attention", "mlp"), read_gpt_neox,
    "neox_block", lm=CausalLM("GPTNeoXForCausalLM", "GPTNeoXModel", "gpt_neox"),
    declared=(size("vocab_size"), size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
              heads("num_attention_heads", "hidden_size"), size("max_position_embeddings")),
    architectures=("GPTNeoXModel",), refused=("an odd number of rotary dims",), doc_name="GPT-NeoX decoder")
GPT_NEOX = family(NEOX_TABLE)
FAMILY_LIST = (GPT_NEOX,)
