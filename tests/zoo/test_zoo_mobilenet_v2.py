"""specs/mobilenet_v2.yaml: its totals against hand arithmetic from the paper's Table 2, and
`validate --against hf:MobileNetV2Model` (transformers' default config: MobileNetV2 1.0), forward and
train on meta, every row exact. The fast check runs the spec at an odd small image side (TensorFlow
SAME padding then pads the stride-2 convs on both sides, not only after); the 224 px one is slow."""
from __future__ import annotations

from pathlib import Path

import pytest

from costspec.model import load

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "mobilenet_v2.yaml"

# the inverted residuals: (in, out, stride), t = 6
BLOCKS = [(16, 24, 2), (24, 24, 1), (24, 32, 2), (32, 32, 1), (32, 32, 1), (32, 64, 2), (64, 64, 1), (64, 64, 1),
          (64, 64, 1), (64, 96, 1), (96, 96, 1), (96, 96, 1), (96, 160, 2), (160, 160, 1), (160, 160, 1),
          (160, 320, 1)]


def hand_numbers(img: int = 224) -> tuple[int, int]:
    """(forward matmul FLOPs, params): 2 FLOPs per multiply-add; convs without bias, BatchNorm 2 per channel."""
    side = -(-img // 2)  # SAME padding: ceil(h / stride)
    macs = side * side * 32 * 27 + side * side * 32 * 9 + side * side * 32 * 16  # stem: 3x3/2, depthwise, 1x1
    params = 32 * 27 + 2 * 32 + 32 * 9 + 2 * 32 + 32 * 16 + 2 * 16
    for cin, cout, stride in BLOCKS:
        e = 6 * cin
        out = -(-side // stride)
        macs += side * side * cin * e + out * out * e * 9 + out * out * e * cout  # expand, depthwise, project
        params += cin * e + 2 * e + e * 9 + 2 * e + e * cout + 2 * cout
        side = out
    macs += side * side * 320 * 1280  # conv_1x1
    params += 320 * 1280 + 2 * 1280
    return 2 * macs, params


def test_totals_match_hand_arithmetic():
    model = load(SPEC)
    forward = model.evaluate("forward")
    assert hand_numbers() == (forward.tc, forward.params) == (598_988_544, 2_223_872)  # 299.5 M MACs
    train = model.evaluate("train")
    assert (train.tc, train.cuda) == (1_775_289_600, 78_406_272)
    assert forward.cuda == 25_846_912  # BatchNorm (eval: 2 per element), ReLU6 (2), residual adds, the pool


def against(pass_: str, sets: dict | None = None):
    pytest.importorskip("transformers")
    from costspec.against.check import summary, validate_against
    from costspec.against.target import load_target

    model = load(SPEC)
    values = model.bind(sets=sets or {})
    real = load_target("hf:MobileNetV2Model", model, values, "meta", None, {}, output="pooler_output")
    result = validate_against(model, values, real, pass_)
    assert result.ok, "\n".join(result.failures())
    for phase in result.phases.values():
        assert all(row.status in ("PASS", "moved") for row in phase.rows if row.matched)
    for totals in summary(result).values():
        assert totals["real_reconciled"] == totals["spec_matmul"] and totals["real_params"] == totals["spec_params"]
    assert not result.rowmap.unmatched_real and not result.unknown
    return result


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_matches_mobilenet_v2_model_at_an_odd_side(pass_):
    """B = 2, 45 px: sides 23, 12, 6, 3, 2, each stride-2 conv padded (1, 1) on an odd side, (0, 1) on an even."""
    result = against(pass_, {"B": 2, "img": 45})
    total = result.phases["forward"].rows[-1]
    flops, params = hand_numbers(45)
    assert total.real_matmul == total.spec_matmul == 2 * flops and total.real_params == params


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_matches_mobilenet_v2_model_at_224(pass_):
    result = against(pass_)
    assert result.phases["forward"].rows[-1].real_matmul == 598_988_544
