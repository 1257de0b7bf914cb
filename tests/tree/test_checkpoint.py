"""Activation checkpointing in the tree: `checkpoint:` on a block use or a repeat adds the checkpointed
forward to the backward (and so to train), per row and in total; bad uses are refused with the place."""
from __future__ import annotations

import pytest
import sympy

import costspec
from costspec.core.errors import SpecError

SPEC = """
costspec: 1
name: ck
dims: {{B: 2, S: 4, C: 8, L: {L}}}
input: [B, S, C]
blocks:
  mlp_block:
    - residual: [{{layernorm: {{}}}}, {{mlp: {{hidden: 4*C}}}}]
layers:
  - linear: {{out: C}}
  - repeat: L
    name: blocks
    body: mlp_block
{extra}
  - layernorm: {{}}
"""


def spec(extra: str = "", L: int | str = 3) -> costspec.Model:
    return costspec.loads(SPEC.format(extra=extra, L=L))


def flops(report, name: str | None = None) -> int:
    """Total FLOPs of row `name` of an evaluated report (the model's total for None)."""
    if name is None:
        return report.total
    row = next(r for r in report.table.all_rows() if r.name == name)
    return int(row.values["total_flops"])


def symbols(model) -> dict[str, sympy.Symbol]:
    return {d.name: d.symbol for d in model.dims.dims.values()}


def test_a_checkpointed_repeat_adds_the_forward_of_every_instance_to_backward_and_train():
    plain, ck = spec(), spec("    checkpoint: true")
    s = symbols(plain)
    B, S, C, L = s["B"], s["S"], s["C"], s["L"]
    T, H = B * S, 4 * C
    # one instance's forward by hand: layernorm, fc1 + bias, gelu, fc2 + bias, residual add
    body_matmul = 2 * T * C * H * 2
    for pass_ in ("backward", "train"):
        gained = ck.cost(pass_).tc - plain.cost(pass_).tc
        assert sympy.expand(gained - L * body_matmul) == 0
    body = plain.node("blocks").children[0].forward()
    assert sympy.expand(ck.cost("train").flops - plain.cost("train").flops - L * body.flops) == 0
    assert ck.cost("forward").flops == plain.cost("forward").flops
    assert ck.cost("train").params == plain.cost("train").params  # parameters are counted once


def test_every_row_inside_gains_its_own_forward():
    plain, ck = spec(), spec("    checkpoint: true")
    at = {"B": 2, "S": 4, "C": 8, "L": 3}
    p, c = plain.evaluate("backward", **at), ck.evaluate("backward", **at)
    f = plain.evaluate("forward", **at)
    for name in ("blocks.norm", "blocks.mlp", "blocks.mlp.fc1", "blocks.mlp.act", "blocks.mlp.fc2", "blocks.add"):
        assert flops(c, name) == flops(p, name) + flops(f, name), name
    assert flops(c, "linear") == flops(p, "linear")  # outside: unchanged
    assert flops(c) == flops(p) + flops(f, "blocks")


def test_every_n_checkpoints_instances_0_n_2n_and_so_on():
    at = {"B": 2, "S": 4, "C": 8}
    one = flops(spec(L=1).evaluate("forward", L=1, **at), "blocks")
    plain = {n: flops(spec(L=n).evaluate("train", L=n, **at)) for n in (5, 6)}
    for n, every, checkpointed in ((5, 2, 3), (6, 2, 3), (5, 3, 2), (5, 6, 1)):
        got = flops(spec(f"    checkpoint: {{every: {every}}}", L=n).evaluate("train", L=n, **at))
        assert got == plain[n] + checkpointed * one, (n, every)


def test_every_n_is_the_ceiling_of_count_over_n_symbolically_and_counts_the_variants_apart():
    ck = spec("    checkpoint: {every: 2}\n    at: [{indices: [1, 2], name: pair}]", L="5")
    repeat = ck.node("blocks")
    assert repeat.checkpoint and repeat.checkpoint_every == 2
    pair, others = repeat.children
    assert repeat.checkpointed(pair) == 1  # index 2; index 1 is not (1 % 2 != 0)
    L = symbols(ck)["L"]
    assert repeat.checkpointed(others) == sympy.ceiling(L / 2) - 1  # 0 and 4 (and 6, 8, ... at larger L)
    at = {"B": 2, "S": 4, "C": 8}
    plain = flops(spec("    at: [{indices: [1, 2], name: pair}]", L=7).evaluate("train", L=7, **at))
    one = flops(spec(L=1).evaluate("forward", L=1, **at), "blocks")
    got = flops(ck.evaluate("train", L=7, **at))
    assert got == plain + 4 * one  # indices 0, 2, 4, 6


def test_a_checkpointed_block_use_and_the_flag_on_its_scope():
    text = SPEC.format(extra="", L=2).replace("  - layernorm: {}\n", "  - block: mlp_block\n    name: last\n"
                                                                     "    checkpoint: true\n")
    ck = costspec.loads(text)
    plain = costspec.loads(text.replace("    checkpoint: true\n", ""))
    assert ck.node("last").checkpoint and not ck.node("blocks").checkpoint
    gained = ck.cost("train").flops - plain.cost("train").flops
    assert sympy.expand(gained - plain.node("last").forward().flops) == 0


def test_nothing_is_recomputed_where_nothing_is_differentiated():
    text = """
costspec: 1
name: first
dims: {B: 2, C: 8}
input: [B, C]
blocks:
  act: [{activation: {fn: gelu}}, {scale: {by: 2}}]
layers:
  - block: act
    checkpoint: true
  - linear: {out: C}
"""
    ck = costspec.loads(text)
    plain = costspec.loads(text.replace("    checkpoint: true\n", ""))
    assert ck.cost("train").flops == plain.cost("train").flops  # no parameters, an input without gradient


@pytest.mark.parametrize("extra, where, words", [
    ("  - linear: {out: C}\n    checkpoint: true", "checkpoint", "belongs to a block use or a repeat, not to a linear"),
    ("  - residual: [{linear: {out: C}}]\n    checkpoint: true", "checkpoint", "not to a residual"),
    ("  - block: mlp_block\n    checkpoint: {every: 2}", "checkpoint", "picks instances of a repeat"),
])
def test_checkpoint_on_other_layers_is_refused_with_its_place(extra, where, words):
    text = SPEC.format(extra="", L=2).replace("  - layernorm: {}\n", extra + "\n")
    with pytest.raises(SpecError) as exc:
        costspec.loads(text)
    assert words in str(exc.value)
    assert exc.value.location.path.endswith(where)
    assert exc.value.location.line is not None


def test_nested_checkpoints_are_refused():
    text = SPEC.format(extra="    checkpoint: true", L=2).replace(
        "    - residual: [{layernorm: {}}, {mlp: {hidden: 4*C}}]",
        "    - block: inner\n      checkpoint: true\n  inner:\n    - residual: [{layernorm: {}}, {mlp: {hidden: 4*C}}]")
    with pytest.raises(SpecError) as exc:
        costspec.loads(text)
    assert "nested checkpoints" in str(exc.value)
    assert "$.layers[1]" in str(exc.value)  # the outer checkpointed layer is named


def test_the_roofline_reads_the_recomputed_forward_bytes_too():
    from costspec.analysis.roofline import total_bytes
    from costspec.tree.walk import NO_GRAD

    plain, ck = spec(), spec("    checkpoint: true")
    one = sympy.Integer(1)

    def train_bytes(model):
        return total_bytes(model.root, "train", one, NO_GRAD, "default")

    forward_of_blocks = total_bytes(plain.node("blocks"), "forward", one, NO_GRAD, "default")  # L instances
    assert sympy.expand(train_bytes(ck) - train_bytes(plain) - forward_of_blocks) == 0
    rows = {s.node.name: s for s in ck.walk()}
    fc1 = rows["blocks.mlp.fc1"]
    plain_fc1 = {s.node.name: s for s in plain.walk()}["blocks.mlp.fc1"]
    gained = total_bytes(fc1.node, "backward", fc1.instances, fc1.grad, "default") - total_bytes(
        plain_fc1.node, "backward", plain_fc1.instances, plain_fc1.grad, "default")
    assert sympy.expand(gained - total_bytes(plain_fc1.node, "forward", plain_fc1.instances, plain_fc1.grad,
                                             "default")) == 0
