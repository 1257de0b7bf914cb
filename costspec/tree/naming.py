"""Dotted names of the model tree: every node's `name` from its scope's prefix and its `local` name.

Names are stable: an explicit `name:` is kept (two in one scope are an error); default names (the op
or block name) that collide in a scope are numbered in order (`fc1`, `fc2`). Transparent nodes
(residuals, parallels, unnamed sequences) add no level; a repeat's variant groups are `name[0,3]`.
"""
from __future__ import annotations

from typing import Iterator

from costspec.core.errors import SpecError
from costspec.tree.nodes import Node, OpNode, RepeatNode


def assign_names(scope: Node, prefix: str) -> None:
    """Give every node its dotted name; default names that collide in a scope are numbered."""
    members = list(scope_members(scope))
    seen_explicit: dict[str, Node] = {}
    defaults: dict[str, list[Node]] = {}
    for node in members:
        if node.explicit:
            if node.local in seen_explicit:
                raise SpecError(f"two layers are named '{node.local}' in the same scope", node.loc,
                                "unique layer names")
            seen_explicit[node.local] = node
        else:
            defaults.setdefault(node.local, []).append(node)
    for local, nodes in defaults.items():
        if len(nodes) > 1 or local in seen_explicit:
            for k, node in enumerate(nodes, start=1):
                node.local = f"{local}{k}"
    for node in members:
        node.name = f"{prefix}.{node.local}" if prefix else node.local
        if isinstance(node, RepeatNode):
            for group in node.children:
                group.name = f"{node.name}[{group.local.strip('[]')}]" if node.grouped else node.name
                assign_names(group, group.name)
        elif isinstance(node, OpNode):
            for part in node.children:
                part.name = f"{node.name}.{part.local}"
        else:
            assign_names(node, node.name)


def scope_members(scope: Node) -> Iterator[Node]:
    """The nodes named in `scope`: its children, looking through transparent ones (residuals)."""
    for child in scope.children:
        if child.transparent:
            yield from scope_members(child)
        else:
            yield child
