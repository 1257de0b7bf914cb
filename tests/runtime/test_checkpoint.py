"""Activation checkpointing against torch: the generated module runs checkpointed parts under
torch.utils.checkpoint, `validate` matches it row by row, and the analytic train FLOPs equal
FlopCounterMode on an independent torch.utils.checkpoint run of the same network."""
from __future__ import annotations

import pytest
import sympy

import costspec
from costspec.core.expr import evaluator
from costspec.runtime.validate import validate

torch = pytest.importorskip("torch")

SPEC = """
costspec: 1
name: ck
dims: {{B: 2, S: 4, C: 8, H: 24, L: {L}}}
input: [B, S, C]
precision: {{dtype: fp32}}
blocks:
  ff:
    - linear: {{out: H}}
    - activation: {{fn: gelu}}
    - linear: {{out: C}}
layers:
  - linear: {{out: C}}
  - repeat: L
    name: blocks
    body: ff
{extra}
"""


def matmul(model, pass_: str, **dims) -> int:
    """The analytic matmul-class FLOPs (what FlopCounterMode counts) of `pass_` at `dims`."""
    ev = evaluator(model.bind(sets=dims))
    return ev(sum(model.cost(pass_).matmul.values(), sympy.Integer(0)))


class Independent(torch.nn.Module):
    """The spec written by hand in torch, each block under torch.utils.checkpoint when `every` picks it."""

    def __init__(self, C: int, H: int, L: int, every: int):
        super().__init__()
        self.inp = torch.nn.Linear(C, C)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(C, H), torch.nn.GELU(),
                                                              torch.nn.Linear(H, C)) for _ in range(L))
        self.every = every

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        x = self.inp(x)
        for i, block in enumerate(self.blocks):
            picked = self.every and i % self.every == 0
            x = checkpoint(block, x, use_reentrant=False) if picked else block(x)
        return x


def counted(L: int, every: int, early_stop: bool) -> int:
    """FlopCounterMode's forward + backward FLOPs of the independent module (B=2, S=4, C=8, H=24) on meta."""
    from torch.utils.checkpoint import set_checkpoint_early_stop
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        module = Independent(8, 24, L, every)
        x = torch.randn(2, 4, 8)
    counter = FlopCounterMode(display=False)
    with counter, set_checkpoint_early_stop(early_stop):
        module(x).sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("L, extra, every", [(3, "    checkpoint: true", 1), (5, "    checkpoint: {every: 2}", 2),
                                             (3, "", 0)])
def test_train_flops_equal_an_independent_torch_checkpoint_run(L, extra, every):
    model = costspec.loads(SPEC.format(L=L, extra=extra))
    assert matmul(model, "train", L=L) == counted(L, every, early_stop=False)


def test_pytorch_early_stop_skips_what_follows_the_last_saved_tensor():
    """The convention, pinned: with PyTorch's default early stop the recomputation ends when the last tensor
    backward needs is saved: the block's last GEMM (which saves its inputs before it runs) is not re-run.
    costspec counts the whole forward (early stop off, as the generated module runs, and the reentrant
    checkpoint always); the difference is exactly the last GEMM of each checkpointed instance."""
    model = costspec.loads(SPEC.format(L=3, extra="    checkpoint: true"))
    last_gemm = 2 * (2 * 4) * 24 * 8
    assert counted(3, 1, early_stop=True) == matmul(model, "train", L=3) - 3 * last_gemm


@pytest.mark.parametrize("extra", ["    checkpoint: true", "    checkpoint: {every: 2}\n    at: [{indices: [0], name: first}]"])
def test_validate_matches_the_checkpointed_module_row_by_row(extra):
    model = costspec.loads(SPEC.format(L=3, extra=extra))
    plain = costspec.loads(SPEC.format(L=3, extra=""))
    result = validate(model, model.bind(), "train")
    assert result.ok, result.failures()
    backward = result.total("backward").values
    assert backward["matmul_measured"] == backward["matmul_analytic"] > matmul(plain, "backward")


def test_the_generated_module_wraps_the_picked_instances():
    model = costspec.loads(SPEC.format(L=4, extra="    checkpoint: {every: 2}"))
    with torch.device("meta"):
        module, _ = model.to_torch()
    assert [scope.checkpointed for scope in module.blocks] == [True, False, True, False]


def test_a_checkpointed_block_with_attention_and_values_read_from_outside():
    text = """
costspec: 1
name: attn_ck
dims: {B: 2, S: 4, C: 8}
input: [B, S, C]
blocks:
  blk:
    - residual: [{layernorm: {}}, {attention: {heads: 2, backend: math}}]
    - add: {with: skip}
layers:
  - linear: {out: C}
    save: skip
  - block: blk
    checkpoint: true
  - linear: {out: C}
"""
    model = costspec.loads(text)
    result = validate(model, model.bind(), "train")
    assert result.ok, result.failures()
    plain = costspec.loads(text.replace("    checkpoint: true\n", ""))
    gained = result.total("backward").values["matmul_analytic"] - matmul(plain, "backward")
    assert gained == matmul(plain, "forward") - 2 * (2 * 4 * 8 * 8) * 2  # the block's forward: all but the linears
