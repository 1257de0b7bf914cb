"""The multimodal gemma3 config: the whole model (the default: Gemma3ForConditionalGeneration, --backbone
Gemma3Model: vision tower, projector, decoder), its text decoder (--tower text: Gemma3ForCausalLM through the
template's gemma3_text) and its vision tower (--tower vision: SiglipVisionModel's last_hidden_state) imported
from small configs built with transformers' Gemma3Config and checked against those classes on meta (forward
and train, exact); a config whose projector cannot pool (transformers' defaults) falls back to the decoder;
refusals with their reasons; hostile values; random configs (slow)."""
from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.against.check import validate_against
from costspec.against.meta_checks import META_CHECK_NOTE
from costspec.against.target import load_target
from costspec.cli import main
from costspec.core.errors import CostspecError
from costspec.importer import import_hf
from costspec.model import loads

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tests.common import invoke  # noqa: E402
from tests.importer.check import HOSTILE, assert_exact, hostile_sweep, read_keys, write_config  # noqa: E402

TEXT = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 64, "sliding_window": 4}
VISION = {"hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 2,
          "image_size": 32, "patch_size": 16}
# a 4 x 4 patch grid pooled to 2 x 2 = 4 image tokens; no vision head, as Gemma 3's checkpoints
WHOLE_VISION = {**VISION, "patch_size": 8, "vision_use_head": False}
WHOLE = {"mm_tokens_per_image": 4, "image_token_index": 60, "boi_token_index": 61, "eoi_token_index": 62}


def config(text=TEXT, vision=VISION, **whole):
    return transformers.Gemma3Config(text_config=text, vision_config=vision, **whole)


def whole_config(text=TEXT, vision=WHOLE_VISION, **keys):
    return config(text, vision, **{**WHOLE, **keys})


def header(text: str) -> str:
    """The spec's header comments as one line (they are wrapped)."""
    return " ".join(line[2:] for line in text.split("\ncostspec: 1", 1)[0].splitlines() if line.startswith("# "))


def check(path, tower=None, dims=None, batch=2):
    imported = import_hf(path, tower=tower)
    model = loads(imported.text, str(path.with_suffix(".yaml")))
    values = model.bind(batch, dims)
    results = {p: validate_against(model, values, load_target(f"hf:{imported.described}", model, values, "meta",
                                                                str(path), imported.hf_kwargs,
                                                                output=imported.output), p)
               for p in ("forward", "train")}
    if imported.described in ("Gemma3ForConditionalGeneration", "Gemma3Model"):  # the placeholder-count check
        assert all(META_CHECK_NOTE in result.described for result in results.values())
    return imported, assert_exact(results)


def test_whole_model_is_the_default(tmp_path):
    path = write_config(whole_config(), tmp_path)
    imported, totals = check(path, dims={"S": 8})
    assert imported.described == "Gemma3ForConditionalGeneration"
    model = loads(imported.text)
    # the real class's parameters, every one (vision tower, projector, decoder; the LM head tied)
    with torch.device("meta"):
        real = transformers.Gemma3ForConditionalGeneration(whole_config())
    assert model.report("forward", model.bind(1, {"S": 8})).params == sum(p.numel() for p in real.parameters())
    # the projector's matmul and the decoder over all S tokens, from the dims: forward at B = 2, S = 8
    B, S, C, M, Cv = 2, 8, 32, 4, 16
    vision = 2 * B * 16 * (3 * 8 * 8) * Cv + 2 * B * 16 * Cv * 4 * Cv + 2 * 2 * B * 16 * 16 * Cv + 2 * 2 * B * 16 * Cv * 40
    decoder = 2 * (2 * B * S * C * (2 * 16 + 2 * 16) + 2 * B * S * 2 * 16 * C + 2 * 2 * B * 2 * S * S * 16
                   + 3 * 2 * B * S * C * 48)
    assert totals["forward"]["spec_matmul"] == vision + 2 * B * M * Cv * C + decoder + 2 * B * S * C * 64


def test_whole_model_printed_check_command_passes(tmp_path):
    """The `validate --against` command the header prints, run as printed (at B = 1, S = 8): PASS on meta."""
    path = write_config(whole_config(), tmp_path)
    spec = tmp_path / "gemma3.yaml"
    imported = invoke("import", "hf", path, "-o", spec)
    assert imported.returncode == 0, imported.stderr
    words = shlex.split(spec.read_text().splitlines()[3].removeprefix("#   "))
    assert words[:4] == ["costspec", "validate", str(spec), "--against"], words
    result = invoke(*words[1:], "--set", "S=8")
    assert result.returncode == 0 and "result: PASS" in result.stdout, result.stdout + result.stderr
    assert META_CHECK_NOTE.split(";")[0] in " ".join(result.stdout.split()), result.stdout


def test_whole_model_backbone(tmp_path):
    imported = import_hf(write_config(whole_config(), tmp_path), backbone=True)
    assert imported.described == "Gemma3Model" and "lm_head" not in imported.text
    assert "source: language_model.layers" in imported.text and "source: vision_tower.embeddings" in imported.text


@pytest.mark.slow
def test_whole_model_backbone_against_gemma3model(tmp_path):
    path = write_config(whole_config(), tmp_path)
    imported = import_hf(path, backbone=True)
    model = loads(imported.text)
    values = model.bind(2, {"S": 8})
    for pass_ in ("forward", "train"):
        real = load_target("hf:Gemma3Model", model, values, "meta", str(path))
        assert_exact({pass_: validate_against(model, values, real, pass_)})


@pytest.mark.slow
def test_whole_model_with_an_unused_vision_head(tmp_path):
    """vision_use_head true (transformers' default): SiglipVisionModel builds its head, Gemma 3 never runs it:
    the spec leaves it out by name (its parameters too)."""
    path = write_config(whole_config(vision={**WHOLE_VISION, "vision_use_head": True}), tmp_path)
    imported, _ = check(path, dims={"S": 8})
    assert 'module: "model.vision_tower.head"' in imported.text


def test_text_tower(tmp_path):
    path = write_config(whole_config(), tmp_path)
    imported, totals = check(path, tower="text", dims={"S": 8})
    assert imported.described == "Gemma3ForCausalLM"
    assert "--tower text: the spec is Gemma 3's text decoder" in imported.text
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
    imported, totals = check(path, tower="vision")  # the 2 x 2 grid: the tower alone still imports
    assert imported.described == "SiglipVisionModel" and "without the projector" in imported.text
    B, S, C, F = 2, 4, 16, 40
    patches = 2 * B * S * (3 * 16 * 16) * C
    assert totals["forward"]["spec_matmul"] == patches + 2 * B * S * C * 4 * C + 2 * 2 * B * S * S * C + \
        2 * 2 * B * S * C * F


def test_a_projector_that_cannot_pool_falls_back_to_the_decoder(tmp_path, capsys):
    """transformers' default mm_tokens_per_image (256: 16 a side) on a 2 x 2 patch grid: the class's AvgPool2d
    gets a kernel of 0. The default imports the text decoder and says why; --tower both refuses with it."""
    path = write_config(config(), tmp_path)
    imported = import_hf(path)
    assert imported.described == "Gemma3ForCausalLM"
    assert "the default falls back to it because the whole model cannot be written" in header(imported.text)
    assert "fails (a kernel of 0)" in header(imported.text)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path), "--tower", "both"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "AvgPool2d(kernel 2 // 16 = 0)" in err and "mm_tokens_per_image" in err, err


@pytest.mark.parametrize("keys, message", [
    ({"mm_tokens_per_image": 2}, "mm_tokens_per_image = 2 is not a square"),
    ({"mm_tokens_per_image": 9}, "gives 16 tokens, not 9"),
    ({"image_token_index": 64}, "image_token_index = 64 is not below text_config.vocab_size = 64"),
])
def test_whole_model_refusals(tmp_path, capsys, keys, message):
    """--tower both refuses; the default imports the text decoder and says why."""
    path = write_config(whole_config(**keys), tmp_path)
    fallback = import_hf(path)
    assert fallback.described == "Gemma3ForCausalLM" and message in header(fallback.text)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path), "--tower", "both"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err, err


def test_the_real_class_fails_where_the_projector_cannot_pool():
    """What the refusal says, as transformers has it: the kernel of 0 fails in the class's own forward."""
    with torch.device("meta"):
        real = transformers.Gemma3ForConditionalGeneration(config())
    with pytest.raises(RuntimeError, match="kernel size should be greater than zero|stride should not be zero"):
        real.model.get_image_features(torch.zeros(1, 3, 32, 32, device="meta"))



def test_hostile_values_are_refused_cleanly(tmp_path):
    base = config().to_dict()
    refused, tried = hostile_sweep(base, tmp_path, keys=read_keys(base), per_key=2)
    assert tried and refused, (refused, tried)


def test_hostile_values_in_a_whole_model_config_are_refused_cleanly(tmp_path):
    """The whole model's own keys and its vision_config's (read now) under hostile values: a spec that loads
    (the whole model, or the decoder where the projector can no longer pool) or a named refusal, never a crash."""
    base = whole_config().to_dict()
    refused, tried = hostile_sweep(base, tmp_path, keys=["mm_tokens_per_image", "image_token_index",
                                                         "vision_config"], per_key=3)
    vision = base["vision_config"]
    for number, key in enumerate(k for k in read_keys(vision) if k != "model_type"):
        for value in (HOSTILE[number % len(HOSTILE)], HOSTILE[(number + 5) % len(HOSTILE)]):
            path = write_config({**base, "vision_config": {**vision, key: value}}, tmp_path)
            tried += 1
            try:
                loads(import_hf(path).text)
            except CostspecError as exc:
                assert str(path) in str(exc), exc
                refused += 1
    assert tried > 20 and refused, (refused, tried)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kv=st.integers(1, 2), groups=st.integers(1, 2), head_dim=st.sampled_from([8, 16]), layers=st.integers(1, 3),
       tower=st.sampled_from([None, "text", "vision"]), side=st.sampled_from([1, 2, 4]))
def test_random_gemma3_configs(tmp_path, kv, groups, head_dim, layers, tower, side):
    text = {**TEXT, "num_key_value_heads": kv, "num_attention_heads": kv * groups, "head_dim": head_dim,
            "num_hidden_layers": layers}
    path = write_config(whole_config(text, mm_tokens_per_image=side * side), tmp_path)
    check(path, tower=tower, dims={"S": 6 + side * side} if tower != "vision" else None)
