"""docs/import.md's family section is what tools/gen_import_docs.py generates from the importer."""
from __future__ import annotations

import importlib.util

import pytest

from tests.common import ROOT

pytest.importorskip("transformers")


def _tool():
    spec = importlib.util.spec_from_file_location("gen_import_docs", ROOT / "tools" / "gen_import_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_family_section_is_generated():
    tool = _tool()
    text = (ROOT / "docs" / "import.md").read_text(encoding="utf-8")
    assert text == tool.page_with_section(text), "docs/import.md is stale: run `python tools/gen_import_docs.py`"


def test_every_family_has_its_section():
    from costspec.importer import FAMILIES

    text = (ROOT / "docs" / "import.md").read_text(encoding="utf-8")
    for model_type, family in FAMILIES.items():
        assert f"| `{model_type}` | `{family.hf_class}` |" in text
        assert f"* `{model_type}` reads: " in text
