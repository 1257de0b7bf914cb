"""A key a config.json omits is read as transformers reads it: the config class's default (from
costspec/data/hf_defaults.json, which tools/gen_hf_defaults.py writes from the pinned transformers: the
drift test regenerates it), reported as assumed; a null keeps the family's meaning; a key without a class
default is still the family's (or refused). Checked against transformers built from the same sparse files."""
from __future__ import annotations

import json
import re
import sys

import pytest

from costspec.cli import main
from costspec.importer import import_hf
from costspec.importer.config import HFConfig, ImportProblem, class_defaults
from tests.common import ROOT

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.importer.check import assert_exact, write_config  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
import gen_hf_defaults  # noqa: E402


def forward_totals(path, dims=None) -> dict[str, dict[str, int]]:
    """The import of `path` against the class it names, built from the same file on meta (forward, batch 2):
    every row agrees, matmul FLOPs and parameters exactly equal; the totals per phase."""
    imported = import_hf(path)
    model = loads(imported.text, str(path.with_suffix(".yaml")))
    values = model.bind(2, dims)
    real = load_target(f"hf:{imported.described}", model, values, "meta", str(path), imported.hf_kwargs,
                       output=imported.output)
    return assert_exact({"forward": validate_against(model, values, real, "forward")})


def said(value, cls: str) -> str:
    return f"{json.dumps(value)} ({cls}'s default; the config does not set it)"


def test_the_table_is_what_the_pinned_transformers_gives():
    """The committed file equals the table regenerated from the installed transformers (no drift)."""
    assert gen_hf_defaults.render(gen_hf_defaults.table()) == gen_hf_defaults.TARGET.read_text(encoding="utf-8")


def test_the_table_holds_every_family_and_the_types_they_nest():
    from costspec.importer.families import FAMILIES

    table = class_defaults()
    assert set(FAMILIES) <= set(table)
    assert table["gemma3"]["sub_configs"] == {"text_config": "gemma3_text", "vision_config": "siglip_vision_model"}
    assert table["gemma3_text"]["defaults"]["vocab_size"] == transformers.Gemma3TextConfig().vocab_size
    # defaults transformers derives from other keys are not class defaults: the family derives them too
    assert "num_key_value_heads" not in table["llama"]["defaults"]
    assert "num_decoder_layers" not in table["t5"]["defaults"]


def test_only_an_absent_key_takes_the_class_default():
    """Absent: the class default, assumed; null: the family's meaning of null (here: the caller's default)."""
    absent = HFConfig({"model_type": "gemma3_text"}, "c.json")
    assert absent.get("head_dim") == transformers.Gemma3TextConfig().head_dim
    assert absent.get_int("vocab_size") == 262208
    assert absent.assumed() == {"head_dim": said(256, "Gemma3TextConfig"),
                                "vocab_size": said(262208, "Gemma3TextConfig")}
    null = HFConfig({"model_type": "gemma3_text", "head_dim": None, "vocab_size": None}, "c.json")
    assert null.get("head_dim") is None and null.assumed() == {}
    with pytest.raises(ImportProblem, match="vocab_size: missing"):
        null.get_int("vocab_size")


def test_keys_without_a_class_default_stay_the_familys():
    """A derived key (num_key_value_heads) and an unknown model type: no class default."""
    cfg = HFConfig({"model_type": "llama"}, "c.json")
    assert cfg.get("num_key_value_heads", 7) == 7 and cfg.assumed() == {}
    with pytest.raises(ImportProblem, match="num_key_value_heads: missing"):
        cfg.get_int("num_key_value_heads")
    with pytest.raises(ImportProblem, match="vocab_size: missing"):
        HFConfig({"model_type": "no_such_type"}, "c.json").get_int("vocab_size")


def test_a_nested_config_takes_the_type_its_parent_nests():
    """text_config without a model_type: the parent class's text config's defaults (Gemma3TextConfig)."""
    cfg = HFConfig({"model_type": "gemma3", "text_config": {"hidden_size": 8}}, "c.json")
    text = cfg.sub("text_config")
    assert text.kind == "gemma3_text" and text.get_int("vocab_size") == 262208
    assert cfg.assumed() == {"text_config.vocab_size": said(262208, "Gemma3TextConfig")}


# the hub's gemma-3-4b-it config.json, shrunk: its text_config omits vocab_size, the heads, head_dim, ...
HUB_GEMMA3 = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
    "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144, "mm_tokens_per_image": 4,
    "text_config": {"hidden_size": 32, "intermediate_size": 48, "model_type": "gemma3_text", "num_hidden_layers": 2,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 4},
    "vision_config": {"hidden_size": 16, "image_size": 32, "intermediate_size": 40,
                      "model_type": "siglip_vision_model", "num_attention_heads": 2, "num_hidden_layers": 1,
                      "patch_size": 8, "vision_use_head": False}}


def test_a_hub_gemma3_config_without_vocab_size_imports_exactly(tmp_path, capsys):
    """Refused before ("text_config.vocab_size: missing"); now Gemma3TextConfig's defaults, equal to
    Gemma3ForConditionalGeneration built from the same file (forward, every row), and reported."""
    path = write_config(HUB_GEMMA3, tmp_path)
    imported = import_hf(path)
    assert imported.described == "Gemma3ForConditionalGeneration"
    defaults = transformers.Gemma3TextConfig()
    assert f"#   text_config.vocab_size: {said(defaults.vocab_size, 'Gemma3TextConfig')}" in imported.text
    assert f"#   text_config.head_dim: {said(defaults.head_dim, 'Gemma3TextConfig')}" in imported.text
    assert forward_totals(path, {"S": 8})
    main(["import", "hf", str(tmp_path), "--format", "json"])
    assumed = json.loads(capsys.readouterr().out)["assumed"]
    for key in ("vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim"):
        assert assumed[f"text_config.{key}"] == said(getattr(defaults, key), "Gemma3TextConfig"), key
    assert assumed["vision_config.num_channels"] == said(3, "SiglipVisionConfig")


SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}
SPARSE = {  # model_type and a few widths: every other key the family reads is the class's default
    "llama": SMALL, "qwen2": {**SMALL, "num_key_value_heads": 2}, "mistral": {**SMALL, "num_key_value_heads": 2},
    "bert": {**SMALL, "num_attention_heads": 2}, "vit": {**SMALL, "image_size": 32, "patch_size": 16},
    "t5": {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1, "num_heads": 4},
    "whisper": {"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
                "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "num_mel_bins": 8,
                "max_source_positions": 8},
    "clip": {"projection_dim": 16, "text_config": {**SMALL}, "vision_config": {**SMALL, "image_size": 32,
                                                                              "patch_size": 16}},
}


@pytest.mark.parametrize("model_type", sorted(SPARSE))
def test_a_sparse_config_imports_as_transformers_reads_it(tmp_path, model_type):
    """FLOPs and parameters equal the family's class built from the same sparse file, every key it omits
    reported as its class's default."""
    path = write_config({"model_type": model_type, **SPARSE[model_type]}, tmp_path)
    imported = import_hf(path)
    assert imported.config is not None
    assumed = imported.config.assumed()
    assert assumed and all("'s default; the config does not set it)" in text for text in assumed.values())
    dims = {"S": 8} if re.search(r"^  S: \{value: \d+", imported.text, re.M) else None  # a text length
    assert forward_totals(path, dims)["forward"]["spec_matmul"] > 0
