"""Every link in the docs resolves: relative links (and `#anchors` into Markdown headings, GitHub-style
slugs) in README.md, docs/**/*.md and bench/README.md, every backticked repository path they name
(`costspec/tree/walk.py`, `tests/...`: a path under one of the repository's top folders ending in .py,
.md, .yaml or .json) exists, and every backticked dotted name in the package (`costspec.tree.walk`,
`costspec.ncu.metrics.metrics_for`) imports."""
from __future__ import annotations

import importlib
import re
import unicodedata
from functools import lru_cache
from pathlib import Path

import pytest

from tests.common import ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").rglob("*.md")])
# the repository's own top folders: a backticked path under one of them must exist
REPO_DIRS = ("costspec", "tests", "docs", "specs", "schemas", "bench", "fuzz", "tools", ".ci")

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+(?:[^>]*\s)?(?:id|name)\s*=\s*["']([^"']+)["']""")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
PATH = re.compile(r"^(?:\./)?((?:%s)/[A-Za-z0-9_./-]*\.(?:py|md|yaml|json))(?:(?::|::)[\w.\[\]-]*)?$"
                  % "|".join(re.escape(d) for d in REPO_DIRS))


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lowercased, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(page: Path) -> frozenset[str]:
    """Every anchor a link may point at in `page`: its headings' slugs (repeats numbered -1, -2, ... as
    GitHub does) and explicit <a id/name> anchors."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose(page.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
        out.update(HTML_ANCHOR.findall(line))
    return frozenset(out)


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link and reference definition outside code."""
    out = []
    for number, line in prose(page.read_text(encoding="utf-8")):
        bare = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        out += [(number, target) for target in LINK.findall(bare)]
        reference = REFERENCE.match(bare)
        if reference:
            out.append((number, reference.group(1)))
    return out


def problem(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, does not resolve (None when it does)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
        return None
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    if not resolved.exists():
        return f"{path} does not exist"
    root = ROOT.resolve()
    if path and root in page.resolve().parents and root not in resolved.parents and resolved != root:
        return f"{path} is outside the repository"
    if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
        return f"{path or page.name} has no heading with the anchor #{anchor}"
    return None


def repo_paths(page: Path) -> list[tuple[int, str]]:
    """(line, path) of every backticked repository path in the prose."""
    out = []
    for number, line in prose(page.read_text(encoding="utf-8")):
        for _, span in CODE_SPAN.findall(line):
            found = PATH.match(span.strip())
            if found:
                out.append((number, found.group(1)))
    return out


DOTTED = re.compile(r"^(costspec(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(.*\))?$")


def dotted_names(page: Path) -> list[tuple[int, str]]:
    """(line, name) of every backticked dotted name in the package (a call's arguments dropped)."""
    out = []
    for number, line in prose(page.read_text(encoding="utf-8")):
        for _, span in CODE_SPAN.findall(line):
            found = DOTTED.match(span.strip())
            if found:
                out.append((number, found.group(1)))
    return out


def resolves(name: str) -> bool:
    """`name` is a module of the package, or an attribute reached from the longest importable prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    broken = [f"{page.relative_to(ROOT)}:{n}: ({t}): {why}" for n, t in links(page) if (why := problem(page, t))]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_backticked_repository_paths_exist(page):
    missing = [f"{page.relative_to(ROOT)}:{n}: `{p}` does not exist" for n, p in repo_paths(page)
               if not (ROOT / p).exists()]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_backticked_package_names_import(page):
    missing = [f"{page.relative_to(ROOT)}:{n}: `{name}` does not import" for n, name in dotted_names(page)
               if not resolves(name)]
    assert not missing, "\n".join(missing)


def test_the_checker_finds_what_is_broken(tmp_path):
    """The checks above can fail: a broken link, a missing anchor and a missing path are each reported."""
    page = tmp_path / "page.md"
    page.write_text("# A title\n## Setup `x`, step 2!\n## Setup `x`, step 2!\n[ok](#a-title) [ok](#setup-x-step-2-1)\n"
                    "[bad](#nowhere) [gone](missing.md) [web](https://example.com)\n```\n[in code](nope.md)\n```\n",
                    encoding="utf-8")
    assert anchors(page) == {"a-title", "setup-x-step-2", "setup-x-step-2-1"}
    found = {t: problem(page, t) for _, t in links(page)}
    assert [t for t, why in found.items() if why] == ["#nowhere", "missing.md"]
    assert PATH.match("costspec/tree/walk.py") and PATH.match("tests/against/models.py:deepencoder")
    assert not PATH.match("deepencoder.py") and not PATH.match("transformers/models/vit/modeling_vit.py")
    assert resolves("costspec.tree.walk") and resolves("costspec.ncu.metrics.metrics_for")
    assert not resolves("costspec.tree_walk") and not resolves("costspec.ncu.metrics.no_such_name")
    assert slug("`attention`") == "attention" and slug("Dataflow: branches, joins and named values") == \
        "dataflow-branches-joins-and-named-values"
