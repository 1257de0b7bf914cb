"""`costspec init`: the commented starter spec (costspec.importer.starter), its editor schema line, no overwrite."""
from __future__ import annotations

import pytest

import costspec
from costspec.core.errors import UsageError
from costspec.importer.starter import starter_spec
from tests.common import ROOT


def test_init_writes_a_spec_that_evaluates_and_never_overwrites(tmp_path, cli):
    result = cli("init", "mynet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    path = tmp_path / "mynet.yaml"
    text = path.read_text()
    assert text.startswith("# yaml-language-server: $schema=")
    schema_ref = text.splitlines()[0].split("=", 1)[1]
    assert schema_ref.startswith("file://") or (tmp_path / schema_ref).resolve().is_file()
    report = costspec.load(path).evaluate("forward", B=8)
    assert report.spec_name == "mynet" and report.total > 0
    again = cli("init", "mynet", cwd=tmp_path)
    assert again.returncode == 2 and "does not overwrite" in again.stderr
    assert path.read_text() == text


def test_init_schema_path_is_relative_inside_the_project(tmp_path):
    text = starter_spec("x", ROOT / "tests" / "x.yaml")
    assert text.splitlines()[0] == "# yaml-language-server: $schema=../schemas/costspec.schema.json"
    with pytest.raises(UsageError):
        starter_spec("1bad name", tmp_path / "x.yaml")
