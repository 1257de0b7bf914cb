"""Paths and helpers shared by the test packages (import as `from tests.common import ROOT, SPECS, run_cli`)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
DATA = TESTS / "data"
SPECS = sorted((ROOT / "specs").glob("*.yaml"))


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run `python -m costspec ARGS` in a subprocess (real exit codes, real stderr)."""
    return subprocess.run([sys.executable, "-m", "costspec", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)
