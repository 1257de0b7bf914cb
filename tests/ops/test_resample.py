"""costspec.ops.resample: nearest upsampling is free, bilinear costs per output."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, forward, out_shape

spec = builder(dims="{B: 2}", input_="[B, 4, 10]")


def test_upsample_nearest_is_free_and_bilinear_costs_per_output():
    nearest = spec("- upsample: {scale: 2}", input_="[B, 4, 5, 6]")
    assert out_shape(nearest) == (2, 4, 10, 12)
    assert forward(nearest) == ({}, {})
    bilinear = spec("- upsample: {mode: bilinear, size: [7, 9]}", input_="[B, 4, 5, 6]")
    assert forward(bilinear)[1] == {"bilinear": 2 * 4 * 7 * 9}
    assert int(bilinear.cost().cuda.xreplace(bilinear.bind())) == 7 * 2 * 4 * 7 * 9  # 4 mul + 3 add per output
    with pytest.raises(SpecError, match=r"upsample needs exactly one of scale and size"):
        spec("- upsample: {scale: 2, size: 4}", input_="[B, 4, 5, 6]")
