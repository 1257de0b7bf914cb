"""docs/import.md's worked example is what `costspec import torch` writes for tests/importer/torch_models.py."""
from __future__ import annotations

import re
from pathlib import Path

from .test_import_torch import imported_spec

PAGE = Path(__file__).resolve().parents[2] / "docs" / "import.md"


def test_the_worked_example_is_the_imported_spec():
    page = PAGE.read_text(encoding="utf-8")
    found = re.search(r"<!-- BEGIN IMPORTED tests\.importer\.torch_models:decoder --dim S=tokens:1 .*?-->\n```yaml\n"
                      r"(.*?)```\n<!-- END IMPORTED -->", page, re.S)
    assert found, "docs/import.md has no imported decoder spec"
    text = imported_spec("decoder").text  # traced under pytest's name for the module, importer.torch_models
    assert found.group(1) == text[text.index("costspec: 1"):].replace("from importer.", "from tests.importer.")
