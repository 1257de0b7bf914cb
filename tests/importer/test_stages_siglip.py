"""Importer families convnext, swin and siglip / siglip_vision_model: small configs imported and checked
against the transformers model built from the same config.json on meta (forward and train: exact matmul
FLOPs and parameters, every pointwise kind agreeing after the spec's named rules), the zoo round trip
(the default configs are the zoo's convnext_tiny, swin_tiny and siglip_b16), refusals, and random
configs drawn by hypothesis (slow)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.importer import import_hf
from costspec.model import load, loads
from tests.common import ROOT

transformers = pytest.importorskip("transformers")

from tests.importer.check import assert_exact, assert_refused, import_and_check, write_config  # noqa: E402


def convnext(**keys):
    return transformers.ConvNextConfig(**keys)


def swin(**keys):
    return transformers.SwinConfig(**keys)


def siglip_vision(**keys):
    return transformers.SiglipVisionConfig(**keys)


SMALL_CONVNEXT = {"hidden_sizes": [8, 16], "depths": [1, 2], "num_stages": 2, "image_size": 32}
SMALL_SWIN = {"embed_dim": 8, "depths": [2, 1], "num_heads": [2, 4], "window_size": 2, "image_size": 32}
SMALL_SIGLIP = {"hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 2,
                "image_size": 32, "patch_size": 8}


# ----------------------------------------------------------------------------------------------
# Small configs against transformers
# ----------------------------------------------------------------------------------------------
def test_convnext_small_config_matches_transformers(tmp_path):
    model, results = import_and_check(convnext(**SMALL_CONVNEXT), tmp_path)
    totals = assert_exact(results)
    # batch 2, 32 px, patch 4: stem 8x8 grid; stage 2 on 4x4. Forward matmul by hand:
    B = 2
    stem = 2 * B * 64 * 8 * (3 * 16)
    block = lambda n, c: 2 * B * n * c * 49 + 2 * 2 * B * n * c * 4 * c  # noqa: E731 -- dwconv + fc1/fc2
    down = 2 * B * 16 * 16 * 8 * 4  # 2x2 stride-2 conv 8 -> 16 on the 4x4 grid
    assert totals["forward"]["spec_matmul"] == stem + block(64, 8) + down + 2 * block(16, 16)
    assert "--output-field pooler_output" in import_hf(tmp_path / "config.json").text


def test_convnext_without_layer_scale(tmp_path):
    model, results = import_and_check(convnext(**SMALL_CONVNEXT, layer_scale_init_value=0.0), tmp_path)
    assert_exact(results)
    assert "layer_scale: {}" not in import_hf(tmp_path / "config.json").text


def test_swin_small_config_matches_transformers(tmp_path):
    # 32 px / patch 4: grid 8 (window 2, shifted odd block), then 4 (window 2, one block: no shift)
    model, results = import_and_check(swin(**SMALL_SWIN), tmp_path)
    totals = assert_exact(results)
    text = import_hf(tmp_path / "config.json").text
    assert "{indices: [1], name: shifted, args: {shift: win // 2}}" in text
    assert totals["forward"]["spec_params"] == model.evaluate("forward").params


def test_swin_grid_of_one_window_and_absolute_embeddings(tmp_path):
    # window 4 over a 4 x 4 grid: one window, which transformers does not shift
    config = swin(embed_dim=8, depths=[2], num_heads=[2], window_size=4, image_size=16,
                  use_absolute_embeddings=True, mlp_ratio=2.5, qkv_bias=False)
    model, results = import_and_check(config, tmp_path)
    assert_exact(results)
    text = import_hf(tmp_path / "config.json").text
    assert "name: shifted" not in text and "the grid is one window" in text
    assert "5*width // 2" in text and "position_embedding" in text and "qkv_bias: false" in text


@pytest.mark.parametrize("head", [True, False])
def test_siglip_vision_config_matches_transformers(tmp_path, head):
    model, results = import_and_check(siglip_vision(**SMALL_SIGLIP, vision_use_head=head), tmp_path)
    totals = assert_exact(results)
    imported = import_hf(tmp_path / "config.json")
    assert imported.output == ("pooler_output" if head else None)
    assert ("queries: 1" in imported.text) is head
    B, S, C, F, L = 2, 16, 16, 40, 2
    body = L * (4 * 2 * B * S * C * C + 2 * 2 * B * S * S * C + 2 * 2 * B * S * C * F) + 2 * B * S * C * 3 * 64
    # the head: q of the probe, packed k/v, scores and AV over S keys, out_proj, MLP on the one query
    pool = 2 * B * C * C + 2 * B * S * C * 2 * C + 2 * 2 * B * S * C + 2 * B * C * C + 2 * 2 * B * C * F
    assert totals["forward"]["spec_matmul"] == body + (pool if head else 0)


def test_siglip_composite_config_imports_both_towers(tmp_path, capsys):
    """A full config: SiglipModel (both towers and the logits) by default; its logits need the text head's
    width to be the vision width (else refused, naming the keys)."""
    text = {"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1, "max_position_embeddings": 8}
    config = transformers.SiglipConfig(vision_config=SMALL_SIGLIP, text_config={**text, "projection_size": 16})
    model, results = import_and_check(config, tmp_path, passes=("forward",))
    assert_exact(results)
    imported = import_hf(tmp_path / "config.json")
    assert imported.described == "SiglipModel"
    assert "C: {value: 16, doc: model width}  # vision_config.hidden_size" in imported.text
    assert "similarity: {with: text_embeds, form: siglip, bias: true}" in imported.text
    data = transformers.SiglipConfig(vision_config=SMALL_SIGLIP, text_config=text).to_dict()
    assert_refused(tmp_path, capsys, data, "text_config.projection_size = 8 differs from vision_config.hidden_size = 16")


# ----------------------------------------------------------------------------------------------
# The zoo round trip: the default configs are the three zoo models
# ----------------------------------------------------------------------------------------------
# swin_tiny: its patch-merging reshapes take ~2 s of symbolic shape checks per load (loaded twice here): slow
@pytest.mark.parametrize("name, config", [("convnext_tiny", "ConvNextConfig"),
                                          pytest.param("swin_tiny", "SwinConfig", marks=pytest.mark.slow),
                                          ("siglip_b16", "SiglipVisionConfig")])
def test_import_of_the_default_config_reproduces_the_zoo_spec(tmp_path, name, config):
    path = write_config(getattr(transformers, config)(dtype="bfloat16"), tmp_path)
    imported, zoo = loads(import_hf(path).text), load(ROOT / f"specs/{name}.yaml")
    for pass_ in ("forward", "train"):
        for batch in (1, 8):
            a, b = imported.report(pass_, imported.bind(batch)), zoo.report(pass_, zoo.bind(batch))
            assert (a.tc, a.cuda, a.params) == (b.tc, b.cuda, b.params), (pass_, batch)


# ----------------------------------------------------------------------------------------------
# Refusals: a clear error naming the file and the key, exit 2
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config, message", [
    (lambda: convnext(**SMALL_CONVNEXT, num_experts=4), "key num_experts not understood by the convnext importer"),
    (lambda: convnext(hidden_sizes=[8, 16], depths=[1, 2, 3], num_stages=2), "depths has 3 entries, expected 2"),
    (lambda: convnext(**{**SMALL_CONVNEXT, "image_size": 36}), "image_size = 36 is not a multiple of patch_size"),
    (lambda: swin(**{**SMALL_SWIN, "image_size": 20}), "stage 1 has an odd grid 5"),
    (lambda: swin(embed_dim=8, depths=[2, 2], num_heads=[2, 2], window_size=7, image_size=32),
     "stage 1's grid 8 is not a multiple of the window"),
    (lambda: swin(embed_dim=8, depths=[1, 2], num_heads=[2, 2], window_size=7, image_size=32),
     "stage 2's grid 4 is smaller than the window"),
    # int(2.3333333 * 96) = 223, not 7 * 96 // 3 = 224: no expression of the width is exact
    (lambda: swin(**{**SMALL_SWIN, "embed_dim": 96}, mlp_ratio=2.3333333),
     "int(mlp_ratio * width) is not a simple fraction"),
    (lambda: swin(**{**SMALL_SWIN, "num_heads": [3, 4]}), "embed_dim = 8 is not a multiple of num_heads[0] = 3"),
    (lambda: siglip_vision(**{**SMALL_SIGLIP, "hidden_act": "relu2"}), "hidden_act = 'relu2': not supported"),
])
def test_refused_configs_name_the_key(tmp_path, capsys, config, message):
    assert_refused(tmp_path, capsys, config().to_dict(), message)


# ----------------------------------------------------------------------------------------------
# Random valid configs (hypothesis): import, then forward and train exact against transformers
# ----------------------------------------------------------------------------------------------
PROPERTY = settings(max_examples=5, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def convnext_configs(draw):
    stages = draw(st.integers(1, 3))
    widths = [draw(st.sampled_from([4, 8, 12])) * 2**i for i in range(stages)]
    patch = draw(st.sampled_from([2, 4]))
    return convnext(hidden_sizes=widths, depths=[draw(st.integers(1, 2)) for _ in range(stages)],
                    num_stages=stages, patch_size=patch, image_size=patch * 2 ** (stages - 1) * draw(st.integers(1, 3)),
                    hidden_act=draw(st.sampled_from(["gelu", "relu", "silu"])),
                    layer_scale_init_value=draw(st.sampled_from([0.0, 1e-6])))


@st.composite
def swin_configs(draw):
    stages = draw(st.integers(1, 3))
    window = draw(st.sampled_from([2, 3]))
    last = draw(st.integers(window, 2 * window))  # the last stage's grid (at least the window); earlier ones double
    grid = last * 2 ** (stages - 1)
    # a stage larger than the window needs whole windows when it has a shifted (odd) block
    depths = [draw(st.integers(1, 2)) for _ in range(stages)]
    grids = [grid // 2**i for i in range(stages)]
    depths = [1 if g > window and g % window else d for g, d in zip(grids, depths)]
    heads = [draw(st.sampled_from([1, 2])) * 2**i for i in range(stages)]
    patch = draw(st.sampled_from([2, 4]))
    return swin(embed_dim=4 * draw(st.integers(1, 2)), depths=depths, num_heads=heads, window_size=window,
                image_size=grid * patch, patch_size=patch, mlp_ratio=draw(st.sampled_from([2.0, 4.0, 1.5])),
                qkv_bias=draw(st.booleans()), use_absolute_embeddings=draw(st.booleans()))


@st.composite
def siglip_configs(draw):
    heads = draw(st.integers(1, 3))
    patch = draw(st.sampled_from([4, 8]))
    return siglip_vision(hidden_size=heads * draw(st.sampled_from([4, 8])), num_attention_heads=heads,
                         intermediate_size=draw(st.integers(4, 24)), num_hidden_layers=draw(st.integers(1, 2)),
                         patch_size=patch, image_size=patch * draw(st.integers(1, 4)),
                         hidden_act=draw(st.sampled_from(["gelu_pytorch_tanh", "gelu", "quick_gelu"])),
                         vision_use_head=draw(st.booleans()))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [convnext_configs(), swin_configs(), siglip_configs()],
                         ids=["convnext", "swin", "siglip"])
def test_random_configs_per_family(tmp_path_factory, strategy):
    @PROPERTY
    @given(config=strategy)
    def check(config):
        folder = tmp_path_factory.mktemp(config.model_type)
        _, results = import_and_check(config, folder)
        assert_exact(results)

    check()
