"""`memory --pass train --check` with activation checkpointing: the moment a checkpointed block's forward has
been re-run in backward (the saves held, the re-run's saves and output, the output's gradient, a tied
table's pending gradient) against MemTracker's snapshot at the end of that re-run, category by category, on
narrow vit_b and llama_1b with `--checkpoint blocks` and `every:2`."""
from __future__ import annotations

import json

import pytest

import costspec
from costspec.analysis.memory import memory_kinds, training_moments
from costspec.analysis.memory_peak import RECOMPUTE, RECOMPUTE_BOUND
from costspec.core.errors import UsageError
from costspec.model import load
from costspec.runtime.mem_tracker import check_memory
from tests.common import ROOT

pytest.importorskip("torch")

SMALL = {"vit_b": {"img": 32, "patch": 8, "C": 32, "heads": 2, "L": 2},
         "llama_1b": {"L": 2, "S": 16, "C": 32, "heads": 2, "KV": 1, "F": 64, "V": 64}}
EXACT = ("Parameter", "Gradient", "Optstate", "Activation", "Temp")


def categories(check) -> dict[str, tuple[int, int]]:
    return {ref: (ours, theirs) for ref, ours, theirs, _ in check.rows}


@pytest.mark.parametrize("setting", ["blocks", "every:2"])
@pytest.mark.parametrize("spec", sorted(SMALL))
def test_the_recompute_moment_is_memtrackers(spec, setting):
    model = load(ROOT / "specs" / f"{spec}.yaml", checkpoint=setting)
    values = model.bind(2, SMALL[spec])
    peak, forward, recompute = check_memory(model, values, "adamw")
    assert recompute.moment == RECOMPUTE and recompute.exact
    got = categories(recompute)
    for ref in EXACT:
        assert got[ref][0] == got[ref][1], (ref, got[ref])
    assert got["Temp"][0] > 0  # the re-run block's output gradient (and llama's pending tied-table gradient)
    for ref in EXACT:
        assert categories(forward)[ref][0] == categories(forward)[ref][1], (ref, categories(forward)[ref])
    # every modelled moment is a moment of the step: their largest is at most MemTracker's peak, which holds
    # the gradients an op's backward makes while it runs besides
    assert peak.peak[0] <= peak.peak[1]


def test_cli_reports_the_recompute_and_fails_on_none(cli):
    sets = [arg for k, v in SMALL["llama_1b"].items() for arg in ("--set", f"{k}={v}")]
    out = cli("memory", ROOT / "specs/llama_1b.yaml", "--pass", "train", "--checkpoint", "blocks", "-b", "1",
              "--check", "--format", "json", *sets)
    data = json.loads(out.stdout)
    assert out.returncode == (0 if data["ok"] else 1), out.stderr
    assert data["recompute"]["exact"] and data["recompute"]["costspec"] > 0
    assert data["recompute"]["categories"]["Temp"]["costspec"] == data["recompute"]["categories"]["Temp"]["memtracker"]


BLOCK_USE = """
costspec: 1
name: ck
dims: {B: 2, S: 8, C: 16, L: 2}
input: [B, S, C]
blocks:
  mlp_block:
    - residual: [{layernorm: {}}, {mlp: {hidden: 4*C}}]
layers:
  - linear: {out: C}
  - repeat: L
    name: blocks
    body: mlp_block
  - block: mlp_block
    name: last
    checkpoint: true
  - linear: {out: C}
"""


def test_a_checkpointed_block_use():
    """`checkpoint: true` on a block use: the plain repeat's saves before it are held, the last linear's freed."""
    model = costspec.loads(BLOCK_USE)
    _, _, recompute = check_memory(model, model.bind(), "adam")
    assert recompute.exact, recompute.rows


def test_variant_groups_keep_the_bound_and_are_not_checked():
    text = BLOCK_USE.replace("    body: mlp_block\n", "    body: mlp_block\n    checkpoint: {every: 2}\n"
                             "    at: [{indices: [1], name: odd}]\n").replace("    checkpoint: true\n", "")
    model = costspec.loads(text)
    names = [m.name for m in training_moments(model, memory_kinds(model, "train"))]
    assert RECOMPUTE_BOUND in names and RECOMPUTE not in names
    with pytest.raises(UsageError, match="upper bound"):
        check_memory(model, model.bind(), "adam")
