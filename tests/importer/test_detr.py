"""Importer family detr: DetrModel is refused, each refusal a clean exit 2 naming the key or the part of the model
costspec does not price exactly (a timm backbone; with a transformers ResNet backbone, DETR_GAPS). The first of
those gaps is checked against transformers itself: DetrModel does not run on meta."""
from __future__ import annotations

import pytest

from costspec.importer.families.detr import DETR_GAPS

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tests.importer.check import BOOKKEEPING, assert_refused, hostile_sweep  # noqa: E402


def detr(**keys):
    backbone = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                                         out_features=["stage4"])
    base = dict(use_timm_backbone=False, backbone_config=backbone, d_model=32, encoder_layers=1, decoder_layers=1,
                encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                num_queries=5)
    return transformers.DetrConfig(**{**base, **keys})


def test_detr_with_a_resnet_backbone_is_refused_with_every_gap(tmp_path, capsys):
    data = detr().to_dict()
    assert data["backbone_config"]["model_type"] == "resnet"
    for gap in DETR_GAPS:
        assert_refused(tmp_path, capsys, data, gap, "model_type")


@pytest.mark.parametrize("change, message, key", [
    (lambda d: d | {"use_timm_backbone": True}, "use_timm_backbone = True: a timm backbone", "use_timm_backbone"),
    # DetrConfig's default backbone: timm's resnet50
    (lambda d: transformers.DetrConfig().to_dict(), "backbone_config.model_type = 'timm_backbone': a timm backbone",
     "backbone_config"),
    (lambda d: d | {"backbone_config": {**d["backbone_config"], "model_type": "convnext"}},
     "backbone_config.model_type = 'convnext': expected resnet", "backbone_config"),
    (lambda d: d | {"backbone_config": None}, "backbone_config = None: expected the backbone's config",
     "backbone_config"),
])
def test_detr_backbone_refusals_name_the_key(tmp_path, capsys, change, message, key):
    assert_refused(tmp_path, capsys, change(detr().to_dict()), message, key)


def test_detr_hostile_values_are_named_refusals(tmp_path):
    base = detr().to_dict()
    keys = [k for k in base if k not in BOOKKEEPING]
    refused, tried = hostile_sweep(base, tmp_path, keys)
    assert refused == tried  # nothing imports: every value is a named refusal, never a crash


def test_detrmodel_does_not_run_on_meta():
    """The first gap, as transformers has it: the encoder's mask asks padding_mask.all() of a meta tensor."""
    with torch.device("meta"):
        model = transformers.DetrModel(detr()).eval()
    with pytest.raises(RuntimeError, match="meta tensors"):
        model(pixel_values=torch.zeros(1, 3, 64, 64, device="meta"))
