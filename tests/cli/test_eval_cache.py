"""`costspec eval` with the compiled-spec cache: byte-identical to `--no-cache` (the symbolic path) for every
zoo spec, pass, dims, depth, dtype and format; the same errors; a warm run builds no model and imports
no sympy, jsonschema, numpy or torch; a damaged entry is rebuilt; options the cache does not cover
take the full path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import costspec.model
from costspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
# modules a warm `eval` must not import; a cold one must not import torch / transformers
HEAVY = ("sympy", "mpmath", "jsonschema", "numpy", "torch", "transformers", "yaml")
IMPORTS = """
import sys
from costspec.cli import main
try:
    main(sys.argv[1:])
finally:
    sys.stdout.flush()
    sys.stderr.write("MODULES " + " ".join(sorted(sys.modules)) + "\\n")
"""


@pytest.fixture
def cached(tmp_path_factory, monkeypatch):
    """One cache folder for the whole module; each spec is loaded once per dtype (the runs under test
    differ in what they do with the model, not in how it is read)."""
    monkeypatch.setenv("COSTSPEC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "eval-cache"))
    monkeypatch.delenv("COSTSPEC_NO_CACHE", raising=False)
    loaded: dict[tuple[str, str | None], costspec.model.Model] = {}
    real = costspec.model.load

    def load(path, dtype=None, phase=None, context=None, backend=None, checkpoint=None):
        if (phase, context, backend, checkpoint) != (None, None, None, None):
            return real(path, dtype, phase, context, backend, checkpoint)
        key = (str(path), dtype)
        if key not in loaded:
            loaded[key] = real(path, dtype)
        return loaded[key]

    monkeypatch.setattr(costspec.model, "load", load)
    return tmp_path_factory.getbasetemp() / "eval-cache" / "compiled"


def _run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _cases(path: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(pass, options, formats): a new batch, the defaults, a free dim doubled with a depth."""
    model = costspec.model.load(path)
    free = [d for d in model.dims.free()]
    batch = ["--batch", "3"] if any(d.name == "B" for d in free) else []
    other = next((d for d in free if d.name != "B"), None)
    doubled = ["--set", f"{other.name}={2 * int(other.default)}"] if other is not None else []
    return [("forward", batch, ("json", "table")), ("train", [], ("json",)),
            ("backward", [*doubled, "--depth", "2"], ("json", "table"))]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_cached_eval_is_byte_identical_to_no_cache(path, cached, capsys, monkeypatch):
    for pass_, options, formats in _cases(path):
        for fmt in formats:
            args = ["eval", path, "--pass", pass_, *options, "--format", fmt]
            reference = _run(capsys, *args, "--no-cache")
            first = _run(capsys, *args)  # cold for the first format of a pass: builds, checks, stores
            assert first == reference, (args, first[2])
            with monkeypatch.context() as m:  # warm: answered from the entry, no model built
                m.setattr(costspec.model, "load", lambda *a, **k: pytest.fail("a warm run built the model"))
                if reference[0] == 0:
                    assert _run(capsys, *args) == reference, args
            if reference[0]:  # an error (e.g. a constraint at the doubled dim): the same one, exit 2
                assert reference[0] == 2 and reference[2].startswith("costspec: error:")
                assert _run(capsys, *args) == reference


@pytest.mark.parametrize("args", [
    ["vit_b", "--batch", "8", "--dtype", "fp32", "--format", "csv"],
    ["vit_b", "--batch", "8", "--pass", "train", "--format", "markdown"],
    ["mixtral_8x7b", "--batch", "2", "--dtype", "fp16", "--depth", "1"],
    ["vit_b", "--set", "img=200"],  # misaligned GEMMs: the alignment flags
    ["llama_1b", "--batch", "0"],
    ["llama_1b", "--set", "nope=3"],
    ["llama_1b", "--batch", "2", "--set", "B=3"],
    ["toy_mlp", "--batch", "2"],  # toy_mlp has no B
])
def test_more_options_and_errors(args, cached, capsys):
    reference = _run(capsys, "eval", *args, "--no-cache")
    assert _run(capsys, "eval", *args) == reference
    assert _run(capsys, "eval", *args) == reference


def test_options_the_cache_does_not_cover_take_the_full_path(cached, capsys, monkeypatch):
    args = ["eval", "vit_b", "--batch", "8", "--gpu", "h100-sxm", "--depth", "1"]
    _run(capsys, "eval", "vit_b", "--batch", "8")  # a warm entry exists
    reference = _run(capsys, *args, "--no-cache")
    calls = []
    real = costspec.model.load_worded  # the commands' load (costspec.load, its errors naming the flags)
    monkeypatch.setattr(costspec.model, "load_worded", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert _run(capsys, *args) == reference and calls
    assert reference[0] == 0 and "est. time" in reference[1]


def test_checkpointing_takes_the_full_path_and_changes_train(cached, capsys, monkeypatch):
    args = ["eval", "vit_b", "--batch", "2", "--pass", "train", "--format", "json"]
    plain = _run(capsys, *args)  # stores a warm entry of the spec as written
    assert _run(capsys, *args) == plain
    reference = _run(capsys, *args, "--checkpoint", "blocks", "--no-cache")
    calls = []
    real = costspec.model.load_worded
    monkeypatch.setattr(costspec.model, "load_worded", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert _run(capsys, *args, "--checkpoint", "blocks") == reference and calls
    assert reference[0] == 0 and reference[1] != plain[1]


def test_a_damaged_entry_is_rebuilt(cached, capsys):
    args = ["eval", "pythia_160m", "--batch", "2", "--pass", "backward"]
    reference = _run(capsys, *args, "--no-cache")
    before = set(cached.iterdir()) if cached.exists() else set()
    assert _run(capsys, *args) == reference
    [entry] = set(cached.iterdir()) - before
    intact = entry.read_bytes()
    for i in range(0, len(intact), max(1, len(intact) // 25)):  # a changed byte anywhere: a miss, rebuilt
        entry.write_bytes(intact[:i] + bytes([intact[i] ^ 0x04]) + intact[i + 1:])
        assert _run(capsys, *args) == reference
        assert entry.read_bytes() == intact
    entry.write_bytes(b"")
    assert _run(capsys, *args) == reference and entry.read_bytes() == intact


def _modules(err: str) -> set[str]:
    line = next(x for x in err.splitlines() if x.startswith("MODULES "))
    return set(line.split()[1:])


# every costspec module a warm `costspec eval SPEC` imports: the command line, the cache, the compiled
# evaluation, the table it prints. A new import on this path has to be added here, on purpose.
WARM_EVAL_MODULES = {
    "costspec", "costspec.analysis", "costspec.analysis.alignment", "costspec.analysis.backend_note",
    "costspec.analysis.compiled", "costspec.analysis.program", "costspec.analysis.reporting",
    "costspec.cli", "costspec.cli.eval_cmd", "costspec.cli.eval_fast", "costspec.cli.options",
    "costspec.core", "costspec.core.cache", "costspec.core.conventions", "costspec.core.errors",
    "costspec.core.render", "costspec.core.results", "costspec.core.safeio", "costspec.core.text",
    "costspec.core.units", "costspec.core.version", "costspec.core.vocab", "costspec.core.zoo",
    "costspec.export", "costspec.export.report",
}
# the packages and modules a cold `eval` may import (it loads, checks and builds the spec symbolically)
COLD_EVAL_PACKAGES = ("costspec.core", "costspec.spec", "costspec.ops", "costspec.tree", "costspec.data")
COLD_EVAL_MODULES = WARM_EVAL_MODULES | {"costspec.model", "costspec.analysis.compiler", "costspec.analysis.evaluation"}


def _third_party(modules: set[str], baseline: set[str]) -> set[str]:
    """Top-level packages beyond the standard library, costspec and what the bare interpreter loaded (site hooks)."""
    return {m.split(".")[0] for m in modules - baseline} - set(sys.stdlib_module_names) - {"costspec", "__main__"}


def test_the_modules_eval_imports(tmp_path):
    """Warm: exactly WARM_EVAL_MODULES of costspec's and click beyond the standard library (no sympy,
    jsonschema, yaml, numpy, torch). Cold: no torch, transformers or numpy, and no module of another
    command (validate, torch, time, sweep...), analysis (sweep, roofline, ladder...) or layer (runtime, nn,
    against, importer, the exporters)."""
    env = {**os.environ, "COSTSPEC_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("COSTSPEC_NO_CACHE", None)
    bare = subprocess.run([sys.executable, "-c", "import sys; print(' '.join(sys.modules))"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)
    baseline = set(bare.stdout.split())
    command = [sys.executable, "-c", IMPORTS, "eval", "vit_b", "--batch", "8"]
    cold = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    warm = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert cold.returncode == warm.returncode == 0 and cold.stdout == warm.stdout
    cold_modules, warm_modules = _modules(cold.stderr), _modules(warm.stderr)

    assert {m for m in warm_modules if m.split(".")[0] == "costspec"} == WARM_EVAL_MODULES
    assert _third_party(warm_modules, baseline) == {"click"}
    heavy = sorted(m for m in warm_modules if m.split(".")[0] in HEAVY)
    assert not heavy, f"a warm eval imported {heavy}"

    assert not _third_party(cold_modules, baseline) & {"torch", "transformers", "numpy", "matplotlib"}
    ours = {m for m in cold_modules if m.split(".")[0] == "costspec"}
    stray = sorted(m for m in ours - COLD_EVAL_MODULES
                   if not any(m == p or m.startswith(p + ".") for p in COLD_EVAL_PACKAGES))
    assert not stray, f"a cold eval imported {stray}"
    assert {"costspec.model", "costspec.tree.network", "costspec.spec.schema"} <= ours  # it did build the model


def test_import_costspec_is_light():
    code = ("import sys, costspec; light = 'sympy' not in sys.modules; costspec.load; "
            "print(light, 'sympy' in sys.modules, costspec.Report.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split() == ["True", "True", "Report"], out.stderr


def test_concurrent_first_runs_agree(tmp_path):
    env = {**os.environ, "COSTSPEC_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("COSTSPEC_NO_CACHE", None)
    command = [sys.executable, "-m", "costspec", "eval", "toy_mlp", "--set", "M=64", "--format", "json"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(3)]
    outputs = [r.communicate(timeout=300) for r in runs]
    assert all(r.returncode == 0 for r in runs), [o[1] for o in outputs]
    assert len({o[0] for o in outputs}) == 1
    entries = list((tmp_path / "compiled").iterdir())
    assert len(entries) == 1 and entries[0].suffix == ".json"  # one whole entry, no temporaries
    warm = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert warm.stdout == outputs[0][0]
    assert json.loads(warm.stdout)["totals"]["total_flops"] > 0
