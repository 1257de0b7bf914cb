"""costspec.core.zoo: the zoo is the specs folder, a spec by name from any directory (a local file wins), `costspec zoo`."""
from __future__ import annotations

import json

from costspec.core.zoo import resolve, zoo_specs
from tests.common import SPECS


def test_zoo_is_the_specs_folder():
    assert [z.key for z in zoo_specs()] == [p.stem for p in SPECS]
    assert {z.path.read_bytes() for z in zoo_specs()} == {p.read_bytes() for p in SPECS}


def test_zoo_name_gives_the_same_table_as_the_path_from_any_directory(tmp_path, cli):
    by_path = cli("eval", "specs/vit_b.yaml", "--batch", "8")
    by_name = cli("eval", "vit_b", "--batch", "8", cwd=tmp_path)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout == by_path.stdout


def test_a_local_file_wins_over_a_zoo_name(tmp_path, monkeypatch):
    (tmp_path / "vit_b").write_text("not a spec")
    monkeypatch.chdir(tmp_path)
    assert resolve("vit_b") == "vit_b"
    assert str(resolve("llama_1b")).endswith("llama_1b.yaml")
    assert resolve("no_such_spec") == "no_such_spec"  # then load says: no such file


def test_costspec_zoo_lists_every_spec_with_its_doc(cli):
    result = cli("zoo", "--format", "json")
    rows = {r["name"]: r for r in json.loads(result.stdout)["rows"]}
    assert set(rows) == {p.stem for p in SPECS}
    assert rows["vit_b"]["spec_name"] == "vit_b_16" and rows["vit_b"]["doc"].startswith("ViT-Base/16")
    text = cli("zoo").stdout
    assert all(p.stem in text for p in SPECS)
