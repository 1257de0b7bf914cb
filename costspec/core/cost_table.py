"""The CUDA-core cost table: FLOPs per element for each pointwise / reduction kind (data, not code)."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Mapping

import sympy
import yaml

from costspec.core.errors import Location, SpecError


@lru_cache(maxsize=1)
def default_table() -> dict[str, dict]:
    """kind -> {"flops": number, "reason": str}, from the packaged cost_table.yaml."""
    text = resources.files("costspec.data").joinpath("cost_table.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["kinds"]


def flops_per_element(overrides: Mapping[str, object] | None = None,
                      where: Location | None = None) -> dict[str, sympy.Rational]:
    """The table as exact numbers, with a spec's `costs:` overrides applied."""
    table = {kind: sympy.Rational(str(entry["flops"])) for kind, entry in default_table().items()}
    for kind, value in (overrides or {}).items():
        if kind not in table:
            raise SpecError(f"unknown cost kind '{kind}'", where.child(kind) if where else None,
                            "one of " + ", ".join(sorted(table)))
        table[kind] = sympy.Rational(str(value))
    return table
