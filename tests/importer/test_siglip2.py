"""Importer family siglip2: Siglip2Model / Siglip2VisionModel are refused with the reasons (SIGLIP2_GAPS), a clean
exit 2 naming the config; the first reason is checked against transformers itself: the vision tower does not run
on meta, whether spatial_shapes is a meta tensor or a real one."""
from __future__ import annotations

import pytest

from costspec.importer.families.siglip2 import SIGLIP2_GAPS, TEXT_ONLY

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tests.importer.check import BOOKKEEPING, assert_refused, hostile_sweep  # noqa: E402

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
    assert_refused(tmp_path, capsys, config.text_config.to_dict(), TEXT_ONLY, "model_type")


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
