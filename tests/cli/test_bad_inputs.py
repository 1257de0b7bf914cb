"""Bad and hostile files other than specs: GPU catalogs, calibration files, ncu CSVs and their
JSON sidecars, plus special files (a FIFO, /dev/zero, a 300 MB sparse file) for
every kind. Each gives one exact message, exit 2, no traceback, within TIME_BOUND_S, and no
input file is ever modified (`-o` naming an input is refused).

The corpus is tests/bad_inputs/ (see its README.md); the messages are in its expected.yaml.
Every case runs in a copy of the corpus in a temp dir, so messages carry bare file names.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from costspec.cli import main
from tests.common import ROOT, TESTS

HERE = TESTS / "bad_inputs"
EXPECTED: dict[str, dict[str, str]] = yaml.safe_load((HERE / "expected.yaml").read_text(encoding="utf-8"))
TOY = ROOT / "specs" / "toy_mlp.yaml"
OK_CSV = '"ID","Kernel Name","smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"\n"","","inst"\n"0","k","786,432"\n'
TIME_BOUND_S = 5.0  # the bound for every reproducer; the cases take well under 0.5 s each

# How each kind of file is fed to costspec: the command line with FILE in it.
COMMANDS = {
    "catalog": ["gpus", "--catalog", "FILE"],
    "catalog_eval": ["eval", str(TOY), "--gpu", "h100-sxm", "--catalog", "FILE"],
    "calibration": ["eval", str(TOY), "--calibration", "FILE"],
    "csv": ["ncu", "compare", str(TOY), "FILE"],
    "sidecar": ["ncu", "compare", str(TOY), "FILE"],  # FILE: the CSV the sidecar sits next to
    "spec": ["eval", "FILE"],
    "spec_check": ["check", "FILE"],
}


def _kind(name: str) -> str:
    return name.split("_")[0]


def _generate(directory: Path) -> None:
    """Cases too big to commit or that cannot be committed (FIFOs, devices, sparse files)."""
    line = '"0","k","' + "1" * 140_000 + '"'  # a field over Python's 128 kB csv field limit
    (directory / "csv_field_140kB.csv").write_text(OK_CSV.rsplit("\n", 2)[0] + "\n" + line + "\n")
    for name in ("catalog_300MB.yaml", "calibration_300MB.yaml", "spec_300MB.yaml", "sidecar_300MB.json"):
        with open(directory / name, "wb") as f:
            f.truncate(300 * 2**20)  # sparse: no disk used
    with open(directory / "csv_over_256MiB.csv", "wb") as f:
        f.truncate(256 * 2**20 + 1)
    for kind in ("catalog", "calibration", "csv", "spec", "sidecar"):
        os.mkfifo(directory / f"{kind}_fifo")  # a directory is refused by click before costspec reads it
    os.symlink("/dev/zero", directory / "sidecar_dev_zero.json")
    os.rename(directory / "sidecar_fifo", directory / "sidecar_fifo.json")
    for name in [p.name for p in directory.glob("sidecar_*")]:
        # a sidecar is read next to its CSV: sidecar_x.json beside sidecar_x.csv
        (directory / (name.removesuffix(".json") + ".csv")).write_text(OK_CSV)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("bad_inputs")
    for path in HERE.iterdir():
        if path.name not in ("expected.yaml", "README.md"):
            shutil.copyfile(path, directory / path.name)
    _generate(directory)
    return directory


def _cases() -> list[tuple[str, str]]:
    return [(section, name) for section, entries in EXPECTED.items() for name in entries]


def _argv(section: str, name: str) -> list[str]:
    target = name.removesuffix(".json") + ".csv" if section == "sidecar" else name  # the sidecar's CSV
    return [target if a == "FILE" else a for a in COMMANDS[section]]


def _run_main(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def test_every_committed_file_has_an_expectation():
    listed = {name for entries in EXPECTED.values() for name in entries}
    committed = {p.name for p in HERE.iterdir()} - {"expected.yaml", "README.md"}
    assert committed <= listed, f"add to expected.yaml: {sorted(committed - listed)}"
    assert set(EXPECTED) <= set(COMMANDS)


@pytest.mark.parametrize("section, name", [c for c in _cases() if "fifo" not in c[1]])
def test_bad_input_gives_the_exact_message_fast(section, name, corpus, capsys, monkeypatch):
    monkeypatch.chdir(corpus)
    monkeypatch.delenv("COSTSPEC_DEBUG", raising=False)  # a bug must show as exit 3, not a traceback
    before = {p.name: p.stat().st_mtime_ns for p in corpus.iterdir()}
    start = time.perf_counter()
    code, out, err = _run_main(_argv(section, name), capsys)
    seconds = time.perf_counter() - start
    expected = EXPECTED[section][name]
    assert code == 2, f"exit {code}: {err}"
    if section == "spec_check":
        assert out.strip() == expected and err == "costspec: error: 1 of 1 spec(s) failed the checks\n"
    else:
        assert err == f"costspec: error: {expected}\n"
    assert seconds < TIME_BOUND_S, f"{name} took {seconds:.2f} s"
    assert not list(corpus.glob("PWNED*")), "a file ran code"
    assert {p.name: p.stat().st_mtime_ns for p in corpus.iterdir()} == before, "an input was modified"


@pytest.mark.parametrize("section, name", [c for c in _cases() if "fifo" in c[1]])
def test_a_fifo_is_refused_without_blocking(section, name, corpus):
    """In a subprocess with a timeout: a regression would block on the FIFO's open for ever."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "costspec", *_argv(section, name)], cwd=corpus, check=False,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert time.perf_counter() - start < 30  # interpreter start included; a hang would hit the timeout
    expected = EXPECTED[section][name]
    assert done.returncode == 2, done.stderr
    if section == "spec_check":
        assert done.stdout.strip() == expected
    else:
        assert done.stderr == f"costspec: error: {expected}\n"


# ----------------------------------------------------------------------------------------------
# -o naming an input: refused before any work, the input untouched
# ----------------------------------------------------------------------------------------------
@pytest.fixture
def inputs(tmp_path) -> Path:
    shutil.copyfile(TOY, tmp_path / "v.yaml")
    shutil.copyfile(ROOT / "tests/data/ncu/toy_forward.details.csv", tmp_path / "run.csv")
    shutil.copyfile(ROOT / "tests/data/ncu/toy_forward.details.json", tmp_path / "run.json")
    (tmp_path / "cat.yaml").write_text("gpus:\n  mine: {name: Mine, memory_gb: 8, memory_bw_gbps: 100, "
                                       "tensor: {fp32: 10}, cuda: {fp32: 1}}\n")
    os.symlink(tmp_path / "v.yaml", tmp_path / "link.yaml")
    os.link(tmp_path / "run.csv", tmp_path / "hard.csv")
    return tmp_path


OUTPUT_CASES = [
    (["latex", "v.yaml", "-o", "v.yaml"], "v.yaml"),
    (["latex", "v.yaml", "-o", "./sub/../v.yaml"], "v.yaml"),
    (["latex", "v.yaml", "-o", "link.yaml"], "v.yaml"),  # a symlink to the spec
    (["sweep", "v.yaml", "--vary", "M=1..4", "-o", "v.yaml"], "v.yaml"),
    (["ncu", "calibrate", "v.yaml", "run.csv", "-o", "run.csv"], "run.csv"),
    (["ncu", "calibrate", "v.yaml", "run.csv", "-o", "hard.csv"], "run.csv"),  # a hard link to the CSV
    (["ncu", "calibrate", "v.yaml", "run.csv", "-o", "run.json"], "run.json"),  # the CSV's sidecar
    (["ncu", "calibrate", "v.yaml", "run.csv", "-o", "v.yaml"], "v.yaml"),
    (["ncu", "run", "v.yaml", "--print-command", "--arch", "9.0", "-o", "v.yaml"], "v.yaml"),
    (["roofline", "v.yaml", "--gpu", "mine", "--catalog", "cat.yaml", "-o", "v.yaml"], "v.yaml"),
]


@pytest.mark.parametrize("args, victim", OUTPUT_CASES, ids=[" ".join(a) for a, _ in OUTPUT_CASES])
def test_output_naming_an_input_is_refused(args, victim, inputs, capsys, monkeypatch):
    monkeypatch.chdir(inputs)
    (inputs / "sub").mkdir()
    before = {p.name: p.read_bytes() for p in inputs.iterdir() if p.is_file()}
    code, _, err = _run_main(args, capsys)
    assert code == 2, err
    assert err.startswith(f"costspec: error: refusing to write {args[-1]}: it is the input file ")
    assert "which would be lost" in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in inputs.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in inputs.iterdir()) == sorted([*before, "sub"])  # no temp file left


def test_outputs_are_written_next_to_their_inputs(inputs, capsys, monkeypatch):
    """The refusal is about the input only: a fresh path and an existing output are written."""
    monkeypatch.chdir(inputs)
    (inputs / "old.tex").write_text("old")
    for args, path in ((["latex", "v.yaml", "-o", "old.tex"], "old.tex"),
                       (["sweep", "v.yaml", "--vary", "M=1..4", "-o", "grid.csv"], "grid.csv"),
                       (["ncu", "calibrate", "v.yaml", "run.csv", "-o", "calib.yaml"], "calib.yaml")):
        code, _, err = _run_main(args, capsys)
        assert code == 0, err
        assert (inputs / path).read_text() not in ("", "old")
    assert (inputs / "grid.csv").read_text().count("\n") == 5  # header + 4 rows
    assert not list(inputs.glob(".*"))  # no temp file left behind
