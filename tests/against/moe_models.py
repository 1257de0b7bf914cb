"""transformers' mixture-of-experts layers alone, as `validate --against` targets (package.module:callable):
each builder stacks L of one transformers MoE module (DeepseekV3MoE, Qwen3MoeSparseMoeBlock,
OlmoeSparseMoeBlock, GptOssMLP) built from a small config, the layers of the specs in
tests/against/test_moe_against.py.

The experts run transformers' batched_mm path (`_experts_implementation`), the one of its three that
FlopCounterMode counts on meta (tests/zoo/test_llm.py says why).
"""
from __future__ import annotations

import torch
from torch import nn


class Stack(nn.Module):
    """L MoE layers one after the other (`layers.{i}.mlp`); a layer returning (hidden, scores) gives hidden."""

    def __init__(self, make, n: int):
        super().__init__()
        self.layers = nn.ModuleList(_Layer(make()) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class _Layer(nn.Module):
    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.mlp = mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.mlp(x)
        return out[0] if isinstance(out, tuple) else out


def _batched(config):
    config._experts_implementation = "batched_mm"
    return config


def deepseek_v3(L: int, C: int, F: int, E: int, K: int, G: int, TG: int, SH: int):
    """DeepseekV3MoE: sigmoid scores, e_score_correction_bias, group-limited top-k (n_group G, topk_group TG),
    norm_topk_prob (sum + 1e-20), routed_scaling_factor 2.5, SH shared experts of width F."""
    import transformers
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    config = _batched(transformers.DeepseekV3Config(
        hidden_size=C, moe_intermediate_size=F, n_routed_experts=E, num_experts_per_tok=K, n_group=G, topk_group=TG,
        n_shared_experts=SH, routed_scaling_factor=2.5, norm_topk_prob=True, hidden_act="silu"))
    return Stack(lambda: DeepseekV3MoE(config), L)


def qwen3_moe(L: int, C: int, F: int, E: int, K: int):
    """Qwen3MoeSparseMoeBlock: softmax, top-k, the k weights renormalised (norm_topk_prob, as Qwen3-30B-A3B)."""
    import transformers
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    config = _batched(transformers.Qwen3MoeConfig(hidden_size=C, moe_intermediate_size=F, num_experts=E,
                                                  num_experts_per_tok=K, norm_topk_prob=True))
    return Stack(lambda: Qwen3MoeSparseMoeBlock(config), L)


def olmoe(L: int, C: int, F: int, E: int, K: int):
    """OlmoeSparseMoeBlock: softmax, top-k, no renormalisation (norm_topk_prob false, OLMoE's config)."""
    import transformers
    from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock

    config = _batched(transformers.OlmoeConfig(hidden_size=C, intermediate_size=F, num_experts=E,
                                               num_experts_per_tok=K, norm_topk_prob=False))
    return Stack(lambda: OlmoeSparseMoeBlock(config), L)


def gpt_oss(L: int, C: int, F: int, E: int, K: int):
    """GptOssMLP: a router with bias, top-k of the logits then softmax over the k; experts with biases,
    gate and up interleaved in gate_up_proj, clamped SwiGLU (limit 7.0, alpha 1.702)."""
    import transformers
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    config = _batched(transformers.GptOssConfig(hidden_size=C, intermediate_size=F, num_local_experts=E,
                                                num_experts_per_tok=K))
    return Stack(lambda: GptOssMLP(config), L)
