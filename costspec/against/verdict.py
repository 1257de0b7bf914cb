"""What a `validate --against` run proved, at a glance: the verdict's lines.

1. structure -- the matmul-class FLOPs (after the named rules) and the parameters of every matched
   row: `exact` (every row agrees), `exact in total` (some rows' work runs in another row's modules:
   scope-boundary), `ambiguous` (a row's module is not determined), or `differs`;
2. CUDA-core work -- the pointwise kinds and element counts: `equal` (no rule needed), `explained`
   by the named rules it lists, or `different`, with the size of the difference relative to the
   model's CUDA-core work (the spec's elements of every kind, every phase run);
3. result: PASS or FAIL.
"""
from __future__ import annotations

from dataclasses import dataclass

from costspec.against.check import AgainstResult
from costspec.against.compare import GRADIENT_REDUCTION, MATMUL, PARAMS

STRUCTURE = (MATMUL, PARAMS)
BOUNDARY = "scope-boundary"


@dataclass
class Verdict:
    structure: str  # exact, exact in total, ambiguous, differs
    cuda_core: str  # equal, explained, different
    lines: list[str]
    difference: int  # CUDA-core elements no rule explains (total rows, every phase)
    cuda_total: int  # the spec's CUDA-core elements (total rows, every phase)


def _rules_used(result: AgainstResult, pointwise: bool) -> list[str]:
    """The named rules the rows used, that change pointwise kinds (or the matmul FLOPs)."""
    used = {(p, row.name, rule) for p, ph in result.phases.items() for row in ph.rows if row.matched
            for rule in row.rules}
    out: list[str] = []
    for a in result.reconciliations:
        moves = bool(a.pointwise) if pointwise else bool(a.matmul)
        if moves and any(rule == a.rule for _, _, rule in used) and a.rule not in out:
            out.append(a.rule)
    return out


def verdict(result: AgainstResult) -> Verdict:
    phases = list(result.phases)
    matched = [r for r in next(iter(result.phases.values())).rows if r.matched]
    where = f"{len(matched)} matched rows" + (", forward and backward" if len(phases) > 1 else ", forward")
    failing = {(kind, row) for ph in result.phases.values() for row, kind, _, _ in ph.failures}
    moved = {(kind, row) for ph in result.phases.values() for row, kind, _, _, _ in ph.moved}
    bad = sorted({row for kind, row in failing if kind in STRUCTURE}
                 | {row for ph in result.phases.values() for row, kind, _, _ in ph.inconsistent if kind == MATMUL})
    ambiguous = result.rowmap.ambiguous()
    matmul_rules = _rules_used(result, pointwise=False)
    after = f" (matmul after {', '.join(matmul_rules)})" if matmul_rules else ""
    if bad:
        structure = "differs"
        line = f"structure: differs -- matmul-class FLOPs or parameters differ in {', '.join(bad)}"
    elif ambiguous:
        structure = "ambiguous"
        line = (f"structure: ambiguous -- {len(ambiguous)} row(s) matched by parameter count where other modules "
                "have as many: their numbers prove nothing until a source: names the module")
    elif any(kind in STRUCTURE for kind, _ in moved):
        structure = "exact in total"
        rows = sorted({row for kind, row in moved if kind in STRUCTURE})
        line = (f"structure: exact in total -- matmul-class FLOPs and parameters agree in the total; "
                f"{', '.join(rows)} run part of theirs in another row's modules ({BOUNDARY}){after}")
    else:
        structure = "exact"
        line = f"structure: exact -- matmul-class FLOPs and parameters agree in all {where}{after}"
    lines = [line]
    totals = [ph.rows[-1] for ph in result.phases.values()]
    cuda_total = sum(sum(t.spec_pointwise.values()) for t in totals)
    difference = sum(abs(real - spec) for ph in result.phases.values() for row, kind, spec, real in ph.failures
                     if row == "total" and kind not in STRUCTURE)
    kinds = sorted({kind for kind, _ in failing if kind not in STRUCTURE}
                   | {kind for ph in result.phases.values() for _, kind, _, _ in ph.inconsistent if kind != MATMUL})
    if kinds:
        cuda = "different"
        share = (f"{100 * difference / cuda_total:.2g}% of the model's CUDA-core work ({cuda_total:,} elements, "
                 f"{' + '.join(phases)})" if cuda_total else "where the spec has no CUDA-core work")
        lines.append(f"CUDA-core work: different -- {len(kinds)} kind(s) ({', '.join(kinds)}) differ by "
                     f"{difference:,} elements in total, {share}")
    else:
        rules = _rules_used(result, pointwise=True)
        if any(r.merged for ph in result.phases.values() for r in ph.rows):
            rules.append(GRADIENT_REDUCTION[0])
        if any(kind not in STRUCTURE for kind, _ in moved):
            rules.append(BOUNDARY)
        if rules:
            cuda = "explained"
            lines.append(f"CUDA-core work: explained by named rules -- every kind agrees after {', '.join(rules)}")
        else:
            cuda = "equal"
            lines.append("CUDA-core work: equal -- every kind and element count agrees, with no rule")
    return Verdict(structure, cuda, lines, difference, cuda_total)
