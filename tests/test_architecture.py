"""The house rules of docs/architecture.md, checked on the package as it is.

The layer order itself is import-linter's job (`lint-imports`, contracts in pyproject.toml); these
tests check what a contract cannot say: every package is in a layer, the package root stays small,
modules stay small, no module reaches into another's private names, and no import cycle exists
anywhere (TYPE_CHECKING imports included).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp
import pytest
import tomllib

from tests.package.test_import_graph import cycles

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "costspec"
MAX_LINES = 600
MAX_ROOT_MODULES = 4  # besides __init__ and __main__


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_package_and_root_module_is_in_a_layer():
    layers = next(c for c in _contracts() if c["type"] == "layers" and c.get("containers") is None)["layers"]
    named = {part.strip() for layer in layers for part in layer.split("|")}
    packages = {f"costspec.{p.name}" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {f"costspec.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert packages | modules <= named, f"not in the layers contract: {sorted((packages | modules) - named)}"


def test_the_package_root_holds_at_most_four_modules():
    modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(modules) <= MAX_ROOT_MODULES, modules


def test_no_module_is_longer_than_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long


def _python_files():
    for folder in ("costspec", "tests", "fuzz", "tools", "bench"):
        yield from (ROOT / folder).rglob("*.py")


def test_no_module_imports_another_modules_private_names():
    found = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("costspec"):
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}"
                          for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
            if isinstance(node, ast.ImportFrom) and node.module and any(
                    part.startswith("_") and not part.startswith("__") for part in node.module.split(".")):
                if node.module.startswith("costspec"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}")
    assert not found, "\n".join(found)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (the Tarjan of tests/package/test_import_graph.py
    on grimp's graph)."""
    return cycles({m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules})


def test_no_import_cycle_type_checking_imports_included():
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph("costspec", exclude_type_checking_imports=False, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    assert not _cycles(graph), _cycles(graph)


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph) == [["a.x", "a.y"]]


@pytest.mark.parametrize("contract", [c["name"] for c in _contracts()])
def test_contracts_are_named_in_the_architecture_page(contract):
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert contract in page or contract.split(":")[0] in page
