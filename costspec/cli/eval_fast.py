"""`costspec eval` from the compiled-spec cache (`costspec.core.cache`), without sympy or jsonschema.

`cached_result` answers a plain eval (any --batch / --set / --pass / --dtype / --depth / --format, and
--alignment warn) from a cache entry; `remember` stores the entry after a full run has built the
model, once the compiled numbers have been checked equal to the symbolic ones at that run's dims.
Options the cache does not cover (--gpu, --ladder, --lengths / --lengths-file, --calibration,
--alignment strict) always take the full path. Whatever the entry cannot answer exactly (a bad dim, a
violated constraint, a corrupt or stale entry) also takes the full path, which gives the error.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from costspec.core import cache

if TYPE_CHECKING:
    from costspec.analysis.reporting import Report
    from costspec.cli.options import Bindings, PassPrecision
    from costspec.core.results import Result
    from costspec.model import Model

ALIGNMENT_SECTION = "Tensor-Core alignment (misaligned GEMM leading dims)"


def entry_key(spec: str, run: PassPrecision) -> str | None:
    """The cache key of `spec` (a path or a zoo name) for this pass and dtype; None when the cache is off
    or the spec cannot be read (the full path then says why)."""
    from costspec.core.errors import CostspecError
    from costspec.core.safeio import SPEC, read_bytes
    from costspec.core.zoo import resolve

    if cache.directory() is None:
        return None
    try:
        path = resolve(spec)
        data = read_bytes(path, SPEC)
    except (CostspecError, OSError):
        return None
    return cache.key(path, data, run.dtype or "", run.pass_)


def cached_result(key: str, dims: Bindings, run: PassPrecision, depth: int | None) -> Result | None:
    """The eval result from cache entry `key`, or None (no entry, or one that cannot answer these dims)."""
    from costspec.analysis.compiled import CompiledFormatError, CompiledModel

    data = cache.read(key)
    if data is None:
        return None
    try:
        compiled = CompiledModel(data)
    except CompiledFormatError:
        return None
    values = compiled.bind(dims.batch, dims.sets)
    report = compiled.report(run.pass_, values) if values is not None else None
    sizes = compiled.gemm_sizes(values) if values is not None else None
    if report is None or sizes is None:
        return None
    from costspec.analysis.alignment import flags
    from costspec.analysis.backend_note import flash_note

    if note := flash_note(run.pass_, compiled.flash):
        report.notes.append(note)
    found = flags((g.layer, g.kind, g.dim, size, g.dtype, g.need, g.best) for g, size in sizes)
    return shown(report, [f.text() for f in found], depth)


def shown(report: Report, aligned: list[str], depth: int | None, roof=None) -> Result:
    """The eval result of `report`: rows down to `depth`, the roofline's columns, the alignment flags."""
    from costspec.export.report import eval_result

    result = eval_result(report, depth, roof)
    if aligned:
        result.sections[ALIGNMENT_SECTION] = aligned
        result.meta["tensor_core_alignment"] = aligned
    return result


def remember(key: str, model: Model, dims: Bindings, run: PassPrecision) -> bool:
    """Store `model` compiled for this pass as entry `key`, if its numbers at these dims (rows, totals, notes,
    alignment flags) equal the symbolic path's; True when stored."""
    from costspec.analysis.alignment import check, flags
    from costspec.analysis.evaluation import build_report
    from costspec.core.errors import CostspecError

    compiled = model.compiled(run.pass_)
    if compiled is None:
        return False
    try:
        values = dims.bind(model)
        reference = build_report(model, run.pass_, values)
        expected_flags = check(model, values)
    except CostspecError:
        return False  # the full path reports it
    bound = compiled.bind(dims.batch, dims.sets)
    fast = compiled.report(run.pass_, bound) if bound is not None else None
    sizes = compiled.gemm_sizes(bound) if bound is not None else None
    same = (fast is not None and sizes is not None and _same(reference, fast)
            and flags((g.layer, g.kind, g.dim, s, g.dtype, g.need, g.best) for g, s in sizes) == expected_flags)
    if not same:
        if os.environ.get("COSTSPEC_DEBUG"):
            raise AssertionError(f"the compiled form of {model.name} differs from the symbolic evaluation")
        return False
    return cache.write(key, compiled.to_json())


def _same(a: Report, b: Report) -> bool:
    """Two reports with the same rows (names, labels, depths, values), total, columns, notes and header."""
    def rows(r: Report) -> list:
        return [(row.name, row.label, row.depth, row.values) for row in r.table.all_rows()]

    return (rows(a) == rows(b) and [c.key for c in a.table.columns] == [c.key for c in b.table.columns]
            and a.notes == b.notes and (a.spec_name, a.pass_, a.precision, a.dims)
            == (b.spec_name, b.pass_, b.precision, b.dims))


__all__ = ["cached_result", "entry_key", "remember", "shown"]
