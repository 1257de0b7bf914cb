"""The CUDA-core cost table: FLOPs per element for each pointwise / reduction kind (data, not code),
with a spec's `costs:` applied: overrides of its kinds, and new kinds in pairs (`my_act`,
`my_act_backward`) that declare an activation the table lacks (`fn: my_act`)."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Callable, Mapping

import sympy
import yaml

from costspec.core.errors import Location, SpecError

BACKWARD = "_backward"


@lru_cache(maxsize=1)
def default_table() -> dict[str, dict]:
    """kind -> {"flops": number, "reason": str}, from the packaged cost_table.yaml."""
    text = resources.files("costspec.data").joinpath("cost_table.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["kinds"]


def flops_per_element(overrides: Mapping[str, object] | None = None,
                      locate: Callable[[str], Location] | None = None) -> dict[str, sympy.Rational]:
    """The table as exact numbers, with a spec's `costs:` overrides applied (`locate`: where a kind is
    written). A kind the table lacks declares an activation, and needs its pair: `k` with `k_backward`."""
    base = default_table()
    table = {kind: sympy.Rational(str(entry["flops"])) for kind, entry in base.items()}
    given = dict(overrides or {})
    for kind, value in given.items():
        if kind not in base:
            forward = kind[:-len(BACKWARD)] if kind.endswith(BACKWARD) else kind
            pair = forward if forward != kind else kind + BACKWARD
            if forward in base or pair not in given:
                raise SpecError(f"unknown cost kind '{kind}'", locate(kind) if locate else None,
                                "one of " + ", ".join(sorted(base)) + f"; or a new activation declared with its "
                                f"backward, both: {forward} and {forward}{BACKWARD}")
        table[kind] = sympy.Rational(str(value))
    return table


def declared_activations(table: Mapping[str, object]) -> set[str]:
    """The activations a spec's `costs:` declares: new kinds of `table` (not their _backward)."""
    base = default_table()
    return {kind for kind in table if kind not in base and not kind.endswith(BACKWARD)}
