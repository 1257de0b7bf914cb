"""Every file a command reads goes through the one bounded reader (`costspec.core.safeio`).

The walk below visits every parameter of every command (`costspec.cli.register_all()`, then the
command tree): a path-typed parameter must be an `InputFile` (checked by the reader's rules when
it is parsed, then read through the reader) or an `OutputFile` (written through its writer); a
string parameter must be one this file knows is not a file. A new path option read some other way
fails here. Then each input option is given a FIFO, /dev/zero, a directory and an oversized file,
through the real command line: exit 2 at once, naming the file, nothing read or blocked.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from costspec.cli import cli, main, options, register_all
from costspec.core import safeio

ROOT = Path(__file__).resolve().parents[2]
TOY = str(ROOT / "specs" / "toy_mlp.yaml")

# string-typed parameters that name no file, and what they are
NOT_FILES = {
    "sets": "NAME=VALUE dim bindings", "gpu": "a GPU key of the catalog", "efficiency": "fractions tc=F,...",
    "lengths": "a comma list of integers", "seq_dim": "a dim name", "keep": "dim names", "name": "a spec name",
    "schema": "the schema reference written into the spec (a path or URL, not read)", "varies": "NAME=VALUES",
    "arch": "a compute capability", "ncu": "the ncu executable (run, not read)",
    "against": "package.module:callable or hf:ModelClass", "config_sets": "KEY=VALUE config settings",
    "output_field": "an output field name",
    "target": "package.module:callable or hf:ModelClass (import torch)", "dims": "NAME=INPUT:AXIS dim names",
    "checkpoint": "none, blocks or every:N",
}


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        if isinstance(command, click.Group):
            yield from _commands(command, path + (name,))
        elif command is not None:
            yield path + (name,), command


register_all()
COMMANDS = list(_commands())
INPUTS = [(path, param) for path, command in COMMANDS for param in command.params
          if isinstance(param.type, options.InputFile)]


def test_every_path_parameter_is_read_or_written_through_safeio():
    unknown = []
    for path, command in COMMANDS:
        for param in command.params:
            where = f"costspec {' '.join(path)} {param.opts[0]}"
            if isinstance(param.type, (click.Path, click.File)):
                if not isinstance(param.type, (options.InputFile, options.OutputFile)):
                    unknown.append(f"{where}: {type(param.type).__name__} (use options.InputFile or OutputFile)")
                elif isinstance(param.type, options.InputFile) and param.type.kind not in safeio.KINDS:
                    unknown.append(f"{where}: kind {param.type.kind!r} is not one of safeio.KINDS")
            elif param.type is click.STRING and param.name not in NOT_FILES:
                unknown.append(f"{where}: a string parameter; a file? (InputFile) or list it in NOT_FILES")
    assert not unknown, "\n".join(unknown)
    assert len(INPUTS) >= 20  # spec arguments, --catalog, --calibration, CSVs, --lengths-file, --config, ...
    kinds = {param.type.kind for _, param in INPUTS}
    assert kinds == set(safeio.KINDS) - {"ncu sidecar"}  # a sidecar is found next to its CSV, never named


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    os.mkfifo(folder / "fifo")
    (folder / "dir").mkdir()
    return folder


# the options a command requires, so that it runs as far as reading its inputs
REQUIRED = {("sweep",): ["--vary", "M=1..2"], ("ncu", "calibrate"): ["-o", "OUT.yaml"], ("report",): ["-o", "OUT.html"],
            ("roofline",): ["--gpu", "h100-sxm", "-o", "OUT.svg"]}


def _invocation(path: tuple[str, ...], param: click.Parameter, value: str, out: Path) -> list[str]:
    """The command with `value` in `param` (other arguments: valid ones, so the parse reaches it)."""
    args = list(path) + [str(out / a) if a.startswith("OUT") else a for a in REQUIRED.get(path, [])]
    command = dict(COMMANDS)[path]
    for p in command.params:
        if isinstance(p, click.Argument):
            if p is param:
                args.append(value)
            elif isinstance(p.type, options.InputFile) and p.type.kind == "ncu CSV":
                args.append(str(ROOT / "tests/data/ncu/toy_forward.details.csv"))
            else:
                args.append(TOY)
        elif p is param:
            args += [p.opts[0], value]
    return args


@pytest.mark.parametrize("path, param", INPUTS, ids=[f"{' '.join(p)} {q.opts[0]}" for p, q in INPUTS])
def test_a_fifo_a_device_and_a_directory_are_refused_at_once(path, param, hostile, capsys):
    for value, says in ((hostile / "fifo", "is a FIFO (named pipe), not a regular file"),
                        ("/dev/zero", "is a character device, not a regular file"),
                        (hostile / "dir", "")):
        if value == hostile / "dir" and param.type.dir_okay:
            continue  # `import hf DIR` reads DIR/config.json
        start = time.monotonic()
        try:
            main(_invocation(path, param, str(value), hostile))
            code = 0
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        assert code == 2, err
        assert time.monotonic() - start < 5
        shown = out + err  # `check` lists each spec's problem on stdout
        assert str(value) in shown and says in shown and "Traceback" not in shown


def test_a_file_over_its_kinds_limit_is_refused_before_it_is_read(tmp_path, capsys):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(safeio.LENGTHS.max_bytes + 1)  # sparse: nothing to read, only its size
    try:
        main(["eval", TOY, "--lengths-file", str(big)])
    except SystemExit as exc:
        assert exc.code == 2
    assert "file is 16,777,217 bytes, over the limit for a lengths file (expected at most 16,777,216 bytes)" \
        in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["report", "toy_mlp", "--validation", "FIFO", "-o", "r.html"],
    ["eval", "gpt2_small", "--lengths-file", "/dev/zero"],
    ["validate", "toy_mlp", "--against", "hf:LlamaModel", "--config", "FIFO"],
])
def test_in_a_subprocess_a_fifo_or_dev_zero_never_blocks_nor_fills_memory(args, hostile, tmp_path):
    """The reproducers: exit 2 in seconds under a 500 MB address-space limit (a hang would time out)."""
    args = [str(hostile / "fifo") if a == "FIFO" else str(tmp_path / a) if a == "r.html" else a for a in args]
    done = subprocess.run(["prlimit", "--as=500000000", sys.executable, "-m", "costspec", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


def test_report_reads_its_json_through_the_reader(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text('{"rows": [], "x": ' + '{"a": ' * 500 + "1" + "}" * 500 + "}")
    try:
        main(["report", TOY, "--validation", str(deep), "-o", str(tmp_path / "r.html")])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert "--validation: " in err and "JSON nested more than 32 levels deep" in err
    assert not (tmp_path / "r.html").exists()
