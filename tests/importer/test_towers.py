"""Dual-tower families (CLIP, SigLIP): both towers and the logits (CLIPModel, SiglipModel: the default), one
tower (--tower vision | text) with and without its pooler (--no-pooler): small configs built with the
transformers config classes, imported, and checked against the class the header names, built from the same
config.json on meta (forward and train: exact matmul FLOPs and parameters, every pointwise kind agreeing after
the spec's named rules); random valid configs (hypothesis, slow); the options' refusals."""
from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.against.check import validate_against
from costspec.against.target import load_target
from costspec.cli import main
from costspec.core.errors import CostspecError
from costspec.importer import import_hf
from costspec.model import loads

transformers = pytest.importorskip("transformers")

from tests.importer.check import assert_exact, assert_refused, hostile_sweep, read_keys, write_config  # noqa: E402

SMALL = {"hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 2}
VISION = {**SMALL, "image_size": 32, "patch_size": 16}
TEXT = {**SMALL, "hidden_size": 24, "vocab_size": 64, "max_position_embeddings": 8}


def clip_config():
    return transformers.CLIPConfig(vision_config=VISION, text_config=TEXT, projection_dim=12)


def siglip_config():  # SiglipModel multiplies the text head's output with the pooled vision width
    return transformers.SiglipConfig(vision_config=VISION, text_config={**TEXT, "projection_size": 16})


CONFIGS = {"clip": clip_config, "siglip": siglip_config}
CLASSES = {("clip", "both", True): "CLIPModel", ("siglip", "both", True): "SiglipModel",
           ("clip", "vision", True): "CLIPVisionModelWithProjection", ("clip", "vision", False): "CLIPVisionModel",
           ("clip", "text", True): "CLIPTextModelWithProjection", ("clip", "text", False): "CLIPTextModel",
           ("siglip", "vision", True): "SiglipVisionModel", ("siglip", "vision", False): "SiglipVisionModel",
           ("siglip", "text", True): "SiglipTextModel", ("siglip", "text", False): "SiglipTextModel"}


def check(path, tower=None, pooler=True, passes=("forward", "train"), batch=2):
    """Import with the options, check against the class the import names: (imported, totals per phase)."""
    imported = import_hf(path, tower=tower, pooler=pooler)
    model = loads(imported.text, str(path.with_suffix(".yaml")))
    values = model.bind(batch, None)
    results = {}
    for pass_ in passes:
        real = load_target(f"hf:{imported.described}", model, values, "meta", str(path), imported.hf_kwargs,
                           output=imported.output)
        results[pass_] = validate_against(model, values, real, pass_)
    return imported, assert_exact(results)


CASES = [(family, tower, pooled) for family in CONFIGS for tower in ("vision", "text") for pooled in (True, False)]


@pytest.mark.parametrize("family", ["clip", pytest.param("siglip", marks=pytest.mark.slow)])
def test_both_towers_and_the_logits_match_the_model(tmp_path, family):
    path = write_config(CONFIGS[family](), tmp_path)
    imported, totals = check(path)
    assert imported.described == CLASSES[family, "both", True]
    assert f"--against hf:{imported.described} --config {path} --pass train" in imported.text
    assert "the spec's output is its logits_per_image" in imported.text
    # by hand: batch 2 (texts and images), T = 8 tokens of width 24 (MLP 40), 4 + 1 tokens of width 16 (MLP 40);
    # 2 layers each; the projections to E; the logits' GEMM 2*B*B*E
    B, T, Ct, S, C, F = 2, 8, 24, 5 if family == "clip" else 4, 16, 40
    text_layer = 2 * B * T * Ct * 4 * Ct + 2 * 2 * B * T * T * Ct + 2 * 2 * B * T * Ct * F
    vision_layer = 2 * B * S * C * 4 * C + 2 * 2 * B * S * S * C + 2 * 2 * B * S * C * F
    patches = 2 * B * 4 * (3 * 16 * 16) * C
    if family == "clip":
        E = 12
        heads = 2 * B * Ct * E + 2 * B * C * E
    else:  # SigLIP: the text head (Ct -> E = C) and the vision tower's attention-pooling head (one query)
        E = C
        heads = 2 * B * Ct * E + (2 * B * C * C + 2 * 2 * B * S * C * C + 2 * 2 * B * S * C + 2 * B * C * C
                                  + 2 * 2 * B * C * F)
    assert totals["forward"]["spec_matmul"] == 2 * text_layer + patches + 2 * vision_layer + heads + 2 * B * B * E


@pytest.mark.parametrize("family, tower, pooled", [
    pytest.param(*case, marks=() if case == ("clip", "text", True) else pytest.mark.slow) for case in CASES])
def test_tower_matches_its_class(tmp_path, family, tower, pooled):
    path = write_config(CONFIGS[family](), tmp_path)
    imported, totals = check(path, tower, pooled)
    assert imported.described == CLASSES[family, tower, pooled]
    assert f"--against hf:{imported.described} " in imported.text
    if family == "clip" and tower == "text" and pooled:
        # by hand: batch 2, T = 8 tokens of width 24, MLP 40, 2 layers, projection 24 -> 12 on the EOS token
        B, T, C, F, E = 2, 8, 24, 40, 12
        layer = 2 * B * T * C * 4 * C + 2 * 2 * B * T * T * C + 2 * 2 * B * T * C * F
        assert totals["forward"]["spec_matmul"] == 2 * layer + 2 * B * C * E
        assert "the spec's output is its text_embeds" in imported.text
    if not pooled:
        assert "(imported with --no-pooler)" in imported.text or "no head (--no-pooler" in imported.text


def test_no_pooler_with_both_towers_is_refused(tmp_path, capsys):
    path = write_config(clip_config(), tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path), "--no-pooler"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--no-pooler with both towers" in err, err


def test_siglip_both_towers_need_the_vision_head(tmp_path, capsys):
    data = transformers.SiglipConfig(vision_config={**VISION, "vision_use_head": False},
                                     text_config={**TEXT, "projection_size": 16}).to_dict()
    assert_refused(tmp_path, capsys, data, "vision_config.vision_use_head = false: SiglipModel's logits read")
    assert import_hf(write_config(data, tmp_path), tower="vision").described == "SiglipVisionModel"


def test_a_tower_config_holds_one_tower(tmp_path, capsys):
    path = write_config(transformers.SiglipTextConfig(**TEXT), tmp_path)
    assert import_hf(path).described == "SiglipTextModel"
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path), "--tower", "vision"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "siglip_text_model config (the text tower alone)" in err, err


def test_options_refused_by_families_without_them(tmp_path, capsys):
    path = write_config(transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                 num_attention_heads=2, vocab_size=64), tmp_path)
    for option in (["--tower", "text"], ["--no-pooler"]):
        with pytest.raises(SystemExit) as exc:
            main(["import", "hf", str(path), *option])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"{option[0]}: the llama importer does not take it" in err, err


def test_cli_check_command_names_the_class(tmp_path, capsys):
    path = write_config(clip_config(), tmp_path)
    spec = tmp_path / "text.yaml"
    main(["import", "hf", str(path), "--tower", "text", "--no-pooler", "-o", str(spec)])
    err = capsys.readouterr().err
    assert f"--against hf:CLIPTextModel --config {path} --pass train" in err, err
    assert "CLIPTextModel's last_hidden_state" not in err
    assert "the spec's output is its last_hidden_state (imported with --no-pooler)" in spec.read_text()


@st.composite
def dual_configs(draw):
    """A CLIP or SigLIP config of random small widths, depths, heads, image and text sizes (SigLIP's text
    head as wide as the vision tower, as SiglipModel needs)."""
    family = draw(st.sampled_from(["clip", "siglip"]))
    heads, theads = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    C, Ct = heads * draw(st.integers(2, 6)), theads * draw(st.integers(2, 6))
    patch = draw(st.sampled_from([8, 16]))
    vision = {"hidden_size": C, "num_attention_heads": heads, "num_hidden_layers": draw(st.integers(1, 2)),
              "intermediate_size": draw(st.integers(4, 24)), "patch_size": patch,
              "image_size": patch * draw(st.integers(1, 3))}
    text = {"hidden_size": Ct, "num_attention_heads": theads, "num_hidden_layers": draw(st.integers(1, 2)),
            "intermediate_size": draw(st.integers(4, 24)), "vocab_size": draw(st.integers(8, 64)),
            "max_position_embeddings": draw(st.integers(2, 10))}
    if family == "clip":
        if draw(st.booleans()):
            text["eos_token_id"] = 2  # the legacy EOS: argmax of the ids, no compare
        return transformers.CLIPConfig(vision_config=vision, text_config=text,
                                       projection_dim=draw(st.integers(2, 12)))
    return transformers.SiglipConfig(vision_config=vision, text_config={**text, "projection_size": C})


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=dual_configs(), tower=st.sampled_from([None, "vision", "text"]), pooled=st.booleans(),
       batch=st.integers(1, 3))
def test_random_dual_tower_configs(tmp_path, config, tower, pooled, batch):
    path = write_config(config, tmp_path)
    check(path, tower, pooled or tower is None, batch=batch)


@pytest.mark.parametrize("make", [lambda: transformers.CLIPTextConfig(**TEXT).to_dict(),
                                  lambda: transformers.SiglipTextConfig(**TEXT).to_dict(),
                                  lambda: clip_config().to_dict(), lambda: siglip_config().to_dict()],
                         ids=["clip_text", "siglip_text", "clip", "siglip"])
def test_hostile_values_are_refused_cleanly(tmp_path, make):
    """Every key of a text tower's config, and every top-level key of a full config (its nested configs
    included), given hostile values in turn: a spec that loads, or a clean refusal naming the file."""
    base = make()
    refused, tried = hostile_sweep(base, tmp_path, keys=read_keys(base), per_key=2)
    assert tried and refused, (refused, tried)
    for key in ("hidden_size", "num_attention_heads", "max_position_embeddings", "vocab_size"):
        if key in base:
            for value in (0, -1, "abc", 10**30, 1.5):
                path = write_config({**base, key: value}, tmp_path)
                with pytest.raises(CostspecError, match=re.escape(key)):
                    loads(import_hf(path).text)
