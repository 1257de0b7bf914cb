"""`mamba2`: Mamba-2's mixer with the chunked state-space-duality scan (Dao & Gu, Transformers are SSMs:
Generalized Models and Efficient Algorithms Through Structured State Space Duality, 2024, Sec. 6 and
Listing 1), counted as transformers 5's Mamba2Mixer runs it without the CUDA / Triton kernels
(`mamba2_chunk_scan`; costspec/nn/ssm.py runs the same aten ops).

On [B, S, C], with E = expand*C = H*P (H heads of P channels), G groups, N = d_state, K = d_conv, chunks
of Q positions (c = ceil(S/Q), S padded to c*Q): in_proj C -> E + (E + 2GN) + H (gate z, xBC, dt); a causal
depthwise conv + SiLU of xBC; the SSD scan: dt = clamp(softplus(dt + dt_bias)), x*dt, A*dt; B and C repeated
from G groups to H heads; per chunk the segment sums of A (cumsum, masks, exp: L [B, H, c, Q, Q]) and four
einsums run as batched matmuls: C B^T (the chunk's scores), (scores * L) x (the diagonal blocks), B^T x (each
chunk's final state), then the inter-chunk recurrence over the c + 1 chunk boundaries (an einsum over the
decays) and C states (the off-diagonal blocks); y + D x; the gated RMSNorm of y by z over G groups; out_proj
E -> C.
"""
from __future__ import annotations

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import Constraint, OpCall, OpDef, requires, same_size
from costspec.ops.registry import register_op
from costspec.ops.ssm.common import MAMBA2_RUNTIME, CausalConv, state_note
from costspec.ops.ssm.mamba2_saved import mamba2_saved
from costspec.ops.work import (
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

SSD = "ssd"  # matmul class of the chunked scan's einsums (batched matmuls)
# torch.einsum drops a contracted axis of size 1 and multiplies elementwise instead of running a bmm
_CONTRACTION = ("the SSD einsums contract over d_state and chunk, and torch runs a contraction of size 1 as an "
                "elementwise product, not the batched matmul costed here")


def _segment_sums(b, h, rows, t):
    """Forward of transformers' segment_sum on `rows` vectors of length t (per batch and head), and the
    exp of its result: the two masks (tril of ones and its negation: 4*t^2 selects), two masked_fills
    and the cumsum on the t x t expansion, exp."""
    sq = b * h * rows * t * t
    return pointwise("select", 4 * t * t + 2 * sq) + pointwise("cumsum", sq) + pointwise("exp", sq)


def _segment_sums_backward(b, h, rows, t):
    """exp's backward (a multiply), the two masked_fills, the cumsum (as a reversed cumsum), and the sum of
    the t x t expansion back to t (when t > 1)."""
    sq = b * h * rows * t * t
    return (pointwise("mul", sq) + pointwise("select", 2 * sq) + pointwise("cumsum", sq)
            + pointwise("bias_grad", above_one(t) * sq))


@register_op
class Mamba2(OpDef):
    """Mamba-2's mixer on [B, S, C] (see the module doc); rows in_proj, conv1d, scan, norm, out_proj, named as
    transformers' Mamba2Mixer names its modules."""

    name = "mamba2"
    doc = ("Mamba-2's mixer (state-space duality, Dao & Gu 2024) on [B, S, C], as transformers' Mamba2Mixer runs it "
           "without the CUDA/Triton kernels: in_proj C -> (z, xBC, dt), causal depthwise conv + SiLU, the chunked "
           "SSD scan (segment sums, four einsums as batched matmuls per chunk of Q positions, the inter-chunk "
           "recurrence), D skip, gated RMSNorm over G groups, out_proj; E = expand * C = heads * head_dim.")
    default_name = "mixer"
    runtime = MAMBA2_RUNTIME
    attrs = (
        Attr("d_state", "size", "state size N (transformers' state_size)", default=128),
        Attr("expand", "size", "inner width E = expand * C", default=2),
        Attr("d_conv", "size", "taps K of the causal depthwise conv (conv_kernel)", default=4),
        Attr("head_dim", "size", "channels P per head", default=64),
        Attr("heads", "size", "heads H (num_heads; default E / head_dim)",
             default=lambda shape, a: a["expand"] * shape[-1] / a["head_dim"]),
        Attr("groups", "size", "groups G sharing B and C (n_groups; also the gated norm's groups)", default=1),
        Attr("chunk", "size", "chunk length Q of the SSD scan (chunk_size)", default=256),
        Attr("bias", "bool", "biases on in_proj and out_proj (use_bias)", default=False),
        Attr("conv_bias", "bool", "bias on the conv (use_conv_bias)", default=True),
        Attr("eps", "number", "epsilon of the gated RMSNorm (does not change the cost)", default=1e-5),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        a = call.attrs
        e = a.expand * call.in_shape[-1]
        if same_size(e, a.heads * a.head_dim) is False:  # decidable now: an error right away
            raise call.fail(f"heads {a.heads} x head_dim {a.head_dim} is not the inner width expand*C = {e}",
                            "heads", "heads * head_dim = expand * C")
        for attr in ("d_state", "chunk"):
            value = sympy.sympify(getattr(a, attr))
            if value.is_number and value < 2:
                raise call.fail(f"{attr} {value}: {_CONTRACTION}", attr, "2 or more")
        return call.in_shape

    def constraints(self, call: OpCall):
        """E = expand * C must be a whole number of heads of head_dim (transformers views the scan's input as
        H x P), the heads must split into the groups, and d_state and chunk must be 2 or more."""
        a = call.attrs
        e = a.expand * call.in_shape[-1]
        out = [Constraint(sympy.Eq(sympy.Mod(e, a.head_dim), 0), "inner width expand*C = {e} is not a multiple of "
                          "head_dim {p}", a.where("head_dim"), {"e": e, "p": a.head_dim}, "head_dim dividing expand*C"),
               Constraint(sympy.Eq(e, a.heads * a.head_dim), "heads {h} x head_dim {p} is not the inner width "
                          "expand*C = {e}", a.where("heads"), {"e": e, "h": a.heads, "p": a.head_dim},
                          "heads * head_dim = expand * C"),
               Constraint(sympy.Eq(sympy.Mod(a.heads, a.groups), 0), "heads {h} not divisible by groups {g}",
                          a.where("groups"), {"h": a.heads, "g": a.groups}, "groups dividing heads")]
        for attr in ("d_state", "chunk"):
            value = getattr(a, attr)
            out.append(Constraint(sympy.Ge(value, 2), attr + " {v}: " + _CONTRACTION, a.where(attr), {"v": value},
                                  "2 or more"))
        return out

    def saved(self, call: OpCall, input_grad: bool):
        """The projections' inputs and outputs, the conv's, the scan's einsum operands
        (`costspec.ops.ssm.mamba2_saved`)."""
        return mamba2_saved(call, self._sizes(call))

    # -- sizes ----------------------------------------------------------------------------------
    def _sizes(self, call: OpCall):
        """(B, S, C, E, H, P, G, N, Q, c = ceil(S/Q), Sp = c*Q)."""
        b, s, c = call.in_shape
        a = call.attrs
        chunks = sympy.ceiling(s / a.chunk)
        return b, s, c, a.expand * c, a.heads, a.head_dim, a.groups, a.d_state, a.chunk, chunks, chunks * a.chunk

    def _proj_width(self, call: OpCall):
        _, _, _, e, h, _, g, n, _, _, _ = self._sizes(call)
        return 2 * e + 2 * g * n + h

    def _conv(self, call: OpCall) -> CausalConv:
        b, s, _, e, _, _, g, n, _, _, _ = self._sizes(call)
        return CausalConv("conv1d", b, s, e + 2 * g * n, call.attrs.d_conv, call.attrs.conv_bias)

    def _ssd_flops(self, call: OpCall):
        """The forward einsums: C B^T and (scores * L) x per chunk (2*B*c*H*Q^2*(N + P)), B^T x and C states
        (2*B*c*H*Q*N*P each), the inter-chunk recurrence (2*B*H*(c+1)^2*P*N)."""
        b, _, _, _, h, p, _, n, q, nc, _ = self._sizes(call)
        return FLOPS_PER_MAC * (b * nc * h * (q * q * (n + p) + 2 * q * n * p) + b * h * (nc + 1) ** 2 * p * n)

    # -- work -----------------------------------------------------------------------------------
    def forward(self, call: OpCall):
        """in_proj, conv1d (+ SiLU), scan (-exp(A_log); dt's bias, softplus, clamp; D x on the padded length;
        x*dt and A*dt; cumsum of A*dt; the segment sums of each chunk (t = Q) and of the chunk boundaries
        (t = c + 1); scores * L; the decays exp(cumsum_last - cumsum) and exp(cumsum); B * decay; y_off * decay;
        the two adds of y), norm (one rmsnorm_gated element per output), out_proj."""
        a = call.attrs
        b, s, c, e, h, p, g, n, q, nc, sp = self._sizes(call)
        bsh, bhsp, pad_x = b * s * h, b * h * sp, b * sp * h * p
        scan = (Work({SSD: self._ssd_flops(call)}) + pointwise("exp", h + 2 * bhsp) + pointwise("scale", h)
                + pointwise("add", bsh + bhsp + 2 * pad_x) + pointwise("softplus", bsh) + pointwise("clamp", bsh)
                + pointwise("mul", 2 * pad_x + b * s * e + bsh + b * nc * q * q * h + b * sp * h * n)
                + pointwise("cumsum", bhsp) + _segment_sums(b, h, nc, q) + _segment_sums(b, h, 1, nc + 1))
        conv = self._conv(call)
        width = self._proj_width(call)
        return [Part("in_proj", linear_forward(b * s, c, width, a.bias), c * width + (width if a.bias else 0)),
                Part("conv1d", conv.forward(), conv.params, own=True),
                Part("scan", scan, 3 * h, own=True),
                Part("norm", pointwise("rmsnorm_gated", b * s * e), e),
                Part("out_proj", linear_forward(b * s, e, c, a.bias), e * c + (c if a.bias else 0))]

    def backward(self, call: OpCall, input_grad: bool):
        """scan: the einsums' backward (two batched matmuls each: twice the forward's FLOPs); the products'
        backward (two multiplies each, a broadcast operand's gradient summed where its axis is longer than 1),
        exp's (one multiply), the segment sums' and cumsum's; the adds of a value read twice or more (A*dt's
        cumsum four times, A*dt, the chunked x, B and C twice, dt and x twice); the sums of B's and C's
        gradients over the heads of a group (when a group has more than one), clamp's backward (ge, le,
        logical_and, where), softplus's, dt_bias's sum; A = -exp(A_log). norm: one rmsnorm_gated_backward
        element per output."""
        a = call.attrs
        b, s, c, e, h, p, g, n, q, nc, sp = self._sizes(call)
        bsh, bhsp, pad_x, pad_bn, bshn = b * s * h, b * h * sp, b * sp * h * p, b * sp * h * n, b * s * h * n
        scan = (Work({SSD: 2 * self._ssd_flops(call)})
                + pointwise("mul", 4 * pad_x + 2 * bhsp + 2 * pad_bn + 2 * b * nc * q * q * h + 2 * bsh + 2 * b * s * e
                            + h)
                + pointwise("bias_grad", above_one(p) * (pad_x + b * s * e) + above_one(n) * pad_bn
                            + above_one(q) * bhsp + 2 * bsh + pad_x + 2 * above_one(h / g) * bshn)
                + pointwise("add", 4 * bhsp + pad_x + 2 * pad_bn + bsh + b * s * e)
                + pointwise("scale", bhsp + h) + pointwise("cumsum", bhsp) + pointwise("select", 4 * bsh)
                + pointwise("softplus_backward", bsh)
                + _segment_sums_backward(b, h, nc, q) + _segment_sums_backward(b, h, 1, nc + 1))
        width = self._proj_width(call)
        return [Part("in_proj", linear_backward(b * s, c, width, a.bias, input_grad)),
                Part("conv1d", self._conv(call).backward(), own=True),
                Part("scan", scan, own=True),
                Part("norm", pointwise("rmsnorm_gated_backward", b * s * e)),
                Part("out_proj", linear_backward(b * s, e, c, a.bias, True))]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        return self._conv(call).reconcile(pass_, ev)

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        """The projections' GEMMs and the conv; the SSD einsums are left out (the Triton SSD kernels fuse them)."""
        b, s, c, e, _, _, _, _, _, _, _ = self._sizes(call)
        return {"in_proj": linear_outputs(b * s, c, self._proj_width(call), pass_, input_grad),
                "conv1d": self._conv(call).outputs(pass_),
                "out_proj": linear_outputs(b * s, e, c, pass_, True)}

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The projections as GEMMs on the B*S tokens, the conv as its implicit GEMM per channel; the SSD
        einsums (chunk-local products the fused kernels tile themselves) are left out."""
        b, s, c, e, _, _, _, _, _, _, _ = self._sizes(call)
        return [Gemm("in_proj", b * s, self._proj_width(call), c), self._conv(call).gemm(),
                Gemm("out_proj", b * s, c, e)]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Projections as GEMMs; the conv as a causal-conv kernel with SiLU fused. The scan as the fused SSD
        kernels (mamba_chunk_scan_combined): forward reads x (B*S*E), dt (B*S*H), B and C (B*S*G*N each) and
        the 3H parameters, writes y, and the chunk states (B*c*H*P*N) are written and read back once between
        its kernels; backward reads those and dy, writes their gradients. `--fusion none` (the torch path):
        the Q x Q decays and scores (B*H*c*Q^2 each) and B and C repeated to the heads (B*c*Q*H*N each) are
        written and read back (backward: the same again for their gradients). The gated norm reads y, z and
        its weight, writes its output (backward: reads dy, y, z, writes dy and dz)."""
        a = call.attrs
        b, s, c, e, h, p, g, n, q, nc, sp = self._sizes(call)
        x, bc, states = b * s * e, 2 * b * s * g * n, b * nc * h * p * n
        inputs = 2 * x + b * s * h + bc + 3 * h  # the backward's reads: x and dy, dt, B and C, the parameters
        unfused = 2 * b * h * nc * q * q + 2 * b * sp * h * n if fusion == Fusion.NONE else 0
        if pass_ == Phase.FORWARD:
            scan = Traffic("scan", x + b * s * h + bc + 3 * h + states + unfused, x + states + unfused)
            norm = Traffic("norm", 2 * x + e, x)
        else:
            scan = Traffic("scan", inputs + states + unfused, x + b * s * h + bc + 3 * h + states + unfused)
            norm = Traffic("norm", 3 * x + e, 2 * x + e)
        width = self._proj_width(call)
        return [linear_traffic("in_proj", b * s, c, width, a.bias, pass_, input_grad),
                self._conv(call).traffic(pass_, fusion), scan, norm,
                linear_traffic("out_proj", b * s, e, c, a.bias, pass_, True)]

    def notes(self, call: OpCall):
        b, _, _, _, h, p, _, n, _, _, _ = self._sizes(call)
        conv = self._conv(call)
        return ["mamba2 scan as transformers' torch path runs it: its einsums are batched matmuls "
                f"({sympy.sympify(self._ssd_flops(call))} FLOPs, matmul class `ssd`, counted by FlopCounterMode, "
                "charged like any matmul); the segment sums, decays and products around them are CUDA-core work; "
                "the Triton SSD kernels run the same chunk products on Tensor Cores (docs/conventions.md)",
                state_note(call, b * h * p * n, "B*H*P*N", b * conv.channels * call.attrs.d_conv,
                           "B*(E+2*G*N)*K")]

    def build(self, call: OpCall, ev):
        from costspec.nn.ssm import Mamba2 as TorchMamba2

        a = call.attrs
        _, _, c, e, h, _, g, n, q, _, _ = self._sizes(call)
        return TorchMamba2(ev(c), ev(e), ev(n), ev(a.d_conv), ev(h), ev(g), ev(q), a.bias, a.conv_bias, a.eps)
