"""costspec.ops.pool: max / average / adaptive / global pooling and means, by hand."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, forward, out_shape

spec = builder(dims="{B: 2}", input_="[B, 4, 10]")


def test_resnet_stem_max_pool_and_head_global_average():
    model = spec("""\
        - max_pool2d: {kernel: 3, stride: 2, padding: 1}
        - global_avg_pool: {}
        """, dims="{B: 1}", input_="[B, 64, 112, 112]")
    assert out_shape(model) == (1, 64)
    _, pointwise = forward(model)
    # 56 x 56 outputs of 3 x 3 windows; then every element of the 64 x 56 x 56 map added once
    assert pointwise == {"max_pool": 64 * 56 * 56 * 9, "mean": 64 * 56 * 56}
    backward = forward(model, "backward")[1]
    assert backward == {}  # nothing needs a gradient: no parameters anywhere


def test_avg_pool_stride_defaults_to_the_kernel_and_mean_drops_axes():
    model = spec("- avg_pool1d: {kernel: 2}", input_="[B, 4, 10]")
    assert out_shape(model) == (2, 4, 5)
    assert forward(model)[1] == {"avg_pool": 2 * 4 * 5 * 2}
    assert out_shape(spec("- mean: {axes: [1]}", input_="[B, 4, 10]")) == (2, 10)
    assert out_shape(spec("- mean: {axes: [-1], keepdim: true}", input_="[B, 4, 10]")) == (2, 4, 1)
    assert out_shape(spec("- adaptive_avg_pool2d: {size: [2, 5]}", input_="[B, 4, 6, 10]")) == (2, 4, 2, 5)


def test_pooling_errors():
    with pytest.raises(SpecError, match=r"padding 2 is more than half the kernel 3"):
        spec("- max_pool2d: {kernel: 3, padding: 2}", input_="[B, 4, 10, 10]")
    with pytest.raises(SpecError, match=r"axis 3 is out of range for an input of rank 3"):
        spec("- mean: {axes: [3]}")
    with pytest.raises(SpecError, match=r"axis -1 is listed twice"):
        spec("- mean: {axes: [2, -1]}")
    with pytest.raises(SpecError, match=r"input size 10 is not a multiple of the output size 3"):
        spec("- adaptive_avg_pool2d: {size: 3}", input_="[B, 4, 6, 10]")
    with pytest.raises(SpecError, match=r"global_avg_pool needs an input \[B, C, \.\.\.\]"):
        spec("- global_avg_pool: {}", input_="[B, 4]")
