"""GPT-NeoX / Pythia (transformers' GPTNeoXModel: x + attn(ln1(x)) + mlp(ln2(x)), or sequential), a parallel
residual with two LayerNorms and partial rotary embeddings, under its own module names (embed_in, attention,
final_layer_norm, embed_out), with the decoder template's defaults (modern_template.py): bf16 when the config
names no dtype, S = min(4096, max_position_embeddings). Phi is an entry of the template (modern.py)."""
from __future__ import annotations

import textwrap

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.common import GELU_NEW_NOTE, activation, check_divides
from costspec.importer.families.modern_template import precision, sequence_dim
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


def _decoder_dims(spec: SpecText, cfg: HFConfig, heads: int) -> tuple[int, int]:
    C = cfg.get_int("hidden_size")
    check_divides(cfg, "hidden_size", C, "num_attention_heads", heads)
    spec.dim("B", 1, "batch size")
    sequence_dim(spec, cfg, 2048)
    spec.dim("C", C, "hidden size", "hidden_size")
    spec.dim("heads", heads, "attention heads", "num_attention_heads")
    return C, C // heads


def _fn(spec: SpecText, cfg: HFConfig, default: str) -> str:
    fn = activation(cfg, "hidden_act", default)
    if cfg.get("hidden_act", default) == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    return fn


def _rope_attrs(rotary: int, head_dim: int) -> str:
    return "rope: true" + (", rope_dims: R" if rotary < head_dim else "")


# ----------------------------------------------------------------------------------------------
# GPT-NeoX / Pythia
# ----------------------------------------------------------------------------------------------
GPT_NEOX_IGNORED = {"tie_word_embeddings": NO_LM_HEAD, **ROPE_IGNORED}


def build_gpt_neox(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "GPTNeoXModel)")
    heads = cfg.get_int("num_attention_heads")
    C, d = _decoder_dims(spec, cfg, heads)
    spec.dim("F", cfg.get_int("intermediate_size"), "MLP intermediate size", "intermediate_size")
    spec.dim("L", cfg.get_int("num_hidden_layers"), "layers", "num_hidden_layers")
    spec.dim("V", cfg.get_int("vocab_size"), "vocabulary size", "vocab_size")
    rotary = rotary_dims(cfg, d)
    spec.dim("R", rotary, f"rotary dims per head (int(head_dim {d} * rotary fraction))", "rotary_pct")
    fn = _fn(spec, cfg, "gelu")
    bias = "" if cfg.get_bool("attention_bias", True) else ", qkv_bias: false, proj_bias: false"
    parallel = cfg.get_bool("use_parallel_residual", True)
    precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    layer_count = cfg.get_int("num_hidden_layers")
    spec.doc = (f"GPT-NeoX decoder imported from a Hugging Face config: token embedding, {layer_count} "
                + ("parallel-residual blocks x + attn(ln1(x)) + mlp(ln2(x))" if parallel
                   else "sequential pre-LN blocks") + f" (hidden {C}, {heads} heads of dim {d}, fused qkv"
                + (" with bias" if not bias else " without bias") + f", rotary on {rotary} of {d} dims, {fn} MLP), "
                "final LayerNorm")
    attn = f"attention: {{heads: heads, {_rope_attrs(rotary, d)}, causal: true{bias}}}"
    mlp = f"mlp: {{hidden: F, fn: {fn}}}"
    if parallel:
        spec.block("neox_block", f"""\
# use_parallel_residual: x + attention(ln1(x)) + mlp(ln2(x)), all three read the block's input
- parallel:
    join: add
    branches:
      - []  # the input itself
      - - layernorm: {{}}
          source: input_layernorm
        - {attn}
          source: attention
      - - layernorm: {{}}
          source: post_attention_layernorm
        - {mlp}  # hidden_act
          source: mlp
""")
    else:
        spec.block("neox_block", f"""\
- residual:
    - layernorm: {{}}
      source: input_layernorm
    - {attn}
      source: attention
- residual:
    - layernorm: {{}}
      source: post_attention_layernorm
    - {mlp}  # hidden_act
      source: mlp
""")
    spec.header.append("# `source:` and `ignore:` name modules of transformers' GPTNeoXModel")
    spec.ignore(rope_ignores())
    spec.layers("""\
- embedding: {vocab: V, dim: C}
  name: embed_in
  source: embed_in
- repeat: L
  name: layers
  body: neox_block
  source: layers
- layernorm: {}
  name: final_layer_norm
  source: final_layer_norm
""")
    cfg.check_understood(GPT_NEOX_IGNORED)
    return spec.render()


# rotary dims (a fraction of the head dim) are checked by the family: they need not be all of it
NEOX_KEYS = (size("vocab_size"), size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
             heads("num_attention_heads", "hidden_size"), size("max_position_embeddings"))
GPT_NEOX = Family(("gpt_neox",), "GPTNeoXForCausalLM", build_gpt_neox,
                  "GPT-NeoX / Pythia causal LM: parallel (or sequential) residual, partial rotary, LM head",
                  architectures=("GPTNeoXModel",),
                  lm=CausalLM("GPTNeoXForCausalLM", "GPTNeoXModel", "gpt_neox"),
                  refused=("an odd number of rotary dims",), keys=NEOX_KEYS)

FAMILY_LIST = (GPT_NEOX,)
