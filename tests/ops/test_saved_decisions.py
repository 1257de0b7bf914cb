"""Every registered op has decided what its module keeps for backward: it defines `OpDef.saved`, declares
`saves_nothing`, or says why it is not modelled yet (`saved_unmodelled`). (What they keep is checked against autograd in tests/ops/test_vs_torch.py, whose train runs
compare the saved bytes, and over the zoo in tests/runtime/test_saved_bytes.py.)"""
from __future__ import annotations

from costspec.ops import OPS
from costspec.ops.opdef import OpDef


def test_every_op_decides_what_it_saves():
    undecided = sorted(name for name, op in OPS.items()
                       if not op.saves_nothing and not op.saved_unmodelled and type(op).saved is OpDef.saved)
    assert not undecided, f"ops that neither define saved() nor declare saves_nothing or why not: {undecided}"


def test_the_ops_whose_saved_tensors_are_not_modelled():
    """The known gaps, each with its reason: a new op must not join them unnoticed."""
    unmodelled = {name for name, op in OPS.items() if op.saved_unmodelled}
    assert unmodelled == set()


def test_an_op_that_saves_nothing_does_not_also_define_saved():
    both = sorted(name for name, op in OPS.items() if op.saves_nothing and type(op).saved is not OpDef.saved)
    assert not both, f"ops declaring saves_nothing that also define saved(): {both}"
