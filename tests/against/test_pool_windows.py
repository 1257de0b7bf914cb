"""The real-model counter counts what a pool's windows cover: EfficientNet's pooler is
AvgPool2d(2560, ceil_mode=True) on a 7 x 7 map, one window per channel reading 49 elements (not
2560^2); windows that fit the padded input (no ceil_mode) count kernel area x outputs, as before."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.target import Target  # noqa: E402
from costspec.model import loads  # noqa: E402
from costspec.runtime.runtime_count import measure  # noqa: E402


def counted(pool, shape) -> tuple[dict, dict]:
    x = torch.randn(shape, device="meta", requires_grad=True)
    m = measure(torch.nn.Sequential(pool), x, train=True)
    return dict(m.pointwise["forward"]["0"]), dict(m.pointwise["backward"]["0"])


def test_efficientnet_pooler_counts_the_49_elements_each_window_reads():
    fwd, bwd = counted(torch.nn.AvgPool2d(2560, ceil_mode=True), (1, 2560, 7, 7))
    assert fwd == {"avg_pool": 2560 * 49} == {"avg_pool": 125_440}
    assert bwd == {"avg_pool_backward": 125_440}


@pytest.mark.parametrize("pool, shape, elements", [
    # ceil_mode: 5 windows per axis from -1 in steps of 2, the last clipped to the padded end 9: 3+3+3+3+2
    (torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True), (1, 4, 8, 8), 4 * 14 * 14),
    (torch.nn.AvgPool1d(3, 2, ceil_mode=True), (1, 4, 8), 4 * (3 + 3 + 3 + 2)),
    # without ceil_mode every window lies in the padded input: outputs x kernel area (ResNet's stem pool)
    (torch.nn.MaxPool2d(3, 2, 1), (1, 64, 112, 112), 64 * 56 * 56 * 9),
    (torch.nn.AvgPool2d(2), (2, 3, 8, 8), 2 * 3 * 4 * 4 * 4),
], ids=["avg2d-ceil-padded", "avg1d-ceil", "max2d-stem", "avg2d-even"])
def test_windows_clipped_to_the_padded_input(pool, shape, elements):
    fwd, _ = counted(pool, shape)
    assert sum(fwd.values()) == elements


SPEC = """
costspec: 1
name: effnet_pooler
dims: {B: 2, C: 64, H: 7}
precision: {dtype: fp32}
input: [B, 16, H, H]
layers:
  - conv2d: {out: C, kernel: 1, bias: false}
    name: top_conv
  - avg_pool2d: {kernel: H}  # one 7 x 7 window per channel
    name: pooler
"""


class Pooler(torch.nn.Module):
    """EfficientNet's head: a 1x1 conv and AvgPool2d(hidden_dim, ceil_mode=True) over the 7 x 7 map."""

    def __init__(self):
        super().__init__()
        self.top_conv = torch.nn.Conv2d(16, 64, 1, bias=False)
        self.pooler = torch.nn.AvgPool2d(64, ceil_mode=True)

    def forward(self, x):
        return self.pooler(self.top_conv(x))


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_ceil_mode_pooler_matches_a_7x7_pool_spec(pass_):
    model = loads(SPEC)
    target = Target("tests:pooler", Pooler().to("meta"), (torch.randn(2, 16, 7, 7, device="meta"),))
    result = validate_against(model, model.bind(), target, pass_)
    assert result.ok, "\n".join(result.failures())
    assert result.phases["forward"].rows[-1].real_pointwise == {"avg_pool": 2 * 64 * 49}
