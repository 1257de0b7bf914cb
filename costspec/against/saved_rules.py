"""The named rules of `validate --against --saved-bytes` (`costspec.against.saved`): each a convention of how the
real (transformers) model runs that makes it keep other bytes for backward than the spec's module, with its
formula in the dims. Real = spec + rule per instance of the op row the rule applies to (`once`: in the first
such row only; `replaces`: the rule's bytes stand in place of the spec's bytes of the row). A rule whose form
depends on the real model's own modules reads it off `RealModel` (what the comparison saw the real model run).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import sympy

from costspec.ops.work import is_zero, numel
from costspec.tree.nodes import OpNode

FP32 = 4
INT64 = 8
INT32 = 4


@dataclass(frozen=True)
class RealModel:
    """What the comparison saw the real model run, for the rules whose form depends on its modules:
    `rope_columns`, its rotary tables' columns per rotary dim (1 where the rotary module concatenates the
    frequencies twice, Llama's `cat((freqs, freqs))`; 1/2 where it keeps them once, gpt-oss's); `one_plus_weight`,
    the op rows whose real norm scales by (1 + weight) (Gemma's RMSNorm); `batched_positions`, the
    position_embedding rows whose real lookup returned a table per batch row (it looked up B x S ids of its own);
    `sdpa`, whether the real model runs transformers' SDPA attention interface (`_attn_implementation`);
    `rope_bytes`, the bytes per element of its rotary tables (None: no rotary module seen)."""

    rope_columns: sympy.Expr = sympy.Integer(1)
    one_plus_weight: frozenset[str] = field(default_factory=frozenset)
    batched_positions: frozenset[str] = field(default_factory=frozenset)
    sdpa: bool = False
    rope_bytes: int | None = None


@dataclass(frozen=True)
class SavedRule:
    """A named difference: the real model keeps `bytes(node)` more per instance of `node` (an expression of
    the dims; `once`: in the first such layer only; where `replaces(node)`, `bytes(node)` in place of the spec's
    bytes of the row), for the reason `text`; both read the real model's `RealModel` as their second argument."""

    name: str
    applies: Callable[[OpNode, RealModel], bool]
    bytes: Callable[[OpNode, RealModel], sympy.Expr]
    text: str
    once: bool = False
    replaces: Callable[[OpNode], bool] = lambda _node: False


def _rows_cols(node: OpNode) -> tuple[sympy.Expr, sympy.Expr]:
    shape = node.call.in_shape
    return numel(shape[:-1]), shape[-1]


def _bytes(node: OpNode) -> sympy.Expr:
    return node.precision.bytes_per_element


def _rope_dims(node: OpNode) -> sympy.Expr:
    from costspec.ops.attention.geometry import geometry

    a = node.call.attrs
    if node.op.name == "mla":  # the decoupled rotary dims
        return a.qk_rope_head_dim
    return a.rope_dims if getattr(a, "rope_dims", None) else geometry(node.call).d


def _rmsnorm_written_out(node: OpNode) -> sympy.Expr:
    """An rmsnorm row's bytes as transformers keeps them; an mla layer's inner norms' difference (q_a's, when the
    query is low-rank, and kv_a's), or an attention layer's q/k RMSNorm's (qk_norm: rmsnorm, over each head or the
    whole width: h*d values a query, kv*d a key): the normalised values at the dtype instead of fp32."""
    rows, cols = _rows_cols(node)
    b = _bytes(node)
    if node.op.name == "rmsnorm":
        return rows * (FP32 * cols + FP32 + b * cols)
    a = node.call.attrs
    if node.op.name == "attention":  # q (h*d) and k (kv*d) a token: their norms' normalised values
        g = _geom(node)
        return -(g.nb * g.tq * g.h * g.d + g.nb * g.t * g.kv * g.d) * (FP32 - b)
    ranks = a.kv_lora_rank + (0 if is_zero(a.q_lora_rank) else a.q_lora_rank)
    return -rows * ranks * (FP32 - b)


def _eager_softmax(node: OpNode) -> bool:
    """An attention layer the spec runs eagerly (its own softmax: backend eager or soft-capping), without sinks
    (transformers' sink attention takes its softmax at the dtype)."""
    from costspec.ops.attention.geometry import eager

    return node.op.name == "attention" and eager(node.call) and not node.call.attrs.sinks


def _grouped_mm(node: OpNode) -> sympy.Expr:
    rows, a = _rows_cols(node)[0] * node.call.attrs.top_k, node.call.attrs
    own_weights = str(a.scoring) == "topk_softmax" and _zero(a.routed_scaling_factor)
    return (3 + bool(a.bias)) * INT64 * rows + INT32 * a.experts + (rows * _bytes(node) if own_weights else 0)


def _norm_rows(node: OpNode) -> sympy.Expr:
    """The rows a layer norm normalises: all but the last dim, or all but the channels (dim 1) of layernorm2d."""
    shape = node.call.in_shape
    return numel(shape) / shape[1] if node.op.name == "layernorm2d" else numel(shape[:-1])


def _geom(node: OpNode):
    from costspec.ops.attention.geometry import geometry

    return geometry(node.call)


def _zero(value) -> bool:
    return value is None or sympy.sympify(value) == 0


def _seq(node: OpNode) -> sympy.Expr:
    return node.call.in_shape[-2] if node.op.name == "position_embedding" else node.call.in_shape[-1]


RULES: tuple[SavedRule, ...] = (
    SavedRule("attention-sinks-max-indices", lambda n, _: n.op.name == "attention" and bool(n.call.attrs.sinks),
              lambda n, _: INT64 * _geom(n).nb * _geom(n).h * _geom(n).tq,
              "transformers' attention with sinks (gpt-oss) subtracts each row's max from the logits and sinks before "
              "its softmax with torch.max(dim=-1), whose backward keeps the int64 argmax of each of the N*h*Sq rows "
              "(the spec's softmax keeps no indices): 8*N*h*Sq bytes a layer"),
    SavedRule("layernorm-fp32-statistics", lambda n, _: n.op.name in ("layernorm", "layernorm2d") and _bytes(n) != FP32,
              lambda n, _: 2 * _norm_rows(n) * (FP32 - _bytes(n)),
              "torch's layer_norm keeps its mean and rstd in fp32 for 16-bit inputs on CUDA and meta (the spec counts "
              "them at the layer's dtype, as cpu keeps them): 2*T*(4 - b) bytes a layer, T rows (positions of a "
              "channels-first layernorm2d), b bytes per element"),
    SavedRule("batchnorm-eval-statistics-on-meta",
              lambda n, _: n.op.name == "batchnorm" and n.call.attrs.mode == "eval",
              lambda n, _: 2 * n.call.in_shape[1] * FP32,
              "on meta, batch_norm with running statistics still returns a per-channel mean and 1/std (fp32, C each) "
              "that its backward keeps; cpu's and cuDNN's inference kernels return empty ones, as the spec counts "
              "(none): 8*C bytes a layer"),
    SavedRule("rmsnorm-written-out", lambda n, _: n.op.name in ("rmsnorm", "mla") or (
        n.op.name == "attention" and str(getattr(n.call.attrs, "qk_norm", "none")) == "rmsnorm"),
              lambda n, _: _rmsnorm_written_out(n),
              "transformers' RMSNorm classes upcast to fp32 and write the norm out (pow, mean, rsqrt, mul, cast, "
              "mul by the weight): they keep x in fp32 (4*T*C), rstd (4*T) and the normalised x at the dtype "
              "(b*T*C) in place of what the spec's RMSNorm keeps (the rule replaces the spec's bytes of the layer); "
              "inside an mla layer (DeepSeek's q_a_layernorm and kv_a_layernorm, which the spec's module runs as "
              "nn.RMSNorm, keeping the normalised x in fp32) the difference is -(4 - b)*T*(r_q + r) bytes; so for an "
              "attention layer's q/k RMSNorm (Qwen3's q_norm and k_norm): -(4 - b)*(T*h*d + T*kv*d) bytes",
              replaces=lambda n: n.op.name == "rmsnorm"),
    SavedRule("rmsnorm-one-plus-weight", lambda n, real: n.op.name == "rmsnorm" and bool(n.call.attrs.affine)
              and n.name in real.one_plus_weight,
              lambda n, _: FP32 * _rows_cols(n)[1],
              "Gemma's RMSNorm scales by (1 + weight) computed in fp32 (output * (1.0 + self.weight.float())) each "
              "forward: a C-element fp32 tensor of its own that the multiply keeps, 4*C bytes a layer; it keeps x "
              "in fp32, rstd and the normalised x in fp32 as the spec's RMSNorm does (offered where the real norm's "
              "forward scales by 1 + weight)"),
    SavedRule("rope-tables-per-forward", lambda n, _: n.op.name == "mla" or (
        n.op.name == "attention" and bool(getattr(n.call.attrs, "rope", 0))),
              lambda n, real: 2 * n.call.in_shape[-2] * _rope_dims(n) * real.rope_columns * _bytes(n),
              "transformers computes the rotary cos and sin per forward (1 x S x w at the dtype, shared by every "
              "layer), kept by the first layer's rotation: 2*S*w*b bytes once (the spec's tables are buffers); w "
              "is the rotary dims d where the rotary module concatenates the frequencies twice (Llama's "
              "cat((freqs, freqs))), d/2 where it keeps them once (gpt-oss), as the real module's tables show",
              once=True),
    SavedRule("rope-tables-fp32", lambda n, real: (n.op.name == "mla" or (
        n.op.name == "attention" and bool(getattr(n.call.attrs, "rope", 0)))) and real.rope_bytes == FP32
              and _bytes(n) != FP32,
              lambda n, real: 2 * n.call.in_shape[-2] * _rope_dims(n) * real.rope_columns * (FP32 - _bytes(n)),
              "a rotary module that returns its cos and sin in fp32 (OLMo-2's: no cast to the activations' dtype) "
              "makes the tables the first layer's rotation keeps 4 bytes an element: 2*S*w*(4 - b) bytes once besides "
              "rope-tables-per-forward's 2*S*w*b (offered where the real rotary module's tables are fp32)",
              once=True),
    SavedRule("index-tensors", lambda n, _: n.op.name == "position_embedding" or (
        n.op.name == "embedding" and bool(getattr(n.call.attrs, "segments", 0))),
              lambda n, _: INT64 * _seq(n),
              "the real model looks this table up with int64 ids it makes itself (position ids, or the all-zero "
              "segment ids of a single-segment input), one sequence broadcast over the batch: 8*S bytes"),
    SavedRule("position-ids-per-batch-row", lambda n, real: n.op.name == "position_embedding"
              and n.name in real.batched_positions,
              lambda n, _: INT64 * (n.call.in_shape[0] - 1) * _seq(n),
              "the real position lookup reads B x S int64 ids of its own, not one sequence broadcast over the batch "
              "(BART's learned positions expand the ids over the batch and add their offset of 2, a new tensor; "
              "Whisper's decoder repeats them over the batch): 8*(B - 1)*S bytes besides index-tensors' 8*S "
              "(offered where the real lookup returned a table per batch row)"),
    SavedRule("causal-bias-mask", lambda n, real: n.op.name == "attention" and real.sdpa
              and bool(getattr(n.call.attrs, "causal", False))
              and str(getattr(n.call.attrs, "rel_bias", "none")) != "none",
              lambda n, _: _geom(n).tq * _geom(n).sk,
              "transformers' SDPA interface folds a position bias into a float mask for a causal layer with "
              "torch.where(causal_mask, position_bias, min) over a bool causal mask it makes per layer (1 x 1 x Sq x "
              "Sk), which the where keeps (T5's decoder self-attention): Sq*Sk bytes a layer (the spec's causal mask "
              "is no tensor; offered where the real model runs the SDPA interface)"),
    SavedRule("t5-bucket-ids",
              lambda n, _: n.op.name == "attention" and str(getattr(n.call.attrs, "rel_bias", "")) == "t5"
              and not getattr(n.call.attrs, "rel_bias_shared", False),
              lambda n, _: INT64 * n.call.in_shape[-2] ** 2,
              "transformers computes T5's relative-position buckets per forward (S x S int64 ids) and the bias "
              "table's lookup keeps them: 8*S*S bytes in the layer that makes the bias (the spec's bucket ids are "
              "a buffer)"),
    SavedRule("probe-repeated",
              lambda n, _: n.op.name == "attention" and not _zero(getattr(n.call.attrs, "queries", 0)),
              lambda n, _: n.call.in_shape[0] * n.call.attrs.queries * n.call.in_shape[-1] * _bytes(n),
              "the real head repeats its learned queries over the batch (probe.repeat(B, 1, 1)), a tensor of its own "
              "that the query projection keeps: B*Q*C*b bytes (the spec's queries are a parameter)"),
    SavedRule("rel-pos-index-ids", lambda n, _: n.op.name == "attention" and bool(getattr(n.call.attrs, "rel_pos", 0)),
              lambda n, _: INT64 * (_geom(n).qh ** 2 + _geom(n).qw ** 2),
              "transformers' SAM computes the relative coordinates its rel_pos tables are read at per forward "
              "(Hq x Hk and Wq x Wk int64 ids), kept by the gathers: 8*(Hq^2 + Wq^2) bytes a layer (the spec's are "
              "buffers)"),
    SavedRule("rel-pos-qkv-storage",
              lambda n, _: n.op.name == "attention" and bool(getattr(n.call.attrs, "rel_pos", 0)),
              lambda n, _: 2 * _geom(n).m * _geom(n).h * _geom(n).d * _bytes(n),
              "transformers' SAM reads q for the relative-position einsums as a view of the fused qkv output, so "
              "the whole qkv storage (3*M*h*d at the dtype, M rows) stays saved, and q reshaped (M*h*d) too, where "
              "the spec's module keeps two q-sized tensors: 2*M*h*d*b bytes a layer"),
    SavedRule("router-fp32", lambda n, _: n.op.name == "moe" and str(n.call.attrs.scoring) in ("softmax", "sigmoid")
              and bool(n.call.attrs.renorm) and _bytes(n) != FP32,
              lambda n, _: _rows_cols(n)[0] * (n.call.attrs.experts + 2 * n.call.attrs.top_k + 1) * (FP32 - _bytes(n)),
              "transformers' softmax routers (Mixtral) take the softmax in fp32, its sigmoid routers (DeepSeek-V3) "
              "the logits, and keep the routing in fp32: the scores (T*E), the top-k weights and their sum (T*k, T) "
              "and the renormalised weights the experts' outputs are scaled by (T*k), where the spec keeps them at "
              "the dtype: T*(E + 2k + 1)*(4 - b) bytes"),
    SavedRule("router-logits-fp32", lambda n, _: n.op.name == "moe" and str(n.call.attrs.scoring) == "sigmoid"
              and bool(n.call.attrs.score_bias) and _bytes(n) != FP32,
              lambda n, _: FP32 * _rows_cols(n)[1] * (_rows_cols(n)[0] + n.call.attrs.experts),
              "DeepSeek-V3's router (DeepseekV3TopkRouter) computes its logits as F.linear(x.float(), "
              "weight.float()): the linear keeps the fp32 copies of its input (T*C) and of the router's weight "
              "(E*C), made each forward: 4*C*(T + E) bytes a layer (the spec's router reads x at the dtype)"),
    SavedRule("eager-softmax-fp32", lambda n, _: _eager_softmax(n) and _bytes(n) != FP32,
              lambda n, _: FP32 * _geom(n).nb * _geom(n).h * _geom(n).tq * _geom(n).t,
              "transformers' eager attention takes its softmax in fp32 (softmax(scores, dtype=torch.float32)"
              ".to(q.dtype)): the softmax keeps its fp32 output besides the probabilities at the dtype the second "
              "product keeps, where the spec's eager module takes it at the dtype: 4*N*h*Sq*Sk bytes a layer "
              "(N attention problems)"),
    SavedRule("grouped-mm-routing-indices", lambda n, _: n.op.name == "moe", lambda n, _: _grouped_mm(n),
              "transformers' grouped_mm experts (the default) sort the T*k (token, expert) rows by expert: the sort "
              "permutation, its inverse and the rows' token ids (int64, T*k each) and the experts' row offsets "
              "(int32, E): 24*T*k + 4*E bytes a layer (the spec's balanced rows need no sort); experts with biases "
              "gather them at the sorted expert ids (int64, 8*T*k more); a router that keeps its k weights itself "
              "(top-k then softmax, unscaled: gpt-oss) leaves the sorted copy the outputs are scaled by to the "
              "experts (T*k*b more)"),
    SavedRule("batched-mm-gathered-weights", lambda n, _: n.op.name == "moe",
              lambda n, _: _rows_cols(n)[0] * n.call.attrs.top_k * (3 if n.call.attrs.gated else 2)
              * n.call.attrs.hidden * _rows_cols(n)[1] * _bytes(n),
              "transformers' batched_mm experts (`_experts_implementation=batched_mm`, what a FLOP check runs) gather "
              "each (token, expert) row's own copy of its expert's weights for one bmm, which the bmm keeps: "
              "T*k*(3 gated, else 2)*F*C*b bytes a layer (in place of grouped_mm's sort, which it does not run; the "
              "biases it gathers are added, not kept)"),
)


