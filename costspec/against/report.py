"""`validate --against` as a `costspec.core.results.Result` (printed by `costspec.core.render`)."""
from __future__ import annotations

from costspec.against.check import AgainstResult, what_ran
from costspec.against.compare import GRADIENT_REDUCTION, REDUCTION_KINDS
from costspec.against.mapping import compact
from costspec.against.verdict import verdict
from costspec.core.results import Column, Result, Row, Table

# sections printed even when empty ("none" says it was looked at): the rest only when they hold a line
ALWAYS = ("rules applied", "unmatched spec rows", "unmatched real modules", "unknown aten ops", "problems")

COLUMNS = [
    Column("real_module", "real module", "text"),
    Column("spec_matmul", "spec matmul", "count"),
    Column("real_matmul", "real matmul", "count"),
    Column("real_reconciled", "reconciled", "count"),
    Column("spec_params", "spec params", "count"),
    Column("real_params", "real params", "count"),
    Column("pointwise", "pointwise", "text"),
    Column("status", "result", "text"),
]


def _pointwise_cell(row) -> str | None:
    if not row.matched:
        return None
    if row.negative():
        return "error"
    return "same" if row.spec_pointwise == row.real_pointwise else "differs"


def _kinds(pointwise: dict[str, int]) -> str:
    return ", ".join(f"{k} {pointwise.get(k, 0):,}" for k in REDUCTION_KINDS)


def _ignored_line(e, phases: list[str]) -> str:
    what = (" " + ",".join(e.kinds) if e.kinds else "") + (f" in {e.phase}" if e.phase else "")
    ran = "; ".join(f"{phase}: matmul {e.matmul.get(phase, 0):,}" + "".join(
        f", {k} {v:,}" for k, v in sorted(e.pointwise.get(phase, {}).items())) for phase in phases
        if e.phase in (None, phase)) or "not in this pass"
    params = "" if e.kinds else f"{e.params:,} params; "
    return f"{e.pattern}{what} ({compact(e.paths)}): {params}{ran} -- {e.reason}"


def to_result(result: AgainstResult) -> Result:
    dims = " ".join(f"{k}={v}" for k, v in result.dims.items())
    header = (f"{result.spec} | validate {result.pass_} --against {result.target} on {result.device} | {dims} | "
              f"rtol {result.rtol:g}")
    tables = []
    matches = result.rowmap.matches
    for phase, ph in result.phases.items():
        rows = []
        for r in ph.rows:
            negative = r.negative()
            values = {"real_module": compact(matches[r.name].paths) if r.name in matches else None,
                      "spec_matmul": r.spec_matmul, "real_matmul": r.real_matmul,
                      "real_reconciled": None if "matmul" in negative else r.real_reconciled,
                      "spec_params": r.spec_params,
                      "real_params": r.real_params, "pointwise": _pointwise_cell(r), "status": r.status,
                      "spec_pointwise": r.spec_pointwise,
                      "real_pointwise": None if negative else r.real_pointwise}
            rows.append(Row(r.name, r.label, r.depth, values))
        total = rows.pop()
        total.name, total.label = "", "total"
        tables.append(Table(list(COLUMNS), rows, total, phase))
    sections: dict[str, list[str]] = {
        "real model": result.described,
        "checked": [
            "the spec against the real model (not against the module costspec generates from the spec)",
            "matmul = matmul-class FLOPs (GEMM, conv, SDPA) under FlopCounterMode; pointwise = CUDA-core kinds and "
            "element counts of the aten ops executed; params = unique tensors (tied weights once), buffers apart",
            "reconciled = real minus the deltas of the rules applied (the spec ops' reconciliation rules and its "
            "ignore: extra entries: real = spec + delta)",
            "rules the real model does not show: left out where a row agrees without them; "
            f"{GRADIENT_REDUCTION[0]}: {GRADIENT_REDUCTION[1]}",
            "scope-boundary: work the real model runs in another layer's modules, where the enclosing row agrees",
            "unmatched rows and modules: compared inside the enclosing matched row (ultimately the total); "
            "constants: ops whose inputs come from no model input or parameter (index grids, rotary tables), "
            "run outside the counters",
        ],
    }
    sections["rules applied"] = [
        f"[{a.rule}] {a.row} ({a.phase}): " + ", ".join(
            ([f"matmul {a.matmul:+,}"] if a.matmul else []) + [f"{k} {v:+,}" for k, v in a.pointwise.items()])
        + f" -- {a.text}" for a in result.reconciliations]
    sections["rules the real model does not show"] = [
        f"{phase}: {row or 'total'}: [{rule}]" for phase, ph in result.phases.items() for row, rule in ph.unseen]
    sections[GRADIENT_REDUCTION[0]] = [
        f"{phase}: {r.name or 'total'}: spec " + _kinds(r.spec_pointwise) + "; real " + _kinds(r.real_pointwise or {})
        for phase, ph in result.phases.items() for r in ph.rows if r.merged]
    sections["scope-boundary"] = [
        f"{phase}: {row}: {what_ran(kind, a, b)}; agrees at {at}"
        for phase, ph in result.phases.items() for row, kind, a, b, at in ph.moved]
    sections["ignored by the spec"] = [_ignored_line(e, list(result.phases)) for e in result.ignored
                                                 if e.extra is None]
    sections["unmatched spec rows"] = result.rowmap.unmatched_rows
    sections["unmatched real modules"] = \
        result.rowmap.unmatched_real
    buffers = sum(result.buffers.values())
    sections["buffers"] = (
        [f"{buffers:,} elements: " + ", ".join(f"{k} {v:,}" for k, v in list(result.buffers.items())[:8])
         + (f", and {len(result.buffers) - 8} more" if len(result.buffers) > 8 else "")] if result.buffers else [])
    sections["constants"] = \
        ([", ".join(f"{op} x{n} ({e:,} elements)" for op, (n, e) in sorted(result.constants.items()))]
         if result.constants else [])
    reasons: dict[str, list[str]] = {}
    for op, n, why in result.ignored_ops:
        reasons.setdefault(why, []).append(f"{op} x{n}")
    sections["aten ops ignored"] = [f"{', '.join(ops)} ({why})" for why, ops in reasons.items()]
    sections["unknown aten ops"] = [f"{op} in {row} ({phase}, {n:,} elements)" for phase, row, op, n in result.unknown]
    sections["attribution notes"] = \
        result.attribution[:4] + ([f"and {len(result.attribution) - 4} more"] if len(result.attribution) > 4 else [])
    sections["problems"] = result.problems
    if result.saved is not None:
        tables.append(result.saved.table())
        by_rule: dict[str, list] = {}
        for u in result.saved.rules:
            by_rule.setdefault(u.rule, []).append(u)
        sections["saved for backward"] = result.saved.described + [
            f"[{rule}] " + ", ".join(f"{u.row or '(model)'} {u.bytes:+,}" + ("" if u.used else " (not seen in the real "
                                                                               "model)") for u in uses)
            + f" bytes -- {uses[0].text}" for rule, uses in by_rule.items()]
    sections["saved for backward"] = sections.get("saved for backward", []) + result.saved_notes
    sections["ambiguous matches"] = result.rowmap.ambiguous()
    failures = result.failures()
    found = verdict(result)
    outcome = "result: PASS" if not failures else f"result: FAIL ({len(failures)} differences no rule explains)"
    meta = {"spec": result.spec, "target": result.target, "pass": result.pass_, "device": result.device,
            "dims": result.dims, "rtol": result.rtol, "checked_against": "the real model", "ok": result.ok,
            "failures": failures,
            "verdict": {"structure": found.structure, "cuda_core": found.cuda_core,
                        "cuda_core_unexplained": found.difference, "cuda_core_total": found.cuda_total},
            "matches": {row or "(model)": {"paths": m.paths, "how": m.how} for row, m in matches.items()},
            "pointwise": {phase: {r.name or "total": {"spec": r.spec_pointwise, "real": r.real_pointwise,
                                                     "rules": r.rules}
                                  for r in ph.rows if r.matched} for phase, ph in result.phases.items()}}
    if result.saved is not None:
        spec, real, rules = result.saved.totals
        meta["saved_for_backward"] = {
            "rows": [{"row": r or "(model)", "spec": s, "real": m, "rules": d} for r, s, m, d in result.saved.rows],
            "total": {"spec": spec, "real": real, "rules": rules},
            "rules": [{"rule": u.rule, "row": u.row or "(model)", "bytes": u.bytes, "used": u.used, "text": u.text}
                      for u in result.saved.rules]}
    sections = {k: v for k, v in sections.items() if v or k in ALWAYS}
    return Result(header, tables, sections, found.lines + [outcome] + [f"FAIL: {f}" for f in failures], meta)
