"""`import hf` with hostile configs: every value a family reads is checked before anything is written
(type, range, divisibility; the key named; exit 2 in well under a second, whatever the value's size),
and no path written into the spec's comments can end a comment and turn the rest into live YAML."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from costspec.cli import main
from costspec.core.errors import CostspecError
from costspec.importer import import_hf
from costspec.importer.config import (
    GENERIC_KEYS,
    GENERIC_PATTERN,
    HFConfig,
    ImportProblem,
    heads,
    layers,
    size,
    under,
)
from costspec.model import load, loads
from tests.importer.check import HOSTILE

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests/data/hf_configs"


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _config(folder: Path, zoo: str, key: str, value) -> Path:
    data = json.loads((CONFIGS / f"{zoo}.json").read_text())
    target = data
    *parents, last = key.split(".")
    for part in parents:
        target = target[part]
    target[last] = value
    path = folder / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("zoo, key, value, says", [
    ("llama_1b", "num_hidden_layers", 10**30,
     "num_hidden_layers = 1000000000000000000000000000000: expected a whole number >= 1 (at most 512)"),
    ("vit_b", "num_hidden_layers", 10**8, "num_hidden_layers = 100000000: expected a whole number >= 1 (at most 512)"),
    ("llama_1b", "num_hidden_layers", 1e30, "num_hidden_layers = 1e+30: expected a whole number >= 1"),
    ("llama_1b", "dtype", ["bfloat16"], "dtype = ['bfloat16']: expected one of float32"),
    ("llama_1b", "dtype", {"name": "bfloat16"}, "dtype = {'name': 'bfloat16'}: expected one of float32"),
    ("llama_1b", "hidden_size", "abc", "hidden_size = 'abc': expected a whole number >= 1"),
    ("llama_1b", "intermediate_size", 2**40, "intermediate_size = 1099511627776: expected a whole number >= 1 "
                                             "(at most 2,147,483,647)"),
    ("llama_1b", "hidden_size", 2050, "hidden_size = 2050 is not a multiple of num_attention_heads = 32"),
    ("llama_1b", "num_key_value_heads", 3, "num_key_value_heads = 3 does not divide num_attention_heads = 32"),
    ("llama_1b", "head_dim", 63, "head_dim = 63: expected an even number (RoPE rotates pairs of channels)"),
    ("vit_b", "num_attention_heads", 7, "hidden_size = 768 is not a multiple of num_attention_heads = 7"),
    ("vit_b", "image_size", -224, "image_size = -224: expected a whole number >= 1"),
    ("gpt2_small", "n_layer", True, "n_layer = True: expected a whole number >= 1"),
    ("gpt2_small", "n_embd", [768], "n_embd = [768]: expected a whole number >= 1"),
    ("mixtral_8x7b", "num_local_experts", 10**12, "num_local_experts = 1000000000000: expected a whole number"),
    ("t5_small_encoder", "num_heads", 7, "d_model = 512 is not a multiple of num_heads = 7"),
    ("whisper_tiny_encoder", "encoder_layers", 10**6, "encoder_layers = 1000000: expected a whole number >= 1 "
                                                      "(at most 512)"),
    ("sam_vit_b", "num_hidden_layers", 0, "num_hidden_layers = 0: expected a whole number >= 1"),
])
def test_a_hostile_value_is_refused_naming_the_key(tmp_path, capsys, zoo, key, value, says):
    path = _config(tmp_path, zoo, key, value)
    out = tmp_path / "spec.yaml"
    start = time.perf_counter()
    code, _, err = _run(["import", "hf", str(path), "-o", str(out)], capsys)
    assert code == 2 and says in err and str(path) in err, err
    assert "Traceback" not in err and not out.exists()
    assert time.perf_counter() - start < 5


def test_a_composite_configs_vision_keys_are_checked_under_their_prefix(tmp_path, capsys):
    vision = json.loads((CONFIGS / "clip_vit_l14.json").read_text())
    data = {"model_type": "clip", "projection_dim": 512, "vision_config": {**vision, "num_hidden_layers": 10**9}}
    (tmp_path / "config.json").write_text(json.dumps(data))
    code, _, err = _run(["import", "hf", str(tmp_path / "config.json")], capsys)
    assert code == 2 and "vision_config.num_hidden_layers = 1000000000: expected a whole number >= 1" in err, err


def test_the_thirty_digit_layer_count_is_refused_in_a_small_bounded_process(tmp_path):
    """The reproducer as a user runs it: exit 2 under a 500 MB address-space limit, in seconds (it built a
    list of 10**30 layers before)."""
    path = _config(tmp_path, "llama_1b", "num_hidden_layers", 10**30)
    done = subprocess.run(["prlimit", "--as=500000000", sys.executable, "-m", "costspec", "import", "hf", str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "num_hidden_layers = 1" in done.stderr and "(at most 512)" in done.stderr, \
        done.stderr


def test_validation_rules_one_by_one():
    cfg = HFConfig({"hidden_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": None,
                    "depths": [2, 300, 300], "vision_config": {"hidden_size": 10, "num_attention_heads": 4}}, "c.json")
    cfg.validate([size("hidden_size"), heads("num_attention_heads", "hidden_size", unless="head_dim", rope=True),
                  heads("num_key_value_heads", "num_attention_heads"), size("head_dim", even=True)])
    with pytest.raises(ImportProblem, match=r"depths = \[2, 300, 300\]: 602 layers in all \(expected at most 512\)"):
        cfg.validate([layers("depths", items=True)])
    with pytest.raises(ImportProblem, match="vision_config.hidden_size = 10 is not a multiple of "
                                            "vision_config.num_attention_heads = 4"):
        cfg.validate(under("vision_config", [heads("num_attention_heads", "hidden_size")]))
    odd = HFConfig({"hidden_size": 36, "num_attention_heads": 4}, "o.json")
    with pytest.raises(ImportProblem, match=r"hidden_size / num_attention_heads = 9 is odd"):
        odd.validate([heads("num_attention_heads", "hidden_size", unless="head_dim", rope=True)])
    HFConfig({"hidden_size": 36, "num_attention_heads": 4, "head_dim": 8}, "h.json").validate(
        [heads("num_attention_heads", "hidden_size", unless="head_dim", rope=True)])  # head_dim given: its own check


@pytest.mark.parametrize("zoo", sorted(p.stem for p in CONFIGS.glob("*.json")))
def test_every_key_of_every_zoo_config_mutated_is_a_spec_or_a_named_refusal(tmp_path, zoo):
    """Each key a family may read (every key but bookkeeping; each key of a nested *_config too) gets one
    hostile value, in turn from HOSTILE: the import either writes a spec that builds or is an ImportProblem;
    never another exception (an exit 3). The long run, every key with every value, is
    `fuzz/run_fuzz.py --mode hf`."""
    base = json.loads((CONFIGS / f"{zoo}.json").read_text())

    def read(key: str) -> bool:
        return key in ("dtype", "torch_dtype") or not (key in GENERIC_KEYS or GENERIC_PATTERN.fullmatch(key))

    keys = [k for k, v in base.items() if not isinstance(v, dict) and read(k)]
    keys += [f"{k}.{sub}" for k, v in base.items() if isinstance(v, dict) and k.endswith("config") for sub in v
             if read(sub)]
    refused = 0
    for number, key in enumerate(keys):
        path = _config(tmp_path, zoo, key, HOSTILE[(number + len(zoo)) % len(HOSTILE)])
        try:
            loads(import_hf(path).text)
        except CostspecError:
            refused += 1
    assert refused > 0


# ----------------------------------------------------------------------------------------------
# Paths written into the spec
# ----------------------------------------------------------------------------------------------
LIVE = "\ncosts: {linear: {forward: 0}}\nprecision: {dtype: fp8}\n#"


def test_a_newline_in_the_config_path_or_the_output_stays_in_its_comment(tmp_path, capsys):
    folder = tmp_path / f"cfg{LIVE}"
    folder.mkdir()
    (folder / "config.json").write_text((CONFIGS / "vit_b.json").read_text())
    out = tmp_path / f"out{LIVE}.yaml"
    code, _, err = _run(["import", "hf", str(folder / "config.json"), "--no-pooler", "-o", str(out)], capsys)
    assert code == 0, err
    text = out.read_text()
    top = yaml.safe_load(text)
    assert "costs" not in top and top["precision"] == {"dtype": "bf16"}
    assert all(line.startswith("#") for line in text.splitlines()[:4])
    assert "cfg\\ncosts: {linear: {forward: 0}}\\nprecision: {dtype: fp8}\\n#/config.json" in text
    assert "\n" not in err.rstrip("\n") and "out\\ncosts" in err  # the terminal line escapes it too
    zoo, imported = load(ROOT / "specs/vit_b.yaml"), loads(text)
    assert imported.report("forward", imported.bind(1)).tc == zoo.report("forward", zoo.bind(1)).tc


def test_a_newline_in_the_schema_reference_of_init_stays_in_its_comment(tmp_path, capsys):
    out = tmp_path / "starter.yaml"
    code, _, err = _run(["init", "starter", "-o", str(out), "--schema", f"s.json{LIVE}"], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "costs" not in yaml.safe_load(text) and text.splitlines()[0].endswith("\\n#")
    loads(text)


@pytest.mark.parametrize("entry", [{"M": 64}, [[1]], 3, None])
def test_a_layer_types_entry_that_is_no_name_is_refused(tmp_path, capsys, entry):
    """Found by fuzzing (fuzz/run_fuzz.py --mode hf): an object in layer_types was a TypeError (exit 3)."""
    transformers = pytest.importorskip("transformers")
    data = transformers.AutoConfig.for_model("qwen2", num_hidden_layers=2, layer_types=["full_attention"] * 2).to_dict()
    data["layer_types"][1] = entry
    (tmp_path / "config.json").write_text(json.dumps(data))
    code, _, err = _run(["import", "hf", str(tmp_path / "config.json")], capsys)
    assert code == 2 and "layer_types" in err and "each full_attention or sliding_attention" in err, err
