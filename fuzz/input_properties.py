"""The property every input file must have, checked through the real commands (in-process,
`costspec.cli.main`): the command gives its result (exit 0) or a CostspecError (exit 1 or 2);
never an internal error (exit 3 / another exception) and never a hang. A file drawn as valid
must be read without an error (`check_input` raises AssertionError otherwise).

* catalog: `costspec gpus --catalog F` and `costspec eval toy --gpu KEY --catalog F`;
* calibration: `costspec eval toy --pass train --calibration F` (table or json, alternately);
* ncu CSV: the file is parsed (`parse_csv`), then `costspec ncu compare toy F` and
  `costspec ncu calibrate toy F -o calib.yaml`, whose output is read back by `eval --calibration`;
* sidecar: written next to a copy of a valid toy CSV, then `costspec ncu compare toy CSV`;
* hf: `costspec import hf F -o spec.yaml` (which builds the spec before it writes it);
* validation / compare: `costspec report toy --validation F` / `--compare F -o report.html`.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from costspec.cli import main
from costspec.core.errors import CostspecError

ROOT = Path(__file__).resolve().parent.parent
TOY = str(ROOT / "specs" / "toy_mlp.yaml")
TOY_CSV = ROOT / "tests" / "data" / "ncu" / "toy_forward.details.csv"


@dataclass
class InputOutcome:
    accepted: bool  # every command that read the file exited 0
    error: str = ""  # the first CostspecError message


def _cli(args: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of one command, in-process; exceptions other than CostspecError
    propagate (COSTSPEC_DEBUG makes `main` re-raise them instead of printing exit 3)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    if code not in (0, 1, 2):
        raise AssertionError(f"exit {code}: {err.getvalue()[-500:]}")
    return code, err.getvalue().strip()


def _write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


def _gpu_key(text: str | bytes) -> str:
    """The first GPU key of a catalog text, as the generator wrote it (h100-sxm when unsure)."""
    lines = (text.decode("utf-8", "replace") if isinstance(text, bytes) else text).split("\n")
    for before, line in itertools.pairwise(lines):
        if before.startswith("gpus:") and line.startswith("  ") and line.rstrip().endswith(":"):
            return line.strip().rstrip(":").strip("'\"") or "h100-sxm"
    return "h100-sxm"


def check_input(kind: str, text: str | bytes, valid: bool) -> InputOutcome:
    """Run the commands that read a file of `kind` on `text` (see the module docstring)."""
    debug = os.environ.get("COSTSPEC_DEBUG")
    os.environ["COSTSPEC_DEBUG"] = "1"
    folder = Path(tempfile.mkdtemp(prefix="costspec-fuzz-"))
    try:
        runs = _runs(kind, folder, text)
        results = []
        for args in runs:
            if callable(args):
                results.append(args())
                continue
            results.append(_cli(args))
            if kind == "csv" and args[:2] == ["ncu", "calibrate"] and results[-1][0] == 0:
                results.append(_cli(["eval", TOY, "--pass", "train", "--calibration", str(folder / "calib.yaml")]))
        errors = [message for code, message in results if code != 0]
        if valid and kind != "csv" and errors:
            raise AssertionError(f"a valid {kind} was refused: {errors[0]}")
        return InputOutcome(not errors, errors[0] if errors else "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if debug is None:
            del os.environ["COSTSPEC_DEBUG"]
        else:
            os.environ["COSTSPEC_DEBUG"] = debug


def _runs(kind: str, folder: Path, text: str | bytes) -> list:
    if kind == "catalog":
        path = _write(folder, "catalog.yaml", text)
        return [["gpus", "--catalog", str(path)],
                ["eval", TOY, "--gpu", _gpu_key(text), "--catalog", str(path), "--pass", "train"]]
    if kind == "calibration":
        path = _write(folder, "calib.yaml", text)
        fmt = "json" if len(text) % 2 else "table"  # both renderers, one run per example
        return [["eval", TOY, "--pass", "train", "--calibration", str(path), "--format", fmt]]
    if kind == "csv":
        path = _write(folder, "run.csv", text)

        def parse() -> tuple[int, str]:
            from costspec.ncu.parse import parse_csv

            try:
                parse_csv(path)
            except CostspecError as exc:
                return 2, str(exc)
            return 0, ""

        return [parse, ["ncu", "compare", TOY, str(path)],
                ["ncu", "calibrate", TOY, str(path), "-o", str(folder / "calib.yaml")]]
    if kind == "sidecar":
        shutil.copyfile(TOY_CSV, folder / "run.csv")
        _write(folder, "run.json", text)
        return [["ncu", "compare", TOY, str(folder / "run.csv")]]
    if kind == "hf":
        path = _write(folder, "config.json", text)
        return [["import", "hf", str(path), "-o", str(folder / "spec.yaml")]]
    if kind in ("validation", "compare"):
        path = _write(folder, f"{kind}.json", text)
        return [["report", TOY, f"--{kind}", str(path), "-o", str(folder / "report.html")]]
    raise ValueError(f"unknown input kind {kind}")
