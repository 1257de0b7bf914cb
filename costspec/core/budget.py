"""Work budgets: cheap up-front measures that refuse specs whose symbolic or torch work would run for
minutes (or exhaust memory) from a few hundred bytes of YAML, with a clear error instead.

Each limit is far above what real models need (the zoo's largest: 32 op layers, 4 derived dims,
formulas of a few dozen terms) and is documented in docs/spec-language.md ("Limits").
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import sympy

from costspec.core.errors import Location, SpecError, UsageError

MAX_OP_INSTANCES = 8_192  # op layers after expanding blocks (each use of a block builds its layers again)
MAX_DIMS = 256  # dims in all (checked before any expression is parsed)
MAX_DERIVED_DIMS = 64  # derived dims (each is a symbol that every size is rewritten in)
MAX_DIM_DEGREE = 16  # degree of a derived dim written out in free dims (X = Y**2 with Y = Z**8: 16)
MAX_FORMULA_TERMS = 256  # terms a closed form may have once multiplied out (bounded before expanding)
MAX_FORMULA_ROWS = 1_000  # rows of `formula` / `latex --per-layer` (each row is a closed form)
MAX_TORCH_MODULES = 20_000  # op modules `torch` / `validate` build (repeats unrolled); modules of a real model
MAX_REAL_LAYERS = 512  # layers a config asks `validate --against hf:` to build (the largest real models: ~130)


def count_op_instances(data: Mapping[str, Any]) -> int:
    """Op layers the tree of `data` will have (repeats once per variant group, blocks once per use),
    counted on the document without building anything; malformed parts count 0 (the builder reports them)."""
    raw_blocks = data.get("blocks")
    blocks: dict[str, Any] = raw_blocks if isinstance(raw_blocks, dict) else {}
    memo: dict[str, int] = {}

    def block(name: Any, stack: tuple) -> int:
        if not isinstance(name, str) or name not in blocks or name in stack:
            return 0
        if name not in memo:
            spec = blocks[name]
            layers = spec.get("layers") if isinstance(spec, dict) else spec
            memo[name] = sequence(layers, stack + (name,))
        return memo[name]

    def sequence(layers: Any, stack: tuple) -> int:
        total = 0
        for layer in layers if isinstance(layers, list) else []:
            total += one(layer, stack)
            if total > MAX_OP_INSTANCES:
                return total
        return total

    def one(layer: Any, stack: tuple) -> int:
        if not isinstance(layer, dict):
            return 0
        if "residual" in layer:
            return sequence(layer["residual"], stack) + 1  # the add
        if "sequence" in layer:
            return sequence(layer["sequence"], stack)
        if "block" in layer:
            return block(layer["block"], stack)
        if "repeat" in layer:
            body = layer.get("body")
            once = block(body, stack) if isinstance(body, str) else sequence(body, stack)
            variants = layer.get("at")
            return once * (len(variants) + 1 if isinstance(variants, list) else 1)
        return 1

    return sequence(data.get("layers"), ())


def check_op_instances(data: Mapping[str, Any], where: Location) -> None:
    count = count_op_instances(data)
    if count > MAX_OP_INSTANCES:
        raise SpecError(f"this spec expands to more than {MAX_OP_INSTANCES:,} op layers (blocks used inside "
                        f"blocks are built once per use)", where,
                        "repeated layers written as `repeat:` (built once, whatever the count)")


def check_dim_count(count: int, where: Location) -> None:
    if count > MAX_DIMS:
        raise SpecError(f"this spec defines {count:,} dims; the limit is {MAX_DIMS}", where, f"at most {MAX_DIMS} dims")


def check_derived_dims(count: int, where: Location) -> None:
    if count > MAX_DERIVED_DIMS:
        raise SpecError(f"this spec defines {count:,} derived dims; the limit is {MAX_DERIVED_DIMS}", where,
                        f"at most {MAX_DERIVED_DIMS} dims defined by expressions")


def check_dim_degree(name: str, expanded: sympy.Expr, where: Location) -> None:
    from costspec.core.expr import degree

    found = degree(expanded)
    if found > MAX_DIM_DEGREE:
        raise SpecError(f"dim {name} is a polynomial of degree {found} in the free dims once its derived dims are "
                        "written out", where, f"degree at most {MAX_DIM_DEGREE}")


def term_bound(expr: Any) -> int:
    """An upper bound on the terms sympy's expand produces for `expr` before collecting them (the work):
    a sum adds its parts' terms, a product multiplies them, a power n of t terms has C(t + n - 1, n)."""
    cache: dict[Any, int] = {}

    def terms(e: Any) -> int:
        if e in cache:
            return cache[e]
        if not isinstance(e, sympy.Basic) or not e.free_symbols:
            n = 1
        elif e.is_Add:
            n = sum(terms(a) for a in e.args)
        elif e.is_Mul:
            n = 1
            for a in e.args:
                n = min(n * terms(a), 10**12)
        elif e.is_Pow and e.exp.is_Integer and e.exp > 0:
            t, k = terms(e.base), int(e.exp)
            n = math.comb(t + k - 1, k) if t < 10**6 else 10**12
        else:  # floor, min, max, a negative power: one atom of the polynomial
            n = 1
        cache[e] = min(n, 10**12)
        return cache[e]

    return terms(expr)
def check_formula_terms(expr: sympy.Expr, what: Callable[[], str]) -> None:
    bound = term_bound(expr)
    if bound > MAX_FORMULA_TERMS:
        raise UsageError(f"this spec needs more than {MAX_FORMULA_TERMS:,} terms for {what()} (up to {bound:,} "
                         f"once multiplied out); keep fewer dims symbolic (--keep, --set) or drop --expand")


def check_formula_rows(rows: int) -> None:
    if rows > MAX_FORMULA_ROWS:
        raise UsageError(f"this spec needs {rows:,} per-layer formulas; the limit is {MAX_FORMULA_ROWS:,}; "
                         "use `costspec eval` for per-layer numbers, or drop --per-layer")


def check_torch_modules(count: int) -> None:
    if count > MAX_TORCH_MODULES:
        raise UsageError(f"this spec needs {count:,} op modules in torch (repeats unrolled); the limit is "
                         f"{MAX_TORCH_MODULES:,}; use `costspec eval` for the costs, or validate at a smaller "
                         "repeat count (--set)")


TORCH_INT_LIMIT = 2**62  # torch takes sizes, paddings and strides as 64-bit integers
