"""`attention`: multi-head self-attention with SDPA (Vaswani et al. 2017), and the variants the
zoo needs: windowed attention with SAM's padding and decomposed relative positions (Kirillov et
al. 2023, Li et al. 2022 "ViTDet"), grouped-query attention (Ainslie et al. 2023), causal masking,
rotary position embedding (Su et al. 2021; partial, as GPT-NeoX), a causal sliding window (Mistral,
Jiang et al. 2023), learned queries (attention pooling, SigLIP), relative-position bias tables (T5,
Raffel et al. 2020; Swin, Liu et al. 2021), cross-attention with rotary positions and a causal mask,
q/k normalisation (Qwen3, OLMo-2, Cohere), attention-logit soft-capping (Gemma 2, Gemma Team 2024),
attention sinks (gpt-oss; Xiao et al. 2023), a bidirectional local window (ModernBERT, Warner et al.
2024), and eager attention (transformers' eager_attention_forward) beside flash and PyTorch's SDPA.

Modules: `sdpa` (one attention call and its work), `geometry` (a layer's rows, problems, projections),
`positions` (rope, rel_pos, rel_bias), `qk_norm` (the q/k norms), `attributes`, `rules` (which option
combinations are valid), `reconcile` (what the runtime counters see), `op` (the op definition,
registered on import).
"""
from costspec.ops.attention.op import Attention
from costspec.ops.attention.sdpa import Sdpa, sdpa_backward, sdpa_forward

__all__ = ["Attention", "Sdpa", "sdpa_backward", "sdpa_forward"]
