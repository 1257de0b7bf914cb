"""tools/hf_coverage.py on a few model types: a config from the class's defaults at 2 layers, imported,
evaluated and compared with its transformers class on meta; a type nobody imports gets its reason."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.common import ROOT

pytest.importorskip("transformers")


def test_the_coverage_table_measures_each_type(tmp_path):
    out = tmp_path / "rows.json"
    result = subprocess.run([sys.executable, "tools/hf_coverage.py", "gpt2", "bert", "no_such_type", "--json",
                             str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = {r["model_type"]: r for r in json.loads(out.read_text())}
    for model_type, cls in (("gpt2", "GPT2LMHeadModel"), ("bert", "BertModel")):
        row = rows[model_type]
        assert row["imported"] and row["exact"] and row["hf_class"] == cls, row
        assert row["costspec_flops"] == row["transformers_flops"] > 0
        assert row["costspec_params"] == row["transformers_params"] > 0
        assert f"| `{model_type}` | yes | {cls} | {row['costspec_flops']:,} |" in result.stdout
    assert not rows["no_such_type"]["imported"] and "no config class" in rows["no_such_type"]["note"]
    assert "exact: 2 of 3 model types (2 imported)" in result.stdout


def test_two_layers_sets_every_layer_count_nested_configs_too():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from hf_coverage import two_layers
    finally:
        sys.path.pop(0)
    data = {"num_hidden_layers": 12, "depths": [3, 4, 1], "text_config": {"num_layers": 24, "hidden_size": 512},
            "layer_types": ["sliding_attention"] * 12, "use_cache": True}
    assert two_layers(data) == {"num_hidden_layers": 2, "depths": [2, 2, 1],
                                "text_config": {"num_layers": 2, "hidden_size": 512},
                                "layer_types": ["sliding_attention"] * 2, "use_cache": True}
    # Swin: num_layers counts the stages (len(depths)); the depths are the layers
    assert two_layers({"num_layers": 4, "depths": [2, 2, 6, 2]}) == {"num_layers": 4, "depths": [2, 2, 2, 2]}
