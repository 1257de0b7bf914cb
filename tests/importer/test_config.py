"""`costspec import hf`: reading the config, picking the family, refusing what it cannot price."""
from __future__ import annotations

import json

import pytest

from costspec.cli import main
from costspec.importer import FAMILIES, import_hf, read_config
from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.emit import SpecText, scalar
from costspec.model import loads
from tests.common import ROOT

VIT_B = ROOT / "tests/data/hf_configs/vit_b.json"


def run(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def write_config(tmp_path, data: dict, name: str = "config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_cli_writes_a_spec_that_loads(tmp_path, capsys):
    out = tmp_path / "vit.yaml"
    code, _, err = run(["import", "hf", str(VIT_B), "-o", str(out)], capsys)
    assert code == 0, err
    assert f"wrote {out}" in err and "--against hf:ViTModel" in err
    model = loads(out.read_text())
    assert model.precision.dtype == "bf16"  # the config's dtype: bfloat16
    code, text, _ = run(["import", "hf", str(VIT_B), "--dtype", "fp16"], capsys)
    assert code == 0 and "precision: {dtype: fp16}  # --dtype" in text


def test_directory_source_and_name(tmp_path, capsys):
    folder = tmp_path / "my-vit"
    folder.mkdir()
    (folder / "config.json").write_text(VIT_B.read_text())
    assert import_hf(folder).text.count("\nname: my-vit\n") == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(["import", "hf", str(empty)], capsys)
    assert code == 2 and "a directory without config.json" in err


def test_unknown_model_type_lists_the_supported_ones(tmp_path, capsys):
    path = write_config(tmp_path, {"model_type": "no_such_model", "hidden_size": 8})
    code, _, err = run(["import", "hf", str(path)], capsys)
    assert code == 2
    assert "model_type = 'no_such_model': no importer for it (supported: " in err
    assert all(name in err for name in FAMILIES)


def test_unknown_key_is_an_error_naming_it(tmp_path, capsys):
    data = json.loads(VIT_B.read_text())
    data["num_experts"] = 8  # a key that would change the cost, unknown to the ViT importer
    path = write_config(tmp_path, data)
    code, _, err = run(["import", "hf", str(path)], capsys)
    assert code == 2 and "key num_experts not understood by the vit importer" in err
    assert str(path) in err and "Traceback" not in err


@pytest.mark.parametrize("key, value, message", [
    ("hidden_act", "relu2", "hidden_act = 'relu2': not supported by this importer"),
    ("hidden_size", 770, "hidden_size = 770 is not a multiple of num_attention_heads = 12"),
    ("num_hidden_layers", 0, "num_hidden_layers = 0: expected a whole number >= 1"),
    ("torch_dtype", "int4", "torch_dtype = 'int4': expected one of"),
    ("image_size", [224, 160], "image_size = [224, 160]: expected a positive whole number (square"),
])
def test_bad_values_are_errors(tmp_path, capsys, key, value, message):
    data = json.loads(VIT_B.read_text())
    data[key] = value
    code, _, err = run(["import", "hf", str(write_config(tmp_path, data))], capsys)
    assert code == 2 and message in err, err


def test_not_json_and_not_an_object(tmp_path, capsys):
    code, _, err = run(["import", "hf", str(write_config(tmp_path, [1, 2], "list.json"))], capsys)
    assert code == 2 and "expected a JSON object" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run(["import", "hf", str(bad)], capsys)
    assert code == 2 and "bad.json" in err


def test_output_may_not_be_the_config(tmp_path, capsys):
    path = write_config(tmp_path, json.loads(VIT_B.read_text()))
    code, _, err = run(["import", "hf", str(path), "-o", str(path)], capsys)
    assert code == 2 and json.loads(path.read_text())["model_type"] == "vit"


def test_architectures_pick_the_family_without_model_type(tmp_path):
    data = json.loads(VIT_B.read_text())
    del data["model_type"]
    data["architectures"] = ["ViTForImageClassification"]
    assert "hf:ViTModel" in import_hf(write_config(tmp_path, data)).text


def test_hfconfig_records_reads_and_generic_keys():
    cfg = HFConfig({"hidden_size": 8, "layer_norm_eps": 1e-6, "attention_dropout": 0.1, "pad_token_id": 0,
                    "is_decoder": False, "extra": 1, "vision_config": {"depth": 2, "odd": 3}}, "c.json")
    assert cfg.get_int("hidden_size") == 8
    sub = cfg.sub("vision_config")
    assert sub.get_int("depth") == 2
    assert cfg.unread() == ["extra", "vision_config.odd"]
    assert cfg.unread({"extra", "vision_config.odd"}) == []
    with pytest.raises(ImportProblem, match=r"c.json: keys extra, vision_config.odd not understood"):
        cfg.check_understood()
    with pytest.raises(ImportProblem, match="c.json: missing_key: missing"):
        cfg.require("missing_key")
    truthy = HFConfig({"is_decoder": True}, "d.json")
    assert truthy.unread() == ["is_decoder"]  # a non-default value of a generic-when-false key needs a reader


def test_scalar_quotes_only_where_yaml_needs_it():
    assert scalar("model width") == "model width"
    assert scalar("(img // patch)**2 + 1") == '"(img // patch)**2 + 1"'
    assert scalar("a: b") == '"a: b"' and scalar("true") == '"true"' and scalar(12) == "12"
    text = (SpecText("t", "a doc: with a colon", "somewhere").dim("B", 1, "batch, size: yes")
            .dim("C", 8, "width", "hidden_size").precision("fp32").input(["B", "C"]).layers("- linear: {out: C}\n")
            .render())
    model = loads(text)
    assert model.name == "t" and "C: {value: 8, doc: width}  # hidden_size" in text


def test_read_config_dtype_defaults_to_float32(tmp_path):
    data = json.loads(VIT_B.read_text())
    data.pop("dtype", None)
    cfg = read_config(write_config(tmp_path, data))
    assert cfg.dtype == "fp32" and "float32" in cfg.dtype_source


@pytest.mark.parametrize("zoo, key, value, message", [
    ("bert_base", "is_decoder", True, "is_decoder = True: BERT as a causal decoder is not supported"),
    ("bert_base", "add_cross_attention", True, "add_cross_attention = True: cross-attention layers"),
    ("sam_vit_b", "global_attn_indexes", [2, 12], "global_attn_indexes = [2, 12]: expected distinct block indices"),
    ("gpt2_small", "n_ctx", 2048, "n_ctx = 2048 exceeds n_positions = 1024"),
    ("gpt2_small", "add_cross_attention", True, "key add_cross_attention not understood by the gpt2 importer"),
    ("llama_1b", "num_key_value_heads", 5, "num_key_value_heads = 5 does not divide num_attention_heads = 32"),
    ("vit_b", "image_size", 230, "image_size = 230 is not a multiple of patch_size = 16"),
    ("clip_vit_l14", "hidden_act", "gelu_fast", "hidden_act = 'gelu_fast': not supported by this importer"),
])
def test_family_refusals(tmp_path, capsys, zoo, key, value, message):
    data = json.loads((ROOT / f"tests/data/hf_configs/{zoo}.json").read_text())
    data[key] = value
    code, _, err = run(["import", "hf", str(write_config(tmp_path, data))], capsys)
    assert code == 2 and message in err, err


def test_composite_configs_read_their_vision_config(tmp_path):
    """A full CLIP config: the vision tower from vision_config, the projections' width from the top level
    (CLIPModel's visual_projection and text_projection)."""
    vision = json.loads((ROOT / "tests/data/hf_configs/clip_vit_l14.json").read_text())
    data = {"model_type": "clip", "projection_dim": 512, "vision_config": {**vision, "projection_dim": 768},
            "text_config": {"model_type": "clip_text_model", "hidden_size": 512}, "logit_scale_init_value": 2.6592}
    text = import_hf(write_config(tmp_path, data)).text
    assert 'E: {value: 512, doc: "output embedding dim (visual_projection, text_projection)"}  # projection_dim' in text
    assert "C: {value: 1024, doc: width}  # vision_config.hidden_size" in text
    data["vision_config"]["num_experts"] = 2
    with pytest.raises(ImportProblem, match="key vision_config.num_experts not understood"):
        import_hf(write_config(tmp_path, data))


def test_json_format(tmp_path, capsys):
    code, text, _ = run(["import", "hf", str(VIT_B), "--format", "json"], capsys)
    data = json.loads(text)
    assert code == 0 and data["family"] == "vit" and data["hf_class"] == "ViTModel" and data["written"] is None
    assert loads(data["spec"]).name == "vit_b"
    out = tmp_path / "v.yaml"
    code, text, _ = run(["import", "hf", str(VIT_B), "-o", str(out), "--format", "json"], capsys)
    assert json.loads(text)["written"] == str(out) and "spec" not in json.loads(text) and out.exists()
