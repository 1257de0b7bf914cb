"""Mixture-of-experts decoders: Mixtral (top-k of E SwiGLU experts) and Qwen2-MoE (plus a shared expert
behind a sigmoid gate; dense layers by mlp_only_layers / decoder_sparse_step).

Both are checked against transformers' batched_mm experts (`_experts_implementation=batched_mm`, the
one expert path FlopCounterMode counts on meta; see docs/validation.md): its per-row weight gather
scatters T*K*3*F*C weight-gradient elements back in the backward, a named rule in the spec."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.llm import TOKENS, dense_block, describe, qwen_window
from costspec.importer.families.llm_parts import (
    EMBED,
    IGNORED,
    MOE_KEYS,
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

BATCHED_MM = {"_experts_implementation": "batched_mm"}
MOE_IGNORED = dict(IGNORED, router_aux_loss_coef="the load-balancing loss: training objective, not the model",
                   output_router_logits="returns the router logits the model computes anyway",
                   router_jitter_noise="training-mode noise on the router input (costspec counts eval mode, as for "
                   "dropout)")


def moe_block(dec: Decoder, window: str, moe: str, qkv_bias: bool = False) -> str:
    """A pre-RMSNorm decoder block whose MLP is the `moe` op written in `moe`."""
    return f"""\
- residual:
    - rmsnorm: {{}}  # input_layernorm (rms_norm_eps does not change the cost)
      source: input_layernorm
    - {attention_line(dec, qkv_bias, qkv_bias, qkv_bias, False, window, indent=6)}
      source: self_attn
- residual:
    - rmsnorm: {{}}
      source: post_attention_layernorm
    # router C -> E (mlp.gate), softmax, top-K; experts down(act(gate(x)) * up(x)) with gate and up one
    # C -> 2*width projection (transformers' experts.gate_up_proj); charged under balanced routing
    - {moe}
      source: mlp
"""


def gather_ignore(count: str, width: str) -> str:
    return f"""\
- module: "layers.*.mlp.experts"
  extra: {{scatter_add: "{count}*B*S*K*3*{width}*C"}}
  pass: backward
  reason: >-
    checked against transformers' batched_mm experts (FlopCounterMode counts no grouped_mm and eager
    experts need a data-dependent nonzero), which gather each (token, expert) row's own copy of its
    expert's weights for one bmm; the gather's backward scatter-adds those T*K*3*{width}*C weight-gradient
    elements into the expert tables, which a grouped GEMM (what the spec charges) does not run
"""


def _moe_dims(spec: SpecText, cfg: HFConfig, experts_key: str) -> None:
    E = cfg.get_int(experts_key)
    K = cfg.get_int("num_experts_per_tok")
    if K > E:
        raise ImportProblem(f"{cfg.where('num_experts_per_tok')} = {K} is more than {experts_key} = {E}")
    spec.dim("E", E, "routed experts", experts_key)
    spec.dim("K", K, "experts per token (top-k)", "num_experts_per_tok")


# ----------------------------------------------------------------------------------------------
# Mixtral
# ----------------------------------------------------------------------------------------------
def build_mixtral(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type mixtral, transformers' MixtralModel)")
    rope(cfg)
    dec = decoder_dims(spec, cfg, cfg.get_int("sliding_window", 0, minimum=0))  # null: full causal attention
    spec.dim("F", cfg.get_int("intermediate_size"), "gated width of each expert", "intermediate_size")
    _moe_dims(spec, cfg, "num_local_experts")
    fn = gated_fn(cfg)
    params, window, at = block_layout(dec)
    spec.doc = describe("Mixtral", dec, f"; a mixture of E {fn}-gated experts, top-K, renormalised")
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(TOKENS, "token ids")
    moe = (f"moe: {{experts: E, top_k: K, hidden: F, gated: true, fn: {fn}, bias: false, renorm: true,\n"
           "              fused_gate_up: true}")
    spec.block("decoder_block", block_text(params, moe_block(dec, window, moe)))
    header_note(spec, "MixtralModel")
    spec.ignore(ROTATE_HALF_IGNORE + gather_ignore("L", "F"))
    spec.layers(decoder_layers(EMBED, "decoder_block", params, at))
    cfg.check_understood(MOE_IGNORED)
    return spec.render()


# ----------------------------------------------------------------------------------------------
# Qwen2-MoE
# ----------------------------------------------------------------------------------------------
def _sparse_layers(cfg: HFConfig, layers: int) -> list[bool]:
    """transformers' rule: layer i is MoE unless listed in mlp_only_layers, when num_experts > 0 and
    (i + 1) is a multiple of decoder_sparse_step."""
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and 0 <= i < layers for i in only):
        raise cfg.refuse("mlp_only_layers", f"expected a list of layer indices below {layers}")
    step = cfg.get_int("decoder_sparse_step", 1)
    return [i not in only and (i + 1) % step == 0 for i in range(layers)]


def _uses(kinds: list[bool], dec: Decoder) -> str:
    """Mixed dense and MoE layers, one block use per layer (a repeat's instances share one body)."""
    out = []
    for i, sparse in enumerate(kinds):
        window = ", args: {window: W}" if dec.window and dec.sliding[i] else (", args: {window: 0}" if dec.window
                                                                             else "")
        out.append(f"- {{block: {'moe_block' if sparse else 'dense_block'}, name: layer{i}, source: layers.{i}"
                   f"{window}}}")
    return "\n".join(out) + "\n"


def build_qwen2_moe(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type qwen2_moe, transformers' "
                    "Qwen2MoeModel)")
    rope(cfg)
    window = qwen_window(cfg)
    last = cfg.get_int("max_window_layers", 28, minimum=0)
    dec = decoder_dims(spec, cfg, window, lambda i: bool((i + 1) % 2) and i < last)  # Qwen2-MoE's rule
    if cfg.get_int("num_experts", 60, minimum=0) == 0:
        raise cfg.refuse("num_experts", "a Qwen2-MoE without experts: import it as qwen2")
    kinds = _sparse_layers(cfg, dec.layers)
    _moe_dims(spec, cfg, "num_experts")
    spec.dim("FE", cfg.get_int("moe_intermediate_size"), "gated width of each routed expert", "moe_intermediate_size")
    spec.dim("FS", cfg.get_int("shared_expert_intermediate_size"), "gated width of the shared expert",
             "shared_expert_intermediate_size")
    dense = not all(kinds)
    F = cfg.get_int("intermediate_size")
    if dense:
        spec.dim("F", F, "gated MLP width of the dense layers", "intermediate_size")
    fn = gated_fn(cfg)
    renorm = cfg.get_bool("norm_topk_prob", False)
    qkv_bias = cfg.get_bool("qkv_bias", True)
    params, window_arg, at = block_layout(dec)
    if dense and dec.window:
        params, window_arg = "params: {window: W}  # W on sliding-window layers, 0 on full ones", "window"
    n_moe = sum(kinds)
    spec.doc = describe("Qwen2-MoE", dec, f"; {'q/k/v biases; ' if qkv_bias else ''}{n_moe} of {dec.layers} MLPs a "
                        f"mixture of E {fn}-gated experts (top-K{', renormalised' if renorm else ''}) plus a shared "
                        "expert behind a sigmoid gate")
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(TOKENS, "token ids")
    moe = (f"moe: {{experts: E, top_k: K, hidden: FE, gated: true, fn: {fn}, bias: false, renorm: "
           f"{'true' if renorm else 'false'}, fused_gate_up: true,\n"
           "              shared_experts: 1, shared_hidden: FS, shared_gate: true}"
           "  # shared_expert, shared_expert_gate")
    spec.block("moe_block", block_text(params, moe_block(dec, window_arg, moe, qkv_bias)))
    if dense:
        spec.note(f"layers {[i for i, s in enumerate(kinds) if not s]} are dense (mlp_only_layers, "
                  "decoder_sparse_step): the layers are listed one by one, each its block")
        block = dense_block(dec, fn, window_arg, qkv_bias, qkv_bias, qkv_bias)
        spec.block("dense_block", block_text(params, block))
    header_note(spec, "Qwen2MoeModel")
    spec.ignore(ROTATE_HALF_IGNORE + gather_ignore("L" if not dense else str(n_moe), "FE"))
    if dense:
        spec.layers(EMBED + _uses(kinds, dec) + "- rmsnorm: {}\n  name: norm\n  source: norm\n")
    else:
        spec.layers(decoder_layers(EMBED, "moe_block", params, at))
    cfg.check_understood(MOE_IGNORED)
    return spec.render()


MIXTRAL = Family(("mixtral",), "MixtralForCausalLM", build_mixtral,
                 "Mixtral causal LM: a router over E SwiGLU experts, top-K renormalised, LM head",
                 hf_kwargs=BATCHED_MM, architectures=("MixtralModel",),
                 lm=CausalLM("MixtralForCausalLM", "MixtralModel", "model"),
                 refused=("num_experts_per_tok above num_local_experts", "a rope_type other than default / linear"),
                 keys=MOE_KEYS)
QWEN2_MOE = Family(("qwen2_moe",), "Qwen2MoeForCausalLM", build_qwen2_moe,
                   "Qwen2-MoE causal LM: routed experts, a sigmoid-gated shared expert, dense layers by "
                   "mlp_only_layers / decoder_sparse_step, LM head",
                   hf_kwargs=BATCHED_MM, architectures=("Qwen2MoeModel",),
                   lm=CausalLM("Qwen2MoeForCausalLM", "Qwen2MoeModel", "model"),
                   refused=("num_experts 0 (import it as qwen2)", "mlp_only_layers naming a layer beyond the model",
                            "a rope_type other than default / linear"), keys=MOE_KEYS)

FAMILY_LIST = (MIXTRAL, QWEN2_MOE)
