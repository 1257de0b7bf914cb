"""The tree layer after its split: module sizes, dotted names, and the dataflow's fanout."""
from __future__ import annotations

from pathlib import Path

import pytest

import costspec
from costspec.core.errors import SpecError
from costspec.tree.naming import scope_members
from costspec.tree.nodes import OpNode, ResidualNode

ROOT = Path(__file__).resolve().parents[2]
SPEC = """costspec: 1
name: t
input: [2, 8]
layers:
  - linear: {out: 8}
  - linear: {out: 8}
    save: h
  - activation: {}
  - linear: {out: 8}
    name: linear
  - add: {with: h}
"""


@pytest.mark.parametrize("package", ["tree", "cli"])
def test_modules_stay_small(package):
    for path in sorted((ROOT / "costspec" / package).glob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= 600, f"{path.relative_to(ROOT)} has {lines} lines"


def test_default_names_that_collide_are_numbered_and_explicit_names_kept():
    model = costspec.loads(SPEC)
    names = [node.name for node in model.root.children]
    # two unnamed linears beside an explicit `linear`: both numbered, the explicit one kept
    assert names == ["linear1", "linear2", "h_fanout", "act", "linear", "add"]


def test_two_explicit_names_in_one_scope_are_an_error():
    spec = SPEC.replace("    name: linear\n", "    name: fc\n  - linear: {out: 8}\n    name: fc\n")
    with pytest.raises(SpecError, match="two layers are named 'fc' in the same scope"):
        costspec.loads(spec)


def test_a_value_read_twice_gets_a_fanout_after_its_saving_layer():
    model = costspec.loads(SPEC)
    children = model.root.children
    saving = children[1]
    fanout = children[2]
    assert isinstance(fanout, OpNode) and fanout.op.name == "fanout"
    assert fanout.value is not None and fanout.value.name == "h" and fanout.saves == "h"
    assert saving.saves is None and saving.value is None  # the fanout now names the value
    assert fanout.value.uses == 2  # the next layer and the add


def test_scope_members_look_through_residuals():
    spec = """costspec: 1
name: r
input: [2, 8]
layers:
  - residual:
      - linear: {out: 8}
        name: fc
  - linear: {out: 8}
    name: head
"""
    model = costspec.loads(spec)
    assert isinstance(model.root.children[0], ResidualNode)
    assert [node.name for node in scope_members(model.root)] == ["fc", "add", "head"]
