"""The families of the decoder template (modern_template.py), one `Template` entry each: Llama, Mistral, Qwen2,
Gemma, Mixtral, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma 2, Gemma 3, Phi-3, StarCoder2, OLMo, OLMo-2, OLMoE, Granite,
Cohere, Ministral, SmolLM3, gpt-oss, DeepSeek-V2 and DeepSeek-V3, each imported as its whole `*ForCausalLM` (LM
head included, tied or not).
A new Llama-like family is one entry here plus its test (tests/importer/test_modern.py)."""
from __future__ import annotations

from functools import partial

from costspec.importer.config import count, heads, layers, size
from costspec.importer.families import Family
from costspec.importer.families.modern_moe import BATCHED_MM, MoE
from costspec.importer.families.modern_template import ROPE_REFUSED, Template, build
from costspec.importer.head import CausalLM

GEMMA_ACT = "transformers 5 runs hidden_activation (gelu_pytorch_tanh when absent); hidden_act is not read"
GEMMA_NORM = ("Gemma's RMSNorm multiplies by (1 + weight): the same C parameters and, as costspec prices an RMSNorm "
              "per element of its input, the same cost")
TEMPLATES = (
    Template("llama", "LlamaForCausalLM", "Llama", mlp_bias_key="mlp_bias", positions_default=2048,
             blurb="RMSNorm, SwiGLU, optional attention (attention_bias) and MLP (mlp_bias) biases"),
    Template("mistral", "MistralForCausalLM", "Mistral", bias_key="", sliding="all", positions_default=131072,
             blurb="Llama's block with a sliding window (sliding_window) on every layer"),
    Template("qwen2", "Qwen2ForCausalLM", "Qwen2", bias_key="", bias_default=True, o_bias=False, sliding="qwen",
             positions_default=32768,
             blurb="q/k/v biases (none on o), sliding layers from max_window_layers on (use_sliding_window) or by "
                   "layer_types"),
    Template("gemma", "GemmaForCausalLM", "Gemma", act_default="gelu_pytorch_tanh", legacy_gelu=True,
             embed_scale="sqrt", tied_default=True, positions_default=8192,
             refuse_true=("use_bidirectional_attention",), notes=(GEMMA_NORM,),
             ignored={"hidden_activation": "transformers 5 ignores it: the MLP runs hidden_act (its legacy 'gelu' "
                                           "read as gelu_pytorch_tanh)"},
             blurb="embeddings x sqrt(C), head_dim from the config (256 in Gemma), GeGLU, RMSNorm (1 + w), tied head"),
    Template("mixtral", "MixtralForCausalLM", "Mixtral", bias_key="", sliding="all", positions_default=131072,
             moe=MoE(("num_local_experts",), "intermediate_size", "qwen", renorm_default=True, renorm_key=""),
             ignored={"router_jitter_noise": "training-mode noise on the router input (costspec counts eval mode, "
                                             "as for dropout)"},
             blurb="Mistral's attention, a router over E SwiGLU experts, top-K renormalised"),
    Template("qwen2_moe", "Qwen2MoeForCausalLM", "Qwen2-MoE", bias_key="qkv_bias", bias_default=True, o_bias=False,
             sliding="qwen2_moe", positions_default=32768,
             moe=MoE(("num_experts",), "moe_intermediate_size", "qwen", dense_layers="qwen",
                     shared_gated_key="shared_expert_intermediate_size"),
             refused=("num_experts 0 (import it as qwen2)", "mlp_only_layers naming a layer beyond the model"),
             blurb="Qwen2's attention (qkv_bias), routed SwiGLU experts plus a sigmoid-gated shared expert, dense "
                   "layers by mlp_only_layers / decoder_sparse_step"),
    Template("phi", "PhiForCausalLM", "Phi", norm="layernorm", layout="parallel", bias_key="", bias_default=True,
             mlp="plain", mlp_bias_default=True, act_default="gelu_new", partial_rotary=True, rotary_default=0.5,
             qk_norm="layernorm", qk_norm_key="qk_layernorm", qk_norm_bias=True, final_norm="final_layernorm",
             head_bias=True, positions_default=2048,
             blurb="one LayerNorm feeding attention and MLP side by side, q/k/v and dense biases, partial rotary, "
                   "optional q/k LayerNorm (qk_layernorm), a plain MLP, LM head with a bias"),
    Template("qwen3", "Qwen3ForCausalLM", "Qwen3", qk_norm="rmsnorm", sliding="qwen", positions_default=32768,
             blurb="q/k RMSNorm per head, optional q/k/v/o biases, sliding layers by layer_types"),
    Template("gemma2", "Gemma2ForCausalLM", "Gemma 2", layout="sandwich", act_keys=("hidden_activation",),
             ignored={"hidden_act": GEMMA_ACT},
             act_default="gelu_pytorch_tanh", sliding="layer_types", attn_softcap_key="attn_logit_softcapping",
             final_softcap_key="final_logit_softcapping", embed_scale="sqrt", tied_default=True,
             positions_default=8192, refuse_true=("use_bidirectional_attention",), eager=True,
             blurb="pre and post RMSNorms, alternating sliding / global layers, attention and final-logit soft-caps, "
                   "embeddings x sqrt(C), tied head"),
    Template("gemma3_text", "Gemma3ForCausalLM", "Gemma 3", layout="sandwich", qk_norm="rmsnorm",
             act_keys=("hidden_activation",), ignored={"hidden_act": GEMMA_ACT}, act_default="gelu_pytorch_tanh",
             sliding="layer_types",
             attn_softcap_key="attn_logit_softcapping", final_softcap_key="final_logit_softcapping",
             embed_scale="sqrt", tied_default=True, positions_default=131072,
             refuse_true=("use_bidirectional_attention",),
             blurb="Gemma 2's block with q/k RMSNorms, 5 sliding layers to 1 global, local and global RoPE bases"),
    Template("phi3", "Phi3ForCausalLM", "Phi-3", bias_key="", fused_qkv=True, fused_gate_up=True, sliding="all",
             partial_rotary=True,
             blurb="fused qkv and gate_up projections, partial rotary, sliding window"),
    Template("starcoder2", "Starcoder2ForCausalLM", "StarCoder2", norm="layernorm", bias_key="use_bias",
             bias_default=True, mlp="plain", mlp_bias_key="use_bias", act_default="gelu_pytorch_tanh",
             sliding="all", tied_default=True,
             blurb="LayerNorm, biases everywhere (use_bias), a plain GELU MLP, sliding window, tied head"),
    Template("olmo", "OlmoForCausalLM", "OLMo", norm="layernorm_plain", refuse_set=("clip_qkv",),
             positions_default=2048, blurb="LayerNorms without weights, SwiGLU"),
    Template("olmo2", "Olmo2ForCausalLM", "OLMo-2", layout="post", qk_norm="rmsnorm", qk_norm_over="all",
             positions_default=2048, blurb="RMSNorms after the attention and the MLP, q/k RMSNorm over the width"),
    Template("granite", "GraniteForCausalLM", "Granite", mlp_bias_key="mlp_bias", embed_scale="embedding_multiplier",
             residual_scale_key="residual_multiplier", logits="div:logits_scaling", positions_default=2048,
             blurb="Llama with embedding, residual and logit multipliers"),
    Template("cohere", "CohereForCausalLM", "Cohere", norm="layernorm_nobias", layout="parallel",
             qk_norm="layernorm", qk_norm_weight="per_head", qk_norm_key="use_qk_norm", logits="mul:logit_scale",
             tied_default=True, positions_default=8192,
             blurb="parallel attention and MLP from one bias-free LayerNorm, optional per-head q/k LayerNorm, "
                   "logits x logit_scale, tied head"),
    Template("ministral", "MinistralForCausalLM", "Ministral", bias_key="", sliding="layer_types",
             needs={"head_dim": "MinistralAttention takes getattr(config, 'head_dim', hidden_size // "
                                "num_attention_heads), and a MinistralConfig always has the attribute: null unless "
                                "set (its class default; unlike MistralConfig it does not derive it), so the fallback "
                                "never applies and the class fails on head_dim ** -0.5 (TypeError)"},
             positions_default=131072, blurb="Mistral's block with sliding / full layers by layer_types"),
    Template("smollm3", "SmolLM3ForCausalLM", "SmolLM3", mlp_bias_key="mlp_bias", sliding="qwen",
             nope_key="no_rope_layers",
             tied_default=True, positions_default=32768,
             ignored={"no_rope_layer_interval": "the pattern no_rope_layers spells out (read there)",
                      "max_window_layers": "not read by SmolLM3 (layer_types and use_sliding_window are)"},
             blurb="Llama's block with NoPE layers (no_rope_layers), optional sliding layers, tied head"),
    Template("qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3-MoE", qk_norm="rmsnorm", sliding="qwen",
             positions_default=32768, moe=MoE(("num_experts", "num_local_experts"), "moe_intermediate_size", "qwen",
                                              dense_layers="qwen"),
             refused=("mlp_only_layers naming a layer beyond the model",),
             blurb="Qwen3's attention, routed SwiGLU experts (softmax, top-k, norm_topk_prob), dense layers by "
                   "mlp_only_layers / decoder_sparse_step"),
    Template("olmoe", "OlmoeForCausalLM", "OLMoE", qk_norm="rmsnorm", qk_norm_over="all", refuse_set=("clip_qkv",),
             moe=MoE(("num_experts",), "intermediate_size", "qwen"),
             blurb="q/k RMSNorm over the width, routed SwiGLU experts (softmax, top-k, norm_topk_prob)"),
    Template("gpt_oss", "GptOssForCausalLM", "gpt-oss", bias_default=True, sliding="layer_types", sinks=True,
             positions_default=131072, moe=MoE(("num_local_experts",), "intermediate_size", "gpt_oss"),
             ignored={"hidden_act": "the experts run gpt-oss's clamped SwiGLU (swiglu_alpha, swiglu_limit)"},
             refused=("swiglu_alpha other than 1.702",),
             blurb="attention sinks, biased projections, alternating sliding / full layers, a biased router (top-k "
                   "then softmax) over clamped-SwiGLU experts"),
    Template("deepseek_v2", "DeepseekV2ForCausalLM", "DeepSeek-V2", mla="v2", positions_default=2048,
             refuse_true=("mlp_bias",),
             moe=MoE(("n_routed_experts", "num_experts"), "moe_intermediate_size", "deepseek_v2",
                     dense_layers="first_k"),
             refused=("topk_method group_limited_greedy",),
             blurb="multi-head latent attention (complex RoPE), softmax greedy routing scaled by "
                   "routed_scaling_factor, shared experts, dense layers below first_k_dense_replace"),
    Template("deepseek_v3", "DeepseekV3ForCausalLM", "DeepSeek-V3", mla="v3", moe=MoE(
        ("n_routed_experts", "num_experts"), "moe_intermediate_size", "deepseek_v3", dense_layers="first_k"),
             refused=("n_group not dividing the experts",),
             blurb="multi-head latent attention, sigmoid routing with a correction bias and group-limited top-k, "
                   "shared experts, dense layers below first_k_dense_replace"),
)


# the numeric keys the template reads, checked before anything is written (type, range, divisibility)
DECODER_KEYS = (size("vocab_size"), size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
                heads("num_attention_heads", "hidden_size", unless="head_dim", rope=True),
                heads("num_key_value_heads", "num_attention_heads"), size("head_dim", even=True),
                size("max_position_embeddings"), count("sliding_window"), count("max_window_layers"))
MOE_KEYS = (size("moe_intermediate_size"), size("shared_expert_intermediate_size"), count("num_experts"),
            count("num_local_experts"), size("num_experts_per_tok"), count("n_shared_experts"),
            count("decoder_sparse_step"), count("mlp_only_layers", items=True))
MLA_KEYS = (size("vocab_size"), size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
            size("num_attention_heads"), size("max_position_embeddings"), count("q_lora_rank"),
            size("kv_lora_rank"), size("qk_nope_head_dim"), size("qk_rope_head_dim", even=True),
            size("v_head_dim"), count("n_routed_experts"), count("n_group"), count("topk_group"),
            count("first_k_dense_replace"), count("moe_layer_freq"))


def keys(t: Template) -> tuple:
    if t.mla:
        return MLA_KEYS + MOE_KEYS
    return DECODER_KEYS + (MOE_KEYS if t.moe else ())


def family(t: Template) -> Family:
    backbone = t.hf_class.replace("ForCausalLM", "Model")
    return Family((t.model_type,), t.hf_class, partial(build, t), f"{t.title} causal LM with its LM head: {t.blurb}",
                  hf_kwargs=BATCHED_MM if t.moe else {}, architectures=(t.hf_class, backbone), keys=keys(t),
                  lm=CausalLM(t.hf_class, backbone, "model", writes="whole", tied_default=t.tied_default,
                              bias=t.head_bias),
                  refused=(ROPE_REFUSED, *(f"{k}: true" for k in t.refuse_true), *(f"{k} set" for k in t.refuse_set),
                           *(f"{k} missing" for k in t.needs), *t.refused))


FAMILY_LIST = tuple(family(t) for t in TEMPLATES)
