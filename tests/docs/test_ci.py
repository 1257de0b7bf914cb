"""CI runs what the README tells a contributor to run: .ci/run ends with the README's test command, verbatim,
after the static checks, installs what the otherwise skipped tests need, and stops at the first failure."""
from __future__ import annotations

import re
import shlex

from tests.common import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def readme_test_command() -> str:
    """The one command line of the README's fenced bash blocks that installs and runs pytest."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    commands = [line.strip() for block in blocks for line in block.splitlines()
                if "python -m pytest" in line and line.strip().startswith("pip install")]
    assert len(commands) == 1, f"expected one install-and-test command in README.md's bash blocks, got {commands}"
    return commands[0]


def ci_commands() -> list[str]:
    """.ci/run's command lines (comments and blank lines dropped)."""
    return [line.strip() for line in CI.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_the_readme_test_command_verbatim_last():
    assert ci_commands()[-1] == readme_test_command()


def test_the_readme_command_runs_the_whole_suite_in_parallel():
    words = shlex.split(readme_test_command().split("&&", 1)[1])
    assert words[:3] == ["python", "-m", "pytest"] and "-n" in words
    assert "-m" not in words[3:] and "-k" not in words and not any(w.startswith("tests/") for w in words)
    install = shlex.split(readme_test_command().split("&&", 1)[0])
    extras = re.search(r"\[(.*)\]", install[-1]).group(1).split(",")
    assert {"test", "plot", "lint"} <= set(extras)


def test_ci_fails_on_the_first_failure_and_runs_the_static_checks_first():
    commands = ci_commands()
    assert "set -euo pipefail" in commands
    last = len(commands) - 1
    for check in ("python -m ruff check costspec tests fuzz tools bench", "python -m mypy", "lint-imports"):
        assert check in commands and commands.index(check) < last, check


def test_ci_installs_what_the_skipping_tests_need():
    assert "chromium" in CI and "texlive-latex-base" in CI  # the browser and pdflatex tests
    assert re.search(r"apt-get install -y\b.*--no-install-recommends", CI)
