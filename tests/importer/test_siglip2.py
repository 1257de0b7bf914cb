"""Importer family siglip2: the text tower (Siglip2TextModel: a siglip2_text_model config, or --tower text of a
full config) imported through the siglip text builder and checked against transformers on meta (forward and
train, exact; the same spec as SigLIP's text tower); Siglip2Model / Siglip2VisionModel are refused with the
reasons (SIGLIP2_GAPS), a clean exit 2 naming the config; the first reason is checked against transformers
itself: the vision tower does not run on meta, whether spatial_shapes is a meta tensor or a real one."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costspec.against.check import validate_against
from costspec.against.target import load_target
from costspec.importer import import_hf
from costspec.importer.config import ImportProblem
from costspec.importer.families.siglip2 import SIGLIP2_GAPS, TEXT_TOWER
from costspec.model import loads

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tests.importer.check import BOOKKEEPING, assert_exact, assert_refused, hostile_sweep, write_config  # noqa: E402

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)


def siglip2():
    return transformers.Siglip2Config(text_config=dict(SMALL, vocab_size=100, bos_token_id=1, eos_token_id=2,
                                                       pad_token_id=0),
                                      vision_config=dict(SMALL, num_patches=16, patch_size=4))


def test_siglip2_configs_are_refused_with_every_reason(tmp_path, capsys):
    config = siglip2()
    for data in (config.to_dict(), config.vision_config.to_dict()):
        for gap in SIGLIP2_GAPS:
            assert_refused(tmp_path, capsys, data, gap, "model_type")
    assert_refused(tmp_path, capsys, config.to_dict(), TEXT_TOWER)


@pytest.mark.parametrize("tower", ["vision", "both"])
def test_siglip2_vision_and_both_towers_are_refused(tmp_path, tower):
    path = write_config(siglip2(), tmp_path)
    with pytest.raises(ImportProblem, match=f"--tower {tower}: SigLIP 2's vision tower"):
        import_hf(path, tower=tower)


def _check(path, tower=None, pooler=True):
    imported = import_hf(path, tower=tower, pooler=pooler)
    model = loads(imported.text)
    values = model.bind(2)
    results = {p: validate_against(model, values, load_target(f"hf:{imported.described}", model, values, "meta",
                                                                str(path), imported.hf_kwargs,
                                                                output=imported.output), p)
               for p in ("forward", "train")}
    return imported, assert_exact(results)


@pytest.mark.parametrize("whole, pooler", [(False, True), (True, True), (True, False)])
def test_siglip2_text_tower_is_exact(tmp_path, whole, pooler):
    """A siglip2_text_model config, or --tower text of a full one: Siglip2TextModel, its pooler_output (the head)
    or with --no-pooler its last_hidden_state; the same layers as SigLIP's text tower of the same keys."""
    config = siglip2()
    path = write_config(config.to_dict() if whole else config.text_config.to_dict(), tmp_path)
    imported, totals = _check(path, "text" if whole else None, pooler)
    assert imported.described == "Siglip2TextModel" and imported.output == ("pooler_output" if pooler else None)
    B, T, C, F = 2, 64, 32, 64
    head = 2 * B * C * C if pooler else 0
    assert totals["forward"]["spec_matmul"] == 2 * B * T * C * 4 * C + 2 * 2 * B * T * T * C + 2 * 2 * B * T * C * F \
        + head
    siglip = tmp_path / "siglip"
    siglip.mkdir()
    text = {**config.text_config.to_dict(), "model_type": "siglip_text_model"}
    same = import_hf(write_config(text, siglip), pooler=pooler).text
    assert imported.text.split("\ndims:", 1)[1] == same.split("\ndims:", 1)[1].replace("SiglipTextModel",
                                                                                      "Siglip2TextModel")


def test_siglip2_text_hostile_values_are_named_refusals(tmp_path):
    base = siglip2().text_config.to_dict()
    refused, tried = hostile_sweep(base, tmp_path, [k for k in base if k not in BOOKKEEPING], per_key=1)
    assert tried and refused


def test_siglip2_by_architectures_alone_is_refused(tmp_path, capsys):
    data = {k: v for k, v in siglip2().vision_config.to_dict().items() if k != "model_type"}
    assert_refused(tmp_path, capsys, data | {"architectures": ["Siglip2VisionModel"]}, SIGLIP2_GAPS[0])


def test_siglip2_hostile_values_are_named_refusals(tmp_path):
    base = siglip2().to_dict()
    refused, tried = hostile_sweep(base, tmp_path, [k for k in base if k not in BOOKKEEPING])
    assert refused == tried  # nothing imports: every value is a named refusal, never a crash


def _inputs(batch: int, grid: int, channels: int, patch: int, device):
    pixels = torch.zeros(batch, grid * grid, channels * patch * patch, device="meta")
    mask = torch.ones(batch, grid * grid, dtype=torch.long, device="meta")
    return pixels, mask, torch.tensor([[grid, grid]] * batch, device=device)


@pytest.mark.parametrize("device, message", [("meta", "Cannot copy out of meta tensor"),
                                             ("cpu", "cannot be called on meta tensors")])
def test_siglip2_vision_model_does_not_run_on_meta(device, message):
    """The first reason, as transformers has it: the position resize reads spatial_shapes as numbers."""
    vision = siglip2().vision_config
    with torch.device("meta"):
        model = transformers.Siglip2VisionModel(vision).eval()
    pixels, mask, shapes = _inputs(1, 4, vision.num_channels, vision.patch_size, device)
    with pytest.raises((NotImplementedError, RuntimeError), match=message):
        model(pixel_values=pixels, pixel_attention_mask=mask, spatial_shapes=shapes)


def test_siglip2_model_does_not_run_on_meta():
    config = siglip2()
    with torch.device("meta"):
        model = transformers.Siglip2Model(config).eval()
    pixels, mask, shapes = _inputs(2, 4, config.vision_config.num_channels, config.vision_config.patch_size, "meta")
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        model(input_ids=ids, pixel_values=pixels, pixel_attention_mask=mask, spatial_shapes=shapes)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(heads=st.integers(1, 4), width=st.sampled_from([8, 16]), layers=st.integers(1, 2), whole=st.booleans(),
       pooler=st.booleans(), positions=st.integers(2, 12))
def test_random_siglip2_text_configs(tmp_path, heads, width, layers, whole, pooler, positions):
    config = transformers.Siglip2Config(
        text_config=dict(hidden_size=heads * width, intermediate_size=3 * width, num_hidden_layers=layers,
                         num_attention_heads=heads, vocab_size=50, max_position_embeddings=positions,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=dict(SMALL, num_patches=16, patch_size=4))
    path = write_config(config.to_dict() if whole else config.text_config.to_dict(), tmp_path)
    _check(path, "text" if whole else None, pooler)
