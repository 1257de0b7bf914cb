"""`validate --against --saved-bytes`: the activations the real model keeps for backward against the spec's.

The real module runs one more training forward on `meta`, cast to the spec's dtype (as a model trained in it
is), in eval mode as the FLOP comparison runs it (dropout is identity: no masks), under a
`saved_tensors_hooks` pack hook: every saved storage once, parameters and buffers left out, charged to the
innermost real module open when it was saved, and that module to its matched spec row (`mapping`; a module no
row names, called between two sources of one row, to that row). The spec's bytes (`costspec.tree.saved`) go to
the deepest matched row holding each op row; the spec at the attention kernels the real model may have run
(math, eager) gives the kernel rules' candidates.

Differences that are conventions of how the real model runs are named rules with their formulas
(`costspec.against.saved_rules`), real = spec + rule, candidates per row: as in the FLOP comparison, a row uses
the largest set of its candidate rules under which it agrees (all of them when none does), and the others are
listed as not seen. A rule kept once (`once`) goes to the first layer the model runs it in. What remains is a
failure with both numbers.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Callable, Mapping

import sympy

from costspec.against.mapping import MODEL_ROW, RowMap
from costspec.against.saved_rules import RULES, RealModel, SavedRule
from costspec.core.results import Column, Row, Table
from costspec.tree.nodes import GroupNode, Node, OpNode, RepeatNode

if TYPE_CHECKING:
    from costspec.against.target import Target
    from costspec.tree.network import Network

@dataclass(frozen=True)
class RuleUse:
    """A rule at one row: its bytes there (real = spec + bytes) and whether the row needed it."""

    rule: str
    row: str
    bytes: int
    text: str
    used: bool


@dataclass
class SavedAgainst:
    """Spec and real saved bytes per matched row, the rules, and the real saved tensors."""

    rows: list[tuple[str, int, int, int]]  # (row, spec, real, rules) in walk order; the model row last
    rules: list[RuleUse]
    tensors: list[tuple[str, str, int, tuple[int, ...], str]]  # (real module, row, bytes, shape, dtype)
    described: list[str] = field(default_factory=list)

    @property
    def totals(self) -> tuple[int, int, int]:
        return (sum(r[1] for r in self.rows), sum(r[2] for r in self.rows), sum(r[3] for r in self.rows))

    def failures(self) -> list[str]:
        return [f"saved for backward: {row or 'model'}: spec {s:,} bytes, real {r:,} ({r - s:+,}; named rules "
                f"{d:+,})" for row, s, r, d in self.rows if s + d != r]

    def table(self) -> Table:
        def row(name: str, label: str, s: int, r: int, d: int) -> Row:
            return Row(name, label, 0, {"spec": s, "real": r, "rules": d, "diff": r - s,
                                        "saved": "PASS" if s + d == r else "FAIL"})

        spec, real, rules = self.totals
        return Table(list(COLUMNS), [row(n, n or "(model)", s, r, d) for n, s, r, d in self.rows],
                     row("", "activations saved for backward", spec, real, rules), title="saved for backward",
                     label_title="saved for backward (train)")


SDPA_ON_META = ("on meta, SDPA runs PyTorch's math decomposition, which keeps q and k scaled, the probabilities and "
                "v (upcast to fp32 from 16 bits) where the spec's flash kernel keeps q, k, v, the output and the "
                "logsumexp: the spec's bytes at backend math minus its own")
EAGER = ("the real layer computes its attention with its own bmm, softmax and bmm at the dtype (torch's "
         "nn.MultiheadAttention asked for its weights: SigLIP's pooling head), keeping q scaled, k, v and the "
         "probabilities: the spec's bytes at backend eager minus its own")

COLUMNS = (Column("spec", "spec bytes", "count"), Column("real", "real bytes", "count"),
           Column("rules", "named rules", "count"), Column("diff", "real - spec", "count"),
           Column("saved", "saved", "text"))


def measure_real_saved(target: "Target", dtype: str, calls: list[str] | None = None,
                       rotary: list[tuple[sympy.Expr, int]] | None = None,
                       batched: set[str] | None = None) -> list[tuple[str, int, tuple[int, ...], str]]:
    """One training forward of the real module under the pack hook: (module path, bytes, shape, dtype) of
    every storage it saves, once, parameters and buffers left out (see the module docstring); `calls`, when
    given, gets the modules' paths in the order they were first called, `rotary` each rotary module's tables'
    columns per rotary dim (`_rope_columns`) and bytes per element, `batched` the embedding modules that
    returned a table per batch row (a 3-d output of more than one row)."""
    import torch

    from costspec.runtime.torch_build import TORCH_DTYPES

    module = target.module
    cast = getattr(torch, TORCH_DTYPES.get(dtype, "float32"))
    module.to(cast)

    def as_dtype(x):
        return x.to(cast) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    args = tuple(as_dtype(a) for a in target.args)
    kwargs = {k: as_dtype(v) for k, v in target.kwargs.items()}
    names = {id(m): p for p, m in module.named_modules()}
    stack: list[str] = []

    called: set[str] = set()

    def enter(m, _args):
        if id(m) in names:
            stack.append(names[id(m)])
            if calls is not None and names[id(m)] not in called:
                called.add(names[id(m)])
                calls.append(names[id(m)])

    def leave(m, _args, out):
        if id(m) in names and stack and stack[-1] == names[id(m)]:
            stack.pop()
        columns = _rope_columns(m, out)
        if rotary is not None and columns is not None:
            rotary.append((columns, out[0].element_size()))
        if (batched is not None and id(m) in names and isinstance(m, torch.nn.Embedding)
                and isinstance(out, torch.Tensor) and out.dim() == 3 and out.shape[0] > 1):
            batched.add(names[id(m)])

    state = {t.untyped_storage()._cdata for t in [*module.parameters(), *module.buffers()]}
    seen: set[int] = set()
    kept: list = []  # alive, so that no later storage reuses an address
    out: list[tuple[str, int, tuple[int, ...], str]] = []

    def pack(t):
        kept.append(t)
        storage = t.untyped_storage()
        key, nbytes = storage._cdata, int(storage.nbytes())
        if key not in state and key not in seen and nbytes:
            seen.add(key)
            out.append((stack[-1] if stack else MODEL_ROW, nbytes, tuple(t.shape), str(t.dtype).removeprefix("torch.")))
        return t

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(enter),
             torch.nn.modules.module.register_module_forward_hook(leave)]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(*args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    return out


def compare_saved_against(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], target: "Target",
                          rowmap: RowMap, kernel_model: "Network | None" = None,
                          eager_model: "Network | None" = None) -> SavedAgainst:
    """The real model's saved bytes (`measure_real_saved`) against the spec's, per matched row. `kernel_model`:
    the spec with the attention kernel the real model ran (meta decomposes SDPA: backend math), when
    `model` names another; the difference is the rule `sdpa-kernel-on-meta`. `eager_model`: the spec at backend
    eager, for attention the real model computes with its own bmm and softmax (`attention-eager-kernel`)."""
    from costspec.core.errors import UsageError
    from costspec.tree.saved import saved_bytes

    def ev(e) -> int:
        return int(sympy.ceiling(sympy.sympify(e).xreplace(values)))

    holder = _holders(model.root, set(rowmap.matches))
    spec_rows = {r: ev(e) for r, e in saved_bytes(model.root).items()}
    spec: dict[str, int] = {}
    for r, n in spec_rows.items():
        spec[holder.get(r, MODEL_ROW)] = spec.get(holder.get(r, MODEL_ROW), 0) + n
    calls: list[str] = []
    rotary: list[tuple[sympy.Expr, int]] = []
    batched: set[str] = set()
    measured = measure_real_saved(target, str(model.precision.dtype), calls, rotary, batched)
    if len(set(rotary)) > 1:
        raise UsageError(f"the real model's rotary modules make tables of different forms ({sorted(set(rotary))}: "
                         "columns per rotary dim, bytes per element): the rotary tables' rule takes one")
    batched_rows = {rowmap.row_of(p) for p in batched}
    real_model = RealModel(
        rotary[0][0] if rotary else sympy.Integer(1), _one_plus_weight(model, target, rowmap, holder),
        frozenset(n.name for n in model.op_nodes() if holder.get(n.name, MODEL_ROW) in batched_rows),
        getattr(getattr(target.module, "config", None), "_attn_implementation", None) == "sdpa",
        rotary[0][1] if rotary else None)
    tensors = [(path, _row_of(path, rowmap, calls), n, shape, dt) for path, n, shape, dt in measured]
    real: dict[str, int] = {}
    for _, row, n, _, _ in tensors:
        real[row] = real.get(row, 0) + n
    candidates: dict[str, list[tuple[str, int, str]]] = {}
    for kernel, name, text in ((kernel_model, "sdpa-kernel-on-meta", SDPA_ON_META), (eager_model,
                                                                                    "attention-eager-kernel", EAGER)):
        if kernel is None:
            continue
        try:
            other = {r: ev(e) for r, e in saved_bytes(kernel.root).items()}
        except UsageError:  # an op whose saved tensors at the eager kernel are not modelled: no such candidate
            if kernel is kernel_model:
                raise
            continue
        for r in sorted(set(other) | set(spec_rows)):
            delta = other.get(r, 0) - spec_rows.get(r, 0)
            if delta:
                candidates.setdefault(holder.get(r, MODEL_ROW), []).append((name, delta, text))
    ops = [n for n in _run_order(model.root) if isinstance(n, OpNode)]
    first = {rule.name: next((n for n in ops if rule.applies(n, real_model)), None) for rule in RULES if rule.once}
    for step in model.walk():
        node = step.node
        if not isinstance(node, OpNode):
            continue
        for rule in RULES:
            if not rule.applies(node, real_model) or (rule.once and first[rule.name] is not node):
                continue
            amount = ev(rule.bytes(node, real_model)) * (1 if rule.once else ev(step.instances))
            if rule.replaces(node):  # in place of the spec's bytes of this layer
                amount -= spec_rows.get(node.name, 0)
            candidates.setdefault(holder.get(node.name, MODEL_ROW), []).append((rule.name, amount, rule.text))
    order = [MODEL_ROW] + [n.name for n in _preorder(model.root)]
    names = sorted(set(spec) | set(real) | set(candidates), key=lambda r: order.index(r) if r in order else len(order))
    rows, uses = [], []
    for r in names:
        s, m = spec.get(r, 0), real.get(r, 0)
        chosen = _fit(s, m, _merged(candidates.get(r, [])))
        rows.append((r, s, m, sum(d for name, d, _ in _merged(candidates.get(r, [])) if name in chosen)))
        uses += [RuleUse(name, r, d, text, name in chosen) for name, d, text in _merged(candidates.get(r, []))]
    model_row = [row for row in rows if row[0] == MODEL_ROW]
    described = [f"the real model cast to the spec's dtype ({model.precision.dtype}), one training forward on meta in "
                 "eval mode (dropout identity), saved_tensors_hooks, each storage once, parameters and buffers out"]
    return SavedAgainst([row for row in rows if row[0] != MODEL_ROW] + model_row, uses, tensors, described)


def saved_against(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], target: "Target", rowmap: RowMap,
                  pass_: str, device: str,
                  kernel_model: Callable[[str], "Network"]) -> tuple[SavedAgainst | None, list[str]]:
    """The comparison after `validate_against` ran `target` (its `rowmap`, `pass_`, `device`), or the notes
    saying why it is not made; `kernel_model(backend)` loads the spec with another attention backend: math (what
    meta runs for SDPA) when an attention layer names another, eager (a real layer's own softmax) when one
    names other than eager."""
    from costspec.core.errors import UsageError
    from costspec.core.vocab import Backend, Pass

    why = None
    if pass_ != Pass.TRAIN:
        why = "compared with --pass train only (what a training forward keeps for backward)"
    elif device != "meta":
        why = "compared on meta only (the real model's training forward would allocate its activations)"
    elif any(node.checkpoint for node in _preorder(model.root)):
        why = ("not compared under activation checkpointing: the real model runs in eval mode, where transformers "
               "turns its gradient checkpointing off")
    if why is not None:
        return None, [f"saved activations not compared: {why}"]
    kernels = {str(n.call.attrs.backend) for n in model.op_nodes() if any(a.name == "backend" for a in n.op.attrs)}
    try:
        other = _kernel(kernel_model, Backend.MATH) if kernels - {str(Backend.MATH)} else None
        eager = _kernel(kernel_model, Backend.EAGER) if kernels - {str(Backend.EAGER)} else None
        return compare_saved_against(model, values, target, rowmap, other, eager), []
    except UsageError as e:  # a layer whose saved tensors are not modelled: the FLOPs are still checked
        return None, [f"saved activations not compared: {e}"]


def _row_of(path: str, rowmap: RowMap, calls: list[str]) -> str:
    """The row of a real module; a module no row names, called between two modules of one row with several
    sources (Whisper's activation between the MLP's fc1 and fc2: `source: [fc1, fc2]`) and beside them, is
    that row's."""
    if not path or any(path in m.paths for m in rowmap.matches.values()) or path not in calls:
        return rowmap.row_of(path)
    parent = path.rpartition(".")[0]
    siblings = [p for p in calls if p.rpartition(".")[0] == parent]
    here = siblings.index(path)
    before = {row for row, m in rowmap.matches.items() if len(m.paths) > 1 and set(siblings[:here]) & set(m.paths)}
    after = {row for row, m in rowmap.matches.items() if len(m.paths) > 1 and set(siblings[here + 1:]) & set(m.paths)}
    between = sorted(before & after)
    return between[0] if len(between) == 1 else rowmap.row_of(path)


def _rope_columns(module, out) -> sympy.Expr | None:
    """A rotary module's tables' columns per rotary dim, from what its forward returned: (cos, sin), each as wide
    as its inverse frequencies (one per pair of rotary dims) twice (1) or once (1/2); None for other modules."""
    import torch

    freqs = getattr(module, "inv_freq", None)
    if not (isinstance(freqs, torch.Tensor) and isinstance(out, tuple) and len(out) == 2
            and all(isinstance(t, torch.Tensor) for t in out) and freqs.numel()):
        return None
    return sympy.Rational(int(out[0].shape[-1]), 2 * freqs.numel())


ONE_PLUS_WEIGHT = re.compile(r"\(1(\.0)? \+ self\.weight")


def _one_plus_weight(model: "Network", target: "Target", rowmap: RowMap, holder: dict[str, str]) -> frozenset[str]:
    """The spec's rmsnorm rows whose matched real module (or one inside it) scales by (1 + weight) in its forward
    (Gemma's RMSNorm: `output * (1.0 + self.weight.float())`), read from the real classes' source."""
    seen: dict[type, bool] = {}

    def scales(module) -> bool:
        if type(module) not in seen:
            try:
                seen[type(module)] = ONE_PLUS_WEIGHT.search(inspect.getsource(type(module).forward)) is not None
            except (OSError, TypeError):
                seen[type(module)] = False
        return seen[type(module)]

    out = set()
    for node in model.op_nodes():
        match = rowmap.matches.get(holder.get(node.name, MODEL_ROW))
        if node.op.name != "rmsnorm" or match is None:
            continue
        modules = [target.module.get_submodule(p) for p in match.paths]
        if any(scales(m) for top in modules for m in top.modules()):
            out.add(node.name)
    return frozenset(out)


def _kernel(kernel_model: Callable[[str], "Network"], backend: str) -> "Network | None":
    """The spec at another attention backend, or None where a layer cannot run it (Gemma 2's soft-capping has no
    math form): then that kernel gives no candidate."""
    from costspec.core.errors import SpecError, UsageError

    try:
        return kernel_model(str(backend))
    except (SpecError, UsageError):
        return None


def _merged(found: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """One entry per rule name (its bytes summed over the row's layers and instances)."""
    out: dict[str, tuple[int, str]] = {}
    for name, amount, text in found:
        out[name] = (out.get(name, (0, text))[0] + amount, text)
    return [(name, amount, text) for name, (amount, text) in out.items()]


def _fit(spec: int, real: int, rules: list[tuple[str, int, str]]) -> set[str]:
    """The largest set of the row's rules under which it agrees; all of them when none does."""
    names = [name for name, _, _ in rules]
    amount = {name: d for name, d, _ in rules}
    for size in range(len(names), -1, -1):
        for subset in combinations(names, size):
            if spec + sum(amount[n] for n in subset) == real:
                return set(subset)
    return set(names)


def _preorder(node: Node):
    for child in node.children:
        yield child
        yield from _preorder(child)


def _run_order(node: Node):
    """The nodes under `node` in the order the model first runs them: pre-order, a repeat's groups by their first
    instance (the group of the listed indices after the others' where the others hold index 0)."""
    children = list(node.children)
    if isinstance(node, RepeatNode):
        listed = {i for g in children if isinstance(g, GroupNode) and g.indices is not None for i in g.indices}
        rest = next(i for i in range(len(listed) + 1) if i not in listed)
        children.sort(key=lambda g: min(g.indices) if isinstance(g, GroupNode) and g.indices else rest)
    for child in children:
        yield child
        yield from _run_order(child)


def _holders(root: Node, matched: set[str]) -> dict[str, str]:
    """op row -> the deepest matched row holding it (itself when matched), MODEL_ROW when none does."""
    out: dict[str, str] = {}

    def visit(node: Node, holder: str) -> None:
        for child in node.children:
            here = child.name if child.name in matched else holder
            if isinstance(child, OpNode):
                out[child.name] = here
            visit(child, here)

    visit(root, MODEL_ROW)
    return out


__all__ = ["RULES", "RuleUse", "SavedAgainst", "SavedRule", "compare_saved_against", "measure_real_saved",
           "saved_against"]
