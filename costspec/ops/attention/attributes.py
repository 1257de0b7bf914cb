"""The attributes of `attention`: heads and dims, projection biases, the kernel backend and causal
counting, windows and grids, positions (rope, rel_pos, rel_bias), learned queries, cross-attention,
q/k normalisation, soft-capping and sinks, ALiBi."""
from __future__ import annotations

import sympy

from costspec.ops.attrs import Attr

ATTRS = (
    Attr("heads", "size", "number of attention (query) heads h"),
    Attr("dim", "size", "model dim C (default: the input's last dim; checked against it)",
         default=lambda shape, a: shape[-1]),
    Attr("head_dim", "size", "per-head dim d (default C / heads)",
         default=lambda shape, a: a["dim"] / a["heads"]),
    Attr("kv_heads", "size", "key/value heads (grouped-query attention when fewer than heads; it must "
         "divide heads; 1 = multi-query, heads = multi-head, so one dim can sweep MQA -> MHA). Default: heads",
         default=lambda shape, a: a["heads"]),
    Attr("qkv_bias", "bool", "bias on the q/k/v projections", default=True),
    Attr("proj_bias", "bool", "bias on the output projection", default=True),
    Attr("q_bias", "bool", "bias on the q projection (default: qkv_bias)", default=lambda shape, a: a["qkv_bias"]),
    Attr("k_bias", "bool", "bias on the k projection (default: qkv_bias; Whisper has none)",
         default=lambda shape, a: a["qkv_bias"]),
    Attr("v_bias", "bool", "bias on the v projection (default: qkv_bias)", default=lambda shape, a: a["qkv_bias"]),
    Attr("o_bias", "bool", "bias on the output projection (default: proj_bias)",
         default=lambda shape, a: a["proj_bias"]),
    Attr("fused_qkv", "bool", "one (C -> (h + 2*kv_heads)*d) projection instead of three", default=True),
    Attr("backend", "choice", "attention kernel family the cost follows: flash (GPU default: the backward "
         "recomputes QK^T), math (PyTorch's SDPA decomposition, as on meta tensors) or eager (explicit matmul, "
         "softmax, matmul, as transformers' eager_attention_forward: every score scaled, a float mask added)",
         default="flash", choices=("flash", "math", "eager")),
    Attr("window", "count", "window side w: attention within w x w windows of the token grid, the grid "
         "zero-padded at the bottom / right to a multiple of w as SAM does (the projections and SDPA are "
         "charged on the padded grid, as executed). 0 (default): global attention", default=0),
    Attr("grid", "pair", "token grid [H, W] of the S = H*W tokens, row-major (windows and relative "
         "positions need it; rel_bias: beit reads it as the patch grid after the class token, S = H*W + 1). "
         "Default: a square grid, sqrt(S) x sqrt(S)",
         default=lambda shape, a: sympy.sqrt(shape[1]) if len(shape) > 1 else sympy.Integer(1)),
    Attr("rel_pos", "bool", "SAM's decomposed relative position bias: learned tables rel_pos_h "
         "(2*Hq-1, d) and rel_pos_w (2*Wq-1, d) over the grid (or window) Hq x Wq, two einsums with q and "
         "a broadcast add give a bias added to every score", default=False),
    Attr("rope", "bool", "rotary position embedding on q and k (x*cos + rotate_half(x)*sin: 2 mul + 1 add "
         "per element), positions 0..S-1 of the attention sequence", default=False),
    Attr("rope_dims", "size", "partial rotary: rotate the first n dims of each head only (GPT-NeoX, Phi: "
         "head_dim/4 or a fraction of it), the rest pass through. Default: all head_dim dims",
         default=lambda shape, a: a["head_dim"]),
    Attr("causal", "bool", "causal mask: query i attends to keys 0..i", default=False),
    Attr("causal_flops", "choice", "how causal attention's QK^T and AV are counted: executed (default; the "
         "full S x S scores, as FlopCounterMode and PyTorch's math kernel count them) or useful (the "
         "S*(S+1)/2 unmasked pairs only; validate names the difference to FlopCounterMode)",
         default="executed", choices=("executed", "useful")),
    Attr("sliding_window", "count", "1-D causal sliding window w over the sequence (Mistral): query i attends "
         "to keys i-w+1..i; needs causal: true. Counted as causal is (causal_flops: executed, the default: the "
         "full S x S scores a masked kernel computes; useful: the min(S,w)*(min(S,w)+1)/2 + (S-min(S,w))*w "
         "unmasked pairs). 0 (default): none. Not `window`, which is SAM's 2-D w x w window on a token grid",
         default=0),
    Attr("queries", "count", "learned queries n: n learned query tokens (parameters) attend to the input's "
         "tokens, output [B, n, C] (SigLIP's attention-pooling head); q and the output projection run on "
         "B*n rows, k and v on B*S (fused_qkv fuses k and v). 0 (default): self-attention", default=0),
    Attr("rel_bias", "choice", "a learned relative-position bias added to every score: t5 (a table of "
         "`buckets` x heads over T5's log-bucketed distances; per layer, or made in one layer and read by later "
         "ones: rel_bias_readers, rel_bias_shared) or swin (a (2w-1)^2 x heads table over the "
         "relative offsets in each window, Swin) or beit (a (2H-1)(2W-1)+3 x heads table over the offsets of "
         "the H x W patch grid of `grid` plus three class-token entries (class to patch, patch to class, class "
         "to class): S = H*W + 1 tokens, the class token first, BEiT). The bucket / offset of each (query, key) "
         "pair depends on positions only and is computed once (a buffer); gathering the table is free, adding "
         "it is one add per score. t5 with causal: true is T5's decoder: one-directional buckets (max_distance "
         "above buckets/2), the bias kept at and below the diagonal by a where in every layer (heads*S*S selects, "
         "its backward as many) and passed to the SDPA as its float mask (no other mask)", default="none",
         choices=("none", "t5", "swin", "beit")),
    Attr("rel_bias_shared", "bool", "rel_bias: t5 or beit -- this layer reads the bias of the nearest earlier layer "
         "with a table of its kind (T5 computes it in its first layer and passes it to every later one; BEiT's "
         "shared_position_bias, once for all layers): it adds it to its "
         "scores but has no table (no parameters, no gather); its gradient is summed at that layer",
         default=False),
    Attr("rel_bias_readers", "count", "rel_bias: t5 or beit with a table -- how many later layers read this layer's "
         "bias "
         "(rel_bias_shared: true; T5: L-1). Their gradients and this layer's are summed here, where the bias is "
         "made: one add per (head, query, key) element and reader. 0 (default): none", default=0),
    Attr("shift", "count", "Swin's shifted windows: the grid is rolled by -shift on both axes before the "
         "window partition (and back after), and an additive mask keeps each window's tokens to their own "
         "region (one add per score); needs window (dividing the grid) and 0 < shift < window. 0: none",
         default=0),
    Attr("buckets", "size", "rel_bias: t5 -- number of buckets (T5: 32)", default=32),
    Attr("max_distance", "size", "rel_bias: t5 -- distance of the last bucket (T5: 128)", default=128),
    Attr("scale", "choice", "score scale: default 1/sqrt(head_dim), or none (T5: no scaling). The kernels "
         "still multiply by the scale (1), so the cost is the same", default="default",
         choices=("default", "none")),
    Attr("local_window", "count", "bidirectional local attention (ModernBERT's local_attention): query i attends "
         "to keys j with |i - j| <= w // 2 (w // 2 on either side); not causal. Counted as causal is "
         "(causal_flops: executed, the default: the full S x S scores a masked kernel computes; useful: the band's "
         "pairs only). 0 (default): none", default=0),
    Attr("softcap", "number", "attention-logit soft-capping (Gemma 2: 50): every score becomes cap * tanh(score / "
         "cap) before the mask and softmax (2 scale + 1 tanh per score, backward tanh_backward + 2 scale). PyTorch's "
         "SDPA has no soft-cap: the module runs eager attention. 0 (default): none", default=0),
    Attr("sinks", "bool", "attention sinks (gpt-oss): a learned logit per head (heads parameters) joins every "
         "softmax row and is dropped after it, so each row's softmax runs over S + 1 logits; its gradient sums the "
         "sink column over batch and queries. PyTorch's SDPA takes no sink: the module runs eager attention",
         default=False),
    Attr("qk_norm", "choice", "normalise q and k after their projections, before rope: rmsnorm (Qwen3, OLMo-2, "
         "Gemma 3) or layernorm (Cohere, no bias unless qk_norm_bias); none (default)", default="none",
         choices=("none", "rmsnorm", "layernorm")),
    Attr("qk_norm_over", "choice", "what the q/k norm normalises: head (each head's d dims: Qwen3, Gemma 3, Cohere) "
         "or all (the whole projected width, h*d for q and kv_heads*d for k: OLMo-2)", default="head",
         choices=("head", "all")),
    Attr("qk_norm_weight", "choice", "qk_norm_over: head -- one d-wide weight shared by every head (shared: Qwen3, "
         "Gemma 3) or one per head (per_head, a (heads, d) weight: Cohere)", default="shared",
         choices=("shared", "per_head")),
    Attr("qk_norm_bias", "bool", "qk_norm: layernorm -- a learned bias beside the weight", default=False),
    Attr("alibi", "bool", "ALiBi (BLOOM, Falcon-RW): a fixed per-head linear bias, slope_h x key position, added to "
         "every score (one add per score, forward only: the bias is a constant buffer, no parameters, no gradient). "
         "With causal: true the causal mask is folded into the same float bias (built once), so math and eager add "
         "one tensor per score where flash masks in registers (one select) and adds the bias. Self-attention over "
         "one sequence, without other positions (rope, rel_pos, rel_bias), windows, queries, kv or cache",
         default=False),
    Attr("zero_bias", "bool", "an all-zero float bias of [1, heads, Sq, Sk] passed to the SDPA and added to every "
         "score (one add per score, forward only: a constant, no parameters, no gradient): what transformers' T5 "
         "runs in a layer without a bias table of its own, its cross-attention (the zero position bias becomes the "
         "float mask). Without other positions (rel_pos, rel_bias, alibi), causal masking or a cache",
         default=False),
    Attr("cache", "count", "tokens already in the layer's key/value cache (serving: `--phase decode --context N` "
         "sets it to N with one new token; `--phase prefill --context N` to N with the input's S new tokens): the "
         "projections, rope and q/k norms run on the S new tokens only, the SDPA's S queries attend to cache + S keys "
         "(a sliding window keeps the last sliding_window - 1 cached tokens), the new k and v are appended. Causal "
         "self-attention only. 0 (default): no cache", default=0),
    Attr("kv_cache", "count", "cross-attention served from a cache (an encoder-decoder's decode step, `--phase "
         "decode`): the keys and values are kv_cache cached tokens (the encoder's states, projected when the prompt "
         "was prefilled), so no k/v projections run and the layer has no k/v weights of its own here; q and the "
         "output projection run on the new tokens, whose queries attend to all kv_cache keys. Not causal, without "
         "kv, cache, positions, windows, learned queries or q/k norms. 0 (default): none", default=0),
    Attr("kv", "value", "cross-attention: keys and values projected from this value ([B, T, Ckv], a `save:`d "
         "value or an `inputs:` name, e.g. an encoder's output); q and the output projection run on the "
         "running value's B*S rows, k and v on B*T (fused_qkv fuses k and v)", default=None),
)
