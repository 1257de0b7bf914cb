"""Activations saved for backward, the spec's count (`costspec.tree.saved`) against autograd's: every tensor a
saved_tensors_hooks pack hook sees in a training forward of the generated module (FakeTensorMode, deduplicated by
storage, parameters and buffers excluded), per op row. (The zoo, at small dims with each kernel family, is walked
in tests/zoo/test_saved_bytes.py.)"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.runtime.saved_bytes import measure_saved  # noqa: E402


def test_a_view_saved_twice_is_one_tensor():
    """relu keeps its output, the linear after it its input: one tensor, charged to relu; a flatten between them
    (a view) changes nothing."""
    text = """costspec: 1
name: views
precision: {dtype: fp32}
input: [2, 3, 4]
layers:
  - linear: {out: 4}
  - activation: {fn: relu}
  - flatten: {start: 1}
  - linear: {out: 5}
"""
    from costspec.model import loads
    from costspec.tree.saved import saved_bytes

    model = loads(text)
    # linear1 keeps the model input, act its output, linear2 (through the flatten) nothing new
    assert saved_bytes(model.root) == {"linear1": 2 * 3 * 4 * 4, "act": 2 * 3 * 4 * 4}
    measured = measure_saved(model, model.bind())
    assert measured.by_layer == {"linear1": 96, "act": 96} and len(measured.tensors) == 2
