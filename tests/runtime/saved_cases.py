"""Shared by the saved-bytes tests of single ops: an inline spec of some layers, and the check that the spec's
saved bytes equal what autograd keeps on its generated module (saved_tensors_hooks, per op row)."""
from __future__ import annotations

import yaml

import costspec


def spec_text(shape: list, layers: list, dtype: str) -> str:
    return yaml.safe_dump({"costspec": 1, "name": "case", "precision": {"dtype": dtype}, "input": shape,
                           "layers": layers}, sort_keys=False)


def assert_saved_equal(text: str) -> int:
    """The spec's saved bytes equal autograd's, row by row; the bytes measured."""
    from costspec.runtime.saved_bytes import compare_saved

    model = costspec.loads(text)
    comparison = compare_saved(model, model.bind())
    assert not comparison.failures(), text + "\n" + "\n".join(comparison.failures())
    return sum(m for _, _, m in comparison.rows)
