"""An output never overwrites an input named by zoo key: `costspec latex toy_mlp -o <the zoo's
toy_mlp.yaml>` compares the resolved paths, not the key with the path. The zoo is pointed at a copy
in a temporary folder, so a regression cannot destroy the tracked spec."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from costspec.cli import main
from costspec.core import zoo

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def zoo_copy(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "zoo"
    folder.mkdir()
    (folder / "toy_mlp.yaml").write_text((ROOT / "specs" / "toy_mlp.yaml").read_text())
    (folder / "linked.yaml").symlink_to(folder / "toy_mlp.yaml")
    monkeypatch.setattr(zoo, "zoo_dir", lambda: folder)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return folder


def _code(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.mark.parametrize("command", [
    ["latex", "toy_mlp", "-o", "TARGET"],
    ["sweep", "toy_mlp", "--vary", "B=1,2", "-o", "TARGET"],
    ["sweep", "toy_mlp.yaml", "--vary", "B=1,2", "--format", "json", "-o", "TARGET"],
])
@pytest.mark.parametrize("target", ["toy_mlp.yaml", "linked.yaml", "../zoo/./toy_mlp.yaml"])
def test_an_output_that_is_the_zoo_spec_read_by_key_is_refused(zoo_copy, capsys, command, target):
    spec = zoo_copy / "toy_mlp.yaml"
    before = spec.read_text()
    path = str(zoo_copy / target) if not target.startswith("..") else target
    code = _code([path if a == "TARGET" else a for a in command])
    err = capsys.readouterr().err
    assert code == 2 and "it is the input file toy_mlp" in err, err
    assert spec.read_text() == before and not spec.is_symlink()
    assert sorted(os.listdir(zoo_copy)) == ["linked.yaml", "toy_mlp.yaml"]  # no temporary file left


def test_an_output_elsewhere_is_written(zoo_copy, capsys):
    assert _code(["latex", "toy_mlp", "-o", "toy.tex"]) == 0
    assert Path("toy.tex").read_text().startswith("%")
