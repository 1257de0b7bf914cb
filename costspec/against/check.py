"""`validate --against`: run the real model under the counters and compare it with the spec.

Plain `validate` checks a spec against the module costspec generates from that same spec (the
engine's self-consistency). This checks it against the user's model: the real module runs on
`meta` (or cpu) under FlopCounterMode and the pointwise counter of `runtime_count`, its module
paths are mapped to spec rows (`mapping`), and every matched row is compared (`compare`).

torch is imported here: import this module only for `--against`.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import sympy

from ..errors import MismatchError, UsageError
from ..validate import PASS_PHASES, Applied, _Amount
from .compare import PhaseResult, compare_phase, op_of_row, rule_deltas
from .mapping import MODEL_ROW, RealModules, RowMap, build_mapping
from .target import Target, first_tensor

if TYPE_CHECKING:
    from ..model import Model

OUTSIDE_ROW = MODEL_ROW  # the loss and its gradient seed: only in the total, as in plain validate


@dataclass
class Ignored:
    """A spec `ignore:` entry: real modules left out of the comparison on purpose, with what they ran."""

    pattern: str
    reason: str
    paths: list[str] = field(default_factory=list)  # the top-most real modules it matched
    matmul: dict[str, int] = field(default_factory=dict)  # phase -> FLOPs
    pointwise: dict[str, Counter] = field(default_factory=dict)  # phase -> kind -> elements
    params: int = 0


@dataclass
class AgainstResult:
    spec: str
    target: str
    pass_: str
    device: str
    dims: dict[str, int]
    rtol: float
    described: list[str]
    rowmap: RowMap
    phases: dict[str, PhaseResult]
    reconciliations: list[Applied]
    ignored: list[Ignored]
    ignored_ops: list[tuple[str, int, str]]
    unknown: list[tuple[str, str, str, int]]  # phase, real path, aten op, elements
    buffers: dict[str, int]  # real buffer path -> elements
    problems: list[str]

    def failures(self) -> list[str]:
        out = [f"{p}: {row}: {_what(kind, a, b)}" for p, ph in self.phases.items() for row, kind, a, b in ph.failures]
        return out + [f"unknown aten op {op} in {path} ({phase})" for phase, path, op, _ in self.unknown] + self.problems

    @property
    def ok(self) -> bool:
        return not self.failures()


def _what(kind: str, spec: int, real: int) -> str:
    unit = "parameters" if kind == "params" else "FLOPs" if kind == "matmul" else "elements"
    name = "matmul-class FLOPs" if kind == "matmul" else kind
    return f"{name}: spec {spec:,} {unit}, real {real:,} ({real - spec:+,})"


def _ignore_patterns(model: "Model") -> list[tuple[re.Pattern, str, str]]:
    out = []
    for entry in model.doc.data.get("ignore", []) or []:
        pattern = entry["module"]
        regex = re.compile("^" + ".".join("[^.]+" if part == "*" else re.escape(part)
                                          for part in pattern.split(".")) + "$")
        out.append((regex, pattern, entry["reason"]))
    return out


def validate_against(model: "Model", values: Mapping[sympy.Symbol, sympy.Integer], target: Target,
                     pass_: str = "forward", device: str = "meta", rtol: float = 0.0) -> AgainstResult:
    """Run `target`'s module for `pass_` (forward or train), count it, map it to `model`'s rows and
    compare."""
    if pass_ not in PASS_PHASES:
        raise UsageError(f"--against checks --pass forward or train, not {pass_!r}")
    import torch

    from ..runtime_count import OUTSIDE, measure

    module = target.module
    names = {id(m): p for p, m in module.named_modules()}
    called: list[str] = []
    hooks = [
        torch.nn.modules.module.register_module_forward_pre_hook(
            lambda m, _i: called.append(names[id(m)]) if id(m) in names else None),
        module.register_forward_pre_hook(lambda _m, _a, _k: (target.args, target.kwargs), with_kwargs=True),
        module.register_forward_hook(lambda _m, _i, out: first_tensor(out)),
    ]
    try:
        first = target.args[0] if target.args else next(iter(target.kwargs.values()), None)
        measured = measure(module, first, train=pass_ == "train")
    finally:
        for hook in hooks:
            hook.remove()
    real = RealModules.of(module, called)
    rowmap = build_mapping(model, real, values)
    patterns = _ignore_patterns(model)
    ignored = [Ignored(p, why) for _, p, why in patterns]

    def ignore_of(path: str) -> Ignored | None:
        parts = path.split(".") if path else []
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            for (regex, _, _), entry in zip(patterns, ignored):
                if regex.match(prefix):
                    if prefix not in entry.paths:
                        entry.paths.append(prefix)
                    return entry
        return None

    phases = PASS_PHASES[pass_]
    amounts: dict[str, dict[str, _Amount]] = {p: {} for p in phases}
    facts: dict[str, dict[int, dict]] = {p: {} for p in phases}
    for phase in phases:
        for path, flops in measured.matmul[phase].items():
            entry = ignore_of(path) if path != OUTSIDE else None
            if entry is not None:
                entry.matmul[phase] = entry.matmul.get(phase, 0) + flops
                continue
            row = OUTSIDE_ROW if path == OUTSIDE else rowmap.row_of(path)
            amounts[phase].setdefault(row, _Amount()).add(flops, {})
        for path, kinds in measured.pointwise[phase].items():
            entry = ignore_of(path)
            if entry is not None:
                entry.pointwise.setdefault(phase, Counter()).update(kinds)
                continue
            amounts[phase].setdefault(rowmap.row_of(path), _Amount()).add(0, kinds)
        for path, calls in measured.sdpa[phase].items():
            op = op_of_row(model, rowmap.row_of(path))
            if op is not None:
                how = "fused-uncounted" if calls.get("sdpa-uncounted") else "fused-counted"
                facts[phase].setdefault(id(op), {})["sdpa"] = how
    params: dict[str, int] = {}
    for path, n in real.own_params.items():
        entry = ignore_of(path)
        if entry is not None:
            entry.params += n
        elif n:
            params[rowmap.row_of(path)] = params.get(rowmap.row_of(path), 0) + n
    rowmap.unmatched_real = [p for p in rowmap.unmatched_real if ignore_of(p) is None]
    deltas, applied = rule_deltas(model, phases, facts, device, values)
    results = {phase: compare_phase(model, values, rowmap, phase, amounts[phase], params, deltas[phase], rtol)
               for phase in phases}
    problems = list(measured.problems) + [f"ignore: {e.pattern} matches no module of the real model"
                                          for e in ignored if not e.paths]
    return AgainstResult(
        spec=model.name, target=target.name, pass_=pass_, device=device,
        dims={str(k): int(v) for k, v in values.items()}, rtol=rtol, described=target.described, rowmap=rowmap,
        phases=results, reconciliations=applied, ignored=ignored,
        ignored_ops=sorted(((op, n, why) for (op, why), n in measured.ignored.items()), key=lambda t: (-t[1], t[0])),
        unknown=[(u.phase, u.module, u.op, u.elements) for u in measured.unknown],
        buffers={name: b.numel() for name, b in module.named_buffers()}, problems=problems)


def check(result: AgainstResult) -> None:
    """Raise MismatchError (exit 1) when the spec and the real model differ beyond the named rules."""
    failures = result.failures()
    if failures:
        shown = "; ".join(failures[:5]) + (f"; and {len(failures) - 5} more" if len(failures) > 5 else "")
        raise MismatchError(f"{result.spec} against {result.target}: {shown}")


def summary(result: AgainstResult) -> dict[str, Any]:
    """Totals per phase (spec vs real matmul FLOPs and parameters) for tables and tests."""
    out: dict[str, Any] = {}
    for phase, ph in result.phases.items():
        total = ph.rows[-1]
        out[phase] = {"spec_matmul": total.spec_matmul, "real_matmul": total.real_matmul,
                      "real_reconciled": total.real_reconciled, "spec_params": total.spec_params,
                      "real_params": total.real_params}
    return out
