"""costspec.ops.layout: permute, slice, chunk, split and pad (shapes only, no FLOPs) and their errors."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, forward, out_shape, params

spec = builder(dims="{B: 2}", input_="[B, 4, 10]")


def test_permute_slice_chunk_split_pad_shapes():
    assert out_shape(spec("- permute: {order: [0, 2, 1]}")) == (2, 10, 4)
    assert out_shape(spec("- slice: {axis: -1, start: 2, end: 7}")) == (2, 4, 5)
    assert out_shape(spec("- slice: {axis: 1, start: 1}")) == (2, 3, 10)
    assert out_shape(spec("- chunk: {chunks: 2, index: 1}")) == (2, 4, 5)
    assert out_shape(spec("- split: {sizes: [3, 7], index: 1}")) == (2, 4, 7)
    assert out_shape(spec("- pad: {pads: [1, 2, 0, 3]}")) == (2, 7, 13)  # last axis 10+1+2, then 4+0+3
    model = spec("""\
        - permute: {order: [0, 2, 1]}
        - chunk: {chunks: 2, index: 0, axis: 1}
        - pad: {pads: [1, 1]}
        """)
    assert forward(model) == ({}, {}) and params(model) == 0


def test_shape_op_errors():
    with pytest.raises(SpecError, match=r"order \[0, 0, 1\] is not a permutation of the 3 axes"):
        spec("- permute: {order: [0, 0, 1]}")
    with pytest.raises(SpecError, match=r"end 11 is beyond the axis' size 10"):
        spec("- slice: {axis: 2, end: 11}")
    with pytest.raises(SpecError, match=r"end 3 is not after start 5"):
        spec("- slice: {axis: 2, start: 5, end: 3}")
    with pytest.raises(SpecError, match=r"axis size 10 is not divisible by chunks 3"):
        spec("- chunk: {chunks: 3, index: 0}")
    with pytest.raises(SpecError, match=r"index 2 is not one of the 2 pieces"):
        spec("- chunk: {chunks: 2, index: 2}")
    with pytest.raises(SpecError, match=r"sizes sum to 9, the axis has 10"):
        spec("- split: {sizes: [3, 6], index: 0}")
    with pytest.raises(SpecError, match=r"8 pads for an input of rank 3"):
        spec("- pad: {pads: [1, 1, 1, 1, 1, 1, 1, 1]}")
