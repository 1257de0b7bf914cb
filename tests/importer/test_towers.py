"""Dual-tower families (CLIP, SigLIP) imported per tower (--tower vision | text) with and without the pooler
(--no-pooler): small configs built with the transformers config classes, imported, and checked against the
class the header names, built from the same config.json on meta (forward and train: exact matmul FLOPs and
parameters, every pointwise kind agreeing after the spec's named rules); the options' refusals."""
from __future__ import annotations

import pytest

from costspec.against.check import validate_against
from costspec.against.target import load_target
from costspec.cli import main
from costspec.importer import import_hf
from costspec.model import loads

transformers = pytest.importorskip("transformers")

from tests.importer.check import assert_exact, write_config  # noqa: E402

SMALL = {"hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 2}
VISION = {**SMALL, "image_size": 32, "patch_size": 16}
TEXT = {**SMALL, "hidden_size": 24, "vocab_size": 64, "max_position_embeddings": 8}


def clip_config():
    return transformers.CLIPConfig(vision_config=VISION, text_config=TEXT, projection_dim=12)


def siglip_config():
    return transformers.SiglipConfig(vision_config=VISION, text_config={**TEXT, "projection_size": 12})


CONFIGS = {"clip": clip_config, "siglip": siglip_config}
CLASSES = {("clip", "vision", True): "CLIPVisionModelWithProjection", ("clip", "vision", False): "CLIPVisionModel",
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


def test_default_is_the_vision_tower_and_both_is_refused_with_its_reason(tmp_path, capsys):
    path = write_config(clip_config(), tmp_path)
    assert import_hf(path).described == "CLIPVisionModelWithProjection"
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path), "--tower", "both"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "a product of two activations" in err, err


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
