"""Token and position embeddings and the LM head: `embedding`, `position_embedding`, `cls_token`,
`learned_tokens` (n learned tokens: YOLOS's detection tokens, register tokens), `lm_head`, and
`take_token` (a pooled token, e.g. CLIP's class token before its projection)."""
from __future__ import annotations

import sympy

from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import (
    GEMM_RUNTIME,
    INDEX_BYTES,
    INPUT,
    Constraint,
    OpCall,
    OpDef,
    Reconcile,
    Runtime,
    Saved,
    requires,
)
from costspec.ops.registry import register_op
from costspec.ops.work import (
    ZERO,
    Gemm,
    Part,
    Traffic,
    Work,
    above_one,
    linear_backward,
    linear_forward,
    linear_outputs,
    linear_traffic,
    numel,
    pointwise,
)

ID_BYTES = 8  # token ids are int64 (torch's index dtype)

_BATCH_1_TEXT = ("batch of 1: autograd sums the gradient of a parameter broadcast over the batch (expand) only "
                 "when B > 1; at B = 1 no reduction runs, costspec counts B*(parameter size) elements")


def _ids_elements(call: OpCall, count) -> sympy.Expr:
    """`count` int64 ids, in elements of the layer's precision (traffic is in elements)."""
    return count * sympy.Rational(ID_BYTES, call.precision.bytes_per_element)


@register_op
class Embedding(OpDef):
    """Token lookup: integer ids [..., S] -> rows of a (vocab x dim) table [..., S, dim] (a gather:
    no FLOPs, only bytes). Optional BERT-style segment (token type) embedding, added."""

    name = "embedding"
    doc = ("Token embedding (nn.Embedding): integer token ids [B, S] -> [B, S, dim], a table lookup with no "
           "FLOPs; its backward scatter-adds the output gradient into the table rows. Optional segment "
           "(token type) table, looked up with the default all-zero segment ids and added (BERT). With tied: true "
           "it looks up the table of the spec's earlier untied embedding layer (an encoder-decoder's decoder "
           "reading the encoder's table: BART, T5): the table's parameters counted once, its gradient from this "
           "lookup added into the table's.")
    default_name = "embed"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The int64 token ids (the table's gradient scatters by them)."""
        return [Saved(INPUT, numel(call.in_shape), INDEX_BYTES)]
    # the gradient of a gather: output-gradient elements added into the looked-up table rows
    runtime = Runtime(aten={"aten.embedding_dense_backward": "scatter_add"})
    attrs = (
        Attr("vocab", "size", "vocabulary size (table rows)"),
        Attr("dim", "size", "embedding dim"),
        Attr("segments", "count", "segment (token type) embeddings added, BERT's type_vocab_size; 0 (default): "
             "none. Costed with the default all-zero segment ids", default=0),
        Attr("tied", "bool", "share the token table of the spec's earlier untied embedding layer (BART's decoder "
             "reads the encoder's table)", default=False),
    )

    def _has_segments(self, call: OpCall) -> bool:
        return sympy.sympify(call.attrs.segments) != 0

    def output_shape(self, call: OpCall):
        requires(self, call, (1, 2, 3), "integer token ids [B, S]")
        return call.in_shape + (call.attrs.dim,)

    def forward(self, call: OpCall):
        a = call.attrs
        n = numel(call.in_shape) * a.dim
        work = pointwise("add", n) if self._has_segments(call) else Work()
        return [Part("", work, (ZERO if a.tied else a.vocab * a.dim) + a.segments * a.dim)]

    def backward(self, call: OpCall, input_grad: bool):
        """d(table) = the output gradient scatter-added into the looked-up rows (ids need no gradient);
        the segment row's gradient sums the output gradient over all tokens. Tied: this lookup's table
        gradient is a second one, which autograd adds to the table's (one add per table element, charged here)."""
        a = call.attrs
        n = numel(call.in_shape) * a.dim
        work = pointwise("scatter_add", n)
        if self._has_segments(call):
            work = work + pointwise("bias_grad", n)
        return [Part("", work + pointwise("add", a.vocab * a.dim) if a.tied else work)]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """NB: autograd adds a shared table's gradients as they arrive, in backward order (the reverse of the
        layers'): a tied lookup's gradient is added when the next one arrives, in the backward of the
        embedding layer before it."""
        a = call.attrs
        if pass_ != Phase.BACKWARD or not a.tied:
            return []
        text = ("autograd sums the shared table's gradients (one add per table element, costspec charges it to the "
                "tied lookup) when the next gradient arrives, in the backward of the embedding layer before it")
        table = a.vocab * a.dim
        return [Reconcile("tied-weight-grad-sum", "", pointwise("add", -table), text),
                Reconcile("tied-weight-grad-sum", "", pointwise("add", table), text, measured_in="embedding")]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Forward: reads the ids and the looked-up rows (and the segment row), writes the embeddings.
        Backward: reads the ids and the output gradient, zero-fills the table gradient and adds the
        rows into it (and writes the segment row's gradient)."""
        a = call.attrs
        tokens = numel(call.in_shape)
        n = tokens * a.dim
        segment = a.dim if self._has_segments(call) else ZERO
        if pass_ == Phase.FORWARD:
            return [Traffic("", _ids_elements(call, tokens) + n + segment, n)]
        return [Traffic("", _ids_elements(call, tokens) + n, a.vocab * a.dim + n + segment)]

    def example_input(self, call: OpCall, shape, ev, device, dtype):
        import torch

        return torch.randint(0, ev(call.attrs.vocab), shape, device=device, dtype=torch.int64)

    def tied_to(self, call: OpCall):
        return "embedding" if call.attrs.tied else None

    def tie(self, call: OpCall, module, source) -> None:
        module.weight = source.weight  # the same Parameter: one table, two lookups

    def build(self, call: OpCall, ev):
        from costspec.nn.embed import TokenEmbedding

        a = call.attrs
        return TokenEmbedding(ev(a.vocab), ev(a.dim), ev(a.segments))


class _Broadcast(OpDef):
    """An op adding a learned parameter broadcast over the batch: its gradient sums over B."""

    def _param_grad(self, call: OpCall) -> sympy.Expr:
        raise NotImplementedError

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """NB: the formula counts B*(parameter size) elements for the batch sum of the parameter's
        gradient; autograd's sum_to_size runs no reduction when B = 1, so none is measured then."""
        if pass_ != Phase.BACKWARD or ev(call.in_shape[0]) != 1:
            return []
        return [Reconcile("broadcast-grad-batch-1", "", pointwise("bias_grad", -self._param_grad(call)),
                          _BATCH_1_TEXT)]


@register_op
class PositionEmbedding(OpDef):
    """Learned absolute position embedding added to tokens [B, S, C] (BERT, GPT-2)."""

    name = "position_embedding"
    doc = ("Learned absolute position embedding: a (length x C) table whose first S rows are added to the "
           "tokens [B, S, C] (BERT, GPT-2); one add per element. With trainable: false a fixed table (Whisper's "
           "sinusoidal positions, a frozen parameter): its parameters counted, no gradient computed for it.")
    default_name = "pos_embed"
    saves_nothing = True  # x + table: an add keeps nothing
    attrs = (Attr("length", "size", "table rows, the maximum sequence length (default: the input's S)",
                  default=lambda shape, a: shape[1] if len(shape) > 1 else 1),
             Attr("trainable", "bool", "whether the table gets a gradient (false: a frozen table, e.g. Whisper's "
                  "sinusoidal encoder positions; still counted in the parameters, as torch counts it)", default=True))

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        return call.in_shape

    def constraints(self, call: OpCall):
        s, length = call.in_shape[1], call.attrs.length
        if sympy.sympify(length - s).is_nonnegative:
            return []
        return [Constraint(sympy.Ge(length, s), "position table length {length} is shorter than the {s} tokens",
                           call.attrs.where("length"), {"length": length, "s": s}, "length >= the input's tokens")]

    def forward(self, call: OpCall):
        b, s, c = call.in_shape
        return [Part("", pointwise("add", b * s * c), call.attrs.length * c)]

    def backward(self, call: OpCall, input_grad: bool):
        """d(table[:S]) = the output gradient summed over the batch; dx = the output gradient (no work).

        NB: the table is added as a (1, S, C) tensor (ViT, DeiT, YOLOS hold it so): autograd sums its
        gradient over the batch, B*S*C elements, only when B > 1; at B = 1 it runs no reduction
        (the factor min(1, B - 1)). A frozen table: no work."""
        if not call.attrs.trainable:
            return [Part("", Work())]
        return [Part("", pointwise("bias_grad", numel(call.in_shape) * above_one(call.in_shape[0])))]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """NB: a model that reads the table with an nn.Embedding lookup of its position ids (BERT, GPT-2,
        CLIP: `runtime["lookup"]`, what validate --against saw run) also scatter-adds the table's S*C
        gradient rows, at every batch size."""
        if pass_ != Phase.BACKWARD or not call.attrs.trainable or not runtime.get("lookup"):
            return []
        _, s, c = call.in_shape
        return [Reconcile("position-lookup", "", pointwise("scatter_add", s * c),
                          "the real model reads the table with an nn.Embedding lookup of the position ids [1, S]: "
                          "its backward scatter-adds the S*C rows of the table's gradient at every batch size "
                          "(after summing the broadcast gradient over the batch when B > 1, as the spec's add does)")]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Forward reads the tokens and S table rows, writes the tokens; backward reads the output
        gradient and writes the table gradient (dx is the output gradient itself)."""
        b, s, c = call.in_shape
        if pass_ == Phase.FORWARD:
            return [Traffic("", b * s * c + s * c, b * s * c)]
        if not call.attrs.trainable:
            return [Traffic("", ZERO, ZERO)]
        return [Traffic("", b * s * c, call.attrs.length * c)]

    def build(self, call: OpCall, ev):
        from costspec.nn.embed import PositionEmbedding as TorchPositionEmbedding

        return TorchPositionEmbedding(ev(call.attrs.length), ev(call.in_shape[2]), bool(call.attrs.trainable))


@register_op
class ClsToken(_Broadcast):
    """Prepend a learned class token: [B, S, C] -> [B, S+1, C] (ViT, CLIP)."""

    name = "cls_token"
    doc = "Prepend a learned class token to tokens [B, S, C] -> [B, S+1, C] (torch.cat; no FLOPs)."
    default_name = "cls_token"
    saves_nothing = True  # a concatenation keeps nothing
    attrs = ()

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        b, s, c = call.in_shape
        return (b, s + 1, c)

    def _param_grad(self, call: OpCall):
        return call.in_shape[0] * call.in_shape[2]

    def forward(self, call: OpCall):
        return [Part("", Work(), call.in_shape[2])]

    def backward(self, call: OpCall, input_grad: bool):
        """d(cls) = the class token's gradient summed over the batch; dx is a slice (no work)."""
        return [Part("", pointwise("bias_grad", self._param_grad(call)))]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """torch.cat copies the tokens into the longer sequence (backward: slices the gradient)."""
        b, s, c = call.in_shape
        if pass_ == Phase.FORWARD:
            return [Traffic("", b * s * c + c, b * (s + 1) * c)]
        return [Traffic("", b * (s + 1) * c, (b * s * c if input_grad else ZERO) + c)]

    def build(self, call: OpCall, ev):
        from costspec.nn.embed import ClsToken as TorchClsToken

        return TorchClsToken(ev(call.in_shape[2]))


@register_op
class LmHead(OpDef):
    """The language-model head: [..., C] -> [..., vocab] logits, optionally tied to the embedding."""

    name = "lm_head"
    doc = ("Language-model head: a linear layer to vocabulary logits [..., C] -> [..., vocab]. With tied: true "
           "it uses the spec's `embedding` table as its weight (its parameters are not counted twice; its "
           "weight gradient is still computed and added into the table's).")
    default_name = "lm_head"

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The input, folded to rows (the weight gradient needs it; the weight is a parameter)."""
        return [Saved(INPUT, numel(call.in_shape), call.precision.bytes_per_element, folded=len(call.in_shape) > 2)]
    runtime = GEMM_RUNTIME
    attrs = (
        Attr("vocab", "size", "vocabulary size (output features)"),
        Attr("tied", "bool", "share the weight of the spec's untied embedding layer (GPT-2, BART)", default=False),
        Attr("bias", "bool", "add a learned bias", default=False),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, (2, 3), "hidden states [B, S, C]")
        return call.in_shape[:-1] + (call.attrs.vocab,)

    def _mkn(self, call: OpCall):
        return numel(call.in_shape[:-1]), call.in_shape[-1], call.attrs.vocab

    def forward(self, call: OpCall):
        m, k, n = self._mkn(call)
        bias = call.attrs.bias
        params = (ZERO if call.attrs.tied else k * n) + (n if bias else ZERO)
        return [Part("", linear_forward(m, k, n, bias), params)]

    def backward(self, call: OpCall, input_grad: bool):
        """dW and dX, as for a linear layer; when tied, this dW is the shared table's second gradient,
        which autograd adds to the embedding's (one add per table element, charged here)."""
        m, k, n = self._mkn(call)
        work = linear_backward(m, k, n, call.attrs.bias, input_grad)
        return [Part("", work + pointwise("add", k * n) if call.attrs.tied else work)]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """NB: the sum of the tied table's two gradients runs when the next one arrives, i.e. in the backward
        of the embedding layer before the head (the last one, where an encoder and a decoder share the
        table): the counters see it in that row."""
        if pass_ != Phase.BACKWARD or not call.attrs.tied:
            return []
        m, k, n = self._mkn(call)
        text = ("autograd sums the tied table's two gradients (one add per table element, costspec charges it "
                "to lm_head) when the embedding's gradient arrives, in the backward of the embedding before the head")
        return [Reconcile("tied-weight-grad-sum", "", pointwise("add", -k * n), text),
                Reconcile("tied-weight-grad-sum", "", pointwise("add", k * n), text, measured_in="embedding")]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        m, k, n = self._mkn(call)
        return [linear_traffic("", m, k, n, call.attrs.bias, pass_, input_grad)]

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        m, k, n = self._mkn(call)
        return {"": linear_outputs(m, k, n, pass_, input_grad)}

    def tied_to(self, call: OpCall):
        return "embedding" if call.attrs.tied else None

    def tie(self, call: OpCall, module, source) -> None:
        module.weight = source.weight  # the same Parameter: one table, two uses

    def build(self, call: OpCall, ev):
        import torch.nn as nn

        m, k, n = self._mkn(call)
        return nn.Linear(ev(k), ev(n), bias=call.attrs.bias)

    def gemms(self, call: OpCall) -> list[Gemm]:
        m, k, n = self._mkn(call)
        return [Gemm("", m, n, k)]

@register_op
class TakeToken(OpDef):
    """One token of a sequence: [B, S, C] -> [B, C] (CLIP's class token before ln_post and proj)."""

    name = "take_token"
    doc = "Select one token of [B, S, C] -> [B, C] (x[:, index]; no FLOPs), e.g. the class token for pooling."
    default_name = "take"
    saves_nothing = True  # x[:, index]: a view
    output_view = True

    def view(self, call: OpCall, contiguous):
        return sympy.And(contiguous, sympy.Eq(call.in_shape[0], 1))  # strided unless one sequence
    attrs = (Attr("index", "axis", "token index (negative counts from the end)", default=0),)

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        s, i = call.in_shape[1], call.attrs.index
        if sympy.sympify(s).is_number and not -s <= i < s:
            raise call.fail(f"token {i} is out of range for {s} tokens", "index", f"an index in [{-s}, {s - 1}]")
        return (call.in_shape[0], call.in_shape[2])

    def constraints(self, call: OpCall):
        s, i = call.in_shape[1], call.attrs.index
        return [Constraint(sympy.And(-s <= i, sympy.Lt(i, s)), "token {i} is out of range for {s} tokens",
                           call.attrs.where("index"), {"i": sympy.Integer(i), "s": s}, "an index within the tokens")]

    def forward(self, call: OpCall):
        return [Part("", Work())]

    def backward(self, call: OpCall, input_grad: bool):
        return [Part("", Work())]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Forward copies one token per sample; backward writes a zero gradient for the others."""
        b, s, c = call.in_shape
        if pass_ == Phase.FORWARD:
            return [Traffic("", b * c, b * c)]
        return [Traffic("", b * c, b * s * c if input_grad else ZERO)]

    def build(self, call: OpCall, ev):
        from costspec.nn.embed import TakeToken as TorchTakeToken

        return TorchTakeToken(call.attrs.index)


def batch_summed(b) -> sympy.Expr:
    """1 when autograd sums a parameter's gradient over a batch of b (expand): b > 1; 0 at b = 1, where
    sum_to_size runs no reduction. An expression when b is a free dim."""
    b = sympy.sympify(b)
    return sympy.Integer(1 if b > 1 else 0) if b.is_number else sympy.Min(1, b - 1)


@register_op
class LearnedTokens(OpDef):
    """`count` learned tokens inserted into the sequence: [B, S, C] -> [B, S + count, C]."""

    name = "learned_tokens"
    doc = ("Insert `count` learned tokens into tokens [B, S, C] -> [B, S + count, C] (torch.cat of a (1, count, C) "
           "parameter expanded over the batch; no FLOPs): at the start, after the first `after` tokens (DINOv2's "
           "register tokens follow the class token), or at the end (YOLOS's detection tokens). The count is an "
           "expression of dims, so `--set` changes it and S follows. Backward: the tokens' gradient summed over "
           "the batch (when B > 1); with `after` the input is read as two slices, whose gradients autograd adds.")
    default_name = "tokens"
    saves_nothing = True  # a concatenation keeps nothing
    attrs = (
        Attr("count", "size", "how many learned tokens (YOLOS: num_detection_tokens; registers: num_register_tokens)"),
        Attr("at", "choice", "where they go: start (prepended) or end (appended)", default="start",
             choices=("start", "end")),
        Attr("after", "count", "at: start -- how many leading input tokens stay before them (DINOv2 with "
             "registers: 1, the class token)", default=0),
    )

    def _split(self, call: OpCall) -> bool:
        """Whether the input is read as two slices (tokens inserted inside it)."""
        return sympy.sympify(call.attrs.after) != 0

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        b, s, c = call.in_shape
        if self._split(call) and call.attrs.at == "end":
            raise call.fail("after places the tokens inside the sequence, at: end after it", "after",
                            "after with at: start, or at: end without after")
        return (b, s + call.attrs.count, c)

    def constraints(self, call: OpCall):
        s, after = call.in_shape[1], call.attrs.after
        if sympy.sympify(s - after).is_nonnegative:
            return []
        return [Constraint(sympy.Le(after, s), "after {after} is more than the {s} input tokens",
                           call.attrs.where("after"), {"after": after, "s": s}, "after at most the input's tokens")]

    def forward(self, call: OpCall):
        return [Part("", Work(), call.attrs.count * call.in_shape[2])]

    def backward(self, call: OpCall, input_grad: bool):
        """d(tokens) = their gradient summed over the batch (B > 1); dx is a slice of the output gradient,
        or, with `after`, the sum of two zero-filled slices (one add per input element)."""
        b, s, c = call.in_shape
        work = pointwise("bias_grad", batch_summed(b) * b * call.attrs.count * c)
        if input_grad and self._split(call):
            work = work + pointwise("add", b * s * c)
        return [Part("", work)]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """torch.cat copies the tokens and the learned ones into the longer sequence; backward reads its
        gradient and writes the input's (with `after`: two slices written and added) and the tokens'."""
        b, s, c = call.in_shape
        n = call.attrs.count
        if pass_ == Phase.FORWARD:
            return [Traffic("", b * s * c + n * c, b * (s + n) * c)]
        dx = (b * s * c * (3 if self._split(call) else 1)) if input_grad else ZERO
        reads = b * (s + n) * c + (2 * b * s * c if input_grad and self._split(call) else ZERO)
        return [Traffic("", reads, dx + n * c)]

    def build(self, call: OpCall, ev):
        from costspec.nn.embed import LearnedTokens as TorchLearnedTokens

        a = call.attrs
        return TorchLearnedTokens(ev(a.count), ev(call.in_shape[2]), a.at == "end", ev(a.after))
