"""`report --compare` with a table whose `rows` is no list (found by fuzz/run_fuzz.py --mode compare: a
TypeError, exit 3): the value is shown as it is, and the page is written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from costspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
TOY = str(ROOT / "specs" / "toy_mlp.yaml")


@pytest.mark.parametrize("rows", [True, 1e300, 7, "x"])
def test_a_table_whose_rows_is_no_list_is_shown_not_iterated(tmp_path, capsys, rows):
    compare = {"spec": "toy_mlp", "pass": "forward",
               "tables": {"forward": {"rows": rows, "total": {"name": "total", "cuda_rel_diff": 0.015}}}}
    path = tmp_path / "cmp.json"
    path.write_text(json.dumps(compare))
    out = tmp_path / "r.html"
    try:
        main(["report", TOY, "--compare", str(path), "-o", str(out)])
    except SystemExit as exc:
        assert exc.code == 0, capsys.readouterr().err
    html = out.read_text()
    assert "tables: forward: rows" in html and "0.015" in html
