"""The zoo's efficientnet_b0 and yolos_small against transformers on meta, forward and train: at reduced
sizes here (`--set` on the spec, the same sizes in the config), at full size marked slow (with the numbers
this check gives: matmul FLOPs and parameters equal to transformers')."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import load  # noqa: E402
from costspec.tree.walk import walk  # noqa: E402
from tests.common import ROOT  # noqa: E402

EFFICIENTNET_B0 = {"width_coefficient": 1.0, "depth_coefficient": 1.0, "hidden_dim": 1280, "image_size": 224}
# narrower stages at 64 px (the stem stays 32 wide and the head 1280: transformers sizes them as
# round_filters(32) and round_filters(1280) whatever the stage channels)
EFFICIENTNET_SMALL = {"img": 64, "C1": 8, "C2": 8, "C3": 16, "C4": 16, "C5": 16, "C6": 24, "C7": 24}
EFFICIENTNET_SMALL_CONFIG = {**EFFICIENTNET_B0, "image_size": 64, "in_channels": "[32, 8, 8, 16, 16, 16, 24]",
                             "out_channels": "[8, 8, 16, 16, 16, 24, 24]"}
YOLOS_SMALL_CONFIG = {"hidden_size": 384, "intermediate_size": 1536, "num_attention_heads": 6, "num_labels": 91}
YOLOS_TINY_SIZES = {"B": 2, "C": 32, "heads": 2, "F": 64, "L": 3, "det": 5, "labels": 7, "gh": 4, "gw": 6,
                    "img_h": 80, "img_w": 130}
YOLOS_TINY_CONFIG = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "num_hidden_layers": 3,
                     "num_detection_tokens": 5, "num_labels": 7, "image_size": "[64, 96]"}
BOTH_OUTPUTS = "tests.zoo.yolos_targets:yolos_detection"  # YolosForObjectDetection, logits and boxes joined


def run(spec: str, target: str, pass_: str, sets: dict | None = None, config: dict | None = None,
        output: str | None = None):
    model = load(ROOT / "specs" / f"{spec}.yaml")
    values = model.bind(sets=sets or {})
    real = load_target(target, model, values, "meta", None, {k: str(v) for k, v in (config or {}).items()}, output)
    result = validate_against(model, values, real, pass_)
    assert result.ok, "\n".join(result.failures())
    totals = summary(result)
    for phase in totals.values():
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    assert not result.rowmap.unmatched_real
    return model, values, totals


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_efficientnet_b0_small_matches_transformers(pass_):
    model, values, _ = run("efficientnet_b0", "hf:EfficientNetModel", pass_, EFFICIENTNET_SMALL,
                           EFFICIENTNET_SMALL_CONFIG, "pooler_output")
    pooler = next(s.node for s in walk(model.root) if s.node.name == "pooler")
    # 64 px -> a 2 x 2 map; AvgPool2d(1280, ceil_mode=True): one window per channel, clipped to the 4 positions
    assert [d.xreplace(values) for d in pooler.out_shape[2:]] == [1, 1]
    assert pooler.forward().pointwise["avg_pool"].xreplace(values) == 1280 * 4


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_efficientnet_b0_matches_transformers(pass_):
    _, _, totals = run("efficientnet_b0", "hf:EfficientNetModel", pass_, config=EFFICIENTNET_B0,
                       output="pooler_output")
    assert totals["forward"]["spec_matmul"] == 769_069_504 and totals["forward"]["spec_params"] == 4_007_548
    if pass_ == "train":
        assert totals["backward"]["spec_matmul"] == 1_516_462_976


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_yolos_small_reduced_matches_transformers(pass_):
    # train: a DETR loss reads both outputs, so both heads run backward (tests/zoo/yolos_targets.py)
    target, config = ("hf:YolosForObjectDetection", YOLOS_TINY_CONFIG) if pass_ == "forward" else (BOTH_OUTPUTS, None)
    model, values, _ = run("yolos_small", target, pass_, YOLOS_TINY_SIZES, config)
    assert values[model.dims.symbols["S"]] == 1 + 5 * 8 + 5  # 80 x 130 px: a 5 x 8 grid (130 // 16), 5 tokens


def test_yolos_detection_tokens_follow_set():
    model = load(ROOT / "specs" / "yolos_small.yaml")
    s = model.dims.symbols["S"]
    assert model.bind()[s] == 1 + 50 * 83 + 100  # 800 x 1333 px: 50 x 83 patches
    assert model.bind(sets={"det": 300})[s] == 1 + 50 * 83 + 300
    tokens = next(st.node for st in walk(model.root) if st.node.name == "embeddings.detection_tokens")
    assert tokens.params.xreplace(model.bind(sets={"det": 300})) == 300 * 384


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_yolos_small_matches_transformers(pass_):
    target, config = ("hf:YolosForObjectDetection", YOLOS_SMALL_CONFIG) if pass_ == "forward" else (BOTH_OUTPUTS, None)
    _, _, totals = run("yolos_small", target, pass_, config=config)
    assert totals["forward"]["spec_matmul"] == 516_186_408_960 and totals["forward"]["spec_params"] == 30_684_768
    if pass_ == "train":
        assert totals["backward"]["spec_matmul"] == 1_196_467_393_536
