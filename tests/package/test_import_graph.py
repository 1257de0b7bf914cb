"""The import graph of costspec/ (and fuzz/) has no cycles: every module-level or function-level import
between the package's own modules is an edge, read from the source with `ast`."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.common import ROOT


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(package: str) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(inner) for node in ast.walk(tree)
                       if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for inner in ast.walk(node)}  # annotations only: not a runtime edge
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("package", ["costspec", "fuzz"])
def test_no_import_cycles(package):
    graph = import_graph(package)
    # a package's __init__ importing its submodules, and the submodules importing siblings through the
    # package, is the registry pattern: drop edges from a submodule to its own package __init__
    for module in graph:
        graph[module] = {t for t in graph[module] if not module.startswith(t + ".")}
    assert cycles(graph) == []


def test_nothing_below_the_facade_imports_it():
    """`costspec.model` is the facade: only the package's public __init__, the CLI and the profiled program
    (`python -m costspec.ncu.runner`, a command of its own) load specs through it."""
    graph = import_graph("costspec")
    below = [m for m in graph if "costspec.model" in graph[m]
             and m not in ("costspec", "costspec.model", "costspec.ncu.runner") and not m.startswith("costspec.cli")]
    assert below == []
