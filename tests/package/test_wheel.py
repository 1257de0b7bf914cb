"""The built wheel: real copies of the zoo, the schema and the importer's data inside the package (not links)."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest
import yaml

from tests.common import ROOT, SPECS


@pytest.mark.slow
def test_wheel_ships_the_zoo_and_the_schema(tmp_path):
    """A non-editable build carries real copies of specs/*.yaml and the schema (not links)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(tmp_path.glob("costspec-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        for spec in SPECS:
            assert z.read(f"costspec/data/zoo/{spec.name}") == spec.read_bytes()
        assert json.loads(z.read("costspec/data/costspec.schema.json")) == \
            json.loads((ROOT / "schemas/costspec.schema.json").read_text())
        assert yaml.safe_load(z.read("costspec/data/zoo/vit_b.yaml"))["name"] == "vit_b_16"
        # import hf's class defaults (read as data: the importer never imports transformers)
        assert z.read("costspec/data/hf_defaults.json") == (ROOT / "costspec/data/hf_defaults.json").read_bytes()
