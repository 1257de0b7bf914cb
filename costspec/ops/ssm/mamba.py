"""`mamba`: Mamba's mixer with its selective scan (Gu & Dao, Mamba: Linear-Time Sequence Modeling with
Selective State Spaces, 2023, Sec. 3 and Algorithm 2), counted as transformers 5's MambaMixer runs it
without the CUDA kernels (`mamba_selective_scan`'s recurrent path; costspec/nn/ssm.py runs the same
aten ops).

On [B, S, C], with E = expand*C, N = d_state, r = dt_rank, K = d_conv:
in_proj C -> 2E (x and the gate z); a causal depthwise conv of x (K taps, padded by K - 1, the first
S outputs kept) and SiLU; x_proj E -> r + 2N (dt, B, C); dt_proj r -> E (its weight applied as a
matmul, its bias added inside the scan); the scan: dt = softplus(dt + bias), dA = exp(A dt),
dBx = dt B x on [B, E, S, N], then a python loop over the S positions of h = dA_t h + dBx_t
(elementwise on [B, E, N]) and y_t = h C_t (a batched matmul [B, E, N] @ [B, N, 1]); y + D x; y * SiLU(z);
out_proj E -> C.

NB: the loop's backward is what autograd makes of it: per step two batched matmuls (dC_t, dh) and the
gradient of h; every step's slice of dA, dBx and C is a full-size gradient (select_backward) that
autograd adds into the previous ones: 2*(S-1)*B*E*S*N + (S-1)*B*S*N adds, quadratic in S. A fused
selective-scan kernel runs none of that (see the notes and docs/conventions.md).

`inner_norms` (Jamba's JambaMambaMixer): RMSNorms on dt (r wide), B and C (N wide) between x_proj and their use.
"""
from __future__ import annotations

import sympy

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import Attr
from costspec.ops.opdef import OpCall, OpDef, requires
from costspec.ops.registry import register_op
from costspec.ops.ssm.common import MAMBA_RUNTIME, CausalConv, state_note
from costspec.ops.ssm.mamba_saved import mamba_saved
from costspec.ops.work import (
    Gemm,
    Part,
    Traffic,
    Work,
    above_one,
    gemm,
    linear_backward,
    linear_forward,
    linear_outputs,
    linear_traffic,
    pointwise,
)

SCAN = "scan"  # matmul class of the per-step state contraction y_t = h_t C_t


def _scan_flops(b, e, n, s):
    """The S batched matmuls [B, E, N] @ [B, N, 1]: 2*B*E*N FLOPs each."""
    return Work({SCAN: FLOPS_PER_MAC * b * e * n * s})


@register_op
class Mamba(OpDef):
    """Mamba's mixer on [B, S, C] (see the module doc); rows in_proj, conv1d, x_proj, dt_proj, scan, out_proj,
    named as transformers' MambaMixer names its modules and parameters."""

    name = "mamba"
    doc = ("Mamba's mixer (selective state space, Gu & Dao 2023) on [B, S, C], as transformers' MambaMixer runs it "
           "without the CUDA kernels: in_proj C -> 2E, causal depthwise conv + SiLU, x_proj -> (dt, B, C), dt_proj, "
           "the selective scan (a sequential loop over S: elementwise recurrence on CUDA cores, the state "
           "contraction as S batched matmuls), D skip, SiLU gate, out_proj E -> C; E = expand * C.")
    default_name = "mixer"
    runtime = MAMBA_RUNTIME
    attrs = (
        Attr("d_state", "size", "state size N per channel (transformers' state_size)", default=16),
        Attr("expand", "size", "inner width E = expand * C (intermediate_size)", default=2),
        Attr("d_conv", "size", "taps K of the causal depthwise conv (conv_kernel)", default=4),
        Attr("dt_rank", "size", "rank r of the dt projection (time_step_rank; default ceil(C/16), transformers' "
             "'auto')", default=lambda shape, a: sympy.ceiling(shape[-1] / 16)),
        Attr("bias", "bool", "biases on in_proj and out_proj (use_bias)", default=False),
        Attr("conv_bias", "bool", "bias on the conv (use_conv_bias)", default=True),
        Attr("inner_norms", "bool", "Jamba's three RMSNorms inside the mixer, on x_proj's outputs before their use: "
             "dt_layernorm over the r dims of dt, b_layernorm and c_layernorm over the N dims of B and C (one "
             "rmsnorm per element of B*S*(r + 2N), forward and backward; r + 2N weights)", default=False),
    )

    def output_shape(self, call: OpCall):
        requires(self, call, 3, "tokens [B, S, C]")
        return call.in_shape

    def saved(self, call: OpCall, input_grad: bool):
        """The projections' inputs and outputs, the conv's, every step of the scan (`costspec.ops.ssm.mamba_saved`)."""
        return mamba_saved(call, self._sizes(call))

    # -- sizes ----------------------------------------------------------------------------------
    def _sizes(self, call: OpCall):
        """(B, S, C, E, N, r, B*S)."""
        b, s, c = call.in_shape
        a = call.attrs
        return b, s, c, a.expand * c, a.d_state, a.dt_rank, b * s

    def _norms(self, call: OpCall, pass_: Phase) -> list[Part]:
        """inner_norms: dt_layernorm (r wide), b_layernorm and c_layernorm (N wide) on the B*S tokens."""
        if not call.attrs.inner_norms:
            return []
        _, _, _, _, n, r, t = self._sizes(call)
        kind = "rmsnorm" if pass_ == Phase.FORWARD else "rmsnorm_backward"
        return [Part(name, pointwise(kind, t * width), width if pass_ == Phase.FORWARD else 0)
                for name, width in (("dt_layernorm", r), ("b_layernorm", n), ("c_layernorm", n))]

    def _conv(self, call: OpCall) -> CausalConv:
        b, s, _, e, _, _, _ = self._sizes(call)
        return CausalConv("conv1d", b, s, e, call.attrs.d_conv, call.attrs.conv_bias)

    # -- work -----------------------------------------------------------------------------------
    def forward(self, call: OpCall):
        """in_proj, conv1d (+ SiLU), x_proj, dt_proj (its GEMM; the bias add in the scan's first op),
        scan (-exp(A_log); softplus; exp(A dt) and dt*B*x on B*E*S*N; per step one multiply and one add per
        state element and the contraction; D skip; SiLU gate), out_proj."""
        a = call.attrs
        b, s, c, e, n, r, t = self._sizes(call)
        bes, besn = b * e * s, b * e * s * n
        scan = (_scan_flops(b, e, n, s) + pointwise("exp", e * n + besn) + pointwise("scale", e * n)
                + pointwise("softplus", bes) + pointwise("mul", 3 * besn + s * b * e * n + 2 * bes)
                + pointwise("add", s * b * e * n + bes) + pointwise("silu", bes))
        conv = self._conv(call)
        return [Part("in_proj", linear_forward(t, c, 2 * e, a.bias), c * 2 * e + (2 * e if a.bias else 0)),
                Part("conv1d", conv.forward(), conv.params, own=True),
                Part("x_proj", linear_forward(t, e, r + 2 * n, False), e * (r + 2 * n)),
                *self._norms(call, Phase.FORWARD),
                Part("dt_proj", gemm(t, r, e) + pointwise("add", bes), r * e + e, own=True),
                Part("scan", scan, e * n + e, own=True),
                Part("out_proj", linear_forward(t, e, c, a.bias), e * c + (c if a.bias else 0))]

    def backward(self, call: OpCall, input_grad: bool):
        """scan: the gate's and D's products (D's gradient summed over B and S); the loop backwards: per step
        2 batched matmuls, dh*h and dh*dA (one fewer at the first step, whose h is zeros), and from the second
        step on the adds of dh and of the slices' full-size gradients into dA, dBx (B*E*S*N each) and C
        (B*S*N); then exp's and the products' backward on B*E*S*N (7 multiplies, the broadcast sums of A over
        B and S, of dt and x over N, of B over E), dt's two gradients added, softplus; x's gradient from the D
        skip and dBx added; A = -exp(A_log). dt_proj: its two GEMMs and its bias's gradient. x_proj: its GEMMs
        and the add of its dX into x's gradient. conv1d: SiLU, dX and dW (+ db)."""
        a = call.attrs
        b, s, c, e, n, r, t = self._sizes(call)
        bes, besn, ben, bsn = b * e * s, b * e * s * n, b * e * n, b * s * n
        scan = (_scan_flops(b, e, n, 2 * s)
                + pointwise("mul", 4 * bes + ben * (2 * s - 1) + 7 * besn + e * n)
                + pointwise("add", (s - 1) * (ben + bsn + 2 * besn) + 2 * bes)
                + pointwise("bias_grad", above_one(b * s) * (bes + besn) + 3 * above_one(n) * besn
                            + above_one(e) * besn)
                + pointwise("silu_backward", bes) + pointwise("softplus_backward", bes) + pointwise("scale", e * n))
        return [Part("in_proj", linear_backward(t, c, 2 * e, a.bias, input_grad)),
                Part("conv1d", self._conv(call).backward(), own=True),
                Part("x_proj", linear_backward(t, e, r + 2 * n, False, True) + pointwise("add", bes)),
                *self._norms(call, Phase.BACKWARD),
                Part("dt_proj", gemm(r, t, e) + gemm(t, e, r) + pointwise("bias_grad", bes), own=True),
                Part("scan", scan, own=True),
                Part("out_proj", linear_backward(t, e, c, a.bias, True))]

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime, ev):
        return self._conv(call).reconcile(pass_, ev)

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool):
        """The projections' GEMMs and the conv; the scan's per-step contractions are left out (a fused
        selective-scan kernel runs them inside the recurrence)."""
        b, s, c, e, n, r, t = self._sizes(call)
        return {"in_proj": linear_outputs(t, c, 2 * e, pass_, input_grad),
                "conv1d": self._conv(call).outputs(pass_),
                "x_proj": linear_outputs(t, e, r + 2 * n, pass_, True),
                "dt_proj": linear_outputs(t, r, e, pass_, True),
                "out_proj": linear_outputs(t, e, c, pass_, True)}

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The projections as GEMMs on the B*S tokens (dt_proj's weight @ dt runs as one), the conv as its
        implicit GEMM per channel; the scan's [E, N] @ [N, 1] per step is a matrix-vector product, left out."""
        b, s, c, e, n, r, t = self._sizes(call)
        return [Gemm("in_proj", t, 2 * e, c), self._conv(call).gemm(), Gemm("x_proj", t, r + 2 * n, e),
                Gemm("dt_proj", t, e, r), Gemm("out_proj", t, c, e)]

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion):
        """Projections as GEMMs (dt_proj's bias read by the scan); the conv as a causal-conv kernel with SiLU
        fused. The scan as a fused selective-scan kernel (selective_scan_cuda): forward reads x, dt, z
        (B*E*S each), B and C (B*S*N each), A, D and dt's bias, writes y; the state never leaves the chip;
        backward reads those and dy, writes their gradients. `--fusion none` (the torch path): dA and dBx
        (B*E*S*N each) are written and read back, and the state (B*E*N) is read and written at every step
        (backward: the same again for their gradients)."""
        a = call.attrs
        b, s, c, e, n, r, t = self._sizes(call)
        bes, bsn, params = b * e * s, b * s * n, e * n + 2 * e
        unfused = 2 * b * e * s * n + s * b * e * n if fusion == Fusion.NONE else 0
        if pass_ == Phase.FORWARD:
            scan = Traffic("scan", 3 * bes + 2 * bsn + params + unfused, bes + unfused)
        else:
            scan = Traffic("scan", 4 * bes + 2 * bsn + params + unfused, 3 * bes + 2 * bsn + params + unfused)
        return [linear_traffic("in_proj", t, c, 2 * e, a.bias, pass_, input_grad),
                self._conv(call).traffic(pass_, fusion),
                linear_traffic("x_proj", t, e, r + 2 * n, False, pass_, True),
                linear_traffic("dt_proj", t, r, e, False, pass_, True),
                scan,
                linear_traffic("out_proj", t, e, c, a.bias, pass_, True)]

    def notes(self, call: OpCall):
        b, s, c, e, n, r, t = self._sizes(call)
        k = call.attrs.d_conv
        return ["mamba scan as transformers' torch path runs it: the state contraction y_t = h_t C_t is S batched "
                f"matmuls ({sympy.sympify(FLOPS_PER_MAC * b * e * n * s)} FLOPs, matmul class `scan`, counted by "
                "FlopCounterMode, charged like any matmul); the recurrence h = exp(A dt) h + dt B x is CUDA-core work; "
                "its backward adds every step's full-size slice gradient (quadratic in S). A fused selective-scan "
                "kernel runs the contraction as FMAs on CUDA cores and none of those adds (docs/conventions.md)",
                state_note(call, b * e * n, "B*E*N", b * e * k, "B*E*K")]

    def build(self, call: OpCall, ev):
        from costspec.nn.ssm import Mamba as TorchMamba

        a = call.attrs
        _, _, c, e, n, r, _ = self._sizes(call)
        return TorchMamba(ev(c), ev(e), ev(n), ev(a.d_conv), ev(r), a.bias, a.conv_bias, bool(a.inner_norms))
