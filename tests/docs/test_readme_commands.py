"""Every command the README shows runs after the README's first command, `pip install .`: run here with
every module that only an extra provides (torch, matplotlib, transformers, ...) made unimportable, as in
a bare install; `.ci/run` also runs them in a fresh virtual environment (tools/readme_commands.py)."""
from __future__ import annotations

import importlib.util
import os
import re
import sys

import tomllib

from tests.common import ROOT

_spec = importlib.util.spec_from_file_location("costspec_tools_readme", ROOT / "tools" / "readme_commands.py")
assert _spec and _spec.loader
readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme)

IMPORT_NAME = {"antlr4-python3-runtime": "antlr4", "pytest-xdist": "xdist", "types-PyYAML": None, "pyyaml": "yaml"}
BLOCKER = """import importlib.abc, sys
class _Bare(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in a bare install)", name=name)
sys.meta_path.insert(0, _Bare())
"""


def _module(requirement: str) -> str | None:
    dist = re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0]
    return IMPORT_NAME.get(dist, dist.lower().replace("-", "_"))


def extras_only() -> set[str]:
    """The top-level modules an extra installs and the core dependencies do not."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_module(r) for r in project["dependencies"]}
    extra = {_module(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    return {m for m in extra - core if m and m != "costspec"}


def test_the_commands_are_found():
    found = readme.commands((ROOT / "README.md").read_text())
    assert found[0] == "costspec eval specs/vit_b.yaml --batch 8"  # the first line, after its `pip install .`
    assert any(c.startswith("costspec report ") for c in found) and any(c.startswith("costspec sweep ") for c in found)
    assert not any("pip install" in c or "pytest" in c or "SPEC" in c for c in found)
    assert readme.commands("```bash\npip install '.[plot]' && costspec roofline x -o r.png\n```\n`costspec eval`") \
        == ["costspec eval"]


def test_every_readme_command_runs_with_the_core_dependencies_only(tmp_path):
    assert {"torch", "matplotlib", "transformers"} <= extras_only() and "numpy" not in extras_only()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(extras_only())))
    work = tmp_path / "work"
    work.mkdir()
    (work / "specs").symlink_to(ROOT / "specs")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    blocked = readme.run("python -c 'import matplotlib'", work, env)
    assert blocked.returncode == 1 and "not in a bare install" in blocked.stderr  # the blocker works
    for command in readme.commands((ROOT / "README.md").read_text()):
        result = readme.run(command, work, env)
        assert result.returncode == 0, (command, result.stderr[-1500:])
        assert result.stdout or "wrote" in result.stderr, command
    assert (work / "vit_b.html").stat().st_size > 10_000
