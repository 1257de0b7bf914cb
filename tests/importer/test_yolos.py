"""Importer family yolos: small configs built with YolosConfig, imported, and checked with `validate --against
hf:YolosModel` on meta (forward and train: every row PASS, matmul FLOPs and parameters exactly equal); the
matmul FLOPs by hand; refusals naming the key (exit 2); hostile values; random valid configs (slow)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.importer import import_hf

transformers = pytest.importorskip("transformers")

from tests.importer.check import BOOKKEEPING, assert_exact, assert_refused, hostile_sweep, import_and_check  # noqa: E402

SMALL = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "num_hidden_layers": 3,
         "image_size": [64, 96], "num_detection_tokens": 5}


def yolos(**keys):
    return transformers.YolosConfig(**{**SMALL, **keys})


@pytest.mark.slow  # the fast profile checks convnextv2 and mobilenet_v2 against transformers
def test_yolos_small_config_matches_transformers(tmp_path):
    model, results = import_and_check(yolos(), tmp_path)
    totals = assert_exact(results)
    # batch 2, 64 x 96 px, 16 px patches: 4 x 6 = 24 patches, S = 1 + 24 + 5 detection tokens
    B, C, F, L, S = 2, 32, 64, 3, 30
    layer = 4 * 2 * B * S * C * C + 2 * 2 * B * S * S * C + 2 * 2 * B * S * C * F
    assert totals["forward"]["spec_matmul"] == 2 * B * 24 * C * 3 * 256 + L * layer + 2 * B * C * C  # + the pooler
    # patch conv, class / detection tokens, the position table (config grid), L - 1 mid tables, layers, LN, pooler
    per_layer = 4 * (C * C + C) + 2 * 2 * C + (C * F + F) + (F * C + C)
    params = (3 * 256 * C + C) + C + 5 * C + S * C + (L - 1) * S * C + L * per_layer + 2 * C + (C * C + C)
    assert totals["forward"]["spec_params"] == params
    text = import_hf(tmp_path / "config.json").text
    assert "--against hf:YolosModel" in text and "--output-field pooler_output" in text
    assert "precision: {dtype: bf16}  # the config names no dtype: bf16" in text


@pytest.mark.slow
@pytest.mark.parametrize("keys", [
    {"use_mid_position_embeddings": False, "qkv_bias": False, "image_size": [48, 48], "patch_size": 8},
    {"num_hidden_layers": 1, "hidden_act": "gelu_pytorch_tanh"},  # one layer: no mid tables
])
def test_yolos_variants_match_transformers(tmp_path, keys):
    _, results = import_and_check(yolos(**keys), tmp_path)
    assert_exact(results)


@pytest.mark.parametrize("keys, message", [
    ({"image_size": [60, 96]}, "image_size = [60, 96] is not a multiple of patch_size = 16"),
    ({"image_size": 64}, "image_size = 64: expected a [height, width] pair"),
    ({"num_attention_heads": 3}, "hidden_size = 32 is not a multiple of num_attention_heads = 3"),
    ({"hidden_act": "relu2"}, "hidden_act = 'relu2': not supported"),
    ({"num_experts": 4}, "key num_experts not understood by the yolos importer"),
])
def test_yolos_refusals_name_the_key(tmp_path, capsys, keys, message):
    assert_refused(tmp_path, capsys, yolos().to_dict() | keys, message)


def test_yolos_hostile_values_are_a_spec_or_a_named_refusal(tmp_path):
    base = yolos().to_dict()
    refused, _ = hostile_sweep(base, tmp_path, [k for k in base if k not in BOOKKEEPING])
    assert refused > 0


PROPERTY = settings(max_examples=5, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def yolos_configs(draw):
    n_heads = draw(st.integers(1, 3))
    patch = draw(st.sampled_from([8, 16]))
    return yolos(hidden_size=n_heads * draw(st.sampled_from([4, 8])), num_attention_heads=n_heads,
                 intermediate_size=draw(st.integers(4, 32)), num_hidden_layers=draw(st.integers(1, 3)),
                 patch_size=patch, image_size=[patch * draw(st.integers(1, 4)), patch * draw(st.integers(1, 4))],
                 num_detection_tokens=draw(st.integers(1, 6)), qkv_bias=draw(st.booleans()),
                 use_mid_position_embeddings=draw(st.booleans()),
                 hidden_act=draw(st.sampled_from(["gelu", "relu", "gelu_pytorch_tanh"])))


@pytest.mark.slow
def test_random_yolos_configs(tmp_path_factory):
    @PROPERTY
    @given(config=yolos_configs())
    def check(config):
        _, results = import_and_check(config, tmp_path_factory.mktemp("yolos"))
        assert_exact(results)

    check()
