"""What a `mamba2` layer's module keeps for backward (`Mamba2.saved`): transformers' Mamba2Mixer torch path (the
chunked SSD scan, `mamba2_chunk_scan`) as costspec.nn.ssm runs it, in fp32 (B batch, S tokens, C width, E = H*P inner
width, H heads of P channels, G groups, N state, K conv taps, chunks of Q positions, c = ceil(S/Q), Sp = c*Q; the
projection is W = 2E + 2GN + H wide, the conv D = E + 2GN channels):

* the input (in_proj's weight gradient) and in_proj's output (the conv reads a transposed view of it, the gate a view);
* the conv's output (B*D*(S+K-1): SiLU reads its first S steps) and SiLU's output (x, B and C are views of it);
* -exp(A_log) and its negation (H each); dt + bias, softplus's output and the clamped dt (B*S*H each);
* x zero-padded to Sp for the D skip (F.pad copies, also when it pads nothing);
* the segment sums' masks (bool: 2*Q^2 within the chunks, 2*(c+1)^2 across them), their exps (B*H*c*Q^2 and
  B*H*(c+1)^2), exp(last - cumsum) and exp(cumsum) (B*H*c*Q each);
* the einsums, each run as one batched matmul: C B^T's two operands (B*c*H*Q*N each), the scores (their product
  with the decays keeps them), (scores * L)'s operand (B*c*H*Q^2) and x's (B*c*H*Q*P), B (chunked, B*Sp*H*N: the
  product with the decays keeps it), B^T x's two operands (B*c*H*Q*N, B*c*H*Q*P), the chunk states' operand
  (B*(c+1)*H*P*N) of the recurrence, C states' two operands (B*c*H*Q*N, B*c*H*P*N) and its output (B*c*Q*H*P);
* the gated norm: y (B*Sp*E, the padded scan output it views), SiLU(gate), their product, 1/rms (B*S*G), the
  normalised values, and out_proj's input (B*S*E each).

In 16 bits (transformers' casts: the scan and the gated norm in fp32) the input, in_proj's and the conv's outputs,
dt + bias, softplus's output and out_proj's input (the norm's fp32 output cast back) are p bytes, the rest fp32;
x, the clamped dt (twice: for x*dt and for A*dt) and the gate are read through fp32 copies (B*S*E, 2*B*S*H, B*S*E)
in place of SiLU's output and dt themselves. The copies keep x's layout, so every fold is as in fp32.
"""
from __future__ import annotations

import sympy

from costspec.ops.opdef import INPUT, STAT_BYTES, OpCall, Saved

MASK_BYTES = 1  # torch.bool


def merges(dims) -> sympy.Boolean:
    """Whether dims [(size, stride), ...] (in this order) reshape to one as a view: skipping size-1 dims, each
    stride is the next dim's size times its stride."""
    if len(dims) <= 1:
        return sympy.true
    (size, stride), rest = dims[0], dims[1:]
    return sympy.Or(sympy.And(sympy.Eq(size, 1), merges(rest)),
                    sympy.And(sympy.Ne(size, 1), _next_merges(stride, rest)))


def _next_merges(stride, rest) -> sympy.Boolean:
    if not rest:
        return sympy.true
    (size, inner), more = rest[0], rest[1:]
    return sympy.Or(sympy.And(sympy.Eq(size, 1), _next_merges(stride, more)),
                    sympy.And(sympy.Ne(size, 1), sympy.Eq(stride, size * inner), merges(rest)))


def mamba2_saved(call: OpCall, sizes) -> list[Saved]:
    """See the module docstring; `sizes`: (B, S, C, E, H, P, G, N, Q, c, Sp)."""
    b, s, c, e, h, p, g, n, q, nc, sp = sizes
    f, bytes_ = STAT_BYTES, call.precision.bytes_per_element
    half = bytes_ != STAT_BYTES
    t, conv_dim = b * s, e + 2 * g * n
    width = 2 * e + 2 * g * n + h
    bhcq, chunked = b * h * nc * q, b * nc * h * q
    # torch.einsum folds each operand's batch dims (b, c, h) to one: B and C chunked are contiguous (B, c, Q, H, N);
    # x chunked keeps the conv's layout, S innermost (strides b: H*P*Sp, c: Q, h: P*Sp); the recurrence's output
    # (B, c + 1, H, P, N) is laid out (b, h, c, p, n)
    bc_view = merges([(b, nc * q * h * n), (nc, q * h * n), (h, n)])
    x_view = merges([(b, h * p * sp), (nc, q), (h, p * sp)])
    states_view = merges([(b, h * (nc + 1) * p * n), (nc, p * n), (h, (nc + 1) * p * n)])
    one_or_two = sympy.Piecewise((1, bc_view), (2, True))
    saved = [Saved(INPUT, t * c, bytes_, folded=True), Saved("in_proj", t * width, bytes_),
             Saved("conv", b * conv_dim * (s + call.attrs.d_conv - 1), bytes_),
             Saved("a_exp", h, f), Saved("a", h, f), Saved("dt_biased", t * h, bytes_),
             Saved("dt_softplus", t * h, bytes_)]
    if half:  # x and the clamped dt read through fp32 copies (dt two: x*dt's and A*dt's), the gate too
        saved += [Saved("x_upcast", t * e, f), Saved("dt_upcast", 2 * t * h, f), Saved("gate_upcast", t * e, f)]
    else:  # x is a view of SiLU's output
        saved += [Saved("conv_silu", b * conv_dim * s, f), Saved("dt", t * h, f)]
    return saved + [
        Saved("x_padded", b * sp * e, f),
        Saved("chunk_masks", 2 * q * q, MASK_BYTES), Saved("decay", bhcq * q, f),
        # C's operand of C B^T and of C states: its chunks once when both are views, else a copy each
        Saved("c_operands", one_or_two * chunked * n, f),
        Saved("scores_b", sympy.Piecewise((0, bc_view), (chunked * n, True)), f),  # else a view of b below
        Saved("scores", chunked * q, f), Saved("y_diag_scores", chunked * q, f),
        # x's operand of (scores L) x and of B^T x: its chunks once when both are views, else a copy each
        Saved("x_operands", sympy.Piecewise((b * sp * h * p, x_view), (2 * chunked * p, True)), f),
        Saved("decay_states", bhcq, f), Saved("b", b * sp * h * n, f), Saved("states_b", chunked * n, f),
        Saved("boundary_masks", 2 * (nc + 1) ** 2, MASK_BYTES), Saved("decay_chunk", b * h * (nc + 1) ** 2, f),
        Saved("chunk_states", b * (nc + 1) * h * p * n, f),
        Saved("y_off_states", sympy.Piecewise((nc + 1, states_view), (nc, True)) * b * h * p * n, f),
        Saved("exp_cumsum", bhcq, f), Saved("y_off", chunked * p, f),
        Saved("y", b * sp * e, f), Saved("gate_silu", t * e, f), Saved("gated", t * e, f),
        Saved("rstd", t * g, f), Saved("normalized", t * e, f), Saved("norm", t * e, bytes_)]
