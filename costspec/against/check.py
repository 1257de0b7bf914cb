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

from costspec.against.compare import MATMUL, PhaseResult, compare_phase, op_of_row, rule_deltas
from costspec.against.constants import ConstantOps
from costspec.against.mapping import MODEL_ROW, RealModules, RowMap, build_mapping
from costspec.against.target import Target, first_tensor
from costspec.core.errors import MismatchError
from costspec.core.vocab import RUNNABLE_PASSES, FusedRun, Pass, Phase
from costspec.runtime.reconcile import Amount, Applied, ran_facts
from costspec.tree.nodes import OpNode

if TYPE_CHECKING:
    from costspec.against.saved import SavedAgainst
    from costspec.tree.network import Network

OUTSIDE_ROW = MODEL_ROW  # the loss and its gradient seed: only in the total, as in plain validate


@dataclass
class Ignored:
    """A spec `ignore:` entry: real modules left out of the comparison on purpose, with what they ran."""

    pattern: str
    reason: str
    regex: re.Pattern
    kinds: tuple[str, ...] | None = None  # only these kinds ("matmul", pointwise kinds); None: everything
    extra: dict[str, sympy.Expr] | None = None  # or: exactly this much more work of these kinds (a rule)
    phase: str | None = None  # only this phase (forward or backward); None: both
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
    unknown: list[tuple[str, str, str, int]]  # phase, spec row, aten op, elements
    buffers: dict[str, int]  # real buffer path -> elements
    constants: dict[str, tuple[int, int]]  # aten op -> (calls, elements) run on constants, not counted
    problems: list[str]
    attribution: list[str] = field(default_factory=list)  # scope ambiguities inside agreeing rows
    saved: "SavedAgainst | None" = None  # --saved-bytes (train): saved-for-backward bytes against the real model's
    saved_notes: list[str] = field(default_factory=list)  # why they were not compared

    def failures(self) -> list[str]:
        out = [f"{p}: {row}: {what_ran(kind, a, b)}"
               for p, ph in self.phases.items() for row, kind, a, b in ph.failures]
        out += [f"{p}: {row}: {overdrawn(kind, ran, taken)}"
                for p, ph in self.phases.items() for row, kind, ran, taken in ph.inconsistent]
        # unknown aten ops fail as their own kind ("unknown:aten.neg") in a row
        saved = self.saved.failures() if self.saved is not None else []
        return out + self.problems + self.rowmap.ambiguous() + saved

    @property
    def ok(self) -> bool:
        return not self.failures()


def what_ran(kind: str, spec: int, real: int) -> str:
    unit = "parameters" if kind == "params" else "FLOPs" if kind == "matmul" else "elements"
    name = "matmul-class FLOPs" if kind == "matmul" else kind
    return f"{name}: spec {spec:,} {unit}, real {real:,} ({real - spec:+,})"


def overdrawn(kind: str, ran: int, taken: int) -> str:
    """A row where the rules take more than ran: an internal inconsistency, said so (never a negative count)."""
    unit = "FLOPs" if kind == "matmul" else "elements"
    name = "matmul-class FLOPs" if kind == "matmul" else kind
    return (f"{name}: the rules applied here take {taken:,} {unit}, more than the {ran:,} the real model ran in "
            "this row: an internal inconsistency, not a count (a rule that does not hold here, or work "
            "attributed to another row)")


def _ignore_entries(model: "Network") -> list[Ignored]:
    from costspec.core.expr import parse_expr

    out = []
    data: Any = model.doc.data
    for i, entry in enumerate(data.get("ignore", []) or []):
        pattern = entry["module"]
        regex = re.compile("^" + ".".join("[^.]+" if part == "*" else re.escape(part)
                                          for part in pattern.split(".")) + "$")
        kinds = tuple(entry["kinds"]) if "kinds" in entry else None
        extra = {kind: parse_expr(raw, model.dims.symbols, model.doc.locate(("ignore", i, "extra", kind)))
                 for kind, raw in entry["extra"].items()} if "extra" in entry else None
        out.append(Ignored(pattern, entry["reason"], regex, kinds=kinds, extra=extra, phase=entry.get("pass")))
    return out


def validate_against(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], target: Target,
                     pass_: str = "forward", device: str = "meta", rtol: float = 0.0) -> AgainstResult:
    """Run `target`'s module for `pass_` (forward or train), count it, map it to `model`'s rows and
    compare."""
    pass_ = Pass.parse(pass_, "--pass", RUNNABLE_PASSES)
    import torch

    from costspec.runtime import runtime_count
    from costspec.runtime.runtime_count import OUTSIDE, measure

    module = target.module
    names = {id(m): p for p, m in module.named_modules()}
    called: list[str] = []
    constants = ConstantOps(module)

    def enter(_m, _a, _k):
        constants.__enter__()  # innermost, inside the counters that measure() opens
        return target.args, target.kwargs

    def leave(m, _i, out):
        if m is not module:
            return None
        constants.__exit__(None, None, None)
        return first_tensor(out, target.output)

    def alias_inputs(m, args):
        """A decomposed module (RMSNorm) and a linear layer read their own alias of their input, as the spec's
        modules do (costspec.nn.autograd.alias): the gradient sum at a residual fork then forms outside the
        norm's backward scope instead of being folded into its one rmsnorm_backward record, and sibling
        projections of one input (DeepSeek's q_a_proj and kv_a_proj_with_mqa) each close their backward scope
        with their own input gradient, so one's scope does not stay open over the other's path (a decomposed
        norm on it would be counted op by op in the wrong module)."""
        if id(m) not in names:
            return None
        called.append(names[id(m)])
        if runtime_count.decomposed_kinds(m) is None and not isinstance(m, torch.nn.Linear):
            return None
        return tuple(a.view_as(a) if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args)

    hooks = [  # registered before measure() opens its tracker: its hooks see the aliases
        torch.nn.modules.module.register_module_forward_pre_hook(alias_inputs),
        module.register_forward_pre_hook(enter, with_kwargs=True),
        # global, registered before measure() opens its tracker: the tracker's hooks then see the one output
        # the loss is taken of, and the root's backward scope opens when that output's gradient arrives (not
        # when every tensor of a ModelOutput has one: ops of the root's own forward would fall outside it)
        torch.nn.modules.module.register_module_forward_hook(leave),
    ]
    decomposed = _rmsnorm_classes(module)
    try:
        first: Any = target.args[0] if target.args else next(iter(target.kwargs.values()), None)
        from torch.utils.checkpoint import set_checkpoint_early_stop

        with set_checkpoint_early_stop(False):  # a checkpointed layer's whole forward again, as costspec counts it
            measured = measure(module, first, train=pass_ is Pass.TRAIN, by_node=True)
    finally:
        for hook in hooks:
            hook.remove()
        for cls in decomposed:
            del runtime_count.DECOMPOSED[cls.__name__]
    described = list(target.described) + [
        f"{cls.__name__}: counted as torch.nn.LayerNorm (one layernorm kind for its mean / sub / pow / rsqrt / mul ops)"
        if cls.__name__ in LAYERNORMS_WRITTEN_OUT else
        f"{cls.__name__}: counted as torch.nn.RMSNorm (one rmsnorm kind for its pow / mean / add / rsqrt / mul ops)"
        for cls in decomposed]
    real = RealModules.of(module, called)
    rowmap = build_mapping(model, real, values)
    entries = _ignore_entries(model)

    def ignore_of(path: str, phase: str | None = None, kind: str | None = None) -> Ignored | None:
        """The ignore entry covering `path` (for `kind` in `phase`; None: the whole module)."""
        parts = path.split(".") if path and path != OUTSIDE else []
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            for candidate in entries:
                if candidate.extra is not None or not candidate.regex.match(prefix):
                    continue
                if candidate.kinds is not None and (kind is None or kind not in candidate.kinds):
                    continue
                if candidate.phase is not None and phase != candidate.phase:
                    continue
                return candidate
        return None

    for named in entries:  # the top-most real modules each entry names
        # "" names the model itself (the root: a rule about the work of its own forward, such as the masks)
        matched = [p for p in real.order if (p or not named.pattern) and named.regex.match(p)]
        named.paths = [p for p in matched if not any(q != p and real.under(q, p) for q in matched)]
    phases = pass_.phases
    amounts: dict[str, dict[str, Amount]] = {p: {} for p in phases}
    facts: dict[str, dict[int, dict]] = {p: {} for p in phases}
    for phase in phases:
        entry: Ignored | None
        for path, flops in measured.matmul[phase].items():
            entry = ignore_of(path, phase, MATMUL)
            if entry is not None:
                entry.matmul[phase] = entry.matmul.get(phase, 0) + flops
                continue
            row = OUTSIDE_ROW if path == OUTSIDE else rowmap.row_of(path)
            amounts[phase].setdefault(row, Amount()).add(flops, {})
        for path, kinds in measured.pointwise[phase].items():
            for kind, n in kinds.items():
                entry = ignore_of(path, phase, kind)
                if entry is not None:
                    entry.pointwise.setdefault(phase, Counter())[kind] += n
                else:
                    amounts[phase].setdefault(rowmap.row_of(path), Amount()).add(0, {kind: n})
        for path, keys in measured.fused[phase].items():
            op = op_of_row(model, rowmap.row_of(path))
            if op is not None:
                for key, calls in keys.items():
                    how = FusedRun.UNCOUNTED if calls.get(FusedRun.UNCOUNTED) else FusedRun.COUNTED
                    facts[phase].setdefault(id(op), {})[key] = how
    _attention_runs(model, measured.regions, rowmap, facts)
    for path in measured.lookups:  # a table read by index in this row (a position embedding's lookup)
        op = op_of_row(model, rowmap.row_of(path))
        if op is not None:
            for phase in phases:
                facts[phase].setdefault(id(op), {})["lookup"] = True
    params: dict[str, int] = {}
    for path, n in real.own_params.items():
        owner = ignore_of(path)
        if owner is not None:
            owner.params += n
        elif n:
            params[rowmap.row_of(path)] = params.get(rowmap.row_of(path), 0) + n
    rowmap.unmatched_real = [p for p in rowmap.unmatched_real if ignore_of(p) is None]
    applied = rule_deltas(model, phases, facts, device, values) + _extra_rules(model, entries, rowmap, phases, values)
    results: dict[str, PhaseResult] = {str(phase): compare_phase(model, values, rowmap, phase, amounts[phase], params,
                                    [a for a in applied if a.phase == phase], rtol) for phase in phases}
    problems, attribution = _row_problems(measured.problems, rowmap, results)
    problems += [f"ignore: {e.pattern} matches no module of the real model"
                                                           for e in entries if not e.paths]
    return AgainstResult(
        spec=model.name, target=target.name, pass_=pass_, device=device,
        dims={str(k): int(v) for k, v in values.items()}, rtol=rtol, described=described, rowmap=rowmap,
        phases=results, reconciliations=applied, ignored=entries,
        ignored_ops=sorted(((op, n, why) for (op, why), n in measured.ignored.items()), key=lambda t: (-t[1], t[0])),
        unknown=_unknown([u for u in measured.unknown if ignore_of(u.module, u.phase, f"unknown:{u.op}") is None],
                         rowmap),
        buffers={name: b.numel() for name, b in module.named_buffers()},
        constants={op: (n, constants.elements[op]) for op, n in constants.ops.items()}, problems=problems,
        attribution=attribution)


def _attention_runs(model: "Network", regions, rowmap: RowMap, facts: dict[str, dict[int, dict]]) -> None:
    """Each attention layer's runs as the counter recorded them in its real modules (the rule of a
    decomposed SDPA is derived from them); none recorded: no such rule (the differences show)."""
    from costspec.tree.walk import walk

    runs = ran_facts(regions, lambda path: op_of_row(model, rowmap.row_of(path)))
    for node, _, _, _ in walk(model.root):
        if isinstance(node, OpNode) and "sdpa" in node.op.runtime.fused:
            for phase in facts:
                facts[phase].setdefault(id(node), {})["ran"] = runs.get(id(node), ())


def _extra_rules(model: "Network", entries: list[Ignored], rowmap: RowMap, phases, values) -> list[Applied]:
    """`ignore:` entries with `extra:` as named rules: the real model runs exactly this much more
    (real = spec + extra), in the row holding the modules they name. A forward extra in a checkpointed
    row runs again in backward for the recomputed share of its instances (`GradState.recompute`)."""
    from costspec.core.expr import evaluator
    from costspec.tree.walk import walk

    ev = evaluator(values)
    recomputed = {step.node.name: (ev(step.instances), ev(step.grad.recompute)) for step in walk(model.root)
                  if step.grad.recompute != 0}
    out = []
    for entry in entries:
        if entry.extra is None:
            continue
        matched = entry.paths
        if not matched:
            continue
        rows = {rowmap.row_of(p) for p in matched}
        row = rows.pop() if len(rows) == 1 else MODEL_ROW
        amounts = {kind: ev(e) for kind, e in entry.extra.items()}
        for phase in phases:
            if entry.phase in (None, phase):
                out.append(Applied(f"ignore: {entry.pattern}", row, phase, entry.reason, amounts.get(MATMUL, 0),
                                   {k: v for k, v in amounts.items() if k != MATMUL}))
        instances, again = recomputed.get(row, (1, 0))
        if Phase.BACKWARD in phases and entry.phase in (None, Phase.FORWARD) and again \
                and all(v * again % instances == 0 for v in amounts.values()):
            share = {k: v * again // instances for k, v in amounts.items()}
            out.append(Applied(f"ignore: {entry.pattern}", row, Phase.BACKWARD, f"{entry.reason}; its forward again "
                               f"in backward, in the {again} of {instances} instances a checkpoint recomputes",
                               share.get(MATMUL, 0), {k: v for k, v in share.items() if k != MATMUL}))
    return out


# RMSNorm classes whose name does not say so: T5's "LayerNorm" scales by the root mean square (no mean
# subtracted, no bias), as nn.RMSNorm does (T5 and its descendants: mT5, UMT5, LongT5, Pix2Struct)
RMSNORM_BY_OTHER_NAMES = frozenset({"T5LayerNorm"})
# LayerNorm classes written out op by op (mean, x - mean, pow, mean, rsqrt, * weight) instead of calling
# F.layer_norm: Cohere's (its q/k norm normalises each head with a (heads, d) weight)
LAYERNORMS_WRITTEN_OUT = frozenset({"CohereLayerNorm"})


def _rmsnorm_classes(module) -> list[type]:
    """RMSNorm classes of the real model (LlamaRMSNorm, ...) counted as torch.nn.RMSNorm is: their
    pow / mean / add / rsqrt / mul ops as one rmsnorm kind; LayerNorms written out op by op as one
    layernorm kind (registered for this run only)."""
    from costspec.runtime import runtime_count

    classes = sorted({type(m) for m in module.modules()
                      if (type(m).__name__.endswith("RMSNorm") or type(m).__name__ in RMSNORM_BY_OTHER_NAMES
                          or type(m).__name__ in LAYERNORMS_WRITTEN_OUT)
                      and runtime_count.decomposed_kinds(m) is None}, key=str)
    for cls in classes:
        layernorm = cls.__name__ in LAYERNORMS_WRITTEN_OUT
        runtime_count.DECOMPOSED[cls.__name__] = (("layernorm", "layernorm_backward") if layernorm
                                                  else runtime_count.DECOMPOSED["RMSNorm"])
    return classes


def _unknown(unknown, rowmap: RowMap) -> list[tuple[str, str, str, int]]:
    """Unknown aten ops summed per (phase, row, op): one line for the 16 layers of a repeat."""
    out: dict[tuple[str, str, str], int] = {}
    for u in unknown:
        key = (u.phase, rowmap.row_of(u.module) or "(model)", u.op)
        out[key] = out.get(key, 0) + u.elements
    return [(phase, row, op, n) for (phase, row, op), n in out.items()]


def _row_problems(problems: list[str], rowmap: RowMap, results: dict[str, PhaseResult]) -> tuple[list[str], list[str]]:
    """(problems, notes): the counter's attribution problems that matter. A tensor read by sibling
    modules (q, k and v of one input) keeps their backward scopes open together, so an op may land
    in either; when the rows involved all agree with the spec, that choice changed nothing (a note)."""
    kept, notes = [], []
    for problem in problems:
        phase = problem.split(":", 1)[0]
        paths = re.findall(r"'([^']*)'", problem)
        rows = {rowmap.row_of("" if p == "(model)" else p) for p in paths}
        failing = {row for row, _, _, _ in results[phase].failures} if phase in results else {"?"}
        if paths and len(rows) == 1 or paths and not rows & (failing | {r or "total" for r in failing}):
            notes.append(problem)
        else:
            kept.append(problem)
    return kept, notes


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
