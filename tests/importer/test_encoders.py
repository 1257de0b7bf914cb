"""Imported encoder specs against their transformers models (on meta): ViT, DeiT, DINOv2, CLIP, SAM,
BERT, RoBERTa. Forward and train: no failing row, matmul FLOPs and parameters exactly equal.

Fixed small configs (fast), then random valid configs per family (hypothesis, slow)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.importer.check import assert_exact, import_and_check, path_model, write_config  # noqa: E402

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}

# name -> (config, batch). Batch 1 where the model looks its learned positions up in an nn.Embedding
# (CLIP, BERT, RoBERTa): at batch 2 the position_embedding op misses that lookup's S*C scatter_add
# (a difference in the op, reported; the matmul FLOPs and parameters agree at any batch).
ENCODERS = {
    "vit": (lambda: transformers.ViTConfig(**SMALL, intermediate_size=96, image_size=32, patch_size=8), 2),
    "vit_no_qkv_bias": (lambda: transformers.ViTConfig(**SMALL, intermediate_size=96, image_size=24, patch_size=8,
                                                       qkv_bias=False, hidden_act="gelu_pytorch_tanh"), 2),
    "deit": (lambda: transformers.DeiTConfig(**SMALL, intermediate_size=96, image_size=32, patch_size=8), 2),
    # the pooler ViTModel / DeiTModel build: dense to pooler_output_size, then pooler_act
    "deit_pooler_width": (lambda: transformers.DeiTConfig(**SMALL, intermediate_size=96, image_size=16, patch_size=8,
                                                          pooler_output_size=40, pooler_act="gelu"), 2),
    "dinov2": (lambda: transformers.Dinov2Config(**SMALL, image_size=28, patch_size=7, use_mask_token=False), 2),
    "dinov2_swiglu": (lambda: transformers.Dinov2Config(**SMALL, image_size=28, patch_size=7, use_mask_token=False,
                                                        use_swiglu_ffn=True, mlp_ratio=3), 2),
    "clip_vision_model": (lambda: transformers.CLIPVisionConfig(**SMALL, intermediate_size=96, image_size=32,
                                                                patch_size=8, projection_dim=48), 1),
    "clip": (lambda: transformers.CLIPConfig(vision_config={**SMALL, "intermediate_size": 96, "image_size": 32,
                                                            "patch_size": 8},
                                             text_config={**SMALL, "intermediate_size": 96}, projection_dim=40), 1),
    "sam_vision_model": (lambda: transformers.SamVisionConfig(**SMALL, image_size=128, patch_size=16, window_size=3,
                                                              global_attn_indexes=[1], output_channels=32,
                                                              mlp_dim=100), 2),
    "sam": (lambda: transformers.SamConfig(vision_config={**SMALL, "image_size": 64, "patch_size": 16,
                                                          "window_size": 0, "global_attn_indexes": [],
                                                          "output_channels": 16}), 2),
    "bert": (lambda: transformers.BertConfig(**SMALL, intermediate_size=96, vocab_size=100,
                                             max_position_embeddings=40), 1),
    "roberta": (lambda: transformers.RobertaConfig(**SMALL, intermediate_size=96, vocab_size=100,
                                                   max_position_embeddings=42), 1),
}


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_import_matches_the_transformers_model(name, tmp_path):
    make, batch = ENCODERS[name]
    _, results = import_and_check(make(), tmp_path, batch=batch)
    totals = assert_exact(results)
    assert totals["forward"]["spec_matmul"] > 0 and totals["backward"]["spec_matmul"] > 0


def test_dinov2_mask_token_is_counted_as_parameters_only(tmp_path):
    """With use_mask_token (Dinov2Config's default) the model holds a (1, C) token that only masked image
    modelling runs: the spec holds it too (patch_embed's mask_token: C parameters, no work), so forward and
    train agree exactly, parameters included."""
    model, results = import_and_check(transformers.Dinov2Config(**SMALL, image_size=28, patch_size=7), tmp_path)
    totals = assert_exact(results)
    without = path_model_of(transformers.Dinov2Config(**SMALL, image_size=28, patch_size=7, use_mask_token=False),
                            tmp_path / "plain")
    C = SMALL["hidden_size"]
    assert totals["forward"]["spec_params"] == model.report("forward", model.bind(1)).params
    assert model.report("forward", model.bind(1)).params - without.report("forward", without.bind(1)).params == C
    for pass_ in ("forward", "backward"):  # no work: FLOPs unchanged
        assert model.report(pass_, model.bind(2)).total == without.report(pass_, without.bind(2)).total


def path_model_of(config, folder):
    folder.mkdir()
    return path_model(write_config(config, folder))


# ----------------------------------------------------------------------------------------------
# Random valid configs (hypothesis): widths, depths, heads, image and patch sizes, window layouts
# ----------------------------------------------------------------------------------------------
def _check(config, batch: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _, results = import_and_check(config, Path(folder), batch=batch)
        assert_exact(results)


@st.composite
def widths(draw) -> dict:
    heads = draw(st.integers(1, 4))
    return {"num_attention_heads": heads, "hidden_size": heads * draw(st.sampled_from([4, 8, 12])),
            "num_hidden_layers": draw(st.integers(1, 3))}


@st.composite
def images(draw, patches=(4, 7, 8)) -> dict:
    patch = draw(st.sampled_from(patches))
    return {"patch_size": patch, "image_size": patch * draw(st.integers(1, 4))}


@pytest.mark.slow
@settings(max_examples=5)
@given(w=widths(), img=images(), mlp=st.integers(4, 48), qkv=st.booleans(), deit=st.booleans(),
       act=st.sampled_from(["gelu", "relu", "gelu_pytorch_tanh", "silu"]))
def test_random_vit_and_deit(w, img, mlp, qkv, deit, act):
    cls = transformers.DeiTConfig if deit else transformers.ViTConfig
    _check(cls(**w, **img, intermediate_size=mlp, qkv_bias=qkv, hidden_act=act), 2)


@pytest.mark.slow
@settings(max_examples=5)
@given(w=widths(), img=images(), ratio=st.sampled_from([1, 2, 3, 4]), swiglu=st.booleans())
def test_random_dinov2(w, img, ratio, swiglu):
    _check(transformers.Dinov2Config(**w, **img, mlp_ratio=ratio, use_swiglu_ffn=swiglu, use_mask_token=False), 2)


@pytest.mark.slow
@settings(max_examples=5)
@given(w=widths(), img=images(), mlp=st.integers(4, 48), proj=st.integers(4, 40), composite=st.booleans())
def test_random_clip(w, img, mlp, proj, composite):
    vision = {**w, **img, "intermediate_size": mlp}
    config = (transformers.CLIPConfig(vision_config=vision, text_config=SMALL, projection_dim=proj) if composite
              else transformers.CLIPVisionConfig(**vision, projection_dim=proj))
    _check(config, 1)


@st.composite
def sam_configs(draw) -> dict:
    w = draw(widths())
    patch = draw(st.sampled_from([8, 16]))
    grid = draw(st.integers(2, 6))
    layers = w["num_hidden_layers"]
    return {**w, "patch_size": patch, "image_size": patch * grid, "window_size": draw(st.integers(0, grid)),
            "global_attn_indexes": draw(st.lists(st.integers(0, layers - 1), unique=True, max_size=layers)),
            "use_rel_pos": draw(st.booleans()), "use_abs_pos": draw(st.booleans()),
            "mlp_dim": draw(st.integers(4, 48)), "output_channels": draw(st.integers(4, 24)),
            "qkv_bias": draw(st.booleans())}


@pytest.mark.slow
@settings(max_examples=5)
@given(cfg=sam_configs())
def test_random_sam(cfg):
    _check(transformers.SamVisionConfig(**cfg), 2)


@pytest.mark.slow
@settings(max_examples=5)
@given(w=widths(), mlp=st.integers(4, 48), vocab=st.integers(8, 300), positions=st.integers(8, 40),
       types=st.integers(1, 3), roberta=st.booleans(), act=st.sampled_from(["gelu", "relu", "gelu_pytorch_tanh"]))
def test_random_bert_and_roberta(w, mlp, vocab, positions, types, roberta, act):
    cls = transformers.RobertaConfig if roberta else transformers.BertConfig
    _check(cls(**w, intermediate_size=mlp, vocab_size=vocab, max_position_embeddings=positions + (2 if roberta else 0),
               type_vocab_size=types, hidden_act=act, pad_token_id=1 if roberta else 0), 1)


@pytest.mark.slow
def test_the_printed_check_command_passes(tmp_path):
    """`costspec import hf -o` prints the `validate --against` command; run as printed, it passes."""
    import shlex

    from tests.common import invoke
    from tests.importer.check import write_config

    config = write_config(transformers.CLIPConfig(vision_config={**SMALL, "intermediate_size": 96, "image_size": 32,
                                                                 "patch_size": 8},
                                                  text_config=SMALL, projection_dim=40), tmp_path)
    spec = tmp_path / "clip.yaml"
    done = invoke("import", "hf", config, "-o", spec)
    assert done.returncode == 0, done.stderr
    command = done.stderr.split("check it with: ", 1)[1].strip()
    assert command.startswith("costspec validate ")
    checked = invoke(*shlex.split(command)[1:])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "result: PASS" in checked.stdout
