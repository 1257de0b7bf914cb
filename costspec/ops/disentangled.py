"""DeBERTa's disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled
Attention", Sec. 3.1; DeBERTa-v2/v3's log-bucketed relative positions and shared keys):
`disentangled_attention`, and `rel_embeddings`, the relative-position table the layers share.

Each score adds to the content-to-content term q_i k_j^T a content-to-position term q_i (P_k)^T at the
bucket of i - j (c2p) and a position-to-content term k_j (P_q)^T at the bucket of j - i (p2c), where
P_k = P W_k and P_q = P W_q project the 2K rows of the relative-position table P (K: the attention span,
position_buckets). With share_att_key the table is projected by the layer's own key and query projections
(DeBERTa-v3), else by pos_key_proj / pos_query_proj. The scale is 1/sqrt(d * (1 + terms)).

As transformers' DisentangledSelfAttention runs it: k is divided by the scale (b*h*S*d), QK^T, then per term
a bmm against the projected table (2*b*h*S*2K*d), a gather of each score's bucket (no arithmetic), a
division by the scale (b*h*S*S) and an add into the scores; softmax; AV. No output projection: DeBERTa's
SelfOutput.dense is a `linear` after it. The bucket of each (i, j) depends on positions only (a buffer).
"""
from __future__ import annotations

from typing import NamedTuple

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import (
    INPUT,
    SHARED,
    Constraint,
    OpCall,
    OpDef,
    Runtime,
    Saved,
    requires,
    same_size_constraint,
)
from costspec.ops.registry import register_op
from costspec.ops.work import (
    ZERO,
    Expr,
    Gemm,
    Part,
    Traffic,
    Work,
    above_one,
    linear_backward,
    linear_forward,
    linear_outputs,
    linear_traffic,
    pointwise,
)

TABLE = SHARED + "rel_embeddings"  # the normalised relative-position table, made once, kept by every reader


class Geom(NamedTuple):
    b: Expr
    s: Expr
    c: Expr
    h: Expr
    d: Expr
    k2: Expr  # rows of the relative-position table the layer reads: 2 * span
    terms: int  # relative terms: c2p and p2c

    @property
    def m(self) -> Expr:
        return self.b * self.s

    @property
    def scores(self) -> Expr:
        return self.b * self.h * self.s * self.s

    @property
    def nq(self) -> Expr:  # elements of q (and of k, v)
        return self.b * self.h * self.s * self.d

    @classmethod
    def of(cls, call: OpCall) -> Geom:
        a = call.attrs
        b, s, c = call.in_shape
        return cls(b, s, c, a.heads, a.head_dim, 2 * a.span, int(bool(a.c2p)) + int(bool(a.p2c)))


class Projection(NamedTuple):
    """A linear part: its name and the (rows, in, out) of each call (a shared projection runs twice)."""

    name: str
    calls: tuple[tuple[Expr, Expr, Expr], ...]


def projections(call: OpCall) -> list[Projection]:
    """q, k, v on the tokens; the table's projections on its 2K rows: by q / k themselves (share_att_key:
    q for p2c, k for c2p) or by pos_q / pos_k."""
    a, g = call.attrs, Geom.of(call)
    inner = g.h * g.d
    tok = (g.m, g.c, inner)
    pos = (g.k2, g.c, inner)
    if a.share_att_key:
        return [Projection("q", (tok, pos) if a.p2c else (tok,)), Projection("k", (tok, pos) if a.c2p else (tok,)),
                Projection("v", (tok,))]
    out = [Projection("q", (tok,)), Projection("k", (tok,)), Projection("v", (tok,))]
    if a.c2p:
        out.append(Projection("pos_k", (pos,)))
    if a.p2c:
        out.append(Projection("pos_q", (pos,)))
    return out


def _attention_forward(g: Geom) -> Work:
    """k / scale, QK^T, per term the bmm against the projected table and its division by the scale, the terms
    added into the scores, softmax, AV."""
    work = pointwise("scale", g.nq) + Work({"sdpa": FLOPS_PER_MAC * 2 * g.scores * g.d})
    work = work + Work({"gemm": FLOPS_PER_MAC * g.terms * g.b * g.h * g.s * g.k2 * g.d})
    return work + pointwise("scale", g.terms * g.scores) + pointwise("add", g.terms * g.scores) + \
        pointwise("softmax", g.scores)


def _attention_backward(call: OpCall, g: Geom, input_grad: bool) -> Work:
    """AV's and QK^T's two products each, softmax_backward, the k scale; per term its two products, the scale,
    the gathered scores' gradient added into their buckets (scatter_add, b*h*S*S) and the projected table's
    gradient summed over the batch it was repeated to (b*h*2K*d, none at b = 1); q (k) read by QK^T and by
    c2p (p2c): their gradients summed; the input read by q, k, v and the table read by two projections: theirs."""
    a = call.attrs
    work = Work({"sdpa": FLOPS_PER_MAC * 4 * g.scores * g.d}) + pointwise("softmax_backward", g.scores)
    work = work + pointwise("scale", g.nq) + Work({"gemm": FLOPS_PER_MAC * 2 * g.terms * g.b * g.h * g.s * g.k2 * g.d})
    work = work + pointwise("scale", g.terms * g.scores) + pointwise("scatter_add", g.terms * g.scores)
    work = work + pointwise("bias_grad", g.terms * above_one(g.b) * g.b * g.h * g.k2 * g.d)
    work = work + pointwise("add", g.terms * g.nq)  # q (c2p) and k (p2c): a second reader each
    if input_grad:
        work = work + pointwise("add", 2 * g.m * g.c)
    if a.c2p and a.p2c:
        work = work + pointwise("add", g.k2 * g.c)
    return work


def _linear_part(p: Projection, bias: bool, pass_: Phase, input_grad: bool) -> tuple[Work, Expr]:
    """A projection's work over its calls (the table's call always computes dX: the table is learned); a
    projection called twice has its weight's (and bias') two gradients summed."""
    work, params = Work(), ZERO
    for i, (m, k, n) in enumerate(p.calls):
        if pass_ == Phase.FORWARD:
            work = work + linear_forward(m, k, n, bias)
        else:
            work = work + linear_backward(m, k, n, bias, input_grad or i > 0 or p.name.startswith("pos_"))
        params = k * n + (n if bias else 0)
    if pass_ == Phase.BACKWARD and len(p.calls) > 1:
        work = work + pointwise("add", params)
    return work, params


@register_op
class DisentangledAttention(OpDef):
    """DeBERTa's disentangled self-attention on [B, S, C]: content-to-content plus content-to-position and
    position-to-content scores over a shared relative-position table (`rel_embeddings`)."""

    name = "disentangled_attention"
    doc = ("DeBERTa-v2/v3's disentangled self-attention on [B, S, C]: q, k, v projections; scores = q k^T plus the "
           "content-to-position (c2p: q against the table projected by the key projection) and position-to-content "
           "(p2c: k against the table projected by the query projection) terms at each pair's relative-position "
           "bucket, scaled by 1/sqrt(d*(1 + terms)); softmax; AV. The table is the nearest earlier "
           "`rel_embeddings` layer's (2*span rows). No output projection (DeBERTa's SelfOutput.dense: a linear).")
    default_name = "attn"
    runtime = Runtime(kernels={"gemm": "gemm", "sdpa": "gemm"})
    attrs = (
        Attr("heads", "size", "attention heads h"),
        Attr("dim", "size", "model dim C (default: the input's last dim)", default=lambda shape, a: shape[-1]),
        Attr("head_dim", "size", "per-head dim d (default C / heads)", default=lambda shape, a: a["dim"] / a["heads"]),
        Attr("span", "size", "attention span K: the relative-position buckets on each side (position_buckets, or "
             "max_relative_positions without buckets; DeBERTa-v3: 256); the table has 2K rows"),
        Attr("c2p", "bool", "the content-to-position term (pos_att_type has c2p)", default=True),
        Attr("p2c", "bool", "the position-to-content term (pos_att_type has p2c)", default=True),
        Attr("share_att_key", "bool", "the table projected by the layer's own key and query projections (DeBERTa-v3); "
             "false: by pos_key_proj and pos_query_proj", default=True),
        Attr("bias", "bool", "biases on every projection", default=True),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        same_size_constraint(call, "dim", call.attrs.dim, call.in_shape[-1], "the input's last dim")
        if not (call.attrs.c2p or call.attrs.p2c):
            raise call.fail("disentangled attention without c2p and p2c is plain attention: write `attention`", "c2p",
                            "c2p and / or p2c")
        return (*call.in_shape[:2], call.attrs.heads * call.attrs.head_dim)

    def constraints(self, call: OpCall):
        a = call.attrs
        return same_size_constraint(call, "dim", a.dim, call.in_shape[-1], "the input's last dim") + [
            Constraint(sympy.Eq(sympy.Mod(a.dim, a.heads), 0), "dim {dim} is not divisible by heads {heads}",
                       a.where("heads"), {"dim": a.dim, "heads": a.heads})]

    def notes(self, call: OpCall):
        g = Geom.of(call)
        return [f"disentangled attention: {g.terms} relative term(s), each a bmm against the {g.k2}-row projected "
                "table (2*B*h*S*2K*d) and a gather of each pair's bucket; the table's projections run on its 2K rows "
                "in every layer"]

    def forward(self, call: OpCall):
        g, bias = Geom.of(call), bool(call.attrs.bias)
        parts = []
        for p in projections(call):
            work, params = _linear_part(p, bias, Phase.FORWARD, False)
            parts.append(Part(p.name, work, params))
        return parts + [Part("sdpa", _attention_forward(g), own=True)]

    def backward(self, call: OpCall, input_grad: bool):
        g, bias = Geom.of(call), bool(call.attrs.bias)
        parts = [Part(p.name, _linear_part(p, bias, Phase.BACKWARD, input_grad)[0]) for p in projections(call)]
        return parts + [Part("sdpa", _attention_backward(call, g, input_grad), own=True)]

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        out = {}
        for p in projections(call):
            out[p.name] = sum((linear_outputs(m, k, n, pass_, input_grad or i > 0 or p.name.startswith("pos_"))
                               for i, (m, k, n) in enumerate(p.calls)), ZERO)
        return out

    def gemms(self, call: OpCall) -> list[Gemm]:
        g = Geom.of(call)
        out = [Gemm(p.name, m, n, k) for p in projections(call) for m, k, n in p.calls]
        return out + [Gemm("sdpa", g.s, g.s, g.d, g.b * g.h, "sdpa", ("k",)),
                      Gemm("sdpa", g.s, g.k2, g.d, g.terms * g.b * g.h, "gemm", ("k",)),
                      Gemm("sdpa", g.s, g.d, g.s, g.b * g.h, "sdpa", ("n",))]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Projections as GEMMs; the scores are materialised (no fused kernel): q, k, v and the projected
        table read, the scores, each term's table products and the probabilities written and read back."""
        g, bias = Geom.of(call), bool(call.attrs.bias)
        out = []
        for p in projections(call):
            reads, writes = ZERO, ZERO
            for i, (m, k, n) in enumerate(p.calls):
                t = linear_traffic(p.name, m, k, n, bias, pass_, input_grad or i > 0 or p.name.startswith("pos_"))
                reads, writes = reads + t.reads, writes + t.writes
            out.append(Traffic(p.name, reads, writes))
        products = g.terms * g.b * g.h * g.s * g.k2
        scores = (3 + 2 * g.terms) * g.scores + products
        if pass_ == Phase.FORWARD:
            return out + [Traffic("sdpa", 3 * g.nq + g.terms * g.b * g.h * g.k2 * g.d + scores, g.nq + scores)]
        return out + [Traffic("sdpa", 5 * g.nq + g.terms * g.b * g.h * g.k2 * g.d + 2 * scores,
                              3 * g.nq + g.terms * g.b * g.h * g.k2 * g.d + scores)]

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """As transformers' DisentangledSelfAttention keeps them, in the layer's dtype: the input (q, k and v's
        weight gradients; a strided one folded to rows by a copy per projection); k divided by the scale (a new
        tensor); per product, q, k or v as torch.matmul folds it to (B*h, S, d): a view of its projection's output
        with one sample, one head or one token, else a copy of its own; per relative term, the normalised table
        (the projections' input: one tensor made by `rel_embeddings` and kept by every reader, `SHARED`) and the
        projected table repeated over the batch (B*h x 2K x d, a new tensor); the probabilities."""
        a, g, b = call.attrs, Geom.of(call), call.precision.bytes_per_element
        view = sympy.Or(sympy.Eq(g.b, 1), sympy.Eq(g.h, 1), sympy.Eq(g.s, 1))

        def folded(which: str, product: str) -> list[Saved]:
            return [Saved(which, sympy.Piecewise((g.nq, view), (0, True)), b),
                    Saved(f"{which}_{product}", sympy.Piecewise((0, view), (g.nq, True)), b)]

        out = [Saved(INPUT, g.m * g.c, b, folded=True) for _ in ("q", "k", "v")]
        out += [Saved("k_scaled", g.nq, b), *folded("q", "qk")]
        for term, which, pos in (("c2p", "q", "pos_k"), ("p2c", "k", "pos_q")):
            if getattr(a, term):
                out += [Saved(TABLE, g.k2 * a.dim, b), Saved(pos, g.b * g.h * g.k2 * g.d, b), *folded(which, term)]
        return out + [Saved("probabilities", g.scores, b), *folded("v", "av")]

    def build(self, call: OpCall, ev):
        from costspec.nn.disentangled import DisentangledSelfAttention

        a = call.attrs
        return DisentangledSelfAttention(ev(a.dim), ev(a.heads), ev(a.head_dim), ev(a.span), bool(a.c2p),
                                         bool(a.p2c), bool(a.share_att_key), bool(a.bias), ev(call.in_shape[1]))

    def link(self, call: OpCall, module, earlier: list) -> None:
        """Read the normalised table of the nearest earlier `rel_embeddings` layer (one of its reader slots)."""
        tables = [(n, m) for n, m in earlier if n.op.name == "rel_embeddings"]
        if not tables:
            raise call.fail("disentangled_attention reads the relative-position table of an earlier rel_embeddings "
                            "layer, and there is none", "span", "a rel_embeddings layer before the attention layers")
        node, table = tables[-1]
        slot = table.add_reader()
        if slot is None:
            raise call.fail(f"more disentangled_attention layers read '{node.name}' than its readers "
                            f"{table.readers}", "span", f"readers on '{node.name}' counting every layer that reads it")
        if table.rows < 2 * module.span:
            raise call.fail(f"span {module.span} needs {2 * module.span} table rows; '{node.name}' has {table.rows}",
                            "span", "2 * span <= the table's rows")
        module.source = (table, slot)


@register_op
class RelEmbeddings(OpDef):
    """DeBERTa's relative-position table: (rows, C) learned embeddings (and a LayerNorm over them), made once
    per forward and read by the later disentangled_attention layers; the running value passes through."""

    name = "rel_embeddings"
    doc = ("DeBERTa's relative-position embeddings: a learned (rows, C) table (2 * position_buckets rows), "
           "normalised by a LayerNorm (norm_rel_ebd: layer_norm) once per forward and read by every later "
           "disentangled_attention layer (readers of them); their gradients are summed here. The running value "
           "passes through unchanged.")
    default_name = "rel_embeddings"
    output_view = True  # the running value passes through

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """Its LayerNorm's mean and 1/std per table row (the table itself is the parameter)."""
        a, b = call.attrs, call.precision.bytes_per_element
        return [Saved("mean", a.rows, b), Saved("rstd", a.rows, b)] if a.norm else []

    def makes(self, call: OpCall) -> dict[str, Expr]:
        """The normalised table (rows x C) its readers' projections keep; without the norm the table is the
        parameter itself."""
        a = call.attrs
        return {TABLE: a.rows * a.dim * call.precision.bytes_per_element} if a.norm else {}
    pass_through = True
    attrs = (
        Attr("rows", "size", "table rows (DeBERTa-v3: 2 * position_buckets = 512)"),
        Attr("dim", "size", "embedding width C (default: the input's last dim)", default=lambda shape, a: shape[-1]),
        Attr("norm", "bool", "a LayerNorm over the table (norm_rel_ebd: layer_norm)", default=True),
        Attr("readers", "size", "disentangled_attention layers reading the table (DeBERTa: every layer, L)"),
    )

    def forward(self, call: OpCall):
        a = call.attrs
        params = a.rows * a.dim + (2 * a.dim if a.norm else 0)
        return [Part("table", pointwise("layernorm", a.rows * a.dim) if a.norm else Work(), params)]

    def backward(self, call: OpCall, input_grad: bool):
        """The readers' gradients summed (readers - 1 adds per table element), then the LayerNorm's backward."""
        a = call.attrs
        work = pointwise("add", (a.readers - 1) * a.rows * a.dim)
        return [Part("table", work + (pointwise("layernorm_backward", a.rows * a.dim) if a.norm else Work()))]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Forward: read the table (and the norm's weights), write the normalised table; backward: read the
        readers' gradients, the table and the weights, write the table's (and weights') gradients."""
        a = call.attrs
        n, w = a.rows * a.dim, (2 * a.dim if a.norm else 0)
        if pass_ == Phase.FORWARD:
            return [Traffic("table", n + w, n if a.norm else ZERO)]
        return [Traffic("table", a.readers * n + n + w, n + w)]

    def build(self, call: OpCall, ev):
        from costspec.nn.disentangled import RelEmbeddingTable

        a = call.attrs
        return RelEmbeddingTable(ev(a.rows), ev(a.dim), bool(a.norm), ev(a.readers))
