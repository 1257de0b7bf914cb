"""Work bounds of the torch side: how many modules `torch` / `validate` would build, and how much
memory a cpu run of `validate` may need, checked before torch is imported (limits in costspec.core.budget)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy

from costspec.analysis.roofline import total_bytes
from costspec.core.budget import MAX_TORCH_MODULES, TORCH_INT_LIMIT, check_torch_modules
from costspec.core.errors import UsageError
from costspec.core.vocab import Fusion
from costspec.tree.nodes import OpNode
from costspec.tree.walk import NO_GRAD, walk


def torch_modules(model: Any, values: Mapping[sympy.Symbol, sympy.Integer]) -> int:
    """Op modules the torch build creates at `values` (every op layer times its repeat instances)."""
    total = 0
    for node, _, mult, _ in walk(model.root):
        if isinstance(node, OpNode):
            total += int(sympy.sympify(mult).xreplace(values))
            if total > MAX_TORCH_MODULES:
                break
    return total


CPU_BYTES_PER_ELEMENT = 4  # validate runs the module in fp32 on cpu


def validate_memory(model: Any, values: Mapping[sympy.Symbol, sympy.Integer], pass_: str) -> int:
    """Bytes a cpu run of `validate` may hold: the spec's roofline traffic for `pass_` (every tensor each
    layer reads and writes, weights included) rescaled to fp32; an upper bound on what autograd keeps."""
    traffic = total_bytes(model.root, pass_, sympy.Integer(1), NO_GRAD, Fusion.DEFAULT)
    size = sympy.sympify(model.precision.bytes_per_element)  # a Rational for the 4-bit formats
    return int(sympy.sympify(traffic).xreplace(values) * CPU_BYTES_PER_ELEMENT / size)


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo (bytes), or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_validate_memory(model: Any, values: Mapping[sympy.Symbol, sympy.Integer], pass_: str,
                          available: int | None = None) -> None:
    need = validate_memory(model, values, pass_)
    have = available if available is not None else available_memory()
    if have is not None and need > have:
        raise UsageError(f"validate --device cpu would need about {need / 2**30:,.1f} GiB here (the spec's memory "
                         f"traffic for {pass_} in fp32), more than the {have / 2**30:,.1f} GiB available; use "
                         "--device meta (counts shapes without allocating), smaller dims (--batch, --set), or --force")


def check_torch_build(model: Any, values: Mapping[sympy.Symbol, sympy.Integer]) -> None:
    """What `torch` / `validate` check before importing torch: the module count, and every integer
    attribute (sizes, padding, stride...) within torch's 64-bit integers."""
    check_torch_modules(torch_modules(model, values))
    for node in model.op_nodes():
        if not isinstance(node, OpNode):
            continue
        for attr, raw in getattr(node.call.attrs, "_values", {}).items():
            for item in raw if isinstance(raw, (tuple, list)) else (raw,):
                if not isinstance(item, sympy.Basic):
                    continue
                try:
                    value = item.xreplace(values)
                except (ZeroDivisionError, TypeError):
                    continue  # reported by the shape checks
                if value.is_Integer and abs(int(value)) >= TORCH_INT_LIMIT:
                    raise UsageError(f"{node.op.name} '{node.name}': {attr} = {value} is beyond torch's 64-bit "
                                     "integers; use `costspec eval` for exact numbers at this size")
