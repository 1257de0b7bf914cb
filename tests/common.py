"""Paths and helpers shared by the test packages (import as `from tests.common import ROOT, SPECS, run_cli`)."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
DATA = TESTS / "data"
SPECS = sorted((ROOT / "specs").glob("*.yaml"))


def zoo_params(specs=SPECS, slow=()) -> list:
    """The zoo specs as pytest params, id'd by name, each in the xdist group of its spec: with `--dist loadgroup`
    (the default, pyproject.toml) one worker runs every grouped test of a spec, so the closed forms that
    formulas_once computes for it are computed once (the formula, LaTeX and pdflatex tests share them)."""
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.xdist_group(f"zoo-{p.stem}"),
                                              *((pytest.mark.slow,) if p.stem in slow else ())]) for p in specs]


@functools.lru_cache(maxsize=None)
def _load(path: str):
    import costspec

    return costspec.load(path)


def load_once(spec) -> "costspec.Model":  # noqa: F821
    """costspec.load(spec), once per test process and spec file, for tests that only read the model."""
    return _load(str(Path(spec).resolve()))


@functools.lru_cache(maxsize=None)
def _formulas(path: str, pass_: str, keep: tuple | None, expand: bool, depth: int | None):
    from costspec.analysis.formula import formulas

    return formulas(_load(path), pass_, keep=list(keep) if keep is not None else None, expand=expand, depth=depth)


def formulas_once(spec, pass_: str, keep=None, expand: bool = False, depth: int | None = None):
    """costspec.analysis.formula.formulas(load_once(spec), pass_, keep, expand, depth=depth), computed once per
    test process and arguments: the closed forms are immutable, and several tests check the same ones."""
    return _formulas(str(Path(spec).resolve()), str(pass_), tuple(keep) if keep is not None else None, expand, depth)


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run `python -m costspec ARGS` in a subprocess (real exit codes, real stderr)."""
    return subprocess.run([sys.executable, "-m", "costspec", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)



def invoke(*args, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`costspec ARGS` in this process, through costspec.cli.main as the console script runs it: the exit
    code its SystemExit carries (0 when it returns), stdout and stderr (click's CliRunner isolation), run
    from `cwd`. The same CompletedProcess as run_cli, without a new interpreter and its imports per call:
    for the tests about a command, not about the process (those use run_cli)."""
    from click.testing import CliRunner

    from costspec.cli import main

    argv = [str(a) for a in args]
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with CliRunner().isolation(env={"COSTSPEC_DEBUG": None}) as (out, err, _):
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["costspec", *argv], code, stdout, stderr)

# `bounded`: costspec's CLI in a subprocess, with its CPU time (user + system, the whole process from
# interpreter start; wall time on shared CI cores is noise) and its peak RSS asserted
SECONDS = 5.0


MAX_RSS = 1 << 30


# Runs costspec's CLI in-process and reports its exit code and peak RSS (bytes) on the last line of stderr.
_BOUNDED = """
import json, resource, sys
from costspec.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
sys.stdout.flush()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"code": code, "rss": usage.ru_maxrss * 1024, "cpu": usage.ru_utime + usage.ru_stime}), file=sys.stderr)
"""


def bounded(*args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `costspec ARGS`, asserting 5 s and 1 GB."""
    proc = subprocess.run([sys.executable, "-c", _BOUNDED, *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    *err, last = proc.stderr.rstrip("\n").split("\n")
    stats = json.loads(last)
    assert stats["cpu"] < SECONDS, f"costspec {' '.join(map(str, args))} took {stats['cpu']:.1f} s of CPU"
    assert stats["rss"] < MAX_RSS, f"costspec {' '.join(map(str, args))} peaked at {stats['rss'] / 2**20:.0f} MiB"
    assert "Traceback" not in proc.stderr
    return stats["code"], proc.stdout, "\n".join(err)
