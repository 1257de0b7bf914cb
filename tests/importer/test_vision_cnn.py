"""Importer families of convolutional vision backbones: convnextv2, mobilenet_v2 and efficientnet. Each: a small config built with its transformers config class, imported, and checked with
`validate --against` its AutoModel class on meta (forward and train: every row PASS, matmul FLOPs and
parameters exactly equal); refusals naming the key (exit 2); hostile values for every key (a spec that
builds or a named refusal, never a crash); random valid configs drawn by hypothesis (slow)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.importer import import_hf
from costspec.model import load, loads
from tests.common import ROOT

transformers = pytest.importorskip("transformers")

from tests.importer.check import (  # noqa: E402
    BOOKKEEPING,
    assert_exact,
    assert_refused,
    hostile_sweep,
    import_and_check,
    write_config,
)

SMALL_CONVNEXTV2 = {"hidden_sizes": [8, 16], "depths": [1, 2], "num_stages": 2, "image_size": 32}
# MobileNetV2's layout is fixed (16 inverted residuals): small through the depth multiplier and the image
SMALL_MOBILENET = {"depth_multiplier": 0.35, "image_size": 45}
# EfficientNet: three stages, widths x 0.25, repeats x 0.5 (ceil: 1, 1, 2 blocks)
SMALL_EFFICIENTNET = {"width_coefficient": 0.25, "depth_coefficient": 0.5, "hidden_dim": 320, "image_size": 33,
                      "in_channels": [32, 16, 24], "out_channels": [16, 24, 40], "kernel_sizes": [3, 3, 5],
                      "strides": [1, 2, 2], "num_block_repeats": [1, 2, 3], "expand_ratios": [1, 6, 6]}


def convnextv2(**keys):
    return transformers.ConvNextV2Config(**keys)


def mobilenet_v2(**keys):
    return transformers.MobileNetV2Config(**keys)


def efficientnet(**keys):
    return transformers.EfficientNetConfig(**{**SMALL_EFFICIENTNET, **keys})


# ----------------------------------------------------------------------------------------------
# ConvNeXt-V2
# ----------------------------------------------------------------------------------------------
def test_convnextv2_small_config_matches_transformers(tmp_path):
    model, results = import_and_check(convnextv2(**SMALL_CONVNEXTV2), tmp_path)
    totals = assert_exact(results)
    # batch 2, 32 px, patch 4: stem 8x8 grid; stage 2 on 4x4 (the matmuls of ConvNeXt: GRN has none)
    B = 2
    stem = 2 * B * 64 * 8 * (3 * 16)
    block = lambda n, c: 2 * B * n * c * 49 + 2 * 2 * B * n * c * 4 * c  # noqa: E731 -- dwconv + pwconv1/2
    down = 2 * B * 16 * 16 * 8 * 4
    assert totals["forward"]["spec_matmul"] == stem + block(64, 8) + down + 2 * block(16, 16)
    # parameters by hand: stem conv + LN, per block dwconv + LN + pwconv1 + GRN (2 x 4C) + pwconv2,
    # downsampling LN + conv, final LN
    blk = lambda c: c * 49 + c + 2 * c + (c * 4 * c + 4 * c) + 2 * 4 * c + (4 * c * c + c)  # noqa: E731
    params = (3 * 16 * 8 + 8) + 2 * 8 + blk(8) + 2 * 8 + (8 * 4 * 16 + 16) + 2 * blk(16) + 2 * 16
    assert totals["forward"]["spec_params"] == params
    text = import_hf(tmp_path / "config.json").text
    assert "--against hf:ConvNextV2Model" in text and "--output-field pooler_output" in text
    assert "grn: {}" in text and "layer_scale" not in text
    assert "precision: {dtype: bf16}  # the config names no dtype: bf16" in text


def test_convnextv2_takes_the_configs_dtype_and_activation(tmp_path):
    config = convnextv2(hidden_sizes=[8], depths=[1], num_stages=1, image_size=16, hidden_act="relu",
                        dtype="float32")
    model, results = import_and_check(config, tmp_path, passes=("train",))
    assert_exact(results)
    assert model.precision.dtype == "fp32"
    assert "activation: {fn: relu}" in import_hf(tmp_path / "config.json").text


@pytest.mark.parametrize("keys, message", [
    ({"layer_scale_init_value": 1e-6}, "key layer_scale_init_value not understood by the convnextv2 importer"),
    ({"depths": [1, 2, 3]}, "depths has 3 entries, expected 2"),
    ({"image_size": 36}, "image_size = 36 is not a multiple of patch_size x 2^(stages - 1) = 8"),
    ({"hidden_act": "relu2"}, "hidden_act = 'relu2': not supported"),
    ({"num_stages": 3}, "num_stages = 3 but the per-stage lists have 2 entries"),
    ({"model_type": "mobilenet_v2", "hidden_act": "prelu"}, "hidden_act = 'prelu': not supported"),
    ({"model_type": "mobilenet_v2", "depth_multiplier": 0}, "depth_multiplier = 0: expected a number > 0"),
    ({"model_type": "mobilenet_v2", "output_stride": 0}, "output_stride = 0: expected a whole number >= 1"),
    ({"model_type": "mobilenet_v2", "tf_padding": "yes"}, "tf_padding = 'yes': expected true or false"),
    ({"model_type": "efficientnet", "hidden_dim": 1280}, "hidden_dim = 1280 but the head conv has round_filters(1280) "
                                                         "= 320 channels"),
    ({"model_type": "efficientnet", "kernel_sizes": [3, 4, 5]}, "kernel_sizes[1] = 4: expected an odd kernel"),
    ({"model_type": "efficientnet", "strides": [1, 3, 2]}, "strides[1] = 3: expected 1 or 2"),
    ({"model_type": "efficientnet", "kernel_sizes": [3, 1, 5]},
     "kernel_sizes[1] = 1 with stride 2: transformers pads a stride-2 depthwise conv by (k//2 - 1, k//2), a negative "
     "pad that crops"),
    ({"model_type": "efficientnet", "expand_ratios": [1, 6]}, "expand_ratios has 2 entries, expected 3"),
    ({"model_type": "efficientnet", "pooling_type": "gem"}, "pooling_type = 'gem': not supported"),
    ({"model_type": "efficientnet", "image_size": 4000}, "the last grid 500 is larger than the pooler's kernel"),
    ({"model_type": "efficientnet", "depth_coefficient": 1000}, "blocks in all (expected at most 512)"),
])
def test_refusals_name_the_key(tmp_path, capsys, keys, message):
    bases = {"mobilenet_v2": lambda: mobilenet_v2(**SMALL_MOBILENET), "efficientnet": efficientnet}
    base = bases.get(keys.get("model_type", ""), lambda: convnextv2(**SMALL_CONVNEXTV2))()
    assert_refused(tmp_path, capsys, base.to_dict() | keys, message)


# ----------------------------------------------------------------------------------------------
# MobileNetV2
# ----------------------------------------------------------------------------------------------
def mobilenet_hand_matmul(B, img, stem, widths, last, expand, first_is_expansion=True):
    """Forward matmul FLOPs of MobileNetV2Model by hand (sides ceil(h / 2) at each stride 2; output_stride 32)."""
    strides = [2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1]
    side = -(-img // 2)
    macs = side**2 * stem * 27 + side**2 * stem * 9 + side**2 * stem * widths[0]
    macs += 0 if first_is_expansion else side**2 * stem * stem
    for i, s in enumerate(strides):
        e = expand[i]
        out = -(-side // s)
        macs += side**2 * widths[i] * e + out**2 * e * 9 + out**2 * e * widths[i + 1]
        side = out
    return 2 * B * (macs + side**2 * widths[-1] * last)


def test_mobilenet_v2_small_config_matches_transformers(tmp_path):
    model, results = import_and_check(mobilenet_v2(**SMALL_MOBILENET), tmp_path)
    totals = assert_exact(results)
    # depth multiplier 0.35: every width rounded to a multiple of 8 (at least 8, never 10% below)
    widths = [8, 8, 8, 16, 16, 16, 24, 24, 24, 24, 32, 32, 32, 56, 56, 56, 112]
    expand = [48, 48, 48, 96, 96, 96, 144, 144, 144, 144, 192, 192, 192, 336, 336, 336]
    assert totals["forward"]["spec_matmul"] == mobilenet_hand_matmul(2, 45, 16, widths, 1280, expand)
    text = import_hf(tmp_path / "config.json").text
    assert "--against hf:MobileNetV2Model" in text and "--output-field pooler_output" in text
    assert "projections 8, 8, 8, 16, 16, 16, 24," in text and "precision: {dtype: bf16}" in text


@pytest.mark.slow
@pytest.mark.parametrize("keys", [
    {"tf_padding": False, "first_layer_is_expansion": False, "hidden_act": "relu", "image_size": 33},
    {"output_stride": 8, "image_size": 37},  # dilated depthwise convs from the third stride-2 layer on
    {"output_stride": 16, "expand_ratio": 2.5, "finegrained_output": False},
])
def test_mobilenet_v2_variants_match_transformers(tmp_path, keys):
    _, results = import_and_check(mobilenet_v2(**{**SMALL_MOBILENET, **keys}), tmp_path)
    assert_exact(results)


# ----------------------------------------------------------------------------------------------
# EfficientNet
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("keys", [{}, {"depthwise_padding": [1, 3], "pooling_type": "max", "hidden_act": "relu",
                                       "image_size": 40, "strides": [2, 1, 2], "squeeze_expansion_ratio": 0.5}])
def test_efficientnet_small_config_matches_transformers(tmp_path, keys):
    model, results = import_and_check(efficientnet(**keys), tmp_path)
    totals = assert_exact(results)
    if not keys:
        # widths round_filters(c x 0.25) (at least 8, never 10% below): stem 8, stages 8, 8, 16; head 320;
        # repeats ceil(0.5 x [1, 2, 3]) = 1, 1, 2 blocks. Grid: stem 16, block 1 (3x3/2, pad (0, 1)) 8,
        # block 2 (5x5/2, pad (1, 2)) 4.
        B = 2
        macs = 16**2 * 8 * 27  # stem
        macs += 16**2 * 8 * 9 + (8 * 2 + 2 * 8) + 16**2 * 8 * 8  # block 0: dw, squeeze-excite 8 -> 2 -> 8, project
        macs += 16**2 * 8 * 48 + 8**2 * 48 * 9 + (48 * 2 + 2 * 48) + 8**2 * 48 * 8  # block 1: expand x6 on 8
        macs += 8**2 * 8 * 48 + 4**2 * 48 * 25 + (48 * 2 + 2 * 48) + 4**2 * 48 * 16  # block 2
        macs += 4**2 * 16 * 96 + 4**2 * 96 * 25 + (96 * 4 + 4 * 96) + 4**2 * 96 * 16  # block 3 (residual)
        macs += 4**2 * 16 * 320  # head
        assert totals["forward"]["spec_matmul"] == 2 * B * macs
    assert "--against hf:EfficientNetModel" in import_hf(tmp_path / "config.json").text


B0 = {"width_coefficient": 1.0, "depth_coefficient": 1.0, "hidden_dim": 1280, "image_size": 224}


@pytest.mark.parametrize("name, config, dtype, keys", [("mobilenet_v2", "MobileNetV2Config", "tf32", {}),
                                                       pytest.param("efficientnet_b0", "EfficientNetConfig", "tf32",
                                                                    B0, marks=pytest.mark.slow),  # 4 s
                                                       ("convnext_tiny", "ConvNextV2Config", None, {})])
def test_the_default_config_reproduces_the_zoo_spec(tmp_path, name, config, dtype, keys):
    """MobileNetV2 1.0 at 224 px is the zoo's mobilenet_v2 and the B0 coefficients the zoo's efficientnet_b0
    (fp32 weights run in TF32: --dtype tf32), TC and CUDA-core FLOPs and parameters exactly. The default
    ConvNeXt-V2 config (the tiny one) is the zoo's ConvNeXt-T with each block's layer scale (C parameters)
    replaced by a GRN (2 x 4C): the same matmuls."""
    path = write_config(getattr(transformers, config)(dtype="bfloat16", **keys), tmp_path)
    imported, zoo = loads(import_hf(path, dtype=dtype).text), load(ROOT / f"specs/{name}.yaml")
    for pass_ in ("forward", "train"):
        for batch in (1, 8):
            a, b = imported.report(pass_, imported.bind(batch)), zoo.report(pass_, zoo.bind(batch))
            if name != "convnext_tiny":
                assert (a.tc, a.cuda, a.params) == (b.tc, b.cuda, b.params), (pass_, batch)
            else:
                grn_for_scale = sum(d * (2 * 4 * c - c) for d, c in zip([3, 3, 9, 3], [96, 192, 384, 768]))
                assert (a.tc, a.params) == (b.tc, b.params + grn_for_scale), (pass_, batch)


# ----------------------------------------------------------------------------------------------
# Hostile values: every key a family reads, each given one hostile value in turn
# ----------------------------------------------------------------------------------------------
HOSTILE_BASES = {"convnextv2": lambda: convnextv2(**SMALL_CONVNEXTV2).to_dict(),
                 "mobilenet_v2": lambda: mobilenet_v2(**SMALL_MOBILENET).to_dict(),
                 "efficientnet": lambda: efficientnet().to_dict()}


# mobilenet_v2's and efficientnet's specs take ~0.5 s to build, once per key: slow (convnextv2 runs the
# same check fast)
@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.slow) if f != "convnextv2" else f
                                    for f in sorted(HOSTILE_BASES)])
def test_hostile_values_are_a_spec_or_a_named_refusal(tmp_path, family):
    base = json.loads(json.dumps(HOSTILE_BASES[family](), default=str))
    refused, _ = hostile_sweep(base, tmp_path, [k for k in base if k not in BOOKKEEPING], offset=len(family))
    assert refused > 0


# ----------------------------------------------------------------------------------------------
# Random valid configs (hypothesis): import, then forward and train exact against transformers
# ----------------------------------------------------------------------------------------------
PROPERTY = settings(max_examples=5, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def convnextv2_configs(draw):
    stages = draw(st.integers(1, 3))
    widths = [draw(st.sampled_from([4, 8, 12])) * 2**i for i in range(stages)]
    patch = draw(st.sampled_from([2, 4]))
    return convnextv2(hidden_sizes=widths, depths=[draw(st.integers(1, 2)) for _ in range(stages)],
                      num_stages=stages, patch_size=patch,
                      image_size=patch * 2 ** (stages - 1) * draw(st.integers(1, 3)),
                      hidden_act=draw(st.sampled_from(["gelu", "relu", "silu"])))


@st.composite
def mobilenet_v2_configs(draw):
    return mobilenet_v2(depth_multiplier=draw(st.sampled_from([0.25, 0.35, 0.5])),
                        expand_ratio=draw(st.sampled_from([1.0, 2.0, 3.5])), image_size=draw(st.integers(8, 40)),
                        output_stride=draw(st.sampled_from([8, 16, 32])), tf_padding=draw(st.booleans()),
                        first_layer_is_expansion=draw(st.booleans()), finegrained_output=draw(st.booleans()),
                        hidden_act=draw(st.sampled_from(["relu6", "relu", "silu"])))


@st.composite
def efficientnet_configs(draw):
    stages = draw(st.integers(1, 3))
    pick = lambda values: [draw(st.sampled_from(values)) for _ in range(stages)]  # noqa: E731
    width = draw(st.sampled_from([0.1, 0.25, 0.5]))
    filters = max(8, int(1280 * width + 4) // 8 * 8)
    return efficientnet(width_coefficient=width, depth_coefficient=draw(st.sampled_from([0.3, 0.5, 1.0])),
                        hidden_dim=filters + (8 if filters < 0.9 * 1280 * width else 0),
                        image_size=draw(st.integers(24, 40)), in_channels=pick([8, 16, 32]),
                        out_channels=pick([8, 16, 24]), kernel_sizes=pick([3, 5]), strides=pick([1, 2]),
                        num_block_repeats=pick([1, 2]), expand_ratios=pick([1, 2, 6]),
                        depthwise_padding=draw(st.lists(st.integers(0, 4), max_size=2)),
                        squeeze_expansion_ratio=draw(st.sampled_from([0.25, 0.5])),
                        pooling_type=draw(st.sampled_from(["mean", "max"])))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [convnextv2_configs(), mobilenet_v2_configs(), efficientnet_configs()],
                         ids=["convnextv2", "mobilenet_v2", "efficientnet"])
def test_random_configs_per_family(tmp_path_factory, strategy):
    @PROPERTY
    @given(config=strategy)
    def check(config):
        folder = tmp_path_factory.mktemp(config.model_type)
        _, results = import_and_check(config, folder)
        assert_exact(results)

    check()
