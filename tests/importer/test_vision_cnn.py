"""Importer families of convolutional vision backbones: convnextv2 (and the others of this file as they are
added). Each: a small config built with its transformers config class, imported, and checked with
`validate --against` its AutoModel class on meta (forward and train: every row PASS, matmul FLOPs and
parameters exactly equal); refusals naming the key (exit 2); hostile values for every key (a spec that
builds or a named refusal, never a crash); random valid configs drawn by hypothesis (slow)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.cli import main
from costspec.core.errors import CostspecError
from costspec.importer import import_hf
from costspec.model import loads

transformers = pytest.importorskip("transformers")

from tests.importer.check import assert_exact, import_and_check, write_config  # noqa: E402
from tests.importer.test_hostile_configs import HOSTILE  # noqa: E402

SMALL_CONVNEXTV2 = {"hidden_sizes": [8, 16], "depths": [1, 2], "num_stages": 2, "image_size": 32}


def convnextv2(**keys):
    return transformers.ConvNextV2Config(**keys)


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
])
def test_convnextv2_refusals_name_the_key(tmp_path, capsys, keys, message):
    data = convnextv2(**SMALL_CONVNEXTV2).to_dict() | keys
    path = write_config(data, tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and str(path) in err, err


# ----------------------------------------------------------------------------------------------
# Hostile values: every key a family reads, each given one hostile value in turn
# ----------------------------------------------------------------------------------------------
HOSTILE_BASES = {"convnextv2": lambda: convnextv2(**SMALL_CONVNEXTV2).to_dict()}


@pytest.mark.parametrize("family", sorted(HOSTILE_BASES))
def test_hostile_values_are_a_spec_or_a_named_refusal(tmp_path, family):
    base = json.loads(json.dumps(HOSTILE_BASES[family](), default=str))
    keys = [k for k in base if k not in ("id2label", "label2id", "transformers_version", "architectures")]
    refused = 0
    for number, key in enumerate(keys):
        for value in (HOSTILE[number % len(HOSTILE)], HOSTILE[(number + 7) % len(HOSTILE)]):
            path = write_config({**base, key: value}, tmp_path)
            try:
                loads(import_hf(path).text)
            except CostspecError:
                refused += 1
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


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [convnextv2_configs()], ids=["convnextv2"])
def test_random_configs_per_family(tmp_path_factory, strategy):
    @PROPERTY
    @given(config=strategy)
    def check(config):
        folder = tmp_path_factory.mktemp(config.model_type)
        _, results = import_and_check(config, folder)
        assert_exact(results)

    check()
