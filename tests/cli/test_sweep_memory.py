"""A sweep's memory stays bounded inside its documented limits: the plain CSV streams (up to
MAX_POINTS); an output that holds every point in memory (--gpu, --format json / table, --plot) has its
own, lower limit, checked before any work (5 M points with --gpu took 3.7 GB; 20 M, MemoryError)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from costspec.analysis.sweep import MAX_POINTS, MAX_POINTS_GPU, MAX_POINTS_IN_MEMORY
from costspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
GPT2 = str(ROOT / "specs" / "gpt2_small.yaml")


def _run(args: list[str], capsys) -> tuple[int, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra, why, limit", [
    (["--gpu", "h100-sxm"], "--gpu", MAX_POINTS_GPU),
    (["--format", "json"], "--format json", MAX_POINTS_IN_MEMORY),
    (["--format", "table", "--gpu", "h100-sxm"], "--format table", MAX_POINTS_IN_MEMORY),
    (["--plot", "PLOT"], "--plot", MAX_POINTS_IN_MEMORY),
])
def test_a_grid_over_an_in_memory_limit_is_refused_before_any_work(tmp_path, capsys, extra, why, limit):
    extra = [str(tmp_path / "p.png") if a == "PLOT" else a for a in extra]
    side = 1
    while side * side <= limit:
        side *= 2
    code, err = _run(["sweep", GPT2, "--vary", f"B=1..{side}", "--vary", f"S=1..{side}", *extra,
                      "-o", str(tmp_path / "out")], capsys)
    assert code == 2, err
    assert f"the grid has {side * side:,} points; {why} holds every point in memory, and its limit is {limit:,} " \
           f"points (a plain CSV sweep streams up to {MAX_POINTS:,})" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "p.png").exists()


def test_a_grid_at_the_limit_is_evaluated(tmp_path, capsys):
    code, err = _run(["sweep", GPT2, "--vary", "B=1..4", "--vary", "S=1..8", "--gpu", "h100-sxm", "--format", "json",
                      "-q", "-o", str(tmp_path / "out.json")], capsys)
    assert code == 0 and "wrote 32 rows" in err


def test_five_million_points_with_gpu_is_refused_in_a_small_process(tmp_path):
    """The reproducer: exit 2 at once under a 500 MB address-space limit (it took 3.7 GB before)."""
    done = subprocess.run(["prlimit", "--as=500000000", sys.executable, "-m", "costspec", "sweep", GPT2,
                           "--vary", "B=1..5000", "--vary", "S=1..1000", "--gpu", "h100-sxm", "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "the grid has 5,000,000 points; --gpu holds" in done.stderr, done.stderr
    assert done.stdout == ""
