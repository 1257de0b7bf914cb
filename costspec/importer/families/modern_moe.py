"""The mixture-of-experts and multi-head-latent-attention switches of the decoder template (modern.py):
which layers are MoE, the `moe` op of each router kind (Qwen3-MoE, OLMoE, gpt-oss, DeepSeek-V2 / V3), the
`mla` op, and the named rules their transformers modules need.

The MoE families are checked against transformers' batched_mm experts (`_experts_implementation=batched_mm`,
the one expert path FlopCounterMode counts on meta; see docs/validation.md)."""
from __future__ import annotations

from dataclasses import dataclass

from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.emit import SpecText

BATCHED_MM = {"_experts_implementation": "batched_mm"}


@dataclass(frozen=True)
class MoE:
    """How one family routes: the config keys and the `moe` attributes of its router kind."""

    experts_keys: tuple[str, ...]  # the first present names the routed experts
    width_key: str  # each expert's width
    router: str  # qwen (softmax, top-k, norm_topk_prob; Mixtral's too) | gpt_oss | deepseek_v2 | deepseek_v3
    renorm_default: bool = False
    renorm_key: str = "norm_topk_prob"  # the qwen router's renormalisation switch ("": always renorm_default)
    shared_gated_key: str = ""  # the width of one shared expert behind a sigmoid gate (Qwen2-MoE's)
    dense_layers: str = "none"  # none | qwen (mlp_only_layers, decoder_sparse_step) | first_k (first_k_dense_replace)


def layer_kinds(cfg: HFConfig, moe: MoE, layers: int) -> list[bool]:
    """Per layer, a MoE MLP (True) or a dense one, as transformers builds them."""
    if moe.dense_layers == "qwen":
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) and 0 <= i < layers for i in only):
            raise cfg.refuse("mlp_only_layers", f"expected a list of layer indices below {layers}")
        step = cfg.get_int("decoder_sparse_step", 1)
        return [i not in only and (i + 1) % step == 0 for i in range(layers)]
    if moe.dense_layers == "first_k":
        first = cfg.get_int("first_k_dense_replace", 0, minimum=0)
        return [i >= first for i in range(layers)]
    return [True] * layers


def moe_op(spec: SpecText, cfg: HFConfig, moe: MoE, fn: str, routed: bool = True) -> tuple[str, str]:
    """The `moe` op (one line) and a phrase for the doc; writes E, K, FE (and SH) dims. `routed`: some layer is
    MoE (without one, a null num_experts_per_tok is never read by transformers and is accepted)."""
    key = next((k for k in moe.experts_keys if cfg.get(k) is not None), moe.experts_keys[0])
    for other in moe.experts_keys:
        cfg.get(other)
    E = cfg.get_int(key)
    if cfg.get("num_experts_per_tok") is None:
        if routed:
            hint = (" (DeepseekV2Config's default; the DeepSeek-V2 checkpoints set 6)"
                    if moe.router == "deepseek_v2" else "")
            raise ImportProblem(f"{cfg.where('num_experts_per_tok')}: null{hint}: transformers' router runs "
                                "torch.topk(scores, k=num_experts_per_tok), which fails on None (TypeError) in every "
                                "MoE layer, so the model cannot run; set the experts per token")
        K = 1  # no MoE layer reads it
    else:
        K = cfg.get_int("num_experts_per_tok")
    if K > E:
        raise ImportProblem(f"{cfg.where('num_experts_per_tok')} = {K} is more than {key} = {E}")
    spec.dim("E", E, "routed experts", key)
    spec.dim("K", K, "experts per token (top-k)", "num_experts_per_tok")
    spec.dim("FE", cfg.get_int(moe.width_key), "width of each routed expert", moe.width_key)
    attrs = ["experts: E", "top_k: K", "hidden: FE", "fused_gate_up: true"]
    if moe.router == "gpt_oss":
        limit = cfg.get("swiglu_limit", 7.0)
        alpha = cfg.get("swiglu_alpha", 1.702)
        if alpha != 1.702:
            raise cfg.refuse("swiglu_alpha", "the clamped SwiGLU's sigmoid slope must be 1.702 (quick_gelu's)")
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
            raise cfg.refuse("swiglu_limit", "expected a positive number")
        attrs += ["scoring: topk_softmax", "renorm: false", "router_bias: true", "bias: true", "fn: quick_gelu",
                  "interleaved_gate_up: true", f"swiglu_limit: {float(limit)!r}"]
        return "moe: {" + ", ".join(attrs) + "}", ("a router with bias over E experts, top-K then softmax, biased "
                                                  "clamped-SwiGLU experts")
    attrs.append(f"fn: {fn}")
    if moe.router == "qwen":
        renorm = cfg.get_bool(moe.renorm_key, moe.renorm_default) if moe.renorm_key else moe.renorm_default
        attrs.append(f"renorm: {'true' if renorm else 'false'}")
        gated = ""
        if moe.shared_gated_key:
            spec.dim("FS", cfg.get_int(moe.shared_gated_key), "width of the shared expert", moe.shared_gated_key)
            attrs += ["shared_experts: 1", "shared_hidden: FS", "shared_gate: true"]
            gated = ", plus a shared expert behind a sigmoid gate"
        return "moe: {" + ", ".join(attrs) + "}", (f"a mixture of E {fn}-gated experts, top-K"
                                                  f"{', renormalised' if renorm else ''}{gated}")
    scoring = "softmax" if moe.router == "deepseek_v2" else "sigmoid"
    cfg.choice("scoring_func", scoring, (scoring,), f"{moe.router}'s router as transformers runs it")
    if cfg.get_int("moe_layer_freq", 1) != 1:
        raise cfg.refuse("moe_layer_freq", "transformers builds every layer from first_k_dense_replace on as MoE")
    shared = cfg.get_int("n_shared_experts", 0, minimum=0)
    factor = cfg.get("routed_scaling_factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise cfg.refuse("routed_scaling_factor", "expected a positive number")
    if moe.router == "deepseek_v2":
        method = cfg.choice("topk_method", "greedy", ("greedy",), "DeepSeek-V2's group_limited_greedy keeps groups "
                            "by their best score, which the moe op's group-limited choice (DeepSeek-V3's: the sum "
                            "of each group's two best) does not count")
        cfg.get("norm_topk_prob")  # DeepSeek-V2's router never renormalises (transformers ignores the key)
        cfg.get("n_group")
        cfg.get("topk_group")
        attrs += ["scoring: softmax", "renorm: false", f"routed_scaling_factor: {float(factor)!r}"]
        what = f"softmax {method} routing"
    else:
        cfg.choice("topk_method", "noaux_tc", ("noaux_tc",), "transformers' DeepSeek-V3 router")
        groups = cfg.get_int("n_group", 1)
        kept = cfg.get_int("topk_group", 1)
        if E % groups or kept > groups:
            raise cfg.refuse("n_group", f"expected a divisor of the {E} experts, at least topk_group = {kept}")
        renorm = cfg.get_bool("norm_topk_prob", True)
        attrs += ["scoring: sigmoid", "score_bias: true", f"n_group: {groups}", f"topk_group: {kept}",
                  f"renorm: {'true' if renorm else 'false'}"]
        if renorm:
            attrs.append("renorm_eps: true")
        attrs.append(f"routed_scaling_factor: {float(factor)!r}")
        what = "sigmoid scores with a correction bias, group-limited top-K"
    if shared:
        spec.dim("SH", shared, "shared experts (one MLP of SH x FE)", "n_shared_experts")
        attrs.append("shared_experts: SH")
    return "moe: {" + ", ".join(attrs) + "}", f"{what}, E {fn}-gated experts{' and SH shared' if shared else ''}"


def gather_rule(moe_layers: str, bias: bool) -> str:
    rule = f"""\
- module: "model.layers.*.mlp.experts"
  extra: {{scatter_add: "{moe_layers}*B*S*K*3*FE*C"}}
  pass: backward
  reason: >-
    checked against transformers' batched_mm experts (FlopCounterMode counts no grouped_mm and eager
    experts need a data-dependent nonzero), which gather each (token, expert) row's own copy of its
    expert's weights for one bmm; the gather's backward scatter-adds those T*K*3*FE*C weight-gradient
    elements into the expert tables, which a grouped GEMM (what the spec charges) does not run
"""
    if bias:
        rule += f"""\
- module: "model.layers.*.mlp.experts"
  extra: {{add: "{moe_layers}*B*S*K*(2*FE + C)", bias_add: "-{moe_layers}*B*S*K*(2*FE + C)"}}
  pass: forward
  reason: >-
    batched_mm adds each row's gathered expert bias with add_ after its bmm (the add kind); the spec's
    grouped GEMM adds it in its epilogue (bias_add): T*K*(2FE + C) elements either way
"""
    return rule


# ----------------------------------------------------------------------------------------------
# multi-head latent attention
# ----------------------------------------------------------------------------------------------
MLA_IGNORED = {
    "num_key_value_heads": "multi-head latent attention has one shared latent, not key/value heads",
    "head_dim": "transformers' alias of qk_rope_head_dim (read there)",
    "qk_head_dim": "qk_nope_head_dim + qk_rope_head_dim (read there)",
    "num_nextn_predict_layers": "the multi-token-prediction layers transformers does not build",
    "ep_size": "the expert-parallel degree of the original code: the same experts, placed on devices",
    "aux_loss_alpha": "the load-balancing loss: training objective, not the model",
    "seq_aux": "the load-balancing loss: training objective, not the model",
}


def mla_op(spec: SpecText, cfg: HFConfig) -> str:
    """The `mla` op; writes its dims."""
    rq = cfg.get_int("q_lora_rank", 0, minimum=0)
    if rq:
        spec.dim("RQ", rq, "rank of the low-rank query", "q_lora_rank")
    spec.dim("R", cfg.get_int("kv_lora_rank"), "rank of the key/value latent", "kv_lora_rank")
    spec.dim("DN", cfg.get_int("qk_nope_head_dim"), "per-head q/k dims without RoPE", "qk_nope_head_dim")
    spec.dim("DR", cfg.get_int("qk_rope_head_dim"), "per-head q and shared k dims with RoPE", "qk_rope_head_dim")
    spec.dim("DV", cfg.get_int("v_head_dim"), "per-head value dims", "v_head_dim")
    bias = cfg.get_bool("attention_bias", False)
    return ("mla: {heads: heads, " + ("q_lora_rank: RQ, " if rq else "") + "kv_lora_rank: R, qk_nope_head_dim: DN, "
            "qk_rope_head_dim: DR, v_head_dim: DV, causal: true" + (", bias: true" if bias else "") + "}")


def deepseek_v3_rope_rule(interleaved: bool) -> str:
    if not interleaved:
        return """\
- module: "model.layers.*.self_attn"
  extra: {scale: "L*B*S*(heads + 1)*DR/2"}
  reason: >-
    transformers' rotate_half builds [-x2, x1] with a neg (the `scale` kind) of half of the rope dims of q
    and the shared key, B*S*(h+1)*d_r/2 elements per layer; the spec's RoPE folds the sign into the sin table
- module: "model.layers.*.self_attn"
  extra: {add: "L*B*S*(heads + 1)*DR"}
  pass: backward
  reason: >-
    rotate_half's backward adds the gradients of the two halves it slices back into one tensor, one add per
    rotated element of q and the shared key
"""
    return """\
- module: "model.layers.*.self_attn"
  extra: {add: "L*B*S*(heads + 1)*DR", scale: "L*B*S*(heads + 1)*DR/2"}
  pass: backward
  reason: >-
    DeepSeek-V3's interleaved RoPE (rope_interleave) rotates the even and odd dims x1 = x[..., 0::2],
    x2 = x[..., 1::2] as [x1*cos - x2*sin, x2*cos + x1*sin]; in its backward each of x1 and x2 has its two
    gradients summed and the two strided slices' gradients are added back into one tensor (2n adds for the
    n = B*S*(h+1)*d_r rotated elements of q and the shared key, where the spec's RoPE runs n), and the
    subtraction's gradient is negated (n/2 scale)
"""


DEEPSEEK_V2_ROPE_RULE = """\
- module: "model.layers.*.self_attn"
  extra: {mul: "-L*B*S*(heads + 1)*DR*3/2", add: "-L*B*S*(heads + 1)*DR",
          "unknown:aten.view_as_complex": "L*B*S*(heads + 1)*DR/2", "unknown:aten.view_as_real": "L*B*S*(heads + 1)*DR"}
  reason: >-
    DeepSeek-V2's RoPE multiplies complex numbers (view_as_complex of q's and the shared key's rope dims, times
    freqs_cis, view_as_real): the counter sees one mul per complex number, n/2 for the n = B*S*(h+1)*d_r rotated
    elements, each 4 real multiplies and 2 adds (6 FLOPs, as the spec's 2 mul + 1 add per real element), and
    the two views as ops it has no class for (n/2 complex and n real elements), forward and backward
- module: "model.layers.*.self_attn"
  extra: {"unknown:aten._conj": "L*2*S*DR/2"}
  pass: backward
  reason: >-
    the complex product's backward conjugates freqs_cis for q and for the key (2*S*d_r/2 complex elements per
    layer: no arithmetic, an op the counter has no class for)
"""
