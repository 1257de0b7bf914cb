"""State-space causal LMs, imported whole with their LM head: Mamba (MambaForCausalLM: the `mamba` op, the
selective scan as transformers' sequential loop) and Mamba-2 (Mamba2ForCausalLM: the `mamba2` op, the SSD
chunked scan), each a stack of pre-RMSNorm residual mixers between the token embedding and a final RMSNorm.

The ops count what transformers runs without the CUDA kernels (mamba_ssm, causal_conv1d, the Triton SSD
kernels are not part of transformers; on meta and on a machine without them its reference paths run):
costspec/ops/ssm/. Recurrent models have no maximum length: S defaults to 4096.
"""
from __future__ import annotations

import math

from costspec.importer.config import HFConfig, ImportProblem, layers, size
from costspec.importer.emit import SpecText, wrap_comment
from costspec.importer.families import Family
from costspec.importer.families.modern_template import DEFAULT_S, precision

INIT_ONLY = "initialisation of the dt projection or the weights only (not the model's cost)"
COMMON_IGNORED = {
    "time_step_scale": INIT_ONLY, "time_step_min": INIT_ONLY, "time_step_max": INIT_ONLY,
    "time_step_init_scheme": INIT_ONLY, "time_step_floor": INIT_ONLY, "rescale_prenorm_residual": INIT_ONLY,
    "residual_in_fp32": "the residual stream's dtype (kept in fp32 between blocks): the same operations",
    "use_associative_scan": "transformers takes the associative scan only under torch.compile; eager runs the "
                            "loop the op counts",
    "intermediate_size": "transformers recomputes it as expand x hidden_size (read there)",
}


def expand(cfg: HFConfig, C: int) -> int:
    """expand: a whole number (the ops' inner width is expand x C)."""
    value = cfg.get("expand", 2)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise cfg.refuse("expand", "expected a whole number from 1 to 64 (the inner width is expand x hidden_size; "
                         "costspec's mamba ops take a whole factor)")
    return value


def dt_rank(cfg: HFConfig, C: int) -> int:
    """time_step_rank: a whole number or "auto" (ceil(hidden_size / 16))."""
    value = cfg.get("time_step_rank", "auto")
    if value == "auto":
        return math.ceil(C / 16)
    return cfg.get_int("time_step_rank")


def check_act(cfg: HFConfig) -> None:
    cfg.choice("hidden_act", "silu", ("silu", "swish"), "the mixer's conv and gate activations are SiLU in the op")


def header(spec: SpecText, cfg: HFConfig, hf_class: str) -> tuple[int, int, int, bool]:
    C, L, V = cfg.get_int("hidden_size"), cfg.get_int("num_hidden_layers"), cfg.get_int("vocab_size")
    spec.dim("B", 1, "batch size")
    spec.dim("S", DEFAULT_S, f"sequence length (tokens): {DEFAULT_S} (a recurrent model has no maximum); "
             "--set S=... for another")
    spec.dim("C", C, "width (d_model)", "hidden_size")
    spec.dim("L", L, "layers", "num_hidden_layers")
    spec.dim("V", V, "vocabulary size", "vocab_size")
    spec.header.extend(wrap_comment(f"`source:` names modules of transformers' {hf_class} (transformers 5); both "
                                    "loop in python (the scan over S or its chunks): validate --against at a shorter "
                                    "sequence with --set S=64, the counts are exact at every S"))
    return C, L, V, cfg.get_bool("tie_word_embeddings", hf_class == "MambaForCausalLM")


def body(op: str, tied: bool) -> tuple[str, str]:
    block = f"""\
- residual:
    - rmsnorm: {{}}
      source: norm
    - {op}
      source: mixer
"""
    layers_text = f"""\
- embedding: {{vocab: V, dim: C}}
  name: embeddings
  source: backbone.embeddings
- repeat: L
  name: layers
  body: block
  source: backbone.layers
- rmsnorm: {{}}
  name: norm_f
  source: backbone.norm_f
- lm_head: {{vocab: V{', tied: true' if tied else ''}}}  # tie_word_embeddings: {'true' if tied else 'false'}
  source: lm_head
"""
    return block, layers_text


# ----------------------------------------------------------------------------------------------
# Mamba
# ----------------------------------------------------------------------------------------------
def build_mamba(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type mamba, transformers' MambaForCausalLM)")
    if cfg.get_bool("use_mambapy", False):
        raise cfg.refuse("use_mambapy", "the mambapy parallel scan (when installed) runs other operations than the "
                         "sequential loop the mamba op counts (not supported by this importer)")
    check_act(cfg)
    C, L, V, tied = header(spec, cfg, "MambaForCausalLM")
    E, N, K, R = expand(cfg, C), cfg.get_int("state_size", 16), cfg.get_int("conv_kernel", 4), dt_rank(cfg, C)
    spec.dim("N", N, "SSM state size per channel (d_state)", "state_size")
    spec.dim("R", R, "rank of the dt projection", "time_step_rank")
    precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    bias, conv_bias = cfg.get_bool("use_bias", False), cfg.get_bool("use_conv_bias", True)
    op = (f"mamba: {{d_state: N, expand: {E}, d_conv: {K}, dt_rank: R, bias: {'true' if bias else 'false'}, "
          f"conv_bias: {'true' if conv_bias else 'false'}}}")
    block, layers_text = body(op, tied)
    spec.block("block", block)
    spec.layers(layers_text)
    spec.doc = (f"Mamba causal LM imported from a Hugging Face config: embedding, {L} pre-RMSNorm residual Mamba "
                f"mixers (d_model {C}, inner width {E * C}, state {N}, conv {K}, dt rank {R}; the selective scan as "
                f"transformers' sequential loop), final RMSNorm, LM head{' tied to the embedding' if tied else ''}")
    text = spec.render()
    cfg.check_understood({k: v for k, v in COMMON_IGNORED.items() if cfg.has(k)})
    return text


# ----------------------------------------------------------------------------------------------
# Mamba-2
# ----------------------------------------------------------------------------------------------
def build_mamba2(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type mamba2, transformers' "
                    "Mamba2ForCausalLM)")
    check_act(cfg)
    C, L, V, tied = header(spec, cfg, "Mamba2ForCausalLM")
    E = expand(cfg, C)
    H, P = cfg.get_int("num_heads", 128), cfg.get_int("head_dim", 64)
    if H * P != E * C:
        raise ImportProblem(f"{cfg.where('num_heads')} = {H}: num_heads x head_dim = {H * P} is not expand x "
                            f"hidden_size = {E * C} (transformers refuses the config)")
    G = cfg.get_int("n_groups", 1)
    if H % G:
        raise ImportProblem(f"{cfg.where('n_groups')} = {G} does not divide num_heads = {H} (the groups share B and "
                            "C across heads)")
    N, K, Q = cfg.get_int("state_size", 128), cfg.get_int("conv_kernel", 4), cfg.get_int("chunk_size", 256)
    for key, value in (("state_size", N), ("chunk_size", Q)):
        if value < 2:
            raise cfg.refuse(key, "expected 2 or more: the SSD einsums contract over the state and the chunk, and "
                             "torch runs a contraction of size 1 as an elementwise product, not the batched matmul "
                             "the mamba2 op prices")
    limit = cfg.get("time_step_limit", [0.0, math.inf])
    if not isinstance(limit, list) or len(limit) != 2 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in limit):
        raise cfg.refuse("time_step_limit", "expected [min, max] (dt is clamped to it: constants, the same cost)")
    spec.dim("N", N, "SSM state size (d_state)", "state_size")
    spec.dim("H", H, "heads", "num_heads")
    spec.dim("P", P, "channels per head", "head_dim")
    spec.dim("G", G, "groups sharing B and C", "n_groups")
    spec.dim("Q", Q, "chunk length of the SSD scan", "chunk_size")
    precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    bias, conv_bias = cfg.get_bool("use_bias", False), cfg.get_bool("use_conv_bias", True)
    op = (f"mamba2: {{d_state: N, expand: {E}, d_conv: {K}, head_dim: P, heads: H, groups: G, chunk: Q, "
          f"bias: {'true' if bias else 'false'}, conv_bias: {'true' if conv_bias else 'false'}}}")
    block, layers_text = body(op, tied)
    spec.block("block", block)
    spec.layers(layers_text)
    spec.doc = (f"Mamba-2 causal LM imported from a Hugging Face config: embedding, {L} pre-RMSNorm residual Mamba-2 "
                f"mixers (d_model {C}, {H} heads of {P}, state {N}, {G} groups, conv {K}; the SSD scan in chunks of "
                f"{Q}), final RMSNorm, LM head{' tied to the embedding' if tied else ''}")
    text = spec.render()
    ignored = {**COMMON_IGNORED, "time_step_rank": "not read by Mamba-2's mixer (no dt projection)",
               **dict.fromkeys(("norm_before_gate", "rms_norm"), "a key of the original mamba_ssm config that "
                               "transformers 5's Mamba2ForCausalLM does not read (its gated RMSNorm gates, then "
                               "normalises)")}
    cfg.check_understood({k: v for k, v in ignored.items() if cfg.has(k)})
    return text


KEYS = (size("vocab_size"), size("hidden_size"), layers("num_hidden_layers"), size("state_size"),
        size("conv_kernel"), size("num_heads"), size("head_dim"), size("n_groups"), size("chunk_size"))
MAMBA = Family(("mamba",), "MambaForCausalLM", build_mamba,
               "Mamba causal LM with its LM head: pre-RMSNorm residual Mamba mixers (the selective scan as "
               "transformers' sequential loop)",
               architectures=("MambaForCausalLM",), keys=KEYS,
               refused=("use_mambapy: true (the mambapy parallel scan)", "hidden_act other than silu",
                        "a fractional expand"))
MAMBA2 = Family(("mamba2",), "Mamba2ForCausalLM", build_mamba2,
                "Mamba-2 causal LM with its LM head: pre-RMSNorm residual Mamba-2 mixers (the SSD scan in chunks)",
                architectures=("Mamba2ForCausalLM",), keys=KEYS,
                refused=("num_heads x head_dim other than expand x hidden_size", "n_groups not dividing num_heads",
                         "state_size or chunk_size 1 (a contraction torch runs elementwise)",
                         "hidden_act other than silu", "a fractional expand"))
FAMILY_LIST = (MAMBA, MAMBA2)
