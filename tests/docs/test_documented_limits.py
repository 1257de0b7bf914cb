"""Every limit docs/spec-language.md documents is the code's constant: each table row (and each
sentence) is looked up and compared with the constant it names, so changing one without the other
fails here."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from costspec.analysis import ragged, sweep
from costspec.core import budget, expr, safeio, yaml_marks
from costspec.importer import config
from costspec.ops.opdef import MAX_RANK

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "spec-language.md").read_text(encoding="utf-8")


def _row(start: str) -> list[str]:
    rows = [line for line in DOC.splitlines() if line.startswith(f"| {start}")]
    assert len(rows) == 1, f"docs/spec-language.md: expected one table row starting {start!r}, found {len(rows)}"
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def _mib(kind: safeio.Kind) -> str:
    return f"{kind.max_bytes // 2**20} MiB" if kind.max_bytes % 2**20 == 0 else f"{kind.max_bytes:,} bytes"


# budgets table: row start -> the constant in its "limit" column
BUDGETS = {
    "op layers after expanding blocks": budget.MAX_OP_INSTANCES,
    "degree of a derived dim": budget.MAX_DIM_DEGREE,
    "terms of one closed form": budget.MAX_FORMULA_TERMS,
    "per-layer closed forms": budget.MAX_FORMULA_ROWS,
    "op modules built with repeats unrolled": budget.MAX_TORCH_MODULES,
    "layers of a real model built from a config": budget.MAX_REAL_LAYERS,
    "points of a sweep grid, plain CSV": sweep.MAX_POINTS,
    "points of a sweep grid held in memory: CSV with `--gpu`": sweep.MAX_POINTS_GPU,
    "points of a sweep grid held in memory: `--format json`": sweep.MAX_POINTS_IN_MEMORY,
}


@pytest.mark.parametrize("start, value", BUDGETS.items())
def test_each_budget_row_is_the_constant(start, value):
    assert _row(start)[1] == f"{value:,}"


def test_the_dims_budget_row():
    assert _row("dims / derived dims")[1] == f"{budget.MAX_DIMS:,} / {budget.MAX_DERIVED_DIMS:,}"


# input files table: row start -> (the kind, texts its other cells must hold)
INPUTS = {
    "spec (YAML)": (safeio.SPEC, [f"{yaml_marks.MAX_NODES:,} YAML nodes", f"nesting {yaml_marks.MAX_DEPTH}",
                                  f"at most {expr.MAX_INT_DIGITS} digits"]),
    "GPU catalog (YAML)": (safeio.CATALOG, []),
    "calibration (YAML)": (safeio.CALIBRATION, []),
    "ncu CSV": (safeio.NCU_CSV, [f"{safeio.MAX_CSV_LINE:,} characters", f"at most {safeio.MAX_NUMBER_DIGITS} "
                                 "significant digits"]),
    "ncu sidecar (JSON)": (safeio.SIDECAR, [f"nested at most {safeio.MAX_JSON_DEPTH} levels"]),
    "Hugging Face config (JSON)": (safeio.HF_CONFIG, [f"at most {config.MAX_CONFIG_INT:,}",
                                                      f"at most {config.MAX_CONFIG_LAYERS} layers"]),
    "validation JSON": (safeio.VALIDATION_JSON, []),
    "ncu compare JSON": (safeio.COMPARE_JSON, []),
    "lengths file": (safeio.LENGTHS, [f"at most {ragged.MAX_LENGTHS:,} lengths",
                                      f"at most {ragged.MAX_LENGTH_DIGITS} digits"]),
}


@pytest.mark.parametrize("start", INPUTS)
def test_each_input_row_is_the_constant(start):
    kind, texts = INPUTS[start]
    cells = _row(start)
    assert cells[2] == _mib(kind)
    for text in texts:
        assert text in " | ".join(cells[3:]), f"the {start} row does not say {text!r}"


def test_every_input_kind_has_a_row():
    assert {kind.name for kind, _ in INPUTS.values()} == set(safeio.KINDS)


def test_the_limits_in_the_prose_are_the_constants():
    errors = DOC[DOC.index("## Errors and limits"):]
    assert f"files up to {yaml_marks.MAX_BYTES:,} bytes" in errors
    assert f"{budget.MAX_OP_INSTANCES:,} op layers after expanding blocks" in errors
    assert re.search(rf"nesting up to\s+{yaml_marks.MAX_DEPTH} levels", errors)
    assert re.search(rf"values of at most {MAX_RANK} dims", errors)
    bounds = re.sub(r"\s+", " ", DOC)
    assert (f"at most {expr.MAX_TEXT:,} characters and {expr.MAX_DEPTH} levels of nesting per expression, "
            f"{expr.MAX_INT_DIGITS} digits per number, polynomial degree at most {expr.MAX_DEGREE} in the dims, "
            f"results of at most {expr.MAX_RESULT_DIGITS:,} digits") in bounds
    assert f"each expression itself: degree at most {expr.MAX_DEGREE} in the dims it names" in bounds


def test_the_op_layer_limit_is_one_constant():
    """The builder's own count (a backstop behind the up-front one) uses the same limit."""
    from costspec.tree import build

    assert "MAX_OP_NODES" not in vars(build) and build.MAX_OP_INSTANCES is budget.MAX_OP_INSTANCES
