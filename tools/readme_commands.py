"""Every command the README shows, as a new user runs it after the README's first command (`pip install .`).

    python tools/readme_commands.py            # list them
    python tools/readme_commands.py --run      # run each with the `costspec` on PATH; exit 1 on a failure

The commands are the lines of the README's ```bash blocks and its inline `costspec ...` examples that
name no placeholder (SPEC, NAME, [options], a|b). An install (`pip install ...`) is not run: a line's
commands after a bare `pip install .` are; a line that installs extras (the test suite's) is skipped
whole, its commands need what it installs. They run in an empty directory holding only a link to
specs/ (the README's paths), so what they write lands there. `.ci/run` runs them in a fresh virtual
environment with the package installed bare; tests/docs/test_readme_commands.py runs them with every module
of an extra made unimportable.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
_INLINE = re.compile(r"`(costspec [^`]+)`")
_PLACEHOLDER = re.compile(r"\b[A-Z]{2,}\b|[\[\]|]|\.\.\.")


def commands(readme: str) -> list[str]:
    """The README's runnable commands, in order, each once."""
    out: list[str] = []
    for block in _BLOCK.findall(readme):
        for line in block.splitlines():
            parts = [p.strip() for p in line.split("&&") if p.strip()]
            installs = [p for p in parts if p.startswith("pip install")]
            if any(p.split()[2:] != ["."] for p in installs):
                continue  # installs extras: its commands need them
            out += [p for p in parts if p not in installs]
    for line in _INLINE.findall(readme):
        if not _PLACEHOLDER.search(line.replace("--", "")):
            out.append(line)
    return list(dict.fromkeys(out))


def run(command: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def main(argv: list[str]) -> int:
    found = commands((ROOT / "README.md").read_text(encoding="utf-8"))
    if "--run" not in argv:
        print("\n".join(found))
        return 0
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "specs").symlink_to(ROOT / "specs")
        for command in found:
            result = run(command, Path(tmp))
            print(f"{'ok' if result.returncode == 0 else 'FAILED'} (exit {result.returncode}): {command}")
            if result.returncode:
                failed += 1
                print(result.stderr[-2000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
