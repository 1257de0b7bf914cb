"""The multimodal gemma3 config: its text decoder (the default: Gemma3ForCausalLM through the template's
gemma3_text) and its vision tower (--tower vision: SiglipVisionModel's last_hidden_state) imported from small
configs built with transformers' Gemma3Config and checked against those classes on meta (forward and train,
exact); the whole model refused with its reason; hostile values; random configs (slow)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.against.check import validate_against
from costspec.against.target import load_target
from costspec.cli import main
from costspec.importer import import_hf
from costspec.model import loads

transformers = pytest.importorskip("transformers")

from tests.importer.check import assert_exact, hostile_sweep, read_keys, write_config  # noqa: E402

TEXT = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 64, "sliding_window": 4}
VISION = {"hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 2,
          "image_size": 32, "patch_size": 16}


def config(text=TEXT, vision=VISION):
    return transformers.Gemma3Config(text_config=text, vision_config=vision)


def check(path, tower=None, dims=None, batch=2):
    imported = import_hf(path, tower=tower)
    model = loads(imported.text, str(path.with_suffix(".yaml")))
    values = model.bind(batch, dims)
    results = {p: validate_against(model, values, load_target(f"hf:{imported.described}", model, values, "meta",
                                                                str(path), imported.hf_kwargs,
                                                                output=imported.output), p)
               for p in ("forward", "train")}
    return imported, assert_exact(results)


def test_text_decoder_is_the_default(tmp_path):
    path = write_config(config(), tmp_path)
    imported, totals = check(path, dims={"S": 8})
    assert imported.described == "Gemma3ForCausalLM"
    assert "--tower text (the default): the spec is Gemma 3's text decoder" in imported.text
    # the same spec as the text config alone gives (model_type gemma3_text), from `dims:` on
    alone = tmp_path / "text"
    alone.mkdir()
    text = import_hf(write_config(transformers.Gemma3TextConfig(**TEXT), alone)).text
    assert imported.text.split("\ndims:", 1)[1] == text.split("\ndims:", 1)[1]


@pytest.mark.slow
def test_text_backbone(tmp_path):
    imported, _ = check(write_config(config(), tmp_path), dims={"S": 8})
    backbone = import_hf(tmp_path / "config.json", backbone=True)
    assert backbone.described == "Gemma3TextModel" and imported.described == "Gemma3ForCausalLM"
    model = loads(backbone.text)
    values = model.bind(2, {"S": 8})
    for pass_ in ("forward", "train"):
        real = load_target("hf:Gemma3TextModel", model, values, "meta", str(tmp_path / "config.json"))
        assert_exact({pass_: validate_against(model, values, real, pass_)})


@pytest.mark.slow
def test_vision_tower(tmp_path):
    path = write_config(config(), tmp_path)
    imported, totals = check(path, tower="vision")
    assert imported.described == "SiglipVisionModel" and "without the projector" in imported.text
    B, S, C, F = 2, 4, 16, 40
    patches = 2 * B * S * (3 * 16 * 16) * C
    assert totals["forward"]["spec_matmul"] == patches + 2 * B * S * C * 4 * C + 2 * 2 * B * S * S * C + \
        2 * 2 * B * S * C * F


def test_whole_model_refused_with_its_reason(tmp_path, capsys):
    path = write_config(config(), tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path), "--tower", "both"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "a masked scatter by token id" in err, err



def test_hostile_values_are_refused_cleanly(tmp_path):
    base = config().to_dict()
    refused, tried = hostile_sweep(base, tmp_path, keys=read_keys(base), per_key=2)
    assert tried and refused, (refused, tried)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kv=st.integers(1, 2), groups=st.integers(1, 2), head_dim=st.sampled_from([8, 16]), layers=st.integers(1, 3),
       tower=st.sampled_from([None, "vision"]))
def test_random_gemma3_configs(tmp_path, kv, groups, head_dim, layers, tower):
    text = {**TEXT, "num_key_value_heads": kv, "num_attention_heads": kv * groups, "head_dim": head_dim,
            "num_hidden_layers": layers}
    check(write_config(config(text), tmp_path), tower=tower, dims={"S": 6} if tower is None else None)
