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

In 16 bits the generated scan multiplies fp32 states by 16-bit C, which torch's cpu kernels refuse: it cannot be
measured there and is not modelled.
"""
from __future__ import annotations

import sympy

from costspec.ops.opdef import INPUT, STAT_BYTES, OpCall, Saved


def mamba_saved(call: OpCall, sizes) -> list[Saved]:
    """See the module docstring; `sizes`: (B, S, C, E, N, r, B*S)."""
    if call.precision.bytes_per_element != STAT_BYTES:
        raise NotImplementedError("what mamba saves for backward in 16 bits is not modelled (its generated scan "
                                  "mixes fp32 states and 16-bit C, which torch's cpu kernels refuse)")
    b, s, c, e, n, r, t = sizes
    f = STAT_BYTES
    bes, besn = b * e * s, b * e * s * n
    view = sympy.Or(sympy.Eq(b, 1), sympy.Eq(s, 1), sympy.Eq(e, 1))
    saved = [Saved(INPUT, t * c, f, folded=True), Saved("in_proj", t * 2 * e, f),
             Saved("conv", b * e * (s + call.attrs.d_conv - 1), f), Saved("conv_silu", bes, f),
             Saved("x_proj_input", sympy.Piecewise((0, view), (t * e, True)), f), Saved("x_proj", t * (r + 2 * n), f)]
    if call.attrs.inner_norms:
        for name, width in (("dt", r), ("b", n), ("c", n)):
            saved += [Saved(f"{name}_rstd", t, f), Saved(f"{name}_normalized", t * width, f),
                      Saved(f"{name}_norm", t * width, f)]
    return saved + [
        Saved("a_exp", e * n, f), Saved("a", e * n, f), Saved("dt_biased", bes, f), Saved("dt", bes, f),
        Saved("da", besn, f), Saved("dt_b", besn, f), Saved("states", (s + 1) * b * e * n, f),
        Saved("y", bes, f), Saved("z_silu", bes, f), Saved("gated", bes, f)]
