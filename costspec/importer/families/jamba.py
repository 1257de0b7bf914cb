"""Jamba (transformers' JambaForCausalLM), imported whole with its LM head: a stack of pre-RMSNorm decoder
layers, each a mixer then a feed-forward. The mixer is attention (no RoPE, grouped key/value heads, no biases)
on layers i with i % attn_layer_period == attn_layer_offset, else Jamba's Mamba mixer (the `mamba` op with
`inner_norms`: RMSNorms on dt, B and C); the feed-forward is a mixture of experts (a router over
num_experts SwiGLU experts, top-k, not renormalised) on layers i with i % expert_layer_period ==
expert_layer_offset, else a dense SwiGLU MLP. The layers are listed one by one (each its block).

Checked against transformers' batched_mm experts (as Mixtral and Qwen2-MoE are: docs/validation.md).
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText, wrap_comment
from costspec.importer.families import Family
from costspec.importer.families.common import check_divides
from costspec.importer.families.modern_template import DEFAULT_S, precision

HF_CLASS = "JambaForCausalLM"
BATCHED_MM = {"_experts_implementation": "batched_mm"}
MIXERS = {
    "attn": ("attention: {heads: heads, kv_heads: KV, fused_qkv: false, qkv_bias: false, proj_bias: false, "
             "causal: true}", "self_attn"),
    "mamba": ("mamba: {d_state: N, expand: X, d_conv: K, dt_rank: R, bias: {bias}, conv_bias: {conv_bias}, "
              "inner_norms: true}", "mamba"),
}
FFNS = {
    "moe": "moe: {experts: E, top_k: K_top, hidden: F, gated: true, fn: silu, bias: false, renorm: false, "
           "fused_gate_up: true}",
    "mlp": "mlp: {hidden: F, gated: true, fn: silu, bias: false}",
}


def layer_kinds(cfg: HFConfig, L: int) -> list[tuple[str, str]]:
    """(mixer, feed-forward) of each layer, as JambaConfig's layers_block_type and layers_num_experts say."""
    periods = {}
    for period, offset in (("attn_layer_period", "attn_layer_offset"), ("expert_layer_period", "expert_layer_offset")):
        p = cfg.get_int(period, 8 if period.startswith("attn") else 2)
        o = cfg.get_int(offset, 4 if offset.startswith("attn") else 1, minimum=0)
        if o >= p:
            raise cfg.refuse(offset, f"expected less than {period} = {p} (JambaConfig refuses it)")
        periods[period] = (p, o)
    (ap, ao), (ep, eo) = periods["attn_layer_period"], periods["expert_layer_period"]
    experts = cfg.get_int("num_experts", 16)
    return [("attn" if i % ap == ao else "mamba", "moe" if experts > 1 and i % ep == eo else "mlp") for i in range(L)]


def block(mixer: str, ffn: str, bias: bool, conv_bias: bool) -> str:
    line, source = MIXERS[mixer]
    line = line.replace("{bias}", "true" if bias else "false").replace("{conv_bias}", "true" if conv_bias else "false")
    return f"""\
- residual:
    - rmsnorm: {{}}
      source: input_layernorm
    - {line}
      source: {source}
- residual:
    - rmsnorm: {{}}
      source: pre_ff_layernorm
    - {FFNS[ffn]}
      source: feed_forward
"""


def gather_rule(moe_layers: int) -> str:
    return f"""\
- module: "model.layers.*.feed_forward.experts"
  extra: {{scatter_add: "{moe_layers}*B*S*K_top*3*F*C"}}
  pass: backward
  reason: >-
    checked against transformers' batched_mm experts (FlopCounterMode counts no grouped_mm and eager experts
    need a data-dependent nonzero), which gather each (token, expert) row's own copy of its expert's weights for
    one bmm; the gather's backward scatter-adds those T*k*3*F*C weight-gradient elements into the expert
    tables ({moe_layers} MoE layers), which a grouped GEMM (what the spec charges) does not run
"""


def dims(spec: SpecText, cfg: HFConfig, kinds: list[tuple[str, str]]) -> tuple[int, int]:
    C, h = cfg.get_int("hidden_size"), cfg.get_int("num_attention_heads")
    check_divides(cfg, "hidden_size", C, "num_attention_heads", h)
    kv = cfg.get_int("num_key_value_heads", h)
    if h % kv:
        raise ImportProblem(f"{cfg.where('num_key_value_heads')} = {kv} does not divide num_attention_heads = {h}")
    L, V = cfg.get_int("num_hidden_layers"), cfg.get_int("vocab_size")
    spec.dim("B", 1, "batch size")
    spec.dim("S", DEFAULT_S, f"sequence length (tokens): {DEFAULT_S} (no position table: the attention has no RoPE); "
             "--set S=... for another")
    spec.dim("C", C, "hidden size", "hidden_size")
    spec.dim("heads", h, "query heads", "num_attention_heads")
    spec.dim("KV", kv, "key/value heads", "num_key_value_heads")
    spec.dim("F", cfg.get_int("intermediate_size"), "gated width of the MLPs and of each expert", "intermediate_size")
    # every key is read (and checked) whether or not a layer uses it
    E, k = cfg.get_int("num_experts", 16), cfg.get_int("num_experts_per_tok", 2)
    if k > E:
        raise ImportProblem(f"{cfg.where('num_experts_per_tok')} = {k} is more than num_experts = {E}")
    expand, rank = cfg.get_int("mamba_expand", 2), cfg.get("mamba_dt_rank", "auto")
    R = -(-C // 16) if rank == "auto" else cfg.get_int("mamba_dt_rank")
    N, K = cfg.get_int("mamba_d_state", 16), cfg.get_int("mamba_d_conv", 4)
    if any(f == "moe" for _, f in kinds):
        spec.dim("E", E, "routed experts", "num_experts")
        spec.dim("K_top", k, "experts per token (top-k)", "num_experts_per_tok")
    if any(m == "mamba" for m, _ in kinds):
        spec.dim("X", expand, "Mamba inner width factor (inner width X*C)", "mamba_expand")
        spec.dim("N", N, "SSM state size per channel", "mamba_d_state")
        spec.dim("K", K, "taps of the Mamba conv", "mamba_d_conv")
        spec.dim("R", R, "rank of the dt projection", "mamba_dt_rank")
    spec.dim("L", L, "decoder layers", "num_hidden_layers")
    spec.dim("V", V, "vocabulary size", "vocab_size")
    return C, h


def build(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type jamba, transformers' {HF_CLASS})")
    if cfg.get_bool("use_mambapy", False):
        raise cfg.refuse("use_mambapy", "the mambapy parallel scan (when installed) runs other operations than the "
                         "sequential loop the mamba op counts (not supported by this importer)")
    cfg.choice("hidden_act", "silu", ("silu", "swish"), "the Mamba mixer's conv and gate activations are SiLU in the "
               "mamba op (and the MLPs' gate)")
    kinds = layer_kinds(cfg, cfg.get_int("num_hidden_layers"))
    C, h = dims(spec, cfg, kinds)
    tied = cfg.get_bool("tie_word_embeddings", False)
    bias, conv_bias = cfg.get_bool("mamba_proj_bias", False), cfg.get_bool("mamba_conv_bias", True)
    cfg.get_bool("use_mamba_kernels", True)  # deprecated in transformers 5: no effect
    precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    used = sorted(set(kinds), key=kinds.index)
    for mixer, ffn in used:
        spec.block(f"{mixer}_{ffn}", block(mixer, ffn, bias, conv_bias))
    spec.header.extend(wrap_comment(f"`source:` and `ignore:` name modules of transformers' {HF_CLASS} (transformers "
                                    "5); its Mamba layers loop in python over S: validate --against at a shorter "
                                    "sequence with --set S=64, the counts are exact at every S"))
    n_moe = sum(f == "moe" for _, f in kinds)
    if n_moe:
        spec.ignore(gather_rule(n_moe))
    layer_lines = "".join(f"- {{block: {m}_{f}, name: layer{i}, source: model.layers.{i}}}\n"
                          for i, (m, f) in enumerate(kinds))
    spec.layers(f"""\
- embedding: {{vocab: V, dim: C}}
  name: embed_tokens
  source: model.embed_tokens
{layer_lines}- rmsnorm: {{}}
  name: final_layernorm
  source: model.final_layernorm
- lm_head: {{vocab: V{', tied: true' if tied else ''}}}  # tie_word_embeddings: {'true' if tied else 'false'}
  source: lm_head
""")
    n_attn = sum(m == "attn" for m, _ in kinds)
    if not n_attn:
        spec.note("no layer is attention: transformers' JambaModel still builds a full-attention mask, from its cache "
                  "(which, of Mamba layers only, cannot give the sequence length it asks: ValueError) or, with "
                  "use_cache false, after a data-dependent check that meta tensors cannot run; the printed validate "
                  "--against fails inside transformers for this config (tools/hf_coverage.py calls the model with "
                  "use_cache=False and the mask mapping precomputed, which runs the same layers)")
    spec.doc = (f"Jamba causal LM imported from a Hugging Face config: embedding, {len(kinds)} pre-RMSNorm layers "
                f"({n_attn} attention without RoPE, {len(kinds) - n_attn} Mamba with RMSNorms on dt, B and C; {n_moe} "
                f"mixture-of-experts feed-forwards, the rest dense SwiGLU), final RMSNorm, LM head"
                f"{' tied to the embedding' if tied else ''}")
    text = spec.render()
    cfg.check_understood({k: why for k, why in IGNORED.items() if cfg.has(k)})
    return text


IGNORED = {
    "rms_norm_eps": "the norms' epsilon (does not change the cost)",
    "max_position_embeddings": "no position table (the attention has no RoPE); S is set by --set S=...",
    "use_associative_scan": "transformers takes the associative scan only under torch.compile; eager runs the "
                            "loop the op counts",
    "router_aux_loss_coef": "the load-balancing loss: training objective, not the model",
    "output_router_logits": "returns the router logits the model computes anyway",
    "num_logits_to_keep": "a generation-time slice of the LM head's rows",
}
KEYS = (size("vocab_size"), size("hidden_size"), layers("num_hidden_layers"),
        heads("num_attention_heads", "hidden_size"), heads("num_key_value_heads", "num_attention_heads"),
        size("intermediate_size"), size("num_experts"), size("num_experts_per_tok"), size("mamba_d_state"),
        size("mamba_d_conv"), size("mamba_expand"), size("attn_layer_period"), size("expert_layer_period"))
JAMBA = Family(("jamba",), HF_CLASS, build,
               "Jamba causal LM with its LM head: attention (no RoPE) every attn_layer_period layers, Mamba mixers "
               "with RMSNorms on dt, B and C otherwise; routed SwiGLU experts every expert_layer_period layers, "
               "dense SwiGLU MLPs otherwise",
               hf_kwargs=BATCHED_MM, architectures=(HF_CLASS,), keys=KEYS,
               refused=("use_mambapy: true (the mambapy parallel scan)", "hidden_act other than silu",
                        "an offset not below its period", "num_experts_per_tok above num_experts"))
FAMILY_LIST = (JAMBA,)
