"""costspec.core.safeio: the bounded reader and the atomic writer every command uses.

The command-level cases (every kind of input file, `-o` naming an input) are in
tests/cli/test_bad_inputs.py; here: the functions themselves and `kill -9` during a write.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from costspec.core import safeio
from costspec.core.safeio import (
    CATALOG,
    NCU_CSV,
    SIDECAR,
    InputError,
    Kind,
    OutputError,
    atomic_output,
    check_not_input,
    check_number_text,
    loads_json,
    read_bytes,
    read_text,
    write_text,
    write_with,
)
from tests.common import ROOT


class _Hang(Exception):
    pass


@pytest.fixture
def alarm():
    """Fail instead of hanging: a blocking open() is interrupted after 5 s."""

    def ring(signum, frame):
        raise _Hang("blocked for 5 s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------
def test_a_regular_file_within_the_limit_is_read(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_bytes(b"x" * 10)
    assert read_bytes(path, Kind("test file", 10)) == b"x" * 10
    with pytest.raises(InputError, match=r"a.yaml: file is 11 bytes, over the limit for a test file "
                                         r"\(expected at most 10 bytes\)"):
        path.write_bytes(b"x" * 11)
        read_bytes(path, Kind("test file", 10))


@pytest.mark.parametrize("special, message", [
    ("fifo", "is a FIFO (named pipe), not a regular file (expected a GPU catalog file)"),
    ("/dev/zero", "/dev/zero is a character device, not a regular file (expected a GPU catalog file)"),
    ("/dev/null", "/dev/null is a character device, not a regular file (expected a GPU catalog file)"),
    ("dir", "is a directory, not a GPU catalog"),
    ("missing", "cannot read GPU catalog .*missing: no such file"),
])
def test_special_files_are_refused_at_once(special, message, tmp_path, alarm):
    path = tmp_path / special
    if special == "fifo":
        os.mkfifo(path)  # nobody writes: a blocking open would wait for ever
    elif special == "dir":
        path.mkdir()
    elif special.startswith("/dev/"):
        path = Path(special)
    start = time.perf_counter()
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_bytes(path, CATALOG)
    assert time.perf_counter() - start < 1.0


def test_a_sparse_300MB_file_is_refused_from_its_size(tmp_path):
    path = tmp_path / "big.csv"
    with open(path, "wb") as f:
        f.truncate(300 * 2**20)
    start = time.perf_counter()
    with pytest.raises(InputError, match="314,572,800 bytes, over the limit for an ncu CSV"):
        read_bytes(path, NCU_CSV)
    assert time.perf_counter() - start < 0.5  # refused from fstat, nothing read


def test_text_lines_are_bounded(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("ok\n" + "x" * 21 + "\nok\n")
    assert read_text(path, NCU_CSV, max_line=21).startswith("ok")
    with pytest.raises(InputError, match=r"a.csv:2: line of 22 characters, over the limit \(expected at most 21"):
        path.write_text("ok\n" + "x" * 22 + "\nok\n")
        read_text(path, NCU_CSV, max_line=21)


@pytest.mark.parametrize("text", ["1,215,000,000.00", "158 (0: 158)", "(!) 12", "1e300", "-1e-300", "1.2e-307", "1e-400", "0.000",
                                  "0e-9999", "n/a", "abc", "", "9" * 100, "0." + "0" * 200 + "1" * 100,
                                  "27.595.520"])
def test_numbers_within_the_bounds_pass(text):
    check_number_text(text)  # no error: the caller's parser decides what is a number


@pytest.mark.parametrize("text, message", [
    ("1e400", "'1e400' is out of range"),
    ("1e-401", "'1e-401' is out of range"),
    ("9" * 5000, "has 5,000 significant digits"),
    ("1," + ",".join(["000"] * 40), "has 121 significant digits"),
    ("1e999999999999999999", "has an exponent out of range"),
    ("0e-99999", "has an exponent out of range"),  # zero, but Fraction would build 10**99999
    ("10e300", "out of range"),  # 1e301
    ("(!) 1e500 (0: 1)", "'1e500' is out of range"),
])
def test_numbers_beyond_the_bounds_are_refused_fast(text, message):
    start = time.perf_counter()
    with pytest.raises(InputError, match=message):
        check_number_text(text, "value")
    assert time.perf_counter() - start < 0.1


def test_json_depth_and_numbers_are_bounded():
    ok = "[" * safeio.MAX_JSON_DEPTH + "]" * safeio.MAX_JSON_DEPTH
    assert loads_json(ok, "s.json") == json.loads(ok)
    assert loads_json('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', "s.json") == {"a": "[" * 42}
    with pytest.raises(InputError, match="nested more than 32 levels"):
        loads_json("[" * 33 + "]" * 33, "s.json")
    with pytest.raises(InputError, match="nested more than 32 levels"):
        loads_json("[" * 1_000_000, "s.json")  # refused before json recurses
    assert loads_json('{"a": 1.5, "b": 2}', "s.json") == {"a": 1.5, "b": 2}
    for bad in ('{"a": 1e400}', '{"a": ' + "1" * 5000 + "}", '{"a": Infinity}', '{"a": NaN}', "{"):
        with pytest.raises(InputError):
            loads_json(bad, "s.json")


def test_a_hugging_face_config_may_hold_infinity_but_never_nan(tmp_path):
    # transformers writes Mamba2Config's default time_step_limit (0, inf) with json.dumps: Infinity
    path = tmp_path / "config.json"
    path.write_text('{"time_step_limit": [0.0, Infinity], "low": -Infinity}')
    assert safeio.read_json(path, safeio.HF_CONFIG) == {"time_step_limit": [0.0, float("inf")], "low": float("-inf")}
    with pytest.raises(InputError, match="Infinity is not a finite number"):
        safeio.read_json(path, safeio.SIDECAR)
    path.write_text('{"a": NaN}')
    with pytest.raises(InputError, match="NaN is not a finite number"):
        safeio.read_json(path, safeio.HF_CONFIG)


def test_sidecar_reader_refuses_a_non_utf8_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_bytes(b"\xff{}")
    with pytest.raises(InputError, match="not valid UTF-8"):
        safeio.read_json(path, SIDECAR)


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------
def test_write_replaces_the_file_and_keeps_its_mode(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    write_text(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temp file left


def test_write_through_a_symlink_replaces_its_target(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_device_target_is_written_in_place():
    write_text("/dev/null", "nothing")  # no rename over /dev/null


def test_an_error_while_writing_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as f:
        f.write("half a ")
        raise RuntimeError("the generator failed")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_write_with_hands_a_temp_path_with_the_suffix(tmp_path):
    seen = []

    def save(where: str) -> None:
        seen.append(where)
        Path(where).write_bytes(b"PNG")

    write_with(tmp_path / "plot.png", save)
    assert seen[0].endswith(".png") and Path(seen[0]).parent == tmp_path and not Path(seen[0]).exists()
    assert (tmp_path / "plot.png").read_bytes() == b"PNG"


def test_inputs_are_never_targets(tmp_path):
    spec = tmp_path / "v.yaml"
    spec.write_text("spec")
    (tmp_path / "sub").mkdir()
    os.link(spec, tmp_path / "hard.yaml")
    (tmp_path / "soft.yaml").symlink_to(spec)
    for target in (spec, tmp_path / "sub" / ".." / "v.yaml", tmp_path / "hard.yaml", tmp_path / "soft.yaml"):
        with pytest.raises(OutputError, match="refusing to write .*: it is the input file .*v.yaml"):
            write_text(target, "latex", [None, spec])
    assert spec.read_text() == "spec"
    check_not_input(tmp_path / "other.yaml", [spec, None])  # other paths are fine


def test_a_directory_target_is_an_error(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        write_text(tmp_path, "x")


# ----------------------------------------------------------------------------------------------
# kill -9 during a write
# ----------------------------------------------------------------------------------------------
SLOW_WRITER = """
import sys, time
from costspec.core.safeio import atomic_output
with atomic_output(sys.argv[1]) as f:
    for i in range(10**7):
        f.write(f"row {i},{i * i}\\n")
        if i == 20000:
            f.flush()
            print("writing", flush=True)
        if i > 20000:
            time.sleep(0.001)
"""


def test_kill_9_mid_write_leaves_the_previous_file_intact(tmp_path):
    out = tmp_path / "prev.csv"
    old = "".join(f"old {i}\n" for i in range(1000))
    out.write_text(old)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(out)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "writing"  # 20,001 rows are on disk, in the temp file
        temps = [p for p in tmp_path.iterdir() if p.name.startswith(".prev.csv.")]
        assert len(temps) == 1 and temps[0].stat().st_size > 100_000
    finally:
        proc.kill()  # SIGKILL: no cleanup runs
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert out.read_text() == old


def test_kill_9_during_sweep_output_leaves_the_old_or_the_new_file(tmp_path):
    """A real `costspec sweep -o` of a 100,000-row grid, killed as soon as its output starts to
    change on disk (the temp file appears, or the target itself changes)."""
    out = tmp_path / "prev.csv"
    old = "M,forward_tc\n1,2\n"
    out.write_text(old)
    before = out.stat()
    proc = subprocess.Popen([sys.executable, "-m", "costspec", "sweep", str(ROOT / "specs/toy_mlp.yaml"),
                             "--vary", "M=1..100000", "-o", str(out)], stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            changed = out.stat().st_mtime_ns != before.st_mtime_ns or out.stat().st_size != before.st_size
            if changed or any(p.name.startswith(".prev.csv.") for p in tmp_path.iterdir()):
                break
            time.sleep(0.0005)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    text = out.read_text()
    if proc.returncode == -signal.SIGKILL:
        assert text == old, "a kill during the write left a modified file"
    else:  # it finished before the kill: the new file, whole
        assert text.endswith("\n") and text.count("\n") == 100_001


def test_the_documented_limits_are_the_code_s():
    from costspec.analysis.calibration import MAX_COEFFICIENT
    from costspec.core.expr import MAX_INT_DIGITS
    from costspec.core.yaml_marks import MAX_BYTES, MAX_DEPTH, MAX_NODES

    doc = (ROOT / "docs" / "spec-language.md").read_text(encoding="utf-8")
    limits = doc[doc.index("## Limits of every input file"):]
    assert safeio.YAML_MAX_BYTES == MAX_BYTES  # every YAML input has the spec loader's bounds
    for text in (f"{MAX_BYTES:,} bytes", f"{MAX_NODES:,} YAML nodes", f"nesting {MAX_DEPTH}",
                 f"{NCU_CSV.max_bytes // 2**20} MiB", f"{safeio.MAX_CSV_LINE:,} characters",
                 f"{SIDECAR.max_bytes:,} bytes", f"nested at most {safeio.MAX_JSON_DEPTH} levels",
                 f"at most {safeio.MAX_NUMBER_DIGITS} significant digits", f"between 1e{safeio.MIN_MAGNITUDE} and 1e{safeio.MAX_MAGNITUDE}",
                 f"at most {MAX_COEFFICIENT:,} in magnitude",
                 f"at most {MAX_INT_DIGITS} digits"):
        assert text in limits, f"docs/spec-language.md does not say {text!r}"
