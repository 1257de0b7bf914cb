"""`similarity`: the logits of a contrastive dual-tower model (CLIP, SigLIP): both embeddings divided by their
L2 norms, their dot products scaled by exp(logit_scale) (+ logit_bias), as transformers' CLIPModel and
SiglipModel compute them.

The running value holds the image embeddings [Bi, E], `with:` the text embeddings [Bt, E]; the output is
logits_per_image [Bi, Bt] (the transpose of logits_per_text = text @ image^T, a view). `form` follows the
model's code: CLIP's (the norm as pow(sum(pow(x, 2)), 0.5), a 0-d logit_scale: its product counts as a
`scale`) or SigLIP's (x.norm(p=2), one torch reduction kernel; logit_scale of shape [1]: a `mul`). The
backward is autograd's, term by term: the quotient rule of each division, the norm's own backward and the
fan-out of each embedding read twice (numerator and norm).
"""
from __future__ import annotations

import sympy

from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import OpCall, OpDef, Reconcile, Runtime, Saved, input_tensor, same_size_constraint
from costspec.ops.registry import register_op
from costspec.ops.work import ONE, ZERO, Gemm, Part, Shape, Traffic, gemm, pointwise

CLIP, SIGLIP = "clip", "siglip"


def _sides(call: OpCall) -> tuple[Shape, Shape]:
    return call.in_shape, call.wiring.extra[0]


@register_op
class Similarity(OpDef):
    """logits_per_image = normalize(image) @ normalize(text)^T * exp(logit_scale) (+ logit_bias)."""

    name = "similarity"
    doc = ("Contrastive logits of a dual-tower model (CLIP, SigLIP): the running value [Bi, E] (image embeddings) and "
           "`with:` [Bt, E] (text embeddings) each divided by its L2 norm, their products [Bi, Bt] (one GEMM, "
           "2*Bi*Bt*E FLOPs) times exp(logit_scale), plus logit_bias with bias: true; 1 (or 2) parameters. "
           "The output is logits_per_image.")
    default_name = "logits"
    input_rank = (2,)
    attrs = (Attr("with", "value", "the text embeddings [Bt, E] (a `save:`d value)"),
             Attr("bias", "bool", "a learned logit_bias added to every logit (SigLIP)", default=False),
             Attr("form", "choice", "the model's code: clip (the norm as pow(sum(pow(x, 2)), 0.5); a 0-d "
                  "logit_scale) or siglip (x.norm(p=2), one reduction kernel; logit_scale of shape [1])",
                  default=CLIP, choices=(CLIP, SIGLIP)))
    runtime = Runtime(aten={"aten.linalg_vector_norm": "pow", "aten.eq": "select", "aten.masked_fill_": "select",
                            "aten.masked_fill": "select"}, kernels={"gemm": "gemm"})

    def output_shape(self, call: OpCall) -> Shape:
        image, text = _sides(call)
        if len(text) != 2:
            raise call.fail(f"similarity needs `with:` of rank 2 ([Bt, E]), got rank {len(text)}", "with",
                            "a saved [Bt, E] value")
        return (image[0], text[0])

    def constraints(self, call: OpCall):
        image, text = _sides(call)
        return same_size_constraint(call, "with", text[1], image[1], "the embedding width of the running value")

    def _sizes(self, call: OpCall) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
        image, text = _sides(call)
        return image[0], text[0], image[1]

    def forward(self, call: OpCall):
        Bi, Bt, E = self._sizes(call)
        n, rows, out = (Bi + Bt) * E, Bi + Bt, Bi * Bt
        work = (gemm(Bt, E, Bi) + pointwise("square", n) + pointwise("sum", n) + pointwise("pow", rows)
                + pointwise("div", n) + pointwise("exp", ONE) + pointwise(self._times(call), out))
        if call.attrs.bias:
            work = work + pointwise("add", out)
        return [Part("", work, 2 if call.attrs.bias else 1)]

    def backward(self, call: OpCall, input_grad: bool):
        """logit_scale's gradient sum(g * products) (mul, then bias_grad) and exp's backward (one element:
        scale, or mul for siglip's [1] logit_scale); logit_bias's: sum(g) (bias_grad). For each side that needs
        a gradient: its GEMM (2*Bi*Bt*E), g * exp(logit_scale) once (scale or mul), and through y = x / n(x):
        the quotient rule (dx = g / n, dn = -g*x / n^2: 3 div, 1 scale, 1 mul per element, the row sum of dn:
        bias_grad), the norm's backward (clip: 2*x*dsq per element (scale, mul), 0.5*s^-0.5 per row (pow, mul,
        scale); siglip: x / n * dn per element (div, mul), the zero-norm guard (eq per row: select; masked_fill
        per element: select)) and the sum of x's two gradients (add)."""
        Bi, Bt, E = self._sizes(call)
        out = Bi * Bt
        times = self._times(call)
        # logit_scale and logit_bias are of a lower rank than the [Bt, Bi] logits: autograd sums their gradients
        # even when there is one logit
        work = pointwise("mul", out) + pointwise("bias_grad", out) + pointwise(times, ONE)
        if call.attrs.bias:
            work = work + pointwise("bias_grad", out)
        needs = [input_grad, call.wiring.needs_grad(1, input_grad)]
        if any(needs):
            work = work + pointwise(times, out)
        for rows, needed in zip((Bi, Bt), needs):
            if not needed:
                continue
            m = rows * E
            work = (work + gemm(Bi, Bt, E) + pointwise("div", 3 * m) + pointwise("scale", m) + pointwise("mul", m)
                    + pointwise("bias_grad", sympy.Min(1, E - 1) * m) + pointwise("add", m))
            if call.attrs.form == CLIP:
                work = (work + pointwise("scale", m) + pointwise("mul", m) + pointwise("pow", rows)
                        + pointwise("mul", rows) + pointwise("scale", rows))
            else:
                work = work + pointwise("div", m) + pointwise("mul", m) + pointwise("select", rows + m)
        return [Part("", work)]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        """NB: x.norm(p=2) (form: siglip) runs as one linalg_vector_norm kernel, which the counter records
        once per output row (as its square root: pow); costspec prices its squares and sums too (square
        and sum, one each per element)."""
        if pass_ != Phase.FORWARD or call.attrs.form != SIGLIP:
            return []
        Bi, Bt, E = self._sizes(call)
        n = (Bi + Bt) * E
        return [Reconcile("vector-norm-kernel", "", pointwise("square", -n) + pointwise("sum", -n),
                          "linalg_vector_norm: one kernel per row, counted as its sqrt (pow); costspec prices "
                          "x^2 and the row sum per element: square and sum (Bi + Bt)*E each")]

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool) -> dict[str, sympy.Expr]:
        Bi, Bt, E = self._sizes(call)
        if pass_ == Phase.FORWARD:
            return {"": Bi * Bt}
        needs = [input_grad, call.wiring.needs_grad(1, input_grad)]
        return {"": sum((rows * E for rows, needed in zip((Bi, Bt), needs) if needed), ZERO)}

    def gemms(self, call: OpCall) -> list[Gemm]:
        Bi, Bt, E = self._sizes(call)
        return [Gemm("", Bt, Bi, E, leading=("k",))]

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """exp(logit_scale) and the products (logit_scale's gradient); for each side that needs a gradient its
        embeddings, its row norms (clip: the row sums and their square roots; siglip: the norms) and the other
        side's normalised embeddings (the GEMM's backward reads them)."""
        Bi, Bt, E = self._sizes(call)
        b = call.precision.bytes_per_element
        out = [Saved("products", Bi * Bt, b), Saved("exp", ONE, b)]
        needs = [input_grad, call.wiring.needs_grad(1, input_grad)]
        per_row = 2 if call.attrs.form == CLIP else 1
        for side, (rows, needed) in enumerate(zip((Bi, Bt), needs)):
            if needed:
                other = (Bt, Bi)[side]
                out += [Saved(input_tensor(side), rows * E, b), Saved(f"norms{side}", per_row * rows, b),
                        Saved(f"normalised{1 - side}", other * E, b)]
        return out

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion) -> list[Traffic]:
        """Forward: both embeddings read (twice: the norm, then the division), the normalised ones written
        and read by the GEMM, the logits written and read once to scale them. Backward: the logits' gradient
        read, each side that needs one reads its embeddings and writes its gradient."""
        Bi, Bt, E = self._sizes(call)
        n, out = (Bi + Bt) * E, Bi * Bt
        if pass_ == Phase.FORWARD:
            return [Traffic("", 3 * n + out, n + 2 * out)]
        needs = [input_grad, call.wiring.needs_grad(1, input_grad)]
        sides = sum((rows * E for rows, needed in zip((Bi, Bt), needs) if needed), ZERO)
        return [Traffic("", 2 * out + 2 * sides, sides)]

    def build(self, call: OpCall, ev):
        from costspec.nn.similarity import Similarity as TorchSimilarity

        return TorchSimilarity(bool(call.attrs.bias), call.attrs.form == CLIP)

    @staticmethod
    def _times(call: OpCall) -> str:
        """The kind of a product with exp(logit_scale): a 0-d tensor's is a scale (CLIP), a [1] one's a mul."""
        return "scale" if call.attrs.form == CLIP else "mul"


__all__ = ["Similarity"]
