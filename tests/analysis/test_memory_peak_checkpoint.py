"""The recompute moment of a checkpointed training step from the dims by hand: what is held when backward
has re-run the last checkpointed instance of a repeat (llama_1b and vit_b, `blocks` and `every:2`)."""
from __future__ import annotations

import sympy

import costspec
from costspec.analysis.memory import memory_kinds, training_moments
from costspec.analysis.memory_peak import RECOMPUTE, RECOMPUTE_BOUND, Category
from costspec.model import load
from costspec.tree.saved import saved_bytes
from tests.common import ROOT

LLAMA = ROOT / "specs/llama_1b.yaml"
VIT = ROOT / "specs/vit_b.yaml"


def moment(model, values) -> dict[Category, int]:
    moments = {m.name: m for m in training_moments(model, memory_kinds(model, "train"))}
    return {c: int(sympy.ceiling(b.xreplace(values))) for c, b in moments[RECOMPUTE].parts.items()}


def block_saves(path, sets: dict) -> int:
    """What one plain block instance saves (a model of one layer, no checkpointing)."""
    one = load(path)
    at = one.bind(sets={**sets, "L": 1})
    return sum(int(b.xreplace(at)) for row, b in saved_bytes(one.root).items() if row.startswith("layers."))


def test_llama_blocks():
    sets = {"B": 2, "S": 16, "C": 32, "heads": 2, "KV": 1, "F": 64, "V": 64, "L": 3}
    model = load(LLAMA, checkpoint="blocks")
    values = model.bind(sets=sets)
    got = moment(model, values)
    B, S, C, L, V = (sets[k] for k in ("B", "S", "C", "L", "V"))
    x = B * S * C * 2  # a block's input / output, bf16
    assert got[Category.ACTIVATIONS] == 8 * B * S + L * x  # the token ids (int64) and every block's input
    assert got[Category.RECOMPUTED] == block_saves(LLAMA, sets)  # (its RMSNorm keeps an fp32 copy, not x)
    assert got[Category.RECOMPUTED_OUTPUT] == x and got[Category.GRADIENT_IN_FLIGHT] == x
    assert got[Category.TIED_GRADIENTS] == V * C * 2  # the head's gradient of the table, waiting for the embedding's
    assert got[Category.OUTPUT] == 4  # the loss and its gradient


def test_llama_every_2_frees_the_plain_instances_after_the_last_checkpointed():
    sets = {"B": 2, "S": 16, "C": 32, "heads": 2, "KV": 1, "F": 64, "V": 64, "L": 4}
    model = load(LLAMA, checkpoint="every:2")
    values = model.bind(sets=sets)
    got = moment(model, values)
    x = sets["B"] * sets["S"] * sets["C"] * 2
    # instances 0 and 2 keep their inputs, plain instance 1 all of its saves; plain 3 ran its backward already
    assert got[Category.ACTIVATIONS] == 8 * sets["B"] * sets["S"] + 2 * x + block_saves(LLAMA, sets)


def test_vit_blocks():
    sets = {"B": 2, "img": 32, "patch": 8, "C": 32, "heads": 2, "L": 2}
    model = load(VIT, checkpoint="blocks")
    values = model.bind(sets=sets)
    got = moment(model, values)
    B, C, L = sets["B"], sets["C"], sets["L"]
    S = (sets["img"] // sets["patch"]) ** 2 + 1
    x = B * S * C * 2
    image = B * 3 * sets["img"] ** 2 * 2  # the patch embedding's conv keeps the image
    assert got[Category.ACTIVATIONS] == image + L * x
    one = load(VIT)
    at = one.bind(sets={**sets, "L": 1})
    inner = sum(int(b.xreplace(at)) for row, b in saved_bytes(one.root).items() if row.startswith("blocks."))
    assert got[Category.RECOMPUTED] == inner - x  # its first LayerNorm's input is the checkpoint's
    assert got[Category.RECOMPUTED_OUTPUT] == x and got[Category.GRADIENT_IN_FLIGHT] == x
    assert Category.TIED_GRADIENTS not in got


NESTED = """
costspec: 1
name: nested
dims: {B: 2, S: 8, C: 16, L: 2}
input: [B, S, C]
blocks:
  mlp_block:
    - residual: [{layernorm: {}}, {mlp: {hidden: 4*C}}]
  outer:
    - block: mlp_block
      checkpoint: true
    - linear: {out: C}
layers:
  - linear: {out: C}
  - repeat: L
    name: blocks
    body: outer
"""


def test_a_checkpointed_block_inside_a_repeat_keeps_the_bound():
    """Its rows count every instance of the repeat around it, so what is held when one re-runs is not followed."""
    model = costspec.loads(NESTED)
    names = [m.name for m in training_moments(model, memory_kinds(model, "train"))]
    assert RECOMPUTE_BOUND in names and RECOMPUTE not in names
