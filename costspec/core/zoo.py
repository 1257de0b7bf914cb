"""The spec zoo shipped with the package: `costspec eval vit_b` finds specs/vit_b.yaml by name.

The files live in the repository's top-level `specs/` (what the README links to); the package sees
them as `costspec/data/zoo` (a symlink in the checkout, real files in an installed wheel).
A path that exists always wins over a zoo name, so a local `vit_b.yaml` is never shadowed.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from costspec.core.errors import InputError


@dataclass(frozen=True)
class ZooSpec:
    key: str  # what you type: the file name without .yaml
    name: str  # the spec's `name:`
    doc: str
    path: Path


def zoo_dir() -> Path:
    return Path(str(resources.files("costspec") / "data" / "zoo"))


def resolve(spec: str | Path) -> str | Path:
    """`spec` itself when it names an existing file (or looks like a path); else the zoo file of that name."""
    text = str(spec)
    if Path(text).exists() or "/" in text or "\\" in text:
        return spec
    key = text[:-5] if text.endswith(".yaml") else text
    candidate = zoo_dir() / f"{key}.yaml"
    if key and candidate.is_file():
        return candidate
    keys = [p.stem for p in zoo_dir().glob("*.yaml")]
    close = difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
    if close:
        raise InputError(f"cannot read spec {text}: no such file, and no zoo spec of that name; did you mean "
                         + " or ".join(close) + "? (`costspec zoo` lists them)")
    return spec


def zoo_specs() -> list[ZooSpec]:
    """Every zoo spec, by key, with its name and doc line (read without building the model)."""
    import yaml

    out = []
    for path in sorted(zoo_dir().glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        out.append(ZooSpec(path.stem, str(data.get("name", path.stem)), str(data.get("doc", "")), path))
    return out
