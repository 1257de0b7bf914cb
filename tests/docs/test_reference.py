"""The reference docs cannot drift from the code: docs/ops.md is exactly what tools/gen_docs.py
generates from the registry, and every op, CLI command and option, spec key and reconciliation
rule appears in the docs."""
from __future__ import annotations

import importlib.util
import re

import click
import pytest

from costspec.ops import OPS
from costspec.spec.schema import COMPOSITION_KEYS, build_schema
from tests.common import ROOT

DOCS = ROOT / "docs"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_ops_md_is_what_the_generator_writes():
    assert _read("ops.md") == _gen_docs().ops_markdown(), (
        "docs/ops.md is stale: run `python tools/gen_docs.py` (a new op, attribute, docstring or cost-table entry)")


def test_readme_op_list_is_what_the_generator_writes():
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert _gen_docs().readme_with_ops(readme) == readme, (
        "README.md's op list is stale: run `python tools/gen_docs.py` (it is generated from the op registry)")
    for name in OPS:
        assert (f"`{name}`" in readme) == OPS[name].in_spec


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_registered_op_is_documented(op):
    assert f"## `{op}`" in _read("ops.md")
    if OPS[op].in_spec:
        assert f"[`{op}`](#{op})" in _read("ops.md"), "missing from the index table"


def _commands():
    import costspec.cli as cli

    cli.register_all()
    for name, command in sorted(cli.cli.commands.items()):
        if isinstance(command, click.Group):
            for sub, subcommand in sorted(command.commands.items()):
                yield f"{name} {sub}", subcommand
        else:
            yield name, command


@pytest.mark.parametrize("name, command", list(_commands()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_command_and_option_is_in_cli_md(name, command):
    text = _read("cli.md")
    assert f"costspec {name}\n" in text, f"no section for `costspec {name}`: run `python tools/gen_docs.py --cli`"
    for param in command.params:
        if isinstance(param, click.Option):
            assert any(f"`{opt}`" in text for opt in param.opts), f"{name}: option {param.opts} not documented"


def test_every_spec_key_is_in_spec_language_md():
    text = _read("spec-language.md")
    schema = build_schema()
    keys = set(schema["properties"]) | set(COMPOSITION_KEYS) | {"name", "precision", "body", "args", "at", "indices",
                                                                  "params", "value", "doc", "keep", "dtype"}
    spans = " ".join(re.findall(r"`[^`]+`", text))
    for key in sorted(keys):
        assert re.search(rf"\b{key}\b", spans), f"spec key {key!r} is not documented (in code)"


def test_every_reconciliation_rule_is_in_validation_md():
    rules = set()
    for path in (ROOT / "costspec" / "ops").glob("*.py"):
        rules |= set(re.findall(r'Reconcile\(\s*"([a-z0-9-]+)"', path.read_text(encoding="utf-8")))
    assert rules, "no Reconcile(...) rules found: has the pattern changed?"
    text = _read("validation.md")
    missing = sorted(r for r in rules if f"`{r}`" not in text)
    assert not missing, f"reconciliation rules not described in docs/validation.md: {missing}"
