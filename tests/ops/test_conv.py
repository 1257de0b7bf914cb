"""costspec.ops.conv: convolutions in 1, 2 and 3 dims and transposed, and their shape errors.
Numbers are computed by hand next to each assertion (as in every tests/ops/test_<module>.py); the torch
cross-checks of every op over random shapes are in tests/ops/test_vs_torch.py."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, forward, out_shape, params

spec = builder(dims="{B: 2}", input_="[B, 4, 10]")


def test_conv1d_whisper_stem():
    # Whisper tiny's conv1: 80 mel bins -> 384 channels, kernel 3, padding 1, over 3000 frames
    model = spec("- conv1d: {out: 384, kernel: 3, padding: 1}", dims="{B: 1}", input_="[B, 80, 3000]")
    assert out_shape(model)[1:] == (384, 3000)
    matmul, pointwise = forward(model)
    assert matmul == {"conv": 2 * 1 * 384 * 3000 * 80 * 3}
    assert pointwise == {"bias_add": 384 * 3000}
    assert params(model) == 384 * 80 * 3 + 384


def test_conv3d_video_patch_embedding():
    # a tubelet embedding: kernel = stride = [2, 16, 16] on 16 frames of 224 x 224 -> 8 x 14 x 14 tubelets
    model = spec("- conv3d: {out: 768, kernel: [2, 16, 16], stride: [2, 16, 16]}", dims="{B: 1}",
                 input_="[B, 3, 16, 224, 224]")
    assert out_shape(model)[1:] == (768, 8, 14, 14)
    matmul, _ = forward(model)
    assert matmul == {"conv": 2 * 768 * (8 * 14 * 14) * 3 * (2 * 16 * 16)}
    assert params(model) == 768 * 3 * 2 * 16 * 16 + 768


def test_conv_transpose2d_doubles_the_grid_and_counts_every_input_through_the_kernel():
    model = spec("- conv_transpose2d: {out: 8, kernel: 2, stride: 2, bias: false}", input_="[B, 4, 5, 6]")
    assert out_shape(model)[1:] == (8, 10, 12)  # (5-1)*2 + (2-1) + 1 = 10
    matmul, pointwise = forward(model)
    assert matmul == {"conv": 2 * 2 * 4 * (5 * 6) * 8 * 4}  # 2 * B*Cin*H*W * Cout * kh*kw
    assert pointwise == {}
    assert params(model) == 4 * 8 * 4


def test_conv_shape_errors_are_located():
    with pytest.raises(SpecError, match=r"conv1d needs an NCL input"):
        spec("- conv1d: {out: 4, kernel: 3}", input_="[B, 4, 10, 10]")
    with pytest.raises(SpecError, match=r"layers\[0\]\.conv1d\.kernel.*output length would be -1"):
        spec("- conv1d: {out: 4, kernel: 12}")
    with pytest.raises(SpecError, match=r"output_padding 2 must be smaller than stride 2 or dilation 1"):
        spec("- conv_transpose2d: {out: 4, kernel: 2, stride: 2, output_padding: 2}", input_="[B, 4, 5, 6]")
    with pytest.raises(SpecError, match=r"kernel"):
        spec("- conv3d: {out: 4, kernel: [1, 2]}", input_="[B, 4, 2, 3, 3]")
