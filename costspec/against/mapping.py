"""Spec rows <-> module paths of the real model.

A spec layer or repeat may name its real counterpart with `source:` (a module path relative to
the enclosing matched layer; a list for a layer that spans several modules). A repeat's source is
the container of its instances: `source: encoder.layer` matches instance i to `encoder.layer.{i}`
(counting from the container's first child no earlier layer claimed).
Layers without a source are matched best-effort, inside the enclosing match, among the free modules
whose parameter count equals the layer's: the one named as the layer, else the first after the
previous match in the real model's execution order. Where others have as many parameters and the
name did not decide, the match is ambiguous: reported as such, never as a PASS (the counts cannot
tell those modules apart). Layers without parameters are not matched: their work is counted in the
enclosing row.

Every real module path then belongs to the deepest matched spec row containing it; rows that
are not matched and real modules with parameters that no layer (other than the whole model)
claims are listed, never dropped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import sympy

from costspec.core.errors import UsageError
from costspec.core.expr import evaluator
from costspec.tree.naming import scope_members
from costspec.tree.nodes import Node, OpNode, RepeatNode, ScopeNode
from costspec.tree.walk import group_of, walk

if TYPE_CHECKING:
    import torch

    from costspec.tree.network import Network

MODEL_ROW = ""  # the spec's root scope, matched to the real model's root module ""


@dataclass
class Match:
    """A spec row and the real module paths it covers (one per repeat instance, or several sources)."""

    row: str
    paths: list[str]
    how: str  # "source" (written in the spec), "auto" (by order and parameter count) or "model"
    # auto: other free modules of the same parameter count where it was taken (the count cannot tell them
    # apart: the match is ambiguous until a `source:` names the module)
    alternatives: list[str] = field(default_factory=list)


@dataclass
class RealModules:
    """The real model's module paths with what matching needs."""

    order: list[str]  # every module path, in execution order (modules never called last)
    params: dict[str, int]  # path -> parameters in its subtree (a tied tensor counts in every owner)
    own_params: dict[str, int]  # path -> parameters owned by the module itself (tied tensors once)

    @classmethod
    def of(cls, module: "torch.nn.Module", called: list[str]) -> "RealModules":
        paths = [p for p, _ in module.named_modules()]
        first: dict[str, int] = {}
        for i, path in enumerate(dict.fromkeys(called)):  # a container never called (ModuleList): its first child's
            parts = path.split(".") if path else []
            for k in range(len(parts), -1, -1):
                first.setdefault(".".join(parts[:k]), i)
        order = sorted(paths, key=lambda p: (first.get(p, len(first)), paths.index(p)))
        subs = dict(module.named_modules())
        params = {p: sum(t.numel() for t in subs[p].parameters()) for p in paths}
        own: dict[str, int] = {p: 0 for p in paths}
        for name, tensor in module.named_parameters():  # deduplicated: a tied weight at its first owner
            own[name.rpartition(".")[0]] += tensor.numel()
        return cls(order, params, own)

    def under(self, base: str, path: str) -> bool:
        return base == "" or path == base or path.startswith(base + ".")


@dataclass
class RowMap:
    """The result: matched rows, each real path's row, and what stayed unmatched."""

    matches: dict[str, Match]
    path_row: dict[str, str]
    unmatched_rows: list[str]  # spec rows (layers, repeats) with no real counterpart
    unmatched_real: list[str] = field(default_factory=list)  # top-most unclaimed real modules with parameters

    def row_of(self, path: str) -> str:
        return self.path_row.get(path, MODEL_ROW)

    def ambiguous(self) -> list[str]:
        """One line per row matched by parameter count where other modules have as many."""
        return [f"{row}: matched by parameter count to {compact(m.paths)}, but {compact(m.alternatives)} "
                f"{'has' if len(m.alternatives) == 1 else 'have'} as many parameters: which module it is, is "
                "ambiguous (name it with source:)" for row, m in self.matches.items() if m.alternatives]


class _Matcher:
    def __init__(self, model: "Network", real: RealModules, ev: Callable[[sympy.Expr], int]):
        self.model, self.real, self.ev = model, real, ev
        self.exists = set(real.order)
        self.rank = {p: i for i, p in enumerate(real.order)}
        self.matches: dict[str, Match] = {MODEL_ROW: Match(MODEL_ROW, [""], "model")}
        self.claimed: list[str] = []

    def scope(self, node: Node, base: str, cursor: list[int]) -> None:
        for member in scope_members(node):
            if isinstance(member, OpNode):
                self._op(member, base, cursor)
            elif isinstance(member, RepeatNode):
                self._repeat(member, base, cursor)
            elif isinstance(member, ScopeNode):
                self._named_scope(member, base, cursor)

    def _sources(self, node: Node, base: str) -> list[str] | None:
        if not node.source:
            return None
        paths = [f"{base}.{s}" if base else s for s in node.source]
        for path in paths:
            if path not in self.exists:
                near = [p for p in self.real.order if p.rpartition(".")[0] == path.rpartition(".")[0]][:8]
                raise UsageError(f"{node.loc}: layer '{node.name}' has source '{path}', which the real model does not "
                                 "have" + (f" (modules there: {', '.join(near)})" if near else ""))
        return paths

    def _auto(self, params: int, base: str, cursor: list[int], name: str) -> tuple[str | None, list[str]]:
        """The free module under `base` with `params` parameters named as the layer (`name`, its last
        component), else the first after the cursor; and the other free modules under `base` (before
        or after it, none inside or around it) with as many parameters where the name did not decide."""
        if params == 0:
            return None, []
        candidates = [p for p in self.real.order if p != base and self.real.under(base, p)
                      and self.real.params[p] == params and self._free(p, base)]
        named = [p for p in candidates if p.rpartition(".")[2] == name]
        if len(named) == 1:
            return named[0], []
        found = next((p for p in candidates if self.rank[p] >= cursor[0]), None)
        if found is None:
            return None, []
        return found, [p for p in candidates if not self.real.under(p, found) and not self.real.under(found, p)]

    def _free(self, path: str, base: str) -> bool:
        """Neither inside nor around a module another layer took (the layers enclosing `base` aside)."""
        return not any((self.real.under(c, path) and not self.real.under(c, base)) or self.real.under(path, c)
                       for c in self.claimed)

    def _take(self, path: str, cursor: list[int]) -> None:
        self.claimed.append(path)
        cursor[0] = max(cursor[0], self.rank[path] + 1)

    def _record(self, row: str, paths: list[str], how: str, alternatives: list[str] | None = None) -> None:
        match = self.matches.setdefault(row, Match(row, [], how))
        match.paths.extend(p for p in paths if p not in match.paths)
        match.alternatives.extend(p for p in alternatives or [] if p not in match.alternatives)

    def _located(self, node: Node, base: str, cursor: list[int]) -> tuple[list[str], str, list[str]]:
        """(paths, how, alternatives) of a layer or named scope: its sources, or an automatic match."""
        paths = self._sources(node, base)
        if paths is not None:
            return paths, "source", []
        found, others = self._auto(self.ev(node.forward().params), base, cursor, node.name.rpartition(".")[2])
        return ([found], "auto", others) if found is not None else ([], "", [])

    def _op(self, node: OpNode, base: str, cursor: list[int]) -> None:
        paths, how, others = self._located(node, base, cursor)
        for path in paths:
            self._take(path, cursor)
        if paths:
            self._record(node.name, paths, how, others)

    def _named_scope(self, node: ScopeNode, base: str, cursor: list[int]) -> None:
        paths, how, others = self._located(node, base, cursor)
        if not paths:  # not matched: its layers are matched inside the enclosing module
            self.scope(node, base, cursor)
            return
        self._record(node.name, paths, how, others)
        inner = paths[0] if len(paths) == 1 else base
        for path in paths:
            self._take(path, cursor)
        self.scope(node, inner, [self.rank[paths[0]] + 1 if len(paths) == 1 else cursor[0]])

    def _repeat(self, node: RepeatNode, base: str, cursor: list[int]) -> None:
        times = self.ev(node.times)
        paths = self._sources(node, base)
        how = "source"
        if paths is not None and len(paths) != 1:
            raise UsageError(f"{node.loc}: repeat '{node.name}' needs one source (the container of its instances)")
        container = paths[0] if paths else self._auto_container(node, times, base, cursor)
        if container is None:  # its layers stay unmatched: their work is compared in the enclosing row
            return
        how = "source" if paths else "auto"
        first = self._first_free_child(container) if paths else 0
        instances = [f"{container}.{first + i}" if container else str(first + i) for i in range(times)]
        missing = [p for p in instances if p not in self.exists]
        if missing:
            raise UsageError(f"{node.loc}: repeat '{node.name}' has {times} instances, but the real model has no "
                             f"module '{missing[0]}' (source '{container}')")
        if container:
            self._take(container, cursor)
        self._record(node.name, instances, how)
        for i, path in enumerate(instances):
            group = group_of(node, i)
            if node.grouped:
                self._record(group.name, [path], how)
            self.scope(group, path, [self.rank[path] + 1])
        if not container:
            for path in instances:
                self._take(path, cursor)

    def _first_free_child(self, container: str) -> int:
        """The index of the container's first child that no earlier layer claimed: a repeat's
        instances continue after children the layers before it took (transformers' ResNet stage
        holds its projection block as `layers.0`, written before the repeat of identity blocks)."""
        first = 0
        while any(self.real.under(f"{container}.{first}" if container else str(first), c) for c in self.claimed):
            first += 1
        return first

    def _auto_container(self, node: RepeatNode, times: int, base: str, cursor: list[int]) -> str | None:
        """A module under `base` with exactly the children 0..times-1: the first whose children each
        hold their group's parameters, else the first at all (the rows then show what differs)."""
        per_index = [self.ev(group_of(node, i).forward().params) for i in range(times)]
        candidates = []
        for path in self.real.order[cursor[0]:]:
            if path == base or not self.real.under(base, path) or not self._free(path, base):
                continue
            kids = [f"{path}.{i}" if path else str(i) for i in range(times)]
            if all(k in self.exists for k in kids) and (f"{path}.{times}" if path else str(times)) not in self.exists:
                if [self.real.params[k] for k in kids] == per_index:
                    return path
                candidates.append(path)
        return candidates[0] if candidates else None


def build_mapping(model: "Network", real: RealModules, values: Mapping[sympy.Symbol, sympy.Integer]) -> RowMap:
    matcher = _Matcher(model, real, evaluator(values))
    matcher.scope(model.root, "", [0])
    matches = matcher.matches
    named = [q for m in matches.values() if m.how == "source" for q in m.paths]
    for match in matches.values():  # a module a source: names is no other layer's alternative
        match.alternatives = [p for p in match.alternatives
                              if not any(real.under(q, p) or real.under(p, q) for q in named)]
    path_row: dict[str, str] = {}
    by_path: dict[str, str] = {}
    for row, match in matches.items():
        for path in match.paths:
            # the deepest row wins: rows are recorded parent first, so a later (deeper) row overrides
            if path not in by_path or row.count(".") >= by_path[path].count("."):
                by_path[path] = row
    for path in real.order:
        owner = max((p for p in by_path if real.under(p, path)), key=lambda p: (p.count(".") + 1 if p else 0),
                    default="")
        path_row[path] = by_path.get(owner, MODEL_ROW)
    unmatched_rows = [node.name for node, _, _, _ in walk(model.root)
                      if isinstance(node, (OpNode, RepeatNode, ScopeNode)) and node.name not in matches]
    claimed = [p for p in by_path if p]
    unmatched_real = [p for p in sorted(real.order, key=lambda p: (p.count("."), p)) if p and real.params[p]
                      and not any(real.under(c, p) or real.under(p, c) for c in claimed)]
    top = [p for p in unmatched_real if not any(q != p and real.under(q, p) for q in unmatched_real)]
    return RowMap(matches, path_row, unmatched_rows, sorted(top, key=real.order.index))


_INDEX = re.compile(r"(?<=\.)(\d+)(?=\.|$)|^(\d+)(?=\.|$)")


def compact(paths: list[str]) -> str:
    """['layers.0.attn', ..., 'layers.11.attn'] -> 'layers.{0..11}.attn'."""
    if not paths:
        return "-"
    if len(paths) == 1:
        return paths[0] or "(model)"
    patterns: dict[str, list[int]] = {}
    for path in paths:
        m = _INDEX.search(path)
        if m is None:
            patterns.setdefault(path, [])
            continue
        patterns.setdefault(path[:m.start()] + "{}" + path[m.end():], []).append(int(m.group(0)))
    out = []
    for pattern, idx in patterns.items():
        if not idx:
            out.append(pattern)
        elif idx == list(range(idx[0], idx[0] + len(idx))) and len(idx) > 2:
            out.append(pattern.replace("{}", f"{{{idx[0]}..{idx[-1]}}}"))
        else:
            out.append(pattern.replace("{}", "{" + ",".join(map(str, idx)) + "}"))
    return ", ".join(out)
