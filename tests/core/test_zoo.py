"""The zoo by name, `costspec zoo`, `costspec init`, the editor schema line, --dtype, progress, the flash note."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile

import pytest
import yaml

import costspec
from costspec.core.errors import UsageError
from costspec.core.progress import progress
from costspec.core.zoo import resolve, zoo_specs
from costspec.importer.starter import starter_spec
from costspec.spec.schema import build_schema
from tests.common import ROOT, SPECS

SCHEMA_LINE = "# yaml-language-server: $schema=../schemas/costspec.schema.json"


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


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_every_spec_starts_with_the_editor_schema_line(spec):
    first = spec.read_text().splitlines()[0]
    assert first == SCHEMA_LINE
    assert (spec.parent / first.split("=", 1)[1]).resolve() == (ROOT / "schemas/costspec.schema.json").resolve()


def test_schema_completes_every_op_attribute_with_a_description():
    from costspec.ops import spec_ops

    layer = json.loads((ROOT / "schemas/costspec.schema.json").read_text())["$defs"]["layer"]["properties"]
    for name, op in spec_ops().items():
        assert layer[name]["description"], name
        props = layer[name]["properties"]
        assert set(props) == {a.name for a in op.attrs}, name
        for attr in op.attrs:
            assert props[attr.name].get("description"), f"{name}.{attr.name} has no description"
    assert build_schema()["$defs"]["layer"]["properties"].keys() == layer.keys()


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


def test_dtype_overrides_the_default_precision_but_not_layer_precisions(write_spec):
    bf16 = costspec.load(ROOT / "specs/vit_b.yaml").evaluate("forward", B=2)
    fp32 = costspec.load(ROOT / "specs/vit_b.yaml", dtype="fp32").evaluate("forward", B=2)
    assert (fp32.tc, fp32.cuda) == (0, bf16.tc + bf16.cuda) and fp32.precision == "fp32"
    path = write_spec("""costspec: 1
name: mixed
dims: {M: 8, D: 16}
precision: {dtype: bf16}
input: [M, D]
layers:
  - linear: {out: D}
  - linear: {out: D}
    precision: fp32
""")
    model = costspec.load(path, dtype="fp16")
    rows = {r.name: r for r in model.evaluate().rows}
    # 2*M*D*D = 4096 matmul FLOPs each: the first follows --dtype (TC), the second keeps its fp32 (CUDA)
    assert rows["linear1"].values["tc_flops"] == 4096 and rows["linear1"].values["matmul_engine"] == "TC(fp16)"
    assert rows["linear2"].values["tc_flops"] == 0 and rows["linear2"].values["matmul_engine"] == "CUDA(fp32)"
    assert model.with_precision("fp32").evaluate().tc == 0
    with pytest.raises(UsageError):
        costspec.load(path, dtype="fp64")


def test_dtype_on_eval_formula_and_sweep(cli):
    assert "precision: fp32" in cli("eval", "specs/vit_b.yaml", "--dtype", "fp32").stdout
    assert "TC FLOPs    = 0" in cli("formula", "specs/vit_b.yaml", "--dtype", "fp32").stdout
    sweep = cli("sweep", "specs/vit_b.yaml", "--vary", "B=1,2", "--dtype", "fp32").stdout.splitlines()
    assert sweep[0].split(",")[2] == "tc_flops" and sweep[1].split(",")[2] == "0"


def test_train_note_names_flash_and_the_math_backend(cli, write_spec):
    train = cli("eval", "specs/vit_b.yaml", "--pass", "train").stdout
    assert "backend: flash" in train and "backend: math" in train
    assert "backend: flash" not in cli("eval", "specs/vit_b.yaml").stdout
    math = (ROOT / "specs/vit_b.yaml").read_text().replace("attention: {heads: heads}",
                                                           "attention: {heads: heads, backend: math}")
    assert "backend: flash" not in cli("eval", write_spec(math), "--pass", "train").stdout


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_terminal_only():
    tty, pipe = _Tty(), io.StringIO()
    with progress("validate", 3, stream=tty) as tick:
        for _ in range(3):
            tick(what="layer")
    assert "validate: 3/3" in tty.getvalue() and tty.getvalue().endswith("\r")
    with progress("validate", 3, stream=pipe) as tick:
        tick()
    assert pipe.getvalue() == ""
    quiet = _Tty()
    with progress("validate", 3, quiet=True, stream=quiet) as tick:
        tick()
    assert quiet.getvalue() == ""


@pytest.mark.slow
def test_wheel_ships_the_zoo_and_the_schema(tmp_path):
    """A non-editable build carries real copies of specs/*.yaml and the schema (not links)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(tmp_path.glob("costspec-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        for spec in SPECS:
            assert z.read(f"costspec/data/zoo/{spec.name}") == spec.read_bytes()
        assert json.loads(z.read("costspec/data/costspec.schema.json")) == \
            json.loads((ROOT / "schemas/costspec.schema.json").read_text())
        assert yaml.safe_load(z.read("costspec/data/zoo/vit_b.yaml"))["name"] == "vit_b_16"


def test_status_line_on_a_terminal_only():
    import time as _time

    from costspec.core.progress import status

    tty, pipe = _Tty(), io.StringIO()
    with status("validate: counting", stream=tty, every=0.01):
        _time.sleep(0.05)
    assert "validate: counting" in tty.getvalue() and " s" in tty.getvalue() and tty.getvalue().endswith("\r")
    with status("validate: counting", stream=pipe, every=0.01):
        _time.sleep(0.02)
    assert pipe.getvalue() == ""
