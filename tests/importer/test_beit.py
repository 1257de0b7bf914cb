"""Importer family beit: small configs built with BeitConfig, imported, and checked with `validate --against
hf:BeitModel` on meta (forward and train: every row PASS, matmul FLOPs and parameters exactly equal); the
matmul FLOPs and parameters by hand (with the relative position bias per layer, and shared); refusals naming the
key (both biases at once among them, exit 2);
hostile values; random valid configs (slow)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.importer import import_hf

transformers = pytest.importorskip("transformers")

from tests.importer.check import BOOKKEEPING, assert_exact, assert_refused, hostile_sweep, import_and_check  # noqa: E402

SMALL = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "num_hidden_layers": 2,
         "image_size": 32, "patch_size": 8}


def beit(**keys):
    return transformers.BeitConfig(**{**SMALL, **keys})


@pytest.mark.slow  # the fast profile checks convnextv2 and mobilenet_v2 against transformers
def test_beit_small_config_matches_transformers(tmp_path):
    model, results = import_and_check(beit(), tmp_path)
    totals = assert_exact(results)
    B, C, F, L, S = 2, 32, 64, 2, 17  # 32 px / 8: 16 patches + the class token
    layer = 4 * 2 * B * S * C * C + 2 * 2 * B * S * S * C + 2 * 2 * B * S * C * F
    assert totals["forward"]["spec_matmul"] == 2 * B * 16 * C * 3 * 64 + L * layer
    # q, v with bias, k without, o; two LayerNorms; two lambdas; fc1, fc2
    per_layer = 4 * C * C + 3 * C + 2 * 2 * C + 2 * C + (C * F + F) + (F * C + C)
    assert totals["forward"]["spec_params"] == (3 * 64 * C + C) + C + L * per_layer + 2 * C  # + the pooler's LN
    text = import_hf(tmp_path / "config.json").text
    assert "--against hf:BeitModel" in text and "--output-field pooler_output" in text and "k_bias: false" in text


@pytest.mark.slow
@pytest.mark.parametrize("keys", [
    # lambda 1.0 (a number the layer still multiplies by), the class token after a final LayerNorm
    {"use_absolute_position_embeddings": True, "use_mean_pooling": False, "layer_scale_init_value": 0.0},
    {"use_absolute_position_embeddings": True, "hidden_act": "relu", "num_hidden_layers": 1},
])
def test_beit_variants_match_transformers(tmp_path, keys):
    _, results = import_and_check(beit(**keys), tmp_path)
    assert_exact(results)


def test_beit_relative_position_bias_per_layer_matches_transformers(tmp_path):
    """use_relative_position_bias: each layer's table of (2G-1)^2 + 3 rows x heads (G = 4 patches a side),
    gathered into a (heads, S, S) bias added to the scores; with the masked-image-modelling token (C parameters,
    no work) and no layer scale; forward and train, every row."""
    model, results = import_and_check(beit(use_relative_position_bias=True, use_mask_token=True,
                                           layer_scale_init_value=0.0), tmp_path)
    totals = assert_exact(results)
    B, C, F, L, S, G, h = 2, 32, 64, 2, 17, 4, 2
    layer = 4 * 2 * B * S * C * C + 2 * 2 * B * S * S * C + 2 * 2 * B * S * C * F
    assert totals["forward"]["spec_matmul"] == 2 * B * 16 * C * 3 * 64 + L * layer
    per_layer = 4 * C * C + 3 * C + 2 * 2 * C + (C * F + F) + (F * C + C) + ((2 * G - 1) ** 2 + 3) * h
    assert totals["forward"]["spec_params"] == (3 * 64 * C + C) + C + C + L * per_layer + 2 * C
    text = import_hf(tmp_path / "config.json").text
    assert "rel_bias: beit" in text and "mask_token: true" in text


@pytest.mark.parametrize("layers", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_beit_shared_relative_position_bias_matches_transformers(tmp_path, layers):
    """use_shared_relative_position_bias: one table (BeitModel.shared_position_bias) whose bias every layer adds,
    written in the first layer (rel_bias_readers: L - 1), read by the others (rel_bias_shared)."""
    model, results = import_and_check(beit(use_shared_relative_position_bias=True, num_hidden_layers=layers,
                                           use_mean_pooling=False), tmp_path)
    totals = assert_exact(results)
    C, F, G, h = 32, 64, 4, 2
    per_layer = 4 * C * C + 3 * C + 2 * 2 * C + 2 * C + (C * F + F) + (F * C + C)
    table = ((2 * G - 1) ** 2 + 3) * h
    assert totals["forward"]["spec_params"] == (3 * 64 * C + C) + C + layers * per_layer + table + 2 * C
    text = import_hf(tmp_path / "config.json").text
    assert "rel_bias_readers: L - 1" in text and ("rel_bias_shared: true" in text) == (layers > 1)


@pytest.mark.parametrize("keys, message", [
    ({"use_shared_relative_position_bias": True, "use_relative_position_bias": True},
     "use_shared_relative_position_bias = True: with use_relative_position_bias too, each layer adds its own bias"),
    ({"image_size": 36}, "image_size = 36 is not a multiple of patch_size = 8"),
    ({"num_attention_heads": 3}, "hidden_size = 32 is not a multiple of num_attention_heads = 3"),
    ({"layer_scale_init_value": -1}, "layer_scale_init_value = -1: expected a number >= 0"),
    ({"num_experts": 4}, "key num_experts not understood by the beit importer"),
])
def test_beit_refusals_name_the_key(tmp_path, capsys, keys, message):
    assert_refused(tmp_path, capsys, beit().to_dict() | keys, message)


def test_beit_hostile_values_are_a_spec_or_a_named_refusal(tmp_path):
    base = beit().to_dict()
    refused, _ = hostile_sweep(base, tmp_path, [k for k in base if k not in BOOKKEEPING])
    assert refused > 0


PROPERTY = settings(max_examples=5, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def beit_configs(draw):
    n_heads = draw(st.integers(1, 3))
    patch = draw(st.sampled_from([4, 8]))
    return beit(hidden_size=n_heads * draw(st.sampled_from([4, 8])), num_attention_heads=n_heads,
                intermediate_size=draw(st.integers(4, 32)), num_hidden_layers=draw(st.integers(1, 2)),
                patch_size=patch, image_size=patch * draw(st.integers(1, 4)),
                use_absolute_position_embeddings=draw(st.booleans()), use_mean_pooling=draw(st.booleans()),
                use_mask_token=draw(st.booleans()), **draw(st.sampled_from([
                    {}, {"use_relative_position_bias": True}, {"use_shared_relative_position_bias": True}])),
                layer_scale_init_value=draw(st.sampled_from([0.0, 0.1])),
                hidden_act=draw(st.sampled_from(["gelu", "relu", "gelu_pytorch_tanh"])))


@pytest.mark.slow
def test_random_beit_configs(tmp_path_factory):
    @PROPERTY
    @given(config=beit_configs())
    def check(config):
        _, results = import_and_check(config, tmp_path_factory.mktemp("beit"))
        assert_exact(results)

    check()
