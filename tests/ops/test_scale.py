"""costspec.ops.scale: a constant scale and a learned layer scale."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, forward, params

spec = builder(dims="{B: 2}", input_="[B, 4, 10]")


def test_gemma_embedding_scale_and_layer_scale():
    model = spec("""\
        - scale: {by: sqrt(C)}
        - layer_scale: {}
        """, dims="{B: 2, C: 16}", input_="[B, 3, C]")
    n = 2 * 3 * 16
    assert forward(model)[1] == {"scale": n, "mul": n}
    assert params(model) == 16  # gamma only; the scale is a constant
    module, _ = model.to_torch()
    assert module.scale.factor == 4.0  # sqrt(16)
    assert tuple(module.ls.gamma.shape) == (16,)
    nchw = spec("- layer_scale: {axis: 1}", input_="[B, 4, 5, 6]")
    assert params(nchw) == 4
    with pytest.raises(SpecError, match=r"axis 3 is out of range for an input of rank 3"):
        spec("- layer_scale: {axis: 3}")
    with pytest.raises(SpecError, match=r"call of 'exp' is not allowed"):
        spec("- scale: {by: exp(2)}")
