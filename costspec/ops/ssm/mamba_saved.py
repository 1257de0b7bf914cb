"""What a `mamba` layer's module keeps for backward (`Mamba.saved`): transformers' MambaMixer torch path (the
sequential selective scan) as costspec.nn.ssm runs it, in fp32 (B batch, S tokens, E inner width, N state, r dt
rank, K conv taps):

* the input (in_proj's weight gradient); in_proj's output (B*S x 2E: the conv reads its x half, SiLU its z half);
* the conv's output (B*E*(S+K-1): SiLU reads its first S steps, a view) and SiLU's output (the scan's x);
* x_proj's input, a copy of the (B, S, E) view of SiLU's output unless one sample, one token or one channel
  folds it as a view; x_proj's output (dt, B and C are views of it), or with Jamba's inner norms each norm's
  1/rms, normalised values and output (its input, the view, is x_proj's output);
* -exp(A_log): exp's output and its negation (E*N each);
* the scan: softplus's input (dt + bias) and output, exp(A dt) and dt*B (B*E*S*N each), every state h_0..h_S
  (B*E*N each: the zero start, kept by the first step's multiply), the scan's output y, SiLU(z) and y*SiLU(z)
  (out_proj's input).

In 16 bits (transformers' dtypes: the scan's discretisation and states in fp32) p-byte tensors are those of the
layer's dtype, the rest fp32: the input, in_proj's output, the conv's and SiLU's outputs, x_proj's input and output,
dt + bias and softplus(dt), SiLU(z) and out_proj's input (the gated output cast back) stay p bytes; -exp(A_log),
exp(A dt), dt*B and y are fp32; B and x upcast for dt*B*x are fp32 copies (B*S*N and B*E*S), and so is D (E);
the states: the zero start (p bytes), every state's p-byte cast (the contraction's operand) and h_1..h_{S-1} in
fp32 (each read by the next step's multiply; the last one only by its cast). Jamba's norms (torch's rms_norm
composite) upcast their input: each keeps that fp32 copy, its fp32 1/rms and normalised values and its p-byte
output, except B's, which only its fp32 copy in the scan reads; x_proj's output is then saved by none.
"""
from __future__ import annotations

import sympy

from costspec.ops.opdef import INPUT, STAT_BYTES, OpCall, Saved


def mamba_saved(call: OpCall, sizes) -> list[Saved]:
    """See the module docstring; `sizes`: (B, S, C, E, N, r, B*S)."""
    b, s, c, e, n, r, t = sizes
    p, f = call.precision.bytes_per_element, STAT_BYTES
    half = p != STAT_BYTES
    bes, besn, ben = b * e * s, b * e * s * n, b * e * n
    view = sympy.Or(sympy.Eq(b, 1), sympy.Eq(s, 1), sympy.Eq(e, 1))
    norms = bool(call.attrs.inner_norms)
    saved = [Saved(INPUT, t * c, p, folded=True), Saved("in_proj", t * 2 * e, p),
             Saved("conv", b * e * (s + call.attrs.d_conv - 1), p), Saved("conv_silu", bes, p),
             Saved("x_proj_input", sympy.Piecewise((0, view), (t * e, True)), p)]
    if not (norms and half):
        saved.append(Saved("x_proj", t * (r + 2 * n), p))
    if norms:
        for name, width in (("dt", r), ("b", n), ("c", n)):
            if half:
                saved.append(Saved(f"{name}_norm_input", t * width, f))
            saved += [Saved(f"{name}_rstd", t, f), Saved(f"{name}_normalized", t * width, f)]
            if not (half and name == "b"):
                saved.append(Saved(f"{name}_norm", t * width, p))
    saved += [Saved("a_exp", e * n, f), Saved("a", e * n, f), Saved("dt_biased", bes, p), Saved("dt", bes, p),
              Saved("da", besn, f)]
    if half:
        saved += [Saved("b_upcast", b * s * n, f), Saved("x_upcast", bes, f)]
    saved.append(Saved("dt_b", besn, f))
    if half:
        saved += [Saved("state_zero", ben, p), Saved("state_casts", s * ben, p), Saved("states", (s - 1) * ben, f),
                  Saved("d", e, f)]
    else:
        saved.append(Saved("states", (s + 1) * ben, f))
    return saved + [Saved("y", bes, f), Saved("z_silu", bes, p), Saved("gated", bes, p)]
