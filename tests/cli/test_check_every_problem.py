"""`costspec check` reports every independent problem of a spec in one run, each once, one line each
(file:line:col: YAML path: message), and exits 2; a problem that follows from another is not reported
again, or says that it may follow from it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from costspec.model import check_file

DATA = Path(__file__).resolve().parents[1] / "data" / "check"


def check(name: str) -> list[str]:
    result = subprocess.run([sys.executable, "-m", "costspec", "check", str(DATA / name)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == "costspec: error: 1 of 1 spec(s) failed the checks\n"
    lines = result.stdout.splitlines()
    for line in lines:
        assert line.startswith(f"{DATA / name}:") and ": $." in line, line
    return lines


def _at(lines: list[str], name: str, line: int, path: str) -> str:
    (found,) = [x for x in lines if x.startswith(f"{DATA / name}:{line}:") and f": {path}: " in x]
    return found.split(f": {path}: ", 1)[1]


def test_an_unknown_key_an_unknown_activation_and_an_unknown_input_dim_are_three_lines():
    lines = check("three_problems.yaml")
    assert len(lines) == 3, lines
    assert _at(lines, "three_problems.yaml", 6, "$.layers[0].linear.colour").startswith("unknown key 'colour'")
    assert _at(lines, "three_problems.yaml", 4, "$.input[1]").startswith("in expression 'S': unknown name 'S'")
    assert _at(lines, "three_problems.yaml", 7, "$.layers[1].activation.fn").startswith("bad value 'gelux'")


def test_a_problem_that_follows_from_another_is_not_reported_twice():
    lines = check("dependent.yaml")
    assert len(lines) == 4, lines
    # the misspelt key: one line (not also "linear needs 'out'" or "missing required key 'out'")
    assert _at(lines, "dependent.yaml", 7, "$.layers[1].linear.ot") == \
        "unknown key 'ot' (expected one of: bias, in, out; out is required and missing); did you mean 'out'?"
    # the unknown op: one line (not also "a layer must have exactly one op")
    assert _at(lines, "dependent.yaml", 8, "$.layers[2].linaer").startswith("unknown op 'linaer'")
    assert _at(lines, "dependent.yaml", 6, "$.layers[0].attention.heads") == "dim 8 is not divisible by heads 3"
    assert _at(lines, "dependent.yaml", 10, "$.layers[4].attention.heads") == (
        "dim 8 is not divisible by heads 5 (after an earlier problem in this sequence, which it may follow from)")


def test_an_unknown_name_in_the_inputs_hides_no_layer_problem():
    lines = check("input_and_layers.yaml")
    assert len(lines) == 5, lines
    name = "input_and_layers.yaml"
    assert _at(lines, name, 6, "$.layerz").startswith("unknown key 'layerz'")
    assert _at(lines, name, 5, "$.input[1]").startswith("in expression '2*S': unknown name 'S'")
    assert _at(lines, name, 4, "$.inputs.mask[1]").startswith("in expression 'T': unknown name 'T'")
    # the reshape's -1 is a size of the unknown S: nothing about it is reported; the later layers are checked
    assert not any("layers[1]" in line for line in lines)
    assert _at(lines, name, 10, "$.layers[2].attention.heads") == "dim 16 is not divisible by heads 3"
    assert _at(lines, name, 11, "$.layers[3].linear.out").startswith("in expression 'E': unknown name 'E'")


def test_a_schema_problem_outside_the_layers_reports_the_schema_problems_only(tmp_path):
    # a dim that is no size leaves nothing safe to build: the layers are not checked (no false alarm)
    path = tmp_path / "spec.yaml"
    path.write_text((DATA / "three_problems.yaml").read_text().replace("{B: 2, C: 8}", "{B: 2, C: [8]}"))
    problems = [str(p) for p in check_file(str(path))]
    assert len(problems) == 2, problems  # the dim's and the unknown key's
    assert any("$.dims.C: " in p for p in problems) and any("unknown key 'colour'" in p for p in problems)


@pytest.mark.parametrize("name", ["three_problems.yaml", "dependent.yaml", "input_and_layers.yaml"])
def test_fixing_the_reported_problems_leaves_a_spec_that_checks(name, tmp_path):
    """The lines are the whole story: with each fixed, the spec is ok (nothing was hidden behind them)."""
    text = (DATA / name).read_text()
    fixes = {"three_problems.yaml": [("{B: 2, C: 8}", "{B: 2, S: 4, C: 8}"), (", colour: red", ""),
                                     ("gelux", "gelu")],
             "dependent.yaml": [("heads: 3", "heads: 2"), ("ot: 16", "out: 16"), ("linaer", "linear"),
                                ("heads: 5", "heads: 4")],
             "input_and_layers.yaml": [("{B: 2, C: 8}", "{B: 2, S: 4, T: 4, C: 8, E: 8}"), ("layerz: []", ""),
                                       ("heads: 3", "heads: 4")]}[name]
    for old, new in fixes:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    assert check_file(str(path)) == []
