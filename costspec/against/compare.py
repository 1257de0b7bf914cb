"""The comparison of a spec with the real model's runtime counts, row by row.

Per matched spec row (see `mapping`): the spec's matmul-class FLOPs, pointwise elements by kind
and parameters against what the real module paths under that row measured, after the named
reconciliation rules the spec's ops declare (`OpDef.reconcile`, as in plain `validate`).

A difference in a row whose enclosing matched row (or the total) agrees on that quantity is work
the real model runs in another layer's modules (a residual add inside the MLP module, the
position add in the model's own forward): reported under the rule `scope-boundary` with its
numbers. A difference the total still shows is a FAIL, named by row and kind.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import sympy

from costspec.against.mapping import MODEL_ROW, RowMap
from costspec.core.expr import evaluator
from costspec.core.vocab import Phase
from costspec.runtime.reconcile import Amount, Applied, reconciliations
from costspec.tree.nodes import Node, OpNode, PartNode
from costspec.tree.walk import node_cost, slot_of, walk

if TYPE_CHECKING:
    from costspec.tree.network import Network

PARAMS = "params"
MATMUL = "matmul"


@dataclass
class RowResult:
    """One spec row in one phase: spec vs real (None when the row is not matched)."""

    name: str
    label: str
    depth: int
    matched: bool
    spec_matmul: int
    spec_params: int
    spec_pointwise: dict[str, int]
    real_matmul: int | None = None
    real_reconciled: int | None = None
    real_params: int | None = None
    real_pointwise: dict[str, int] | None = None  # after the rules
    raw_pointwise: dict[str, int] = field(default_factory=dict)  # as measured, before the rules
    status: str = "-"  # PASS, FAIL, moved (scope-boundary), or - (not matched)
    rules: list[str] = field(default_factory=list)  # the spec's rules that hold in the real model here
    merged: bool = False  # the gradient-reduction rule was needed
    compare_pointwise: tuple[dict[str, int], dict[str, int]] | None = None  # (spec, real) with kinds merged

    def negative(self) -> dict[str, int]:
        """quantity -> the real count after the rules where it is below 0: the rules take more than the
        real model ran here (an internal inconsistency, never a count)."""
        if not self.matched:
            return {}
        out = {k: v for k, v in (self.real_pointwise or {}).items() if v < 0}
        if self.real_reconciled is not None and self.real_reconciled < 0:
            out[MATMUL] = self.real_reconciled
        return out

    def diffs(self, rtol: float) -> dict[str, tuple[int, int]]:
        """quantity -> (spec, real) for every quantity that differs ({} when not matched)."""
        if not self.matched:
            return {}
        out: dict[str, tuple[int, int]] = {}
        assert self.real_reconciled is not None and self.real_params is not None and self.real_pointwise is not None
        if abs(self.real_reconciled - self.spec_matmul) > rtol * self.spec_matmul:
            out[MATMUL] = (self.spec_matmul, self.real_reconciled)
        if self.real_params != self.spec_params:
            out[PARAMS] = (self.spec_params, self.real_params)
        spec, real = self.compare_pointwise or (self.spec_pointwise, self.real_pointwise)
        for kind in sorted(set(spec) | set(real)):
            a, b = spec.get(kind, 0), real.get(kind, 0)
            if a != b:
                out[kind] = (a, b)
        return out


@dataclass
class PhaseResult:
    phase: str
    rows: list[RowResult]  # walk order; the last one is the total
    moved: list[tuple[str, str, int, int, str]] = field(default_factory=list)  # row, kind, spec, real, agrees at
    failures: list[tuple[str, str, int, int]] = field(default_factory=list)  # row, kind, spec, real
    # row, kind, what ran there, what the rules applied there take (more): never shown as a count
    inconsistent: list[tuple[str, str, int, int]] = field(default_factory=list)
    unseen: list[tuple[str, str]] = field(default_factory=list)  # (row, rule) the real model does not show


def _ints(d: Mapping[str, sympy.Expr], ev) -> dict[str, int]:
    return {k: v for k, v in ((k, ev(e)) for k, e in sorted(d.items())) if v}


def _chains(model: "Network", rowmap: RowMap) -> tuple[dict[str, list[str]], dict[int, str], list]:
    """matched row -> its matched ancestors (nearest first, ending at the model row); id(node) ->
    the matched row holding it (itself or its nearest matched ancestor); the walk."""
    steps = list(walk(model.root))
    chains: dict[str, list[str]] = {MODEL_ROW: []}
    holder: dict[int, str] = {id(model.root): MODEL_ROW}
    stack: list[tuple[int, str]] = []  # (depth, matched row) of the enclosing matched rows
    for node, depth, _, _ in steps:
        while stack and stack[-1][0] >= depth:
            stack.pop()
        enclosing = stack[-1][1] if stack else MODEL_ROW
        if node.name in rowmap.matches and node.name != enclosing:
            chains[node.name] = [enclosing] + chains[enclosing]
            stack.append((depth, node.name))
            holder[id(node)] = node.name
        else:
            holder[id(node)] = enclosing
    return chains, holder, steps


GRADIENT_REDUCTION = ("gradient-reduction", "bias_grad and scatter_add both add output-gradient elements into a "
                      "parameter, one add per element: a table the real model reads by lookup (nn.Embedding of "
                      "positions) where the spec adds it by broadcast (or the reverse) moves elements between the two")
REDUCTION_KINDS = ("bias_grad", "scatter_add")


def _merged(pointwise: Mapping[str, int]) -> dict[str, int]:
    out = {k: v for k, v in pointwise.items() if k not in REDUCTION_KINDS}
    total = sum(pointwise.get(k, 0) for k in REDUCTION_KINDS)
    if total:
        out["+".join(REDUCTION_KINDS)] = total
    return out


def compare_phase(model: "Network", values, rowmap: RowMap, phase: str, real_amounts: dict[str, Amount],
                  real_params: dict[str, int], applied: list[Applied], rtol: float) -> PhaseResult:
    """`real_amounts` / `real_params`: by matched row (work attributed to the row itself);
    `applied`: the spec ops' reconciliation rules for this phase, by validate slot.

    The rules describe how torch runs the spec's own module; a real model may run that piece
    another way (a position table looked up, not broadcast). Per row, the largest set of rules
    under which the row agrees is used (all of them when none does); rules left out are listed as
    not seen in the real model, and the gradient-reduction rule is used only where it is needed."""
    ev = evaluator(values)
    chains, holder, steps = _chains(model, rowmap)
    slot_row: dict[str, str] = {}
    for node, _, _, _ in steps:
        slot_row.setdefault(slot_of(node), holder[id(node)])
    rule_by_row: dict[str, dict[str, Amount]] = {}
    for a in applied:
        # an op rule names a validate slot; an `ignore: extra` rule the matched row of its modules
        landing = slot_row.get(a.row, a.row if a.row in rowmap.matches else MODEL_ROW)
        amount = rule_by_row.setdefault(landing, {}).setdefault(a.rule, Amount())
        amount.add(a.matmul, a.pointwise)

    def in_subtree(r: str, row: str) -> bool:
        return row == MODEL_ROW or r == row or row in chains.get(r, [MODEL_ROW])

    rows: list[RowResult] = []
    for node, depth, mult, in_rg in steps:
        rows.append(_row(node, depth, node_cost(node, phase, mult, in_rg),
                         ev(node_cost(node, "forward", mult, in_rg).params), ev))
    rows.append(_row(model.root, 0, model.cost(phase), ev(model.cost("forward").params), ev, label="total"))
    rows[-1].name = MODEL_ROW
    result = PhaseResult(phase, rows)
    decided: dict[tuple[str, str], bool] = {}  # (rule, row it lands in) -> applied, decided deepest first
    for row in reversed(rows):  # pre-order reversed: a row after every row below it
        if row.name not in rowmap.matches:
            continue
        real = Amount()
        for r, amount in real_amounts.items():
            if in_subtree(r, row.name):
                real += amount
        rules = {(rule, r): amount for r, by_rule in rule_by_row.items() if in_subtree(r, row.name)
                 for rule, amount in by_rule.items()}
        row.matched = True
        row.real_matmul = real.matmul
        row.real_params = sum(n for r, n in real_params.items() if in_subtree(r, row.name))
        _fit(row, real, rules, decided, rtol)
    result.unseen = [(origin, rule) for (rule, origin), used in decided.items() if not used]
    by_name = {r.name: r for r in rows[:-1]}
    by_name[MODEL_ROW] = rows[-1]
    for row in rows:
        diffs = row.diffs(rtol)
        if not row.matched:
            continue
        row.status = "ambiguous" if rowmap.matches[row.name].alternatives else "PASS"
        negative = row.negative()
        if negative:
            row.status = "error"
            for kind, after in negative.items():
                ran = (row.real_matmul or 0) if kind == MATMUL else row.raw_pointwise.get(kind, 0)
                result.inconsistent.append((row.name or "total", kind, ran, ran - after))
            diffs = {k: v for k, v in diffs.items() if k not in negative}
        for kind, (spec_n, real_n) in diffs.items():
            agrees = next((anc for anc in chains.get(row.name, []) if kind not in by_name[anc].diffs(rtol)), None)
            if agrees is None:
                row.status = "FAIL" if row.status != "error" else row.status
                result.failures.append((row.name or "total", kind, spec_n, real_n))
            else:
                row.status = "moved" if row.status == "PASS" else row.status  # (ambiguous stays so)
                result.moved.append((row.name, kind, spec_n, real_n, agrees or "total"))
    return result


def _fit(row: RowResult, real: Amount, rules: dict[tuple[str, str], Amount],
         decided: dict[tuple[str, str], bool], rtol: float) -> None:
    """Set the row's reconciled numbers under the largest set of its undecided rules (rules that land
    in this row itself; those below were decided by their own rows) that makes it agree."""
    def search(free: list[tuple[str, str]], fixed: list[Amount]):
        subsets = sorted((tuple(k for i, k in enumerate(free) if mask >> i & 1) for mask in range(2 ** len(free))),
                         key=lambda t: -len(t))
        for merge in (False, True):
            for subset in subsets:
                _apply(row, real, fixed + [rules[k] for k in subset], merge)
                if not row.diffs(rtol):
                    return subset, merge
        return None

    def unexplained(free: list[tuple[str, str]], fixed: list[Amount]):
        """No set of rules makes the row agree: the largest that takes no more than ran (a rule whose
        work does not run in this row is left to the rows around it)."""
        for subset in sorted((tuple(k for i, k in enumerate(free) if mask >> i & 1)
                              for mask in range(2 ** len(free))), key=lambda t: -len(t)):
            _apply(row, real, fixed + [rules[k] for k in subset], False)
            if not row.negative():
                return subset, False
        return tuple(free), False

    free = sorted(key for key in rules if key not in decided)
    fixed = [amount for key, amount in rules.items() if decided.get(key)]
    chosen = search(free, fixed)
    if chosen is None and len(rules) <= 8:  # a rule decided in a row where its work does not run: decide again
        free, fixed = sorted(rules), []
        chosen = search(free, fixed)
    subset, merge = chosen or unexplained(free, fixed)
    _apply(row, real, [amount for key, amount in rules.items() if key not in free and decided.get(key)]
           + [rules[k] for k in subset], merge)
    for key in free:
        decided[key] = key in subset
    row.rules, row.merged = sorted({rule for (rule, _), used in decided.items() if used and (rule, _) in rules}), merge


def _apply(row: RowResult, real: Amount, deltas: list[Amount], merge: bool) -> None:
    row.raw_pointwise = {k: v for k, v in sorted(real.pointwise.items()) if v}
    pw = Counter(real.pointwise)
    matmul = real.matmul
    for d in deltas:
        pw.subtract(d.pointwise)
        matmul -= d.matmul
    row.real_reconciled = matmul
    row.real_pointwise = {k: v for k, v in sorted(pw.items()) if v}
    row.compare_pointwise = (_merged(row.spec_pointwise), _merged(row.real_pointwise)) if merge else None


def _row(node: Node, depth: int, cost, params: int, ev, label: str | None = None) -> RowResult:
    matmul = ev(sum(cost.matmul.values(), sympy.Integer(0)))
    return RowResult(node.name, label or node.label, depth, False, matmul, params, _ints(cost.pointwise, ev))


def rule_deltas(model: "Network", phases: tuple[Phase, ...], sdpa_facts: dict[str, dict[int, dict]], device: str,
                values) -> list[Applied]:
    """The spec ops' named reconciliation rules (validate's), by slot and phase."""
    return reconciliations(list(walk(model.root)), phases, sdpa_facts, device, values)[1]


def op_of_row(model: "Network", row: str) -> OpNode | None:
    """The op node named `row` (a matched attention layer carries its SDPA facts), if it is one."""
    for node, _, _, _ in walk(model.root):
        if node.name == row and isinstance(node, OpNode):
            return node
        if node.name == row and isinstance(node, PartNode):
            return node.owner
    return None
