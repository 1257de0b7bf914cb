"""Numbers identical before and after refactors: every command on every zoo spec vs tests/golden/golden.json.

The golden file was recorded (tests/golden/make_golden.py) before the one-walk / one-table refactor;
`normalize` reads each output into {row: {quantity: value}}, so the check is on numbers (and on the
exact text of latex), not on the layout. eval / formula / latex / validate / ncu compare / torch / gpus.
The commands run in this process (tests.common.invoke: the console script's entry point), not one new
interpreter and its imports per run as make_golden.py records them: the same arguments, the same output.
"""
from __future__ import annotations

import json

import pytest

from tests.common import invoke
from tests.golden.make_golden import OUT, normalize, runs

GOLDEN = json.loads(OUT.read_text(encoding="utf-8"))
RUNS = runs()
FAST = {"eval:toy_mlp:train", "eval:vit_b:forward", "validate:toy_mlp:train", "ncu-compare:toy", "sweep:vit_b",
        "latex:vit_b:forward", "formula:llama_1b:train"}


def test_golden_covers_every_run():
    assert set(GOLDEN) == set(RUNS)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in RUNS])
def test_numbers_unchanged(name):
    done = invoke(*RUNS[name])
    assert done.returncode in (0, 1), f"costspec {' '.join(RUNS[name])}: exit {done.returncode}: {done.stderr}"
    assert normalize(name, done.stdout) == GOLDEN[name]
