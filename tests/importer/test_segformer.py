"""Importer family segformer: small configs built with SegformerConfig, imported, and checked with `validate
--against hf:SegformerModel` on meta (forward and train: every row PASS, matmul FLOPs and parameters exactly
equal); the matmul FLOPs and parameters by hand; refusals naming the key (exit 2); hostile values; random valid
configs (slow)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.importer import import_hf

transformers = pytest.importorskip("transformers")

from costspec.model import loads  # noqa: E402
from tests.importer.check import (  # noqa: E402
    BOOKKEEPING,
    assert_exact,
    assert_refused,
    hostile_sweep,
    import_and_check,
    write_config,
)

SMALL = dict(num_encoder_blocks=2, depths=[1, 2], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
             strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[4, 4], image_size=64)


def segformer(**keys):
    return transformers.SegformerConfig(**{**SMALL, **keys})


def by_hand(config, B: int) -> tuple[int, int]:
    """SegformerModel's forward matmul FLOPs and parameters from the config, written out."""
    flops = params = 0
    side, c_in = config.image_size, config.num_channels
    for i, C in enumerate(config.hidden_sizes):
        k, s, sr, F = config.patch_sizes[i], config.strides[i], config.sr_ratios[i], C * config.mlp_ratios[i]
        side = (side + 2 * (k // 2) - k) // s + 1
        N = side * side
        R = (side // sr) ** 2  # the k/v tokens
        flops += 2 * B * N * C * c_in * k * k
        params += c_in * C * k * k + C + 2 * C + 2 * C  # patch conv, its LayerNorm, the stage's final LayerNorm
        block = 2 * B * (2 * N * C * C + 2 * R * C * C + 2 * N * R * C) + 2 * B * (2 * N * C * F + N * F * 9)
        block_params = 4 * (C * C + C) + 2 * 2 * C + (C * F + F) + (9 * F + F) + (F * C + C)
        if sr > 1:
            block += 2 * B * R * C * C * sr * sr
            block_params += C * C * sr * sr + C + 2 * C
        flops += config.depths[i] * block
        params += config.depths[i] * block_params
        c_in = C
    return flops, params


def test_segformer_small_config_matches_transformers(tmp_path):
    config = segformer()
    _, results = import_and_check(config, tmp_path)
    totals = assert_exact(results)
    flops, params = by_hand(config, 2)
    assert totals["forward"]["spec_matmul"] == flops and totals["forward"]["spec_params"] == params
    text = import_hf(tmp_path / "config.json").text
    assert "--against hf:SegformerModel" in text and "kv: reduced" in text
    assert "precision: {dtype: bf16}  # the config names no dtype: bf16" in text


def test_mit_b0_shaped_config_imports(tmp_path):
    """A config as the published MiT-B0 checkpoint has it (an old key no class reads, float32, image_size 224): the
    spec's grids, precision and parameters follow it (the parameters as counted by hand and by hf_coverage's
    SegformerModel at these sizes)."""
    data = segformer(num_encoder_blocks=4, depths=[2, 2, 2, 2], sr_ratios=[8, 4, 2, 1], hidden_sizes=[32, 64, 160, 256],
                     patch_sizes=[7, 3, 3, 3], strides=[4, 2, 2, 2], num_attention_heads=[1, 2, 5, 8],
                     mlp_ratios=[4, 4, 4, 4], image_size=224)
    raw = data.to_dict() | {"downsampling_rates": [1, 4, 8, 16], "torch_dtype": "float32",
                            "architectures": ["SegformerForImageClassification"]}
    text = import_hf(write_config(raw, tmp_path)).text
    assert "precision: {dtype: fp32}  # torch_dtype: float32" in text
    values = {str(k): int(v) for k, v in loads(text).bind(1).items()}
    assert [values[f"G{i}"] for i in range(1, 5)] == [56, 28, 14, 7]
    _, params = by_hand(data, 1)
    assert loads(text).evaluate("forward").params == params == 3_319_392


@pytest.mark.slow
@pytest.mark.parametrize("keys", [
    # three stages, an image no stride divides, an even patch kernel, the last stage's tokens left [B, N, C]
    dict(num_encoder_blocks=3, depths=[1, 1, 2], sr_ratios=[4, 2, 1], hidden_sizes=[8, 24, 32], patch_sizes=[7, 3, 4],
         strides=[4, 2, 2], num_attention_heads=[1, 3, 2], mlp_ratios=[4, 2, 1], image_size=70,
         reshape_last_stage=False, hidden_act="relu"),
    dict(sr_ratios=[1, 2], hidden_act="gelu_pytorch_tanh", dtype="float16"),
])
def test_segformer_variants_match_transformers(tmp_path, keys):
    config = segformer(**keys)
    _, results = import_and_check(config, tmp_path)
    totals = assert_exact(results)
    assert (totals["forward"]["spec_matmul"], totals["forward"]["spec_params"]) == by_hand(config, 2)


@pytest.mark.parametrize("keys, message, key", [
    ({"depths": [1, 2, 3]}, "depths has 3 entries but num_encoder_blocks = 2", "depths"),
    ({"num_attention_heads": [3, 2]}, "hidden_sizes[0] = 16 is not a multiple of num_attention_heads[0] = 3",
     "num_attention_heads"),
    ({"sr_ratios": [32, 1]}, "stage 1's 32x32 sequence reduction does not fit its 16x16 token grid", "sr_ratios"),
    ({"image_size": 4, "sr_ratios": [1, 2]}, "stage 2's 2x2 sequence reduction does not fit its 1x1 token grid",
     "sr_ratios"),
    ({"mlp_ratios": [4, 2.5]}, "mlp_ratios = [4, 2.5]: expected a whole number", "mlp_ratios"),
    ({"hidden_act": "relu2"}, "hidden_act = 'relu2': not supported", "hidden_act"),
    ({"num_experts": 4}, "key num_experts not understood by the segformer importer", "num_experts"),
])
def test_segformer_refusals_name_the_key(tmp_path, capsys, keys, message, key):
    assert_refused(tmp_path, capsys, segformer().to_dict() | keys, message, key)


def test_segformer_hostile_values_are_a_spec_or_a_named_refusal(tmp_path):
    base = segformer().to_dict()
    refused, tried = hostile_sweep(base, tmp_path, [k for k in base if k not in BOOKKEEPING], per_key=2)
    assert refused > tried // 3


PROPERTY = settings(max_examples=5, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def segformer_configs(draw):
    n = draw(st.integers(1, 3))
    heads = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    return segformer(num_encoder_blocks=n, depths=draw(st.lists(st.integers(1, 2), min_size=n, max_size=n)),
                     sr_ratios=draw(st.lists(st.integers(1, 2), min_size=n, max_size=n)),
                     hidden_sizes=[h * draw(st.sampled_from([4, 8])) for h in heads], num_attention_heads=heads,
                     patch_sizes=draw(st.lists(st.integers(1, 7), min_size=n, max_size=n)),
                     strides=draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)),
                     mlp_ratios=draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)),
                     image_size=draw(st.integers(16, 48)), reshape_last_stage=draw(st.booleans()),
                     hidden_act=draw(st.sampled_from(["gelu", "relu", "gelu_pytorch_tanh"])))


@pytest.mark.slow
def test_random_segformer_configs(tmp_path_factory):
    @PROPERTY
    @given(config=segformer_configs())
    def check(config):
        _, results = import_and_check(config, tmp_path_factory.mktemp("segformer"))
        totals = assert_exact(results)
        assert (totals["forward"]["spec_matmul"], totals["forward"]["spec_params"]) == by_hand(config, 2)

    check()
