"""costspec.against.target: what `--against` names (package.module:callable or hf:ModelClass), its
configuration (--config FILE, --config-set KEY=VALUE) and the errors for a bad target or config."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.core.errors import UsageError  # noqa: E402
from costspec.model import load  # noqa: E402
from tests.common import ROOT  # noqa: E402


@pytest.mark.parametrize("target, message", [
    ("no_colon", "expected package.module:callable"),
    ("tests.against.models:missing", "has no attribute"),
    ("tests.against.models:not_a_module", "expected an nn.Module"),
    ("no_such_module_xyz:f", "cannot import"),
])
def test_bad_targets_are_usage_errors(target, message):
    model = load(ROOT / "specs/toy_mlp.yaml")
    with pytest.raises(UsageError, match=message):
        load_target(target, model, model.bind(), "meta")


def test_config_needs_an_hf_target():
    model = load(ROOT / "specs/toy_mlp.yaml")
    with pytest.raises(UsageError, match="configure hf:ModelClass"):
        load_target("tests.against.models:toy_mlp", model, model.bind(), "meta", None, {"hidden_size": "8"})


@pytest.mark.slow
def test_hf_config_file(tmp_path):
    """--config config.json: a local Hugging Face config file (here ViT-B's), read without network."""
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "vit", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, '
                      '"intermediate_size": 3072, "image_size": 224, "patch_size": 16}')
    model = load(ROOT / "specs/vit_b.yaml")
    values = model.bind()
    real = load_target("hf:ViTModel", model, values, "meta", str(config), {"add_pooling_layer": "false"})
    assert validate_against(model, values, real).ok
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="bad.json: not valid JSON: .* line 1 column"):
        load_target("hf:ViTModel", model, values, "meta", str(bad))


@pytest.mark.slow
def test_hf_config_errors():
    pytest.importorskip("transformers")
    model = load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError, match="has no key 'no_such_key'"):
        load_target("hf:ViTModel", model, model.bind(), "meta", None, {"no_such_key": "1"})
    with pytest.raises(UsageError, match="no model class"):
        load_target("hf:NoSuchModel", model, model.bind(), "meta")
