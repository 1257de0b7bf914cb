"""What `mamba` and `mamba2` share: the aten ops their modules run beyond the plain pointwise ones
(their runtime footprint), the causal depthwise convolution both run before the scan, and the state
they keep between decoding steps.

The cost-table kinds of the footprint: `exp` (the discretisation exp(A dt), the chunk decays),
`softplus` (dt), `clamp` (Mamba-2's dt_limit), `cumsum` (Mamba-2's segment sums), `select` for the
masks (tril and its negation, masked_fill, and clamp's backward: ge, le, logical_and, where), and a
subtraction (`aten.sub`, Mamba-2's decay exponents) counted as the `add` it is.
"""
from __future__ import annotations

from dataclasses import dataclass

from costspec.core.conventions import FLOPS_PER_MAC
from costspec.core.vocab import Fusion, Phase
from costspec.ops.conv import conv_backward, conv_forward, conv_outputs
from costspec.ops.opdef import OpCall, Reconcile, Runtime
from costspec.ops.work import ZERO, Expr, Gemm, Traffic, Work, pointwise

SSM_ATEN = {
    "aten.exp": "exp",
    "aten.softplus": "softplus",
    "aten.softplus_backward": "softplus_backward",
    "aten.clamp": "clamp",
    "aten.cumsum": "cumsum",
    "aten.sub": "add",
    "aten.tril": "select",
    "aten.bitwise_not": "select",
    "aten.masked_fill": "select",
    "aten.ge": "select",
    "aten.le": "select",
    "aten.logical_and": "select",
    "aten.logical_and_": "select",
}
GEMM_AND_CONV = {"gemm": "gemm", "conv": "conv"}
MAMBA_RUNTIME = Runtime(aten=SSM_ATEN, kernels=GEMM_AND_CONV)
# transformers' gated RMSNorm (and costspec.nn.ssm's, of the same name): one fused kind per element, as
# nn.RMSNorm is one `rmsnorm`, and as mamba_ssm's Triton kernel runs it
MAMBA2_RUNTIME = Runtime(aten=SSM_ATEN, decomposed=("MambaRMSNormGated", "rmsnorm_gated", "rmsnorm_gated_backward"),
                         kernels=GEMM_AND_CONV)


@dataclass(frozen=True)
class CausalConv:
    """transformers' causal_conv1d_fn on [B, channels, S]: a depthwise conv of kernel K padded by K - 1 on
    both sides, whose first S outputs are kept (the K - 1 trailing ones are computed and dropped: the
    conv runs over S + K - 1 positions), then SiLU."""

    part: str
    b: Expr
    s: Expr
    channels: Expr
    k: Expr
    bias: bool

    @property
    def length(self) -> Expr:
        return self.s + self.k - 1

    @property
    def params(self) -> Expr:
        return self.channels * self.k + (self.channels if self.bias else ZERO)

    def forward(self) -> Work:
        """2*B*ch*(S+K-1)*K conv FLOPs (+ its bias add), SiLU on the B*ch*S kept."""
        ch = self.channels
        conv = conv_forward(self.b, ch, ch, 1, self.length, 1, self.k, ch, self.bias)
        return conv + pointwise("silu", self.b * ch * self.s)

    def backward(self) -> Work:
        """SiLU's backward, then dX and dW of the conv (its input always needs a gradient: in_proj's output)."""
        ch = self.channels
        return (conv_backward(self.b, ch, ch, 1, self.length, 1, self.k, ch, self.bias, True)
                + pointwise("silu_backward", self.b * ch * self.s))

    def reconcile(self, pass_: Phase, ev) -> list[Reconcile]:
        """torch 2.13's FlopCounterMode counts convolution_backward's grad_weight as groups x F (its formula
        ignores groups; depthwise: groups = channels); costspec counts the F executed."""
        if pass_ != Phase.BACKWARD or ev(self.channels) == 1:
            return []
        weight_grad = FLOPS_PER_MAC * self.b * self.channels * self.length * self.k
        return [Reconcile("conv-grouped-weight-grad", self.part, Work({"conv": (self.channels - 1) * weight_grad}),
                          "FlopCounterMode counts convolution_backward's grad_weight as g*F (its formula ignores "
                          "groups; the conv is depthwise, g = channels); costspec counts the F = 2*MACs executed")]

    def outputs(self, pass_: Phase) -> Expr:
        ch = self.channels
        return conv_outputs(self.b * ch * self.length, ch * self.k, self.b * ch * self.s, pass_, True)

    def gemm(self) -> Gemm:
        """The implicit GEMM per channel: m = B*(S+K-1), n = 1, k = K."""
        return Gemm(self.part, self.b * self.length, 1, self.k, self.channels, "conv")

    def traffic(self, pass_: Phase, fusion: Fusion) -> Traffic:
        """A causal-conv kernel with SiLU fused (causal_conv1d): forward reads x and the weights, writes y;
        backward reads dy, x and the weights, writes dx and the weight gradients. `--fusion none` (the torch
        path): the S + K - 1 conv outputs are written, and read back by the SiLU (backward: the zero-padded
        gradient written and read by the conv's backward)."""
        x = self.b * self.channels * self.s
        padded = self.b * self.channels * self.length if fusion == Fusion.NONE else ZERO
        if pass_ == Phase.FORWARD:
            return Traffic(self.part, x + self.params + padded, x + padded)
        return Traffic(self.part, 2 * x + self.params + padded, x + self.params + padded)


def state_note(call: OpCall, ssm: Expr, ssm_what: str, conv: Expr, conv_what: str) -> str:
    """The inference state one layer keeps between decoding steps, in elements and bytes at the layer's dtype
    (transformers' cache keeps it in the model's dtype)."""
    size = call.precision.bytes_per_element
    return (f"inference state per layer (what a decoding step reads and updates in place of a KV cache, constant "
            f"in the sequence length): ssm state {ssm_what} = {ssm} elements, conv state {conv_what} = {conv} "
            f"elements (the last K conv inputs, as transformers' cache and mamba_ssm keep them); "
            f"{(ssm + conv) * size} bytes at {call.precision.dtype}")
