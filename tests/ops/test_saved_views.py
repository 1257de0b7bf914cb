"""A reshape of a slice is a view where only size-1 dims break the slice's contiguity and a copy elsewhere: the
saved-bytes walk follows torch (the linear after it keeps the slice's whole storage, or its own copy)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.model import loads  # noqa: E402
from costspec.runtime.saved_bytes import compare_saved  # noqa: E402

SPEC = """costspec: 1
name: views
dims: {{R: {rows}, W: {width}}}
precision: {{dtype: bf16}}
input: [R, W]
layers:
  - layernorm: {{}}
  - slice: {{axis: -1, start: 0, end: {end}}}
  - reshape: {{shape: [1, -1]}}
  - linear: {{out: 2}}
"""


@pytest.mark.parametrize("rows, width, end, linear", [
    (2, 2, 1, 2 * 2 * 2),  # (2, 1) of (2, 2): viewed as one row, the linear keeps the norm's whole output
    (2, 3, 2, 2 * 2 * 2),  # (2, 2) of (2, 3): strided, the reshape copies its 4 elements
    (1, 3, 2, 1 * 3 * 2),  # one row: a view of the norm's output
])
def test_a_reshaped_slice_is_a_view_or_a_copy_as_in_torch(rows, width, end, linear):
    model = loads(SPEC.format(rows=rows, width=width, end=end))
    comparison = compare_saved(model, model.bind())
    assert not comparison.failures()
    assert dict((row, a) for row, a, _ in comparison.rows)["linear"] == linear
