"""Shared fixtures: paths, a spec writer, and a CLI runner that goes through costspec.cli.main."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))


@pytest.fixture
def write_spec(tmp_path):
    """write_spec(text, name="spec.yaml") -> path of a spec file in a temp dir."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run `python -m costspec ARGS` in a subprocess (real exit codes, real stderr)."""
    return subprocess.run([sys.executable, "-m", "costspec", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def cli():
    return run_cli


from hypothesis import HealthCheck, settings  # noqa: E402

# CI runs on 2 shared cores: no per-example deadline; a bounded example count.
# derandomize: CI draws the same examples every run (a failure found once is a failure every time);
# the long profile (fuzz/run_fuzz.py, --hypothesis-profile=long) explores freely
settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", deadline=None, max_examples=2000)
settings.load_profile("ci")
